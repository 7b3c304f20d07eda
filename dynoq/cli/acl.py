"""``dynoq acl``: the least-privilege ACL rules of each role, and the admin step that
installs dynoq's scripts, which the roles may only call (docs/security.md)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import click

from ..acl import ROLES, as_text, rules
from ..backend.install import DEFAULT_KEEP_INTERVAL, Installed, install, keep
from ..errors import DynoqError
from ..signals import StopOnSignals
from .base import JSON_OPTION, Env, cli, emit, pass_env

log = logging.getLogger("dynoq.cli")


@cli.group("acl")
def acl() -> None:
    """Least-privilege Redis ACL users (docs/security.md).

    `dynoq --prefix P acl ROLE` prints the rules of ROLE under P, for
    ACL SETUSER <name> on ><password> <rules>; `dynoq acl install`, run as an admin,
    loads dynoq's scripts, which a role may call but not load."""


def _role_command(role: str) -> click.Command:
    @click.option(
        "--cluster",
        is_flag=True,
        help="For a Redis Cluster's user (set it on every node): adds the "
        "topology commands a cluster client needs.",
    )
    @click.option(
        "--upgrade",
        is_flag=True,
        help="Keep the user's selectors: the scripts of the version it was set up "
        "for stay callable during a rolling upgrade.",
    )
    @JSON_OPTION
    @pass_env
    def show(env: Env, cluster: bool, upgrade: bool, as_json: bool) -> None:
        found = rules(env.prefix, role, cluster=cluster, upgrade=upgrade)
        emit(as_json, {"prefix": env.prefix, "role": role, "rules": found}, as_text(found))

    return click.command(role, help=f"Print the rules of a {role} user: {ROLES[role].does}.")(show)


for _role in sorted(ROLES):
    acl.add_command(_role_command(_role))


@acl.command("install")
@click.option(
    "--keep",
    "keep_running",
    is_flag=True,
    help="Keep running until SIGTERM or SIGINT, checking every --interval seconds "
    "and loading again what a restart or a failover lost.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_KEEP_INTERVAL,
    show_default=True,
    help="Seconds between checks with --keep.",
)
@JSON_OPTION
@pass_env
def install_command(env: Env, keep_running: bool, interval: float, as_json: bool) -> None:
    """Load dynoq's scripts on every node (as a user allowed SCRIPT LOAD)."""
    if not keep_running:  # the library's bounds on every connection
        _show(install(env.url), as_json)
        return
    stop = threading.Event()
    shown = False

    def report(outcome: Installed | DynoqError) -> None:
        nonlocal shown
        if isinstance(outcome, DynoqError):
            log.warning("dynoq acl install: %s (retrying in %gs)", outcome, interval)
        elif outcome.loaded or outcome.failed or not shown:  # news only
            _show(outcome, as_json)
            shown = True

    with StopOnSignals(stop):
        keep(env.url, stop, interval=interval, report=report)


def _show(done: Installed, as_json: bool) -> None:
    data: dict[str, Any] = {
        "scripts": done.scripts,
        "nodes": list(done.nodes),
        "loaded": done.loaded,
        "failed": done.failed,
    }
    text = (
        f"{done.scripts} scripts on {len(done.nodes)} node(s) "
        f"({', '.join(done.nodes)}); loaded now: {done.loaded}"
    )
    text += "".join(f"\nnot reached: {node}: {why}" for node, why in done.failed.items())
    emit(as_json, data, text)
