"""Several consumers run as one service, for asyncio (the twin of
``dynoq/consumer/many.py``): started together, stopped together (in parallel), and run
until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Sequence

from ..._core.consuming import summed
from ...errors import InvalidType
from ...message import ConsumerStats
from .facade import Consumer


class Consumers:
    """Start, stop and run ``consumers`` as one (``await tasks.worker()`` makes one)."""

    def __init__(self, consumers: Sequence[Consumer]) -> None:
        if not all(isinstance(c, Consumer) for c in consumers):
            raise InvalidType("Consumers takes dynoq.asyncio.Consumer objects")
        self.consumers = list(consumers)
        self._stopping: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Consumers of {[c.queue.name for c in self.consumers]!r}>"

    def _event(self) -> asyncio.Event:
        if self._stopping is None:  # made on the loop that runs it
            self._stopping = asyncio.Event()
        return self._stopping

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
        """Stop every consumer at once (each finishes, or gives back, its in-flight work
        within ``timeout`` seconds); False if any was still busy then."""
        self._event().set()
        return await _stop_all(self.consumers, timeout)

    async def run(self, stop_timeout: float = 30.0) -> None:
        """Start, wait until SIGINT/SIGTERM or :meth:`stop`, then stop."""
        loop = asyncio.get_running_loop()
        stopping = self._event()
        signals: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            # Not in a thread other than the main one, nor on every platform.
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stopping.set)
                signals.append(sig)
        try:
            await self.start()
            await stopping.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
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
    return all(await asyncio.gather(*(c.stop(timeout) for c in consumers)))
