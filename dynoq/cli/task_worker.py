"""``dynoq worker --tasks module:app``: run every task of a :class:`dynoq.Tasks` (or
``dynoq.asyncio.Tasks``) app, one consumer per task queue (``--queues`` picks), on the
worker's own connection (``--url``/``--prefix``, or DYNOQ_URL/DYNOQ_PREFIX), until
SIGTERM or SIGINT. An asyncio app is run by its own ``serve`` on ``asyncio.run`` (the
command line, like the rest of the sync package, never imports dynoq.asyncio)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from ..signals import StopOnSignals
from ..tasks import Tasks
from .base import CliError, Env
from .worker import HandlerImportError, import_target

log = logging.getLogger("dynoq.worker")
ASYNC_TASKS = ("dynoq.asyncio.tasks", "Tasks")  # the asyncio app's class, by name


def import_app(spec: str) -> Any:
    """The app named ``module:attribute``. Its module may connect at import with
    ``dynoq.connect()``: DYNOQ_URL is the worker's then."""
    app = import_target(spec, "tasks app", "module:app")
    kind = type(app)
    if not isinstance(app, Tasks) and (kind.__module__, kind.__name__) != ASYNC_TASKS:
        raise HandlerImportError(
            f"tasks app {spec!r} is a {kind.__name__}, not a dynoq.Tasks or dynoq.asyncio.Tasks"
        )
    return app


def queue_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


@dataclass(frozen=True)
class Serving:
    """How a worker serves an app: its --stop-timeout, --connect-timeout and
    --ordered-only."""

    stop_timeout: float
    connect_timeout: float | None
    ordered_only: bool


def run(env: Env, spec: str, queues: str | None, options: dict[str, Any], how: Serving) -> None:
    if env.url:  # the app's own dynoq.connect() at import goes where the worker goes
        os.environ["DYNOQ_URL"] = env.url
    serve(env, import_app(spec), f"tasks {spec}", queues, options, how)


def serve(
    env: Env, app: Any, label: str, queues: str | None, options: dict[str, Any], how: Serving
) -> None:
    """Serve ``app`` (anything with ``Tasks.serve``'s signature) once Redis answers,
    logging its start and its counts at the end."""
    stop = threading.Event()
    with StopOnSignals(stop):
        probe = env.client_when_reachable(stop, how.connect_timeout)
    if probe is None:
        log.info("worker stopped before Redis was reachable")
        return
    # The probe stays open until the command ends: on embedded:// it holds the server.

    def ready(worker: Any) -> None:
        consumers = worker.consumers
        loose = [c.queue.name for c in consumers if not c.ordered]
        if how.ordered_only and loose:
            raise CliError(
                f"task queue(s) {', '.join(loose)} not ordered, and --ordered-only was given"
            )
        log.info(
            "worker started: %s on queue(s) %s, group %r, concurrency %d per queue",
            label,
            ", ".join(c.queue.name for c in consumers),
            options["group"],
            options["concurrency"],
        )

    served = app.serve(
        probe.url,
        prefix=probe.prefix,
        queues=queue_list(queues),
        stop_timeout=how.stop_timeout,
        ready=ready,
        **options,
    )  # the library's bounds, as every command's
    stats = asyncio.run(served) if inspect.iscoroutine(served) else served
    log.info(
        "worker stopped: handled %d, failed %d, retried %d, dead-lettered %d",
        stats.handled,
        stats.failed,
        stats.retried,
        stats.dead_lettered,
    )
