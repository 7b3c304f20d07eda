"""Every bound on waiting for the server (pure: no I/O).

A connection on a half-open path (a peer that vanished behind a NAT, a partition, a
frozen host) is never closed by anyone: only a timeout ends a wait on it. So every
connection dynoq makes has a connect timeout and a command timeout (the redis-py options
``socket_connect_timeout`` and ``socket_timeout``, whose defaults are set here for every
redis-py version), a blocking command waits its own time plus the command timeout, and a
wake-up subscription, which is quiet by design, asks for a sign of life when it has been
quiet for a while (:class:`Liveness`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument
from . import validate
from .retry import CLUSTER_RETRY_WINDOW, RETRY_WINDOW, check_window

CONNECT_TIMEOUT = 5.0  # seconds to make a TCP (and TLS) connection
COMMAND_TIMEOUT = 10.0  # seconds for a reply (scripts run for ~50 ms at most: see DESIGN)


@dataclass(frozen=True)
class Timeouts:
    """A client's bounds, in seconds: ``connect`` and ``command`` per attempt (None: no
    bound, only if the caller asked for that), ``retry_window`` for the resends."""

    connect: float | None = CONNECT_TIMEOUT
    command: float | None = COMMAND_TIMEOUT
    retry_window: float = RETRY_WINDOW

    @property
    def attempt(self) -> float | None:
        """The longest one attempt takes: a connection made (perhaps first, with its
        handshake), then one reply that never comes."""
        if self.connect is None or self.command is None:
            return None
        return self.connect + self.command

    @property
    def operation(self) -> float | None:
        """The longest one operation takes before it raises ConnectionFailed: its first
        attempt, the retry window, and the last attempt begun within it (a blocking
        command adds its own wait)."""
        attempt = self.attempt
        return None if attempt is None else 2 * attempt + self.retry_window

    @property
    def subscription(self) -> float:
        """How long a subscription may stay quiet before it sends a PING, and how long it
        then waits for the answer (a subscription always has a bound)."""
        return self.command if self.command is not None else COMMAND_TIMEOUT

    def blocking(self, wait: float) -> float | None:
        """The command timeout for a command that blocks up to ``wait`` seconds on the
        server (WAIT): its own time on top of the usual bound."""
        return None if self.command is None else self.command + wait


def take(options: dict[str, Any], *, cluster: bool = False) -> Timeouts:
    """The bounds of a client made with ``options`` (the keyword arguments of
    ``connect()``): the timeouts go to redis-py with dynoq's defaults set in
    ``options``; ``retry_window`` (and ``cluster_retry_window``, its older name on a
    cluster) is taken out. Bad values raise InvalidArgument/InvalidType."""
    window_default = CLUSTER_RETRY_WINDOW if cluster else RETRY_WINDOW
    window = options.pop("retry_window", None)
    old = options.pop("cluster_retry_window", None)
    if window is not None and old is not None:
        raise InvalidArgument("give retry_window or cluster_retry_window, not both")
    window = check_window(
        window if window is not None else old if old is not None else window_default
    )
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT)
    options.setdefault("socket_timeout", COMMAND_TIMEOUT)
    return Timeouts(
        _seconds(options, "socket_connect_timeout"), _seconds(options, "socket_timeout"), window
    )


def of(kwargs: Mapping[str, Any], window: float) -> Timeouts:
    """The bounds a redis-py client made by the caller has (its connection kwargs); such
    a client keeps its own retries, so dynoq's window is usually 0 there."""
    return Timeouts(kwargs.get("socket_connect_timeout"), kwargs.get("socket_timeout"), window)


def _seconds(options: Mapping[str, Any], name: str) -> float | None:
    value = options[name]
    if value is None:  # asked for: no bound
        return None
    return validate.check_seconds(value, name, minimum=0.001)


class Liveness:
    """When a quiet subscription asks for a sign of life, and when it gives up on it.

    A subscription reads nothing for as long as nothing is published, so a dead path looks
    just like a quiet channel. After ``quiet`` seconds with nothing read it sends a PING
    (one; the server answers it on the subscribed connection); when nothing at all is read
    within ``timeout`` seconds after that, the connection is dead: drop it and subscribe
    again. Anything read counts as a sign of life. Times are monotonic seconds."""

    def __init__(self, quiet: float, timeout: float, now: float) -> None:
        self.quiet = quiet
        self.timeout = timeout
        self.heard_at = now
        self.pinged_at: float | None = None

    def heard(self, now: float) -> None:
        self.heard_at = now
        self.pinged_at = None

    def ping_due(self, now: float) -> bool:
        return self.pinged_at is None and now - self.heard_at >= self.quiet

    def pinged(self, now: float) -> None:
        self.pinged_at = now

    def dead(self, now: float) -> bool:
        return self.pinged_at is not None and now - self.pinged_at >= self.timeout

    def next_check(self, now: float) -> float:
        """Seconds until a PING is due or the answer is overdue (a read waits no longer)."""
        due = (
            self.heard_at + self.quiet if self.pinged_at is None else self.pinged_at + self.timeout
        )
        return max(due - now, 0.0)


MAX_WAIT_STEPS = 1000  # WAITs one batch sends at most (1000 x 5 s with the defaults)


def wait_steps(wait: tuple[int, int] | None, command: float | None) -> list[tuple[int, int]]:
    """``WAIT numreplicas ms`` as the WAITs to send, each blocking at most half the
    command timeout, so that every reply comes within the command timeout while the whole
    wait keeps its own length. A later WAIT waits for the same writes (nothing is written
    between them), so the last reply is the count; one that is met returns at once.
    (Past MAX_WAIT_STEPS the steps grow and the command timeout may cut the wait short.)"""
    if wait is None:
        return []
    replicas, ms = wait
    if command is None or ms <= 0:
        return [(replicas, ms)]
    step = max(1, int(command * 500))
    count = min(-(-ms // step), MAX_WAIT_STEPS)
    size = -(-ms // count)
    return [(replicas, min(size, ms - i * size)) for i in range(count)]


class Patience:
    """The naps of a caller polling for an end (a task's or a flow's result): 5 ms,
    doubling to 200 ms, until ``timeout`` seconds (None: no limit) after ``start``
    (monotonic seconds)."""

    FIRST, MOST = 0.005, 0.2

    def __init__(self, timeout: float | None, start: float) -> None:
        self.timeout = timeout
        self.start = start
        self._nap = self.FIRST

    def nap(self, now: float) -> float | None:
        """Seconds to sleep before the next read, or None when the time is up."""
        left = None if self.timeout is None else self.timeout - (now - self.start)
        if left is not None and left <= 0:
            return None
        wait = self._nap if left is None else min(self._nap, left)
        self._nap = min(self._nap * 2, self.MOST)
        return wait
