"""Commands that run: the sweeper, a worker, the dashboard, the demo."""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

import click

from ..backend import redact
from ..client import Client, connect
from ..errors import ConnectionFailed
from ..queue import Queue
from ..retry import backoff
from ..signals import StopOnSignals
from ..sweeper import DEFAULT_INTERVAL, REFRESH_INTERVAL
from ..topic import Topic
from .base import EXIT_IMPORT, CliError, Env, UsageFailure, cli, pass_env
from .worker import HandlerImportError, import_handler, setup_logging, supervise

log = logging.getLogger("dynoq.cli")


@cli.command()
@click.option("--interval", type=click.FloatRange(min=0, min_open=True),
              default=DEFAULT_INTERVAL, show_default=True, help="Seconds between passes.")
@click.option("--refresh-interval", type=click.FloatRange(min=0, min_open=True),
              default=REFRESH_INTERVAL, show_default=True,
              help="Seconds between re-reads of the queue registry and member reaping.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (0 = any free port).")
@click.option("--metrics-addr", default="0.0.0.0", show_default=True,
              help="Address the metrics endpoint listens on.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines.")
@pass_env
def sweeper(env: Env, interval: float, refresh_interval: float, metrics_port: int | None,
            metrics_addr: str, log_level: str, as_json: bool) -> None:
    """Run the background sweeper until SIGTERM or SIGINT (then exit 0)."""
    setup_logging("json" if as_json else "text", log_level)
    stop = threading.Event()
    with StopOnSignals(stop):
        client = _connect_until(env, stop)
        if client is None:
            return
        with client:
            metrics = None
            if metrics_port is not None:
                metrics = _serve_metrics(client, metrics_port, metrics_addr)
            client.sweeper(interval=interval, refresh_interval=refresh_interval,
                           observer=metrics).run_forever(stop)


def _connect_until(env: Env, stop: threading.Event) -> Client | None:
    """Connect, retrying while the server is unreachable (a sweeper may start first)."""
    failures = 0
    while not stop.is_set():
        try:
            return connect(env.url, prefix=env.prefix)
        except ConnectionFailed as exc:
            failures += 1
            delay = backoff(failures)
            if failures == 1 or failures % 10 == 0:
                log.warning("cannot reach Redis (attempt %d, retrying in %.1fs): %s",
                            failures, delay, exc)
            stop.wait(delay)
    return None


def _serve_metrics(client: Client, port: int, addr: str) -> Any:
    try:
        from ..metrics import Metrics, start_metrics_server
    except ImportError as exc:
        raise CliError(f"--metrics-port needs the metrics extra (pip install "
                       f"'dynoq[metrics]'): {exc}") from None
    metrics = Metrics()
    try:
        server, _ = start_metrics_server(port, addr=addr, registry=metrics.registry,
                                         client=client)
    except OSError as exc:
        raise CliError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
    log.info("metrics on http://%s:%d/metrics", addr, server.server_port)
    return metrics


class HandlerNotFound(CliError):
    exit_code = EXIT_IMPORT


@cli.command()
@click.argument("handler")
@click.option("--queue", default=None, help="Consume this (existing) queue.")
@click.option("--topic", default=None, help="Consume this (existing) topic as --group.")
@click.option("--group", default="default", show_default=True, help="Consumer group.")
@click.option("--mode", type=click.Choice(["clustering", "broadcasting"]),
              default="clustering", show_default=True, help="How a topic group shares.")
@click.option("--concurrency", type=click.IntRange(1, 1024), default=4, show_default=True,
              help="Worker threads.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=1, show_default=True,
              help="Messages per pop.")
@click.option("--ordered-only", is_flag=True,
              help="Refuse to start unless the queue is ordered (a handler relying on order).")
@click.option("--rate-limit", default=None, metavar="COUNT/SECONDS",
              help="Most messages the whole group handles per period, e.g. 100/1.")
