"""``maxRowsPerSecond``: one write's pushes, across all its tasks, at most so many rows a
second, so that a Spark job does not flood a server other applications share.

The limit is counted in Redis, not per task (Spark decides how many tasks run at once,
and where): each task takes permits for the messages it is about to push from one log
of grants per write (a streaming query's log outlives its micro-batches, so the rate
holds across them), the consumer groups' rate limit (``lua/rate-take-2.lua``,
:mod:`dynoq._core.rates`) under the keys of :meth:`RateKeys.spark_write
<dynoq._core.keys.RateKeys.spark_write>`. A task that gets no permit sleeps for the time
the server says the next one needs, and asks again: it waits, it never fails for it.

The log counts grants over a second and a little more (``RateLimit.window``), so the
pushes of grants made in any one second, pushed at once, are at most the rate; a push
sent later than that after its grant (a paused Python worker) may land in the next
second, so a second of pushes holds at most the rate plus such late pushes, each one
push of at most ``batchSize`` rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .._core import rates
from .._core.keys import RateKeys
from .._core.settings import MAX_RATE
from .._core.validate import check_int
from ..client import Client

PERIOD = 1.0  # seconds: the limit is rows per second
MAX_SLEEP = 1.0  # seconds a task sleeps between asks at most (a freed permit is not missed)


def check_rate(value: object) -> int | None:
    """A rows-per-second limit (1..MAX_RATE) or None (no limit)."""
    if value is None:
        return None
    return check_int(value, "max_rows_per_second (maxRowsPerSecond)", low=1, high=MAX_RATE)


@dataclass(frozen=True)
class Throttle:
    """At most ``rows`` rows per second for the write (or streaming query) ``name``,
    over all its tasks. Picklable."""

    rows: int
    name: str

    def __post_init__(self) -> None:
        check_rate(self.rows)

    def take(self, client: Client, want: int) -> int:
        """Permits to push up to ``want`` (>= 1) rows now: between 1 and ``want``,
        waiting as long as the server says none is free."""
        limit = rates.RateLimit((self.rows, PERIOD))
        keys = RateKeys.spark_write(client.prefix, self.name)
        ask = max(1, min(want, limit.count))
        while True:
            granted, wait = client.backend.run(rates.take(keys, limit.count, limit.window, ask))
            if granted:
                return int(granted)
            time.sleep(min(max(float(wait), 0.001), MAX_SLEEP))
