"""The ``dynoq worker`` command: its options, which of a HANDLER, a checker
(``handler_worker``) or a tasks app (``task_worker``) it runs, and the command line of
each process a supervisor runs (``--processes``)."""

from __future__ import annotations

import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import click

from .._core.retry import check_delays
from .._core.sizing import AUTO
from .._core.validate import MAX_BATCH
from ..errors import InvalidArgument
from ..signals import StopOnSignals
from . import django_worker, handler_worker, task_worker
from .base import EXIT_IMPORT, CliError, Env, UsageFailure, cli, pass_env
from .service import CONNECT_TIMEOUT
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
    help="With --tasks or --django: only these queues [default: every task queue of the "
    "app, or of the backend].",
)
@click.option(
    "--django",
    "django_settings",
    default=None,
    metavar="SETTINGS",
    help="Run the tasks of Django's tasks framework on a dynoq.django.DynoqBackend "
    "(this settings module, as DJANGO_SETTINGS_MODULE), one consumer per queue of "
    "--backend, where its OPTIONS connect, instead of a HANDLER.",
)
@click.option(
    "--backend",
    "django_backend",
    default="default",
    show_default=True,
    metavar="ALIAS",
    help="With --django: the TASKS backend whose queues are run.",
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
def worker(env: Env, /, **params: Any) -> None:
    """Run HANDLER (module:function) on a queue or topic, every task of a tasks app
    (--tasks module:app) or of a Django backend (--django settings), until SIGTERM/SIGINT.

    Waits for Redis at start (retrying with backoff; --connect-timeout bounds it). Exit
    codes: 0 stopped cleanly, 1 failure, 2 bad arguments, 3 Redis unreachable, 4 the
    handler (or tasks app) cannot be imported."""
    args = WorkerArgs(**params)  # each option by its name, as click passes them: typed here
    setup_logging("json" if args.as_json else args.log_format, args.log_level)
    args.check_choice()
    options = args.consumer_options()
    if args.processes > 1:
        if env.url:  # children read it from the environment: never on a command line
            os.environ["DYNOQ_URL"] = env.url
        argv = ["--prefix", env.prefix, *_worker_args(click.get_current_context())]
        sys.exit(supervise(argv, args.processes, args.stop_timeout))
    try:
        if _serve_app(env, args, options):
            return
        fn = import_handler(args.checker_fn or args.handler or "")
    except HandlerImportError as exc:
        raise HandlerNotFound(str(exc)) from None
    stop = threading.Event()
    with StopOnSignals(stop):
        client = env.client_when_reachable(stop, args.connect_timeout)
    if client is None:
        log.info("worker stopped before Redis was reachable")
        return
    if args.checker_fn is not None:
        handler_worker.check(env, client, args.checker_fn, fn, args.queue or "", args.checks())
        return
    handler_worker.consume(
        env,
        client,
        args.handler,
        fn,
        args.queue,
        args.topic,
        mode=args.mode,
        ordered_only=args.ordered_only,
        stop_timeout=args.stop_timeout,
        options=options,
    )


def _serve_app(env: Env, args: WorkerArgs, options: dict[str, Any]) -> bool:
    """Serve a tasks app (--tasks) or a Django backend's tasks (--django); False when
    the worker runs a HANDLER or a checker instead."""
    how = task_worker.Serving(args.stop_timeout, args.connect_timeout, args.ordered_only)
    if args.django_settings is not None:
        django_worker.run(args.django_settings, args.django_backend, args.queues, options, how)
        return True
    if args.tasks_app is not None:
        task_worker.run(env, args.tasks_app, args.queues, options, how)
        return True
    return False


@dataclass(frozen=True)
class WorkerArgs:
    """The worker command's arguments as click parsed them (its options above say what
    each is), typed: one value to hand on, where a signature would list 22."""

    handler: str | None
    tasks_app: str | None
    django_settings: str | None
    django_backend: str
    queues: str | None
    checker_fn: str | None
    check_interval: float
    max_checks: int
    queue: str | None
    topic: str | None
    group: str
    mode: str | None
    concurrency: int
    batch_size: int | str
    ordered_only: bool
    rate_limit: str | None
    retry_delays: str | None
    max_retries: int | None
    processes: int
    stop_timeout: float
    connect_timeout: float | None
    log_format: str
    log_level: str
    as_json: bool

    def check_choice(self) -> None:
        """What a worker runs: a HANDLER on one queue or topic, a tasks app, or a checker."""
        handler, tasks_app, queue, topic = self.handler, self.tasks_app, self.queue, self.topic
        if self.django_settings is not None:
            if any(x is not None for x in (handler, tasks_app, queue, topic, self.checker_fn)):
                raise UsageFailure(
                    "--django SETTINGS runs a Django backend's task queues (with --queues): "
                    "no HANDLER, --tasks, --queue, --topic or --checker"
                )
        elif self.checker_fn is not None:
            if handler is not None or tasks_app is not None or topic is not None or queue is None:
                raise UsageFailure(
                    "--checker MODULE:FUNCTION goes with --queue alone (no HANDLER, --tasks or "
                    "--topic)"
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
        elif self.queues is not None:
            raise UsageFailure("--queues goes with --tasks or --django (a HANDLER takes --queue)")
        elif (queue is None) == (topic is None):
            raise UsageFailure("give exactly one of --queue and --topic")

    def consumer_options(self) -> dict[str, Any]:
        """The consumers' options (of a handler or each task queue); UsageFailure for a
        --rate-limit or --retry-delays that cannot be read."""
        return {
            "group": self.group,
            "concurrency": self.concurrency,
            "batch_size": self.batch_size,
            "rate_limit": _rate_limit(self.rate_limit),
            "retry_delays": _retry_delays(self.retry_delays),
            "max_retries": self.max_retries,
        }

    def checks(self) -> dict[str, Any]:
        """A checker's options (--checker)."""
        return {
            "group": self.group,
            "check_interval": self.check_interval,
            "max_checks": self.max_checks,
            "concurrency": self.concurrency,
        }


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