@click.option("--processes", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Worker processes under one supervisor that restarts a crashed one.")
@click.option("--stop-timeout", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to finish in-flight work on SIGTERM before giving it back.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines (--log-format json).")
@pass_env
def worker(env: Env, handler: str, queue: str | None, topic: str | None, group: str,
           mode: str, concurrency: int, batch_size: int, ordered_only: bool,
           rate_limit: str | None, processes: int, stop_timeout: float, log_format: str,
           log_level: str, as_json: bool) -> None:
    """Run HANDLER (module:function) on a queue or topic until SIGTERM/SIGINT.

    Exit codes: 0 stopped cleanly, 1 failure, 2 bad arguments, 3 Redis unreachable,
    4 the handler cannot be imported."""
    setup_logging("json" if as_json else log_format, log_level)
    if (queue is None) == (topic is None):
        raise UsageFailure("give exactly one of --queue and --topic")
    limit = _rate_limit(rate_limit)
    if processes > 1:
        if env.url:  # children read it from the environment: never on a command line
            os.environ["DYNOQ_URL"] = env.url
        argv = ["--prefix", env.prefix, *_worker_args(click.get_current_context())]
        sys.exit(supervise(argv, processes, stop_timeout))
    try:
        fn = import_handler(handler)
    except HandlerImportError as exc:
        raise HandlerNotFound(str(exc)) from None
    client = env.client()
    if topic is not None:
        source: Queue | Topic | None = client.open_existing_topic(topic)
        if source is None:
            raise CliError(f"no topic {topic!r} under prefix {client.prefix!r}")
        ordered = source.settings.ordered
    else:
        source = env.queue(queue or "")
        ordered = source.settings.ordered
    if ordered_only and not ordered:
        raise CliError(f"{queue or topic!r} is not ordered, and --ordered-only was given")
    consumer = client.consumer(source, fn, group=group, mode=mode, concurrency=concurrency,
                               batch_size=batch_size, rate_limit=limit)
    log.info("worker started: %s on %s %r, group %r, concurrency %d", handler,
             "topic" if topic else "queue", topic or queue, group, concurrency)
    consumer.run(stop_timeout=stop_timeout)
    s = consumer.stats()
    log.info("worker stopped: handled %d, failed %d, retried %d, dead-lettered %d",
             s.handled, s.failed, s.retried, s.dead_lettered)


def _rate_limit(text: str | None) -> tuple[int, float] | None:
    if text is None:
        return None
    count, _, period = text.partition("/")
    try:
        return int(count), float(period or 1)
    except ValueError:
        raise UsageFailure(f"--rate-limit {text!r} is not COUNT/SECONDS") from None


def _worker_args(ctx: click.Context) -> list[str]:
    """The worker command line of one process (for the supervisor's children)."""
    out = ["worker", ctx.params["handler"]]
    for name, value in ctx.params.items():
        if name in ("handler", "processes") or value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return [*out, "--processes", "1"]


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; beyond loopback a token is required.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port to listen on (0 = any free port).")
@click.option("--allow-actions", is_flag=True,
              help="Allow replaying and purging dead letters [default: read-only].")
@click.option("--token", envvar="DYNOQ_DASHBOARD_TOKEN", default=None, metavar="TOKEN",
              help="Secret every request must carry (basic-auth password or Bearer); "
                   "prefer the env var DYNOQ_DASHBOARD_TOKEN to the command line.")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=2.0, show_default=True,
              help="Seconds between samples of the live numbers and charts.")
@pass_env
def dashboard(env: Env, host: str, port: int, allow_actions: bool, token: str | None,
              interval: float) -> None:
    """Serve the web dashboard (extra "dashboard") until SIGINT or SIGTERM."""
    try:
        from .. import dashboard as web
    except ImportError as exc:
        raise CliError(f"the dashboard needs its extra: pip install 'dynoq[dashboard]' "
                       f"({exc})") from None
    config = web.DashboardConfig(host=host, port=port, token=token or None,
                                 allow_actions=allow_actions, interval=interval)
    client = env.client()
    mode = "actions allowed" if allow_actions else "read-only"

    def ready(url: str) -> None:
        click.echo(f"dynoq dashboard on {url} ({mode}; prefix {client.prefix!r} at "
                   f"{redact(client.url)}{'; token required' if token else ''})", err=True)

    web.serve(client, config, ready)


@cli.command()
@pass_env
def demo(env: Env) -> None:
    """Run the end-to-end demo (default: a private embedded server; see dynoq.demo)."""
    from . import demo as demo_module

    code = demo_module.main(env.url)
    if code:
        sys.exit(code)


