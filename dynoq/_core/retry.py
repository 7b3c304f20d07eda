"""Retry policy (pure: no I/O) and the two exceptions a handler raises to steer it.

A handler that raises gets its message back after the next delay of the schedule; the
queue's ``max_retries`` decides when it is dead-lettered instead (inside the nack script).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import DynoqError, InvalidArgument, InvalidType
from ..message import Message
from . import validate

# RocketMQ's delay levels: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
ROCKETMQ_DELAY_LEVELS: tuple[float, ...] = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)
# RocketMQ's first retry uses level 3 (10 s); each further retry the next level.
CONCURRENT_RETRY_DELAYS: tuple[float, ...] = ROCKETMQ_DELAY_LEVELS[2:]
# RocketMQ's ordered consumers suspend the queue for 1 s and retry in place.
ORDERED_RETRY_DELAYS: tuple[float, ...] = (1.0,)


class Retry(DynoqError):
    """Raise from a handler to retry the message after ``delay`` seconds (None: the
    policy's next delay). It counts as an attempt: past max_retries it is dead-lettered."""

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None:
            delay = validate.check_seconds(delay, "Retry delay")
        super().__init__(reason or f"retry requested (delay={delay})")
        self.delay = delay


class RateLimited(DynoqError):
    """Raise from a handler when what it calls is rate limited: the message goes back and
    is delivered again after ``delay`` seconds, without using an attempt."""

    def __init__(self, delay: float = 1.0, reason: str = "") -> None:
        delay = validate.check_seconds(delay, "RateLimited delay")
        super().__init__(reason or f"rate limited: back in {delay:g}s")
        self.delay = delay


class DeadLetter(DynoqError):
    """Raise from a handler to dead-letter the message now, without further retries."""

    def __init__(self, reason: str = "dead-lettered by the handler") -> None:
        super().__init__(reason)


def check_delays(delays: object, what: str = "retry_delays") -> tuple[float, ...]:
    """Validate a non-empty sequence of delays in seconds."""
    if isinstance(delays, (str, bytes)) or not isinstance(delays, Sequence):
        raise InvalidType(f"{what} must be a sequence of seconds, got {type(delays).__name__}")
    if not delays:
        raise InvalidArgument(f"{what} must not be empty (give [0] to retry at once)")
    if len(delays) > 1000:
        raise InvalidArgument(f"{what} may hold at most 1000 delays, got {len(delays)}")
    return tuple(validate.check_seconds(d, f"each of {what}") for d in delays)


@dataclass(frozen=True)
class RetryPolicy:
    """The delay before each retry: ``delays[n - 1]`` after the n-th failed delivery,
    the last delay repeated once the schedule is spent; past ``max_retries`` retries (when
    set) a failed message is dead-lettered instead (RocketMQ's maxReconsumeTimes: the
    consumer's own limit; the queue's max_retries still applies in Redis). ``timeout``:
    seconds one handler call of such a message may take (None: the consumer's
    consume_timeout; a task's own ``timeout``)."""

    delays: tuple[float, ...]
    max_retries: int | None = None
    timeout: float | None = None

    @classmethod
    def make(
        cls,
        delays: Sequence[float] | RetryPolicy | None,
        *,
        ordered: bool,
        max_retries: int | None = None,
    ) -> RetryPolicy:
        """The policy of ``retry_delays`` (a sequence of seconds, None for the queue kind's
        defaults, or a RetryPolicy, taken as it is)."""
        if isinstance(delays, RetryPolicy):
            return delays
        if delays is None:
            return cls(ORDERED_RETRY_DELAYS if ordered else CONCURRENT_RETRY_DELAYS, max_retries)
        return cls(check_delays(delays), max_retries)

    def of(self, msg: Message) -> RetryPolicy:
        """The policy for one failed message: this one. A subclass may pick one per
        message (a task queue's consumer takes each task's own: dynoq.Tasks)."""
        return self

    def has_timeouts(self) -> bool:
        """Whether a message's policy may carry a timeout (``of`` picks per message)."""
        return self.timeout is not None

    def spent(self, attempts: int) -> bool:
        """Whether a message that failed its ``attempts``-th delivery has used up this
        policy's retries (as the queue's limit counts: deliveries beyond the first)."""
        return self.max_retries is not None and attempts > self.max_retries

    def delay(self, attempts: int) -> float:
        """Seconds to wait before redelivering a message that failed its ``attempts``-th
        delivery (attempts counts from 1)."""
        return self.delays[min(max(attempts, 1), len(self.delays)) - 1]


MAX_BACKOFF_EXPONENT = 60  # 2**60 s is past any cap: the power stays a float, never huge


@dataclass(frozen=True)
class Backoff(RetryPolicy):
    """Exponential backoff (Celery's ``retry_backoff``): ``factor * 2**(n - 1)`` seconds
    before the n-th retry, at most ``maximum``; with ``jitter`` a uniform draw between 0
    and that (full jitter, Celery's ``retry_jitter``), so that a burst of failures does not
    come back in one burst. ``delays`` is unused (empty)."""

    factor: float = 1.0
    maximum: float = 600.0
    jitter: bool = True

    def delay(self, attempts: int) -> float:
        power = min(max(attempts, 1) - 1, MAX_BACKOFF_EXPONENT)
        ceiling = min(self.maximum, self.factor * 2.0**power)
        return random.uniform(0.0, ceiling) if self.jitter else ceiling


def backoff_policy(
    backoff: object, maximum: object, jitter: object, max_retries: int | None
) -> Backoff:
    """The policy of a task's ``retry_backoff`` (True: a factor of 1 s; a number: the
    factor in seconds), ``retry_backoff_max`` (seconds; None: 600) and ``retry_jitter``
    (None: True), validated."""
    if backoff is True:
        factor = 1.0
    elif isinstance(backoff, bool):
        raise InvalidArgument("retry_backoff=False is no backoff: leave it out")
    else:
        factor = validate.check_seconds(backoff, "retry_backoff", minimum=0.001)
    cap = 600.0 if maximum is None else validate.check_seconds(maximum, "retry_backoff_max")
    spread = validate.check_bool(True if jitter is None else jitter, "retry_jitter")
    return Backoff((), max_retries, factor=factor, maximum=cap, jitter=spread)


BACKOFF_BASE, BACKOFF_CAP = 0.1, 10.0  # seconds


def backoff(failures: int) -> float:
    """Seconds a long-running loop waits after ``failures`` failures in a row (the server
    is away): capped exponential, jittered so that many processes retrying after one
    outage do not move in step."""
    delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** min(max(failures, 1) - 1, 20))
    return float(delay * random.uniform(0.5, 1.0))


