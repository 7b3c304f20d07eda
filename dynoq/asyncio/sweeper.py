"""The sweeper for asyncio: the passes of :mod:`dynoq._core.sweep`, awaited.

What a pass does, which queues it sweeps and how failures are logged and backed off are
the sync sweeper's (``_core.sweep``: Sweeps, Progress); only the waiting differs.
"""

from __future__ import annotations

import asyncio
import time

from .._core import validate
from .._core.sweep import (
    DEFAULT_INTERVAL,
    REFRESH_INTERVAL,
    Progress,
    SweepObserver,
    SweepReport,
    Sweeps,
)
from .backend import AsyncBackend
from .events import wait_event


class Sweeper:
    """Sweeps every queue and topic registered under ``prefix`` (see
    :class:`dynoq.Sweeper`):
    ``await run_once()``, or ``await run_forever()`` until :meth:`stop`."""

    def __init__(self, backend: AsyncBackend, *, prefix: str,
                 interval: float = DEFAULT_INTERVAL,
                 refresh_interval: float = REFRESH_INTERVAL,
                 observer: SweepObserver | None = None) -> None:
        self.backend = backend
        self.prefix = validate.check_name(prefix, "prefix")
        self.interval = validate.check_seconds(interval, "interval", minimum=0.001)
        self.refresh_interval = validate.check_seconds(refresh_interval, "refresh_interval",
                                                       minimum=0.001)
        self.observer = observer
        self._sweeps = Sweeps(self.prefix, self.refresh_interval,
                              cross_slot=backend.cross_slot, observer=observer)
        self._stop: asyncio.Event | None = None
        self._stopped = False

    def stop(self) -> None:
        """Ask ``run_forever`` to return after the current step."""
        self._stopped = True
        if self._stop is not None:
            self._stop.set()

    async def run_once(self) -> SweepReport:
        """One pass over every registered queue and topic (see
        :meth:`dynoq.Sweeper.run_once`)."""
        return await self.backend.drive(self._sweeps.run_once())

    async def run_forever(self) -> SweepReport:
        """Sweep every ``interval`` seconds until stopped; never raises for connection
        failures (logged, retried with backoff). Returns the totals."""
        self._stop = stop = asyncio.Event()
        if self._stopped:
            stop.set()
        progress = Progress(self.prefix, self.interval, self.observer)
        while not stop.is_set():
            started = time.monotonic()
            try:
                report = await self.run_once()
            except Exception as exc:  # noqa: BLE001 - a daemon logs and retries, never exits
                await wait_event(stop, progress.failed(exc, self._sweeps.take_partial()))
                continue
            progress.done(report)
            await wait_event(stop, self.interval - (time.monotonic() - started))
        return progress.stopped()

