"""``dynoq worker HANDLER`` and ``dynoq worker --checker``: a handler consuming a queue or
a topic, or a transaction check of a queue's prepared messages, until SIGTERM/SIGINT (a
tasks app: ``task_worker``). An ``async def`` one runs on the asyncio client
(``async_worker``): nothing would await it on the sync one."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .._core.callables import is_coroutine_function
from ..client import Client
from ..queue import Queue
from ..topic import Topic
from .base import CliError, Env

log = logging.getLogger("dynoq.cli")


def check(env: Env, client: Client, name: str, fn: Any, queue: str, checks: dict[str, Any]) -> None:
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


def consume(
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
    source = _source(env, client, queue, topic, ordered_only)
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


def _source(
    env: Env, client: Client, queue: str | None, topic: str | None, ordered_only: bool
) -> Queue | Topic:
    """The queue or topic a handler consumes (an async def one's too: opening it here
    says at once when it is missing); CliError when it does not exist, or with
    ``ordered_only`` when it is not ordered."""
    if topic is not None:
        source: Queue | Topic | None = client.open_existing_topic(topic)
        if source is None:
            raise CliError(f"no topic {topic!r} under prefix {client.prefix!r}")
    else:
        source = env.queue(queue or "")
    if ordered_only and not source.settings.ordered:
        raise CliError(f"{queue or topic!r} is not ordered, and --ordered-only was given")
    return source
