"""The sweeper: background upkeep of every registered queue and topic (DESIGN.md §4).

What a pass does is in :mod:`dynoq._core.sweeper`; this module runs passes on a backend,
forever, riding out Redis outages with capped, jittered backoff. Any number of sweepers
may run at once (every step is an atomic, bounded script).
"""

from __future__ import annotations

import time

from .._core import validate
from .._core.sweeper import (
    DEFAULT_INTERVAL,
    REFRESH_INTERVAL,
    Progress,
    QueueSweep,
    SweepObserver,
    SweepReport,
    Sweeps,
)
from .backend import AsyncBackend
from .events import Event, new_event, wait_event


class Sweeper:
    """Sweeps every queue and topic registered under ``prefix`` on ``backend``.

    ``run_once()`` does one pass; ``run_forever()`` repeats it every ``interval`` seconds
    until :meth:`stop` is called (or its ``stop_event`` is set). ``observer`` (for example
    ``dynoq.metrics.Metrics``) is told about every pass. ``client.sweeper(...)`` makes one.
    """

    def __init__(
        self,
        backend: AsyncBackend,
        *,
        prefix: str,
        interval: float = DEFAULT_INTERVAL,
        refresh_interval: float = REFRESH_INTERVAL,
        observer: SweepObserver | None = None,
    ) -> None:
        self.backend = backend
        self.prefix = validate.check_name(prefix, "prefix")
        self.interval = validate.check_seconds(interval, "interval", minimum=0.001)
        self.refresh_interval = validate.check_seconds(
            refresh_interval, "refresh_interval", minimum=0.001
        )
        self.observer = observer
        self._sweeps = Sweeps(
            self.prefix, self.refresh_interval, cross_slot=backend.cross_slot, observer=observer
        )
        self._stop = new_event()

    def stop(self) -> None:
        """Ask ``run_forever`` to return after the current step."""
        self._stop.set()

    async def run_once(self) -> SweepReport:
        """One pass over every registered queue and topic. Raises ConnectionFailed when
        Redis is away (the caller retries); a failure confined to one queue is logged and
        counted in ``errors``."""
        return await self.backend.drive(self._sweeps.run_once())

    async def run_forever(self, stop_event: Event | None = None) -> SweepReport:
        """Sweep every ``interval`` seconds until stopped. Connection failures are logged
        and retried with capped exponential backoff; this never raises for them. Returns
        the totals."""
        if stop_event is not None:
            self._stop = stop_event  # so stop() and the caller's event are one
        stop = self._stop
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


__all__ = ["DEFAULT_INTERVAL", "REFRESH_INTERVAL", "QueueSweep", "SweepReport", "Sweeper"]
