"""``dynoq worker --tasks module:app``: run every task of a :class:`dynoq.Tasks` (or
:class:`dynoq.asyncio.Tasks`) app, one consumer per task queue (``--queues`` picks), on
the worker's own connection (``--url``/``--prefix``, or DYNOQ_URL/DYNOQ_PREFIX), until
SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from typing import Any

from .. import asyncio as aio
from ..signals import StopOnSignals
from ..tasks import Tasks
from .base import CliError, Env
from .worker import HandlerImportError, import_target

log = logging.getLogger("dynoq.worker")


def import_app(spec: str) -> Tasks | aio.Tasks:
    """The app named ``module:attribute``. Its module may connect at import with
    ``dynoq.connect()``: DYNOQ_URL is the worker's then."""
    app = import_target(spec, "tasks app", "module:app")
    if not isinstance(app, (Tasks, aio.Tasks)):
        raise HandlerImportError(f"tasks app {spec!r} is a {type(app).__name__}, not a "
                                 "dynoq.Tasks or dynoq.asyncio.Tasks")
    return app


def queue_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def run(env: Env, spec: str, queues: str | None, options: dict[str, Any], *,
        stop_timeout: float, connect_timeout: float | None, ordered_only: bool) -> None:
    if env.url:  # the app's own dynoq.connect() at import goes where the worker goes
        os.environ["DYNOQ_URL"] = env.url
    app = import_app(spec)
    picked = queue_list(queues)
    stop = threading.Event()
    with StopOnSignals(stop):
        client = env.client_when_reachable(stop, connect_timeout, timeout=30.0)
    if client is None:
        log.info("worker stopped before Redis was reachable")
        return
    if isinstance(app, aio.Tasks):
        asyncio.run(_run_async(env, client.url, client.prefix, spec, app, picked, options,
                               stop_timeout, ordered_only))
        return
    app.bind(client)
    worker = app.worker(queues=picked, **options)
    _check_ordered(worker.consumers, ordered_only)
    _started(spec, worker.consumers, options)
    worker.run(stop_timeout=stop_timeout)
    _stopped(worker.stats())


async def _run_async(env: Env, url: str, prefix: str, spec: str, app: aio.Tasks,
                     picked: list[str] | None, options: dict[str, Any], stop_timeout: float,
                     ordered_only: bool) -> None:
    async with aio.connect(url, prefix=prefix, **env.options(timeout=30.0)) as client:
        app.bind(client)
        worker = await app.worker(queues=picked, **options)
        _check_ordered(worker.consumers, ordered_only)
        _started(spec, worker.consumers, options)
        await worker.run(stop_timeout=stop_timeout)
        _stopped(worker.stats())


def _check_ordered(consumers: Any, ordered_only: bool) -> None:
    loose = [c.queue.name for c in consumers if not c.ordered]
    if ordered_only and loose:
        raise CliError(f"task queue(s) {', '.join(loose)} not ordered, and --ordered-only "
                       "was given")


def _started(spec: str, consumers: Any, options: dict[str, Any]) -> None:
    log.info("worker started: tasks %s on queue(s) %s, group %r, concurrency %d per queue",
             spec, ", ".join(c.queue.name for c in consumers), options["group"],
             options["concurrency"])


def _stopped(stats: Any) -> None:
    log.info("worker stopped: handled %d, failed %d, retried %d, dead-lettered %d",
             stats.handled, stats.failed, stats.retried, stats.dead_lettered)
