"""How many messages a consumer's worker pops at a time (pure: no I/O).

``batch_size="auto"`` (the default) pops as many messages as the handler is expected to
finish in :data:`BUDGET` seconds at the speed seen so far, 1 to :data:`AUTO_MAX`: fast
handlers get batches (a pop and an ack per message cost two round trips each; a default
consumer popping one at a time drained about 4,000 messages/s where batches of 100 drain
about 140,000: benchmarks/bench_consumer.py), slow ones get one message at a time, as
before, so a popped message waits little for the calls before it, and is not held from
other consumers for long. A queue with ``ordered="key"`` batches the same way (its pop
takes the heads of as many keys): when "auto" took one message at a time there, a default
consumer of 10,000 keys handled 0.03x what it handles on an unordered queue
(benchmarks/bench_groups.py).
A number is used as it is. Under a rate limit of ``count`` a period no pop takes more than
``count`` messages, and "auto" no more than a worker's share of them (``count`` over the
consumer's ``concurrency``): the calls wait for permits (``_core.rates``), and a popped
message waiting for one is held from the other consumers.

A call can still stall (a fast handler whose backend hangs): on a concurrent or keyed
queue the messages behind it in an "auto" batch go back to the queue once it has run
:data:`STALLED` seconds, for other workers to take (``_core.board.DeliveryState.stalled``);
on a keyed queue each goes back to the head of its key, so no key waits for another's
slow call longer than that (the head-of-line promise of ``ordered="key"``, bounded).
"""

from __future__ import annotations

from typing import Final

AUTO: Final = "auto"
AUTO_MAX = 100  # messages a pop takes at most under "auto"
BUDGET = 0.05  # seconds of handler calls a batch is sized to
_GROW = 0.5  # how much of the way to a faster estimate one batch moves it
STALLED = 1.0  # seconds a call runs before the rest of its "auto" batch goes back


class BatchSizer:
    """The batch size of one consumer's workers: fixed, or adapted to the handler's speed
    (see the module). Shared by the workers; a racing update only loses one sample."""

    __slots__ = ("_cap", "_per_message")

    def __init__(
        self,
        batch_size: int | str,
        *,
        in_flight: int,
        rate_limit: tuple[int, float] | None = None,
        concurrency: int = 1,
    ) -> None:
        if batch_size != AUTO:
            self._cap, self._per_message = int(batch_size), 0.0
            if rate_limit is not None:
                self._cap = min(self._cap, int(rate_limit[0]))
        else:
            self._cap = min(AUTO_MAX, in_flight)
            if rate_limit is not None:
                self._cap = max(1, min(self._cap, int(rate_limit[0]) // max(concurrency, 1)))
            self._per_message = BUDGET  # nothing seen yet: the first pop takes one

    @property
    def adapts(self) -> bool:
        return self._per_message > 0.0

    def size(self) -> int:
        """Messages to pop next."""
        if self._per_message <= 0.0:
            return self._cap
        return max(1, min(self._cap, int(BUDGET / self._per_message)))

    def handled(self, count: int, seconds: float) -> None:
        """``count`` messages were handled in ``seconds`` of handler calls. A slower
        handler shrinks the next batch at once (the calls behind a slow one wait for it);
        a faster one grows it over a few batches."""
        if count <= 0 or self._per_message <= 0.0:
            return
        seen = max(seconds / count, 1e-9)
        current = self._per_message
        self._per_message = seen if seen > current else current + (seen - current) * _GROW


__all__ = ["AUTO", "AUTO_MAX", "BUDGET", "STALLED", "BatchSizer"]
