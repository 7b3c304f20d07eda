"""Several consumers run as one service (a task worker runs one consumer per queue):
started together, stopped together (side by side, events.gather: one stopping must not
keep the others popping), and run until SIGTERM or SIGINT."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from ..._core.consuming import summed
from ...errors import InvalidType
from ...message import ConsumerStats
from ..events import gather, new_event, until_stopped
from .facade import Consumer


class Consumers:
    """Start, stop and run ``consumers`` as one (``Tasks.worker()`` makes one)."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        if not all(isinstance(c, Consumer) for c in consumers):
            raise InvalidType("Consumers takes dynoq.asyncio.Consumer objects")
        self.consumers = list(consumers)
        self._stopping = new_event()

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Consumers of {[c.queue.name for c in self.consumers]!r}>"

    async def start(self) -> Consumers:
        """Start every consumer; if one fails to start, stop those already started and
        raise its error."""
        started: list[Consumer] = []
        try:
            for c in self.consumers:
                await c.start()
                started.append(c)
        except BaseException:
            await _stop_all(started, 5.0)
            raise
        return self

    async def stop(self, timeout: float = 30.0) -> bool:
        """Stop every consumer at once (each finishes or gives back its in-flight work
        within ``timeout`` seconds); False if any was still busy then."""
        self._stopping.set()
        return await _stop_all(self.consumers, timeout)

    async def run(self, stop_timeout: float = 30.0) -> None:
        """Start, block until SIGINT/SIGTERM or :meth:`stop` from another task, then
        stop (``stop_timeout``: see :meth:`stop`)."""
        try:
            await until_stopped(self._stopping, self.start)
        finally:
            await _stop_all(self.consumers, stop_timeout)

    def stats(self) -> ConsumerStats:
        """The consumers' counts, added up."""
        return summed([c.stats() for c in self.consumers])

    async def __aenter__(self) -> Consumers:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _stop_all(consumers: Sequence[Consumer], timeout: float) -> bool:
    """Stop consumers side by side (one stopping must not keep the others popping)."""
    return all(await gather([functools.partial(c.stop, timeout) for c in consumers], "dynoq-stop"))
