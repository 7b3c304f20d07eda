"""``dynoq check``: what in the server's configuration puts messages at risk."""

from __future__ import annotations

import json

import click

from .._core.risks import RISK, Finding, assess, in_memory
from ..backend.facts import gather
from .base import EXIT_FAILURE, JSON_OPTION, Env, cli, pass_env
from .output import print_table


@cli.command()
@JSON_OPTION
@pass_env
def check(env: Env, as_json: bool) -> None:
    """What puts messages at risk on this server: an eviction policy other than
    noeviction, no persistence (RDB or AOF), a server older than Redis 7 / Valkey 8, a
    cluster master without replicas. Exit code 1 when anything is a risk, else 0."""
    client = env.client()
    backend = client.backend
    findings: list[Finding] = (
        in_memory(backend.display_url)
        if backend.url.startswith("memory://")
        else assess(gather(backend))
    )
    risks = sum(f.level == RISK for f in findings)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "server": backend.display_url,
                    "risks": risks,
                    "findings": [f.as_json() for f in findings],
                },
                indent=2,
            )
        )
    else:
        print_table(
            f"dynoq check of {backend.display_url}",
            ["check", "level", "server", "detail"],
            [[f.check, f.level, f.node, f.detail] for f in findings],
        )
        click.echo(f"{risks} risk(s)" if risks else "no risk found")
    if risks:
        click.get_current_context().exit(EXIT_FAILURE)
