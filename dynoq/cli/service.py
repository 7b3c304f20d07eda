"""Commands that run: the sweeper, a worker, the dashboard, the demo."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
from typing import Any

import click

from .._core.callables import is_coroutine_function
from .._core.retry import check_delays
from .._core.sizing import AUTO
from .._core.validate import MAX_BATCH
from ..backend import redact
from ..client import Client
from ..errors import InvalidArgument
from ..queue import Queue
from ..signals import StopOnSignals
from ..sweeper import DEFAULT_INTERVAL, REFRESH_INTERVAL
from ..topic import Topic
from . import task_worker
from .base import EXIT_IMPORT, JSON_OPTION, CliError, Env, UsageFailure, cli, pass_env
from .worker import HandlerImportError, import_handler, setup_logging, supervise

log = logging.getLogger("dynoq.cli")


def _batch_size(ctx: click.Context, param: click.Parameter, value: str) -> int | str:
    """--batch-size: a count, or auto."""
    if value == AUTO:
        return AUTO
    try:
        count = int(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a count of messages or {AUTO}") from None
    if not 1 <= count <= MAX_BATCH:
        raise click.BadParameter(f"{count} is not in 1-{MAX_BATCH} (or {AUTO})")
    return count


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


class HandlerNotFound(CliError):
    exit_code = EXIT_IMPORT


@cli.command()
@click.argument("handler", required=False)
@click.option(
    "--tasks",
    "tasks_app",
    default=None,
    metavar="MODULE:APP",
    help="Run every task of this dynoq.Tasks (or dynoq.asyncio.Tasks) app, one "
    "consumer per task queue, instead of a HANDLER.",
)
@click.option(
    "--queues",
    default=None,
    metavar="NAME,...",
    help="With --tasks: only the tasks of these queues [default: every task queue of the app].",
)
@click.option(
    "--checker",
    "checker_fn",
    default=None,
    metavar="MODULE:FUNCTION",
    help="Run this transaction check (returns 'commit', 'rollback' or 'unknown') "
    "on --queue's prepared messages, as checker group --group, instead of "
    "a HANDLER.",
)
@click.option(
    "--check-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="With --checker: seconds before asking again.",
)
@click.option(
    "--max-checks",
    type=click.IntRange(1, 1_000_000),
    default=15,
    show_default=True,
    help="With --checker: checks before a prepared message is rolled back into the dead letters.",
)
@click.option("--queue", default=None, help="Consume this (existing) queue.")
@click.option("--topic", default=None, help="Consume this (existing) topic as --group.")
@click.option("--group", default="default", show_default=True, help="Consumer group.")
@click.option(
    "--mode",
    type=click.Choice(["clustering", "broadcasting"]),
    default=None,
    help="How a topic group shares (default: as the group is subscribed, else clustering).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 1024),
    default=4,
    show_default=True,
    help="Worker threads.",
)
@click.option(
    "--batch-size",
    default=AUTO,
    show_default=True,
    metavar="1-1000|auto",
    callback=_batch_size,
    help="Messages per pop (1-1000), or auto: adapted to the handler's speed.",
)
@click.option(
    "--ordered-only",
    is_flag=True,
    help="Refuse to start unless the queue is ordered (a handler relying on order).",
)
@click.option(
    "--rate-limit",
    default=None,
    metavar="COUNT/SECONDS",
    help="Most messages the whole group handles per period, e.g. 100/1.",
)
@click.option(
    "--retry-delays",
    default=None,
    metavar="SECONDS,...",
    help="Seconds before each retry of a failed message, e.g. 1,5,30 (the last "
    "repeats) [default: RocketMQ's levels from 10 s, 1 s on ordered queues].",
)
@click.option(
    "--max-retries",
    type=click.IntRange(0, 1_000_000),
    default=None,
    help="Dead-letter a message after this many failed retries here "
    "[default: the queue's max_retries, which also caps this].",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Worker processes under one supervisor that restarts a crashed one.",
)
@click.option(
    "--stop-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to finish in-flight work on SIGTERM before giving it back.",
)
@CONNECT_TIMEOUT
@click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option("--json", "as_json", is_flag=True, help="Log JSON lines (--log-format json).")
@pass_env
def worker(
    env: Env,
    handler: str | None,
    tasks_app: str | None,
    queues: str | None,
    checker_fn: str | None,
    check_interval: float,
    max_checks: int,
    queue: str | None,
    topic: str | None,
    group: str,
    mode: str | None,
    concurrency: int,
    batch_size: int | str,
    ordered_only: bool,
    rate_limit: str | None,
    retry_delays: str | None,
    max_retries: int | None,
    processes: int,
    stop_timeout: float,
    connect_timeout: float | None,
    log_format: str,
    log_level: str,
    as_json: bool,
) -> None:
    """Run HANDLER (module:function) on a queue or topic, or every task of a tasks app
    (--tasks module:app), until SIGTERM/SIGINT.

    Waits for Redis at start (retrying with backoff; --connect-timeout bounds it). Exit
    codes: 0 stopped cleanly, 1 failure, 2 bad arguments, 3 Redis unreachable, 4 the
    handler (or tasks app) cannot be imported."""
    setup_logging("json" if as_json else log_format, log_level)
    _check_worker_choice(handler, tasks_app, queues, checker_fn, queue, topic)
    limit = _rate_limit(rate_limit)
    delays = _retry_delays(retry_delays)
    if processes > 1:
        if env.url:  # children read it from the environment: never on a command line
            os.environ["DYNOQ_URL"] = env.url
        argv = ["--prefix", env.prefix, *_worker_args(click.get_current_context())]
        sys.exit(supervise(argv, processes, stop_timeout))
    options: dict[str, Any] = {
        "group": group,
        "concurrency": concurrency,
        "batch_size": batch_size,
        "rate_limit": limit,
        "retry_delays": delays,
        "max_retries": max_retries,
    }
    if tasks_app is not None:
        try:
            task_worker.run(
                env,
                tasks_app,
                queues,
                options,
                stop_timeout=stop_timeout,
                connect_timeout=connect_timeout,
                ordered_only=ordered_only,
            )
        except HandlerImportError as exc:
            raise HandlerNotFound(str(exc)) from None
        return
    assert handler is not None or checker_fn is not None
    try:
        fn = import_handler(checker_fn or handler or "")
    except HandlerImportError as exc:
        raise HandlerNotFound(str(exc)) from None
    stop = threading.Event()
    with StopOnSignals(stop):
        client = env.client_when_reachable(stop, connect_timeout)
    if client is None:
        log.info("worker stopped before Redis was reachable")
        return
    if checker_fn is not None:
        checks: dict[str, Any] = dict(
            group=group,
            check_interval=check_interval,
            max_checks=max_checks,
            concurrency=concurrency,
        )
        _run_checker(env, client, checker_fn, fn, queue or "", checks)
        return
    _run_handler(
        env,
        client,
        handler,
        fn,
        queue,
        topic,
        mode=mode,
        ordered_only=ordered_only,
        stop_timeout=stop_timeout,
        options=options,
    )


def _check_worker_choice(
    handler: str | None,
    tasks_app: str | None,
    queues: str | None,
    checker_fn: str | None,
    queue: str | None,
    topic: str | None,
) -> None:
    """What a worker runs: a HANDLER on one queue or topic, a tasks app, or a checker."""
    if checker_fn is not None:
        if handler is not None or tasks_app is not None or topic is not None or queue is None:
            raise UsageFailure(
                "--checker MODULE:FUNCTION goes with --queue alone (no HANDLER, --tasks or --topic)"
            )
    elif tasks_app is not None:
        if handler is not None or queue is not None or topic is not None:
            raise UsageFailure(
                "give a HANDLER with --queue or --topic, or --tasks "
                "MODULE:APP (with --queues), not both"
            )
    elif handler is None:
        raise UsageFailure(
            "give a HANDLER (module:function) with --queue or --topic, "
            "--tasks MODULE:APP, or --checker MODULE:FUNCTION with --queue"
        )
    elif queues is not None:
        raise UsageFailure("--queues goes with --tasks (a HANDLER takes --queue)")
    elif (queue is None) == (topic is None):
        raise UsageFailure("give exactly one of --queue and --topic")


def _run_checker(
    env: Env, client: Client, name: str, fn: Any, queue: str, checks: dict[str, Any]
) -> None:
    """Run the transaction check ``fn`` (imported from ``name``) on ``queue`` until
    SIGTERM/SIGINT; an async def check runs on the asyncio client."""
    on_asyncio = is_coroutine_function(fn)
    checked = env.queue(queue)
    log.info(
        "checker started: %s on queue %r, group %r%s",
        name,
        queue,
        checks["group"],
        " (asyncio)" if on_asyncio else "",
    )
    if on_asyncio:
        from . import async_worker

        counts = asyncio.run(
            async_worker.check(client.url, client.prefix, fn, queue=checked.name, **checks)
        )
    else:
        checker = client.checker(checked, fn, **checks)
        checker.run()
        counts = checker.counts
    log.info("checker stopped: %s", dict(counts))


def _run_handler(
    env: Env,
    client: Client,
    handler: str | None,
    fn: Any,
    queue: str | None,
    topic: str | None,
    *,
    mode: str | None,
    ordered_only: bool,
    stop_timeout: float,
    options: dict[str, Any],
) -> None:
    """Consume ``queue`` or ``topic`` with ``fn`` until SIGTERM/SIGINT; an async def
    handler runs on the asyncio client: nothing awaits it here."""
    on_asyncio = is_coroutine_function(fn)
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
    log.info(
        "worker started: %s on %s %r, group %r, concurrency %d%s",
        handler,
        "topic" if topic else "queue",
        topic or queue,
        options["group"],
        options["concurrency"],
        " (asyncio)" if on_asyncio else "",
    )
    if on_asyncio:
        from . import async_worker

        s = asyncio.run(
            async_worker.consume(
                client.url,
                client.prefix,
                fn,
                queue=queue,
                topic=topic,
                stop_timeout=stop_timeout,
                mode=mode,
                **options,
            )
        )
    else:
        consumer = client.consumer(source, fn, mode=mode, **options)
        consumer.run(stop_timeout=stop_timeout)
        s = consumer.stats()
    log.info(
        "worker stopped: handled %d, failed %d, retried %d, dead-lettered %d",
        s.handled,
        s.failed,
        s.retried,
        s.dead_lettered,
    )


def _rate_limit(text: str | None) -> tuple[int, float] | None:
    if text is None:
        return None
    count, _, period = text.partition("/")
    try:
        return int(count), float(period or 1)
    except ValueError:
        raise UsageFailure(f"--rate-limit {text!r} is not COUNT/SECONDS") from None


def _retry_delays(text: str | None) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return check_delays([float(part) for part in text.split(",")], "--retry-delays")
    except (ValueError, InvalidArgument) as exc:
        raise UsageFailure(
            f"--retry-delays {text!r}: give seconds separated by commas, e.g. 1,5,30 ({exc})"
        ) from None


def _worker_args(ctx: click.Context) -> list[str]:
    """The worker command line of one process (for the supervisor's children)."""
    handler = ctx.params["handler"]
    out = ["worker", *([handler] if handler is not None else [])]
    flags = {p.name: p.opts[0] for p in ctx.command.params if isinstance(p, click.Option)}
    for name, value in ctx.params.items():
        if name in ("handler", "processes") or value is None or value is False:
            continue
        flag = flags[name]  # as typed (--tasks for tasks_app, --json for as_json)
        out += [flag] if value is True else [flag, str(value)]
    return [*out, "--processes", "1"]


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
