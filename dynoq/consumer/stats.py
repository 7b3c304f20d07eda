"""A consumer's counts, added to from its threads."""

from __future__ import annotations

import threading

from .._core.consuming import Counts
from ..message import ConsumerStats


class StatsCounter(Counts):
    """:class:`dynoq._core.consuming.Counts` behind a lock."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def add(self, **deltas: float) -> None:
        with self._lock:
            super().add(**deltas)

    def snapshot(self) -> ConsumerStats:
        with self._lock:
            return super().snapshot()
