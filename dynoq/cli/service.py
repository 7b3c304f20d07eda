"""Commands that run: the sweeper, the dashboard, the demo (a worker: ``worker_command``)."""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

import click

from ..backend import redact
from ..client import Client
from ..signals import StopOnSignals
from ..sweeper import DEFAULT_INTERVAL, REFRESH_INTERVAL
from .base import JSON_OPTION, CliError, Env, cli, pass_env
from .worker import setup_logging

log = logging.getLogger("dynoq.cli")

CONNECT_TIMEOUT = click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Give up (exit 3) when Redis is still unreachable this long after start "
    "[default: keep retrying, with backoff, until SIGTERM/SIGINT].",
)


@cli.command()
@click.option(
    "--interval",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="Seconds between passes.",
)
@click.option(
    "--refresh-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=REFRESH_INTERVAL,
    show_default=True,
    help="Seconds between re-reads of the queue registry and member reaping.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics on this port (0 = any free port).",
)
@click.option(
    "--metrics-host",
    "--metrics-addr",
    "metrics_host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint listens on (0.0.0.0: every interface).",
)
@CONNECT_TIMEOUT
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines.")
@pass_env
def sweeper(
    env: Env,
    interval: float,
    refresh_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    connect_timeout: float | None,
    log_level: str,
    as_json: bool,
) -> None:
    """Run the background sweeper until SIGTERM or SIGINT (then exit 0)."""
    setup_logging("json" if as_json else "text", log_level)
    stop = threading.Event()
    with StopOnSignals(stop):
        client = env.client_when_reachable(stop, connect_timeout)
        if client is None:
            return
        with client:
            metrics = None
            if metrics_port is not None:
                metrics = _serve_metrics(client, metrics_port, metrics_host)
            client.sweeper(
                interval=interval, refresh_interval=refresh_interval, observer=metrics
            ).run_forever(stop)


def _serve_metrics(client: Client, port: int, addr: str) -> Any:
    try:
        from ..metrics import Metrics, start_metrics_server
    except ImportError as exc:
        raise CliError(
            f"--metrics-port needs the metrics extra (pip install 'dynoq[metrics]'): {exc}"
        ) from None
    metrics = Metrics()
    try:
        server, _ = start_metrics_server(port, addr=addr, registry=metrics.registry, client=client)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    log.info("metrics on http://%s:%d/metrics", addr, server.server_port)
    return metrics


@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; beyond loopback a token is required.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0 = any free port).",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Allow replaying and purging dead letters [default: read-only].",
)
@click.option(
    "--token",
    envvar="DYNOQ_DASHBOARD_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Secret every request must carry (basic-auth password or Bearer); "
    "prefer the env var DYNOQ_DASHBOARD_TOKEN to the command line.",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=2.0,
    show_default=True,
    help="Seconds between samples of the live numbers and charts.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON line on stdout once listening (url, prefix, ...).",
)
@pass_env
def dashboard(
    env: Env,
    host: str,
    port: int,
    allow_actions: bool,
    token: str | None,
    interval: float,
    as_json: bool,
) -> None:
    """Serve the web dashboard (extra "dashboard") until SIGINT or SIGTERM."""
    try:
        from .. import dashboard as web
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs its extra: pip install 'dynoq[dashboard]' ({exc})"
        ) from None
    config = web.DashboardConfig(
        host=host, port=port, token=token or None, allow_actions=allow_actions, interval=interval
    )
    client = env.client()
    mode = "actions allowed" if allow_actions else "read-only"

    def ready(url: str) -> None:
        if as_json:  # stdout, flushed: a script reads the URL (with --port 0, the port)
            click.echo(
                json.dumps(
                    {
                        "url": url,
                        "prefix": client.prefix,
                        "server": redact(client.url),
                        "allow_actions": allow_actions,
                        "token_required": bool(token),
                    }
                )
            )
            sys.stdout.flush()
            return
        click.echo(
            f"dynoq dashboard on {url} ({mode}; prefix {client.prefix!r} at "
            f"{redact(client.url)}{'; token required' if token else ''})",
            err=True,
        )

    web.serve(client, config, ready)


@cli.command()
@JSON_OPTION
@pass_env
def demo(env: Env, as_json: bool) -> None:
    """Run the end-to-end demo (default: a private embedded server; see dynoq.demo);
    exit 1 if a check failed. --json: the report as one JSON object."""
    from . import demo as demo_module

    code = demo_module.main(env.url, as_json=as_json)
    if code:
        sys.exit(code)