# -- resending one operation after a transient failure -------------------------------------

# How long after its first failure one operation is still resent (a dropped connection, a
# timeout, a failover), unless connect(retry_window=...) says otherwise: long enough for a
# restart or a moment of dropped connections, short enough that a caller hears of an outage.
RETRY_WINDOW = 5.0  # seconds
CLUSTER_RETRY_WINDOW = 30.0  # > a Redis Cluster failover with the default node timeout, 15 s
PAUSE_FIRST, PAUSE_MAX = 0.02, 1.0  # seconds between resends: doubling, capped


class RetryWindow:
    """The resends of one operation: each transient failure gets a pause (capped
    exponential, jittered so that many clients retrying after one outage do not move in
    step) until ``window`` seconds after the first failure; after that, None (give up).

    The one retry decision of every backend (sync and asyncio, single server, Sentinel,
    Cluster): so one operation ends within its first attempt + ``window`` + one more
    attempt, each attempt bounded by the connect and command timeouts."""

    def __init__(self, window: float) -> None:
        self.window = window
        self.deadline: float | None = None
        self.failures = 0

    def pause(self, now: float) -> float | None:
        """Seconds to wait before resending after a failure at ``now`` (monotonic
        seconds), or None when the window is spent."""
        if self.deadline is None:
            self.deadline = now + self.window
        left = self.deadline - now
        if left <= 0:
            return None
        delay = min(PAUSE_MAX, PAUSE_FIRST * 2 ** min(self.failures, 20))
        self.failures += 1
        return min(float(delay * random.uniform(0.5, 1.0)), left)


def check_window(value: object, what: str = "retry_window") -> float:
    """A retry window in seconds (0: send each command once)."""
    return validate.check_seconds(value, what)
