"""Retry policy (pure: no I/O) and the two exceptions a handler raises to steer it.

A handler that raises gets its message back after the next delay of the schedule; the
queue's ``max_retries`` decides when it is dead-lettered instead (inside the nack script).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import DynoqError, InvalidArgument, InvalidType

# RocketMQ's delay levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
ROCKETMQ_DELAY_LEVELS: tuple[float, ...] = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
# RocketMQ's first retry uses level 3 (10 s); each further retry the next level.
CONCURRENT_RETRY_DELAYS: tuple[float, ...] = ROCKETMQ_DELAY_LEVELS[2:]
# RocketMQ's ordered consumers suspend the queue for 1 s and retry in place.
ORDERED_RETRY_DELAYS: tuple[float, ...] = (1.0,)


class Retry(DynoqError):
    """Raise from a handler to retry the message after ``delay`` seconds (None: the
    policy's next delay). It counts as an attempt: past max_retries it is dead-lettered."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None:
            delay = check_delays([delay], "Retry delay")[0]
        super().__init__(reason or f"retry requested (delay={delay})")
        self.delay = delay


class DeadLetter(DynoqError):
    """Raise from a handler to dead-letter the message now, without further retries."""

    def __init__(self, reason: str = "dead-lettered by the handler") -> None:
        super().__init__(reason)


def check_delays(delays: object, what: str = "retry_delays") -> tuple[float, ...]:
    """Validate a sequence of finite, non-negative delays in seconds."""
    if isinstance(delays, (str, bytes)) or not isinstance(delays, Sequence):
        raise InvalidType(f"{what} must be a sequence of seconds, got {type(delays).__name__}")
    out = []
    for d in delays:
        if isinstance(d, bool) or not isinstance(d, (int, float)):
            raise InvalidType(f"{what} must hold numbers of seconds, got {type(d).__name__}")
        if not math.isfinite(d) or d < 0:
            raise InvalidArgument(f"{what} must be finite and >= 0 seconds, got {d!r}")
        out.append(float(d))
    if not out:
        raise InvalidArgument(f"{what} must not be empty (give [0] to retry at once)")
    return tuple(out)


@dataclass(frozen=True)
class RetryPolicy:
    """The delay before each retry: ``delays[n - 1]`` after the n-th failed delivery,
    the last delay repeated once the schedule is spent."""

    delays: tuple[float, ...]

    @classmethod
    def make(cls, delays: Sequence[float] | None, *, ordered: bool) -> RetryPolicy:
        if delays is None:
            return cls(ORDERED_RETRY_DELAYS if ordered else CONCURRENT_RETRY_DELAYS)
        return cls(check_delays(delays))

    def delay(self, attempts: int) -> float:
        """Seconds to wait before redelivering a message that failed its ``attempts``-th
        delivery (attempts counts from 1)."""
        return self.delays[min(max(attempts, 1), len(self.delays)) - 1]
