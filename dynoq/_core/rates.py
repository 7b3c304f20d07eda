"""A consumer group's rate limit where its handlers are called (pure: no I/O).

A limit protects somebody else's API, so it is counted in handler calls: a worker takes
permits (lua/rate-take-2.lua: a log of the group's grants of the last period, shared by
every member) for the calls it is about to make, after the pop, never for the pop itself.
Permits taken at the pop let calls fall long after their grants: a blocking pop
held its permits while it waited, and a batch's last calls ran long after its first, so
that a sliding second held 36 calls of a limit of 20.

A permit is used only while it is *fresh*: its call starts at most ``fresh`` seconds
(:data:`GUARD` of the period, at least :data:`FRESH_FLOOR`) after it was asked for, and
the group's log counts grants over ``period + fresh`` (the :attr:`RateLimit.window`). A
grant is logged after it was asked for, and its calls start after it, so the calls of any
period are grants of one window: at most ``count``; the first permit of a grant whose
reply came back later than ``fresh`` is used anyway (else a slow server would stop every
call), which DESIGN §3.9's ``count + 1`` allows for. The price is :data:`GUARD` of the
throughput. A worker asks for as many permits at once as its next calls will start while
they are fresh (by the handler's speed seen so far): a fast handler takes one round trip
for several calls, a slow one a round trip a call.
"""

from __future__ import annotations

from typing import Any

from . import validate
from .calls import Call
from .lua import script

FRESH_FLOOR = 0.001  # seconds: under this, a permit's round trip is the bound anyway
GUARD = 0.02  # of the period: how long a permit stays fresh, and what the window adds
_GROW = 0.5  # how much of the way to a faster call one sample moves the estimate


class RateLimit:
    """A consumer's view of its group's limit: ``count`` calls per ``period`` seconds,
    how long a permit stays usable, and the handler's speed (shared by the workers: a
    racing update loses one sample)."""

    __slots__ = ("count", "fresh", "per_call", "period", "window")

    def __init__(self, limit: tuple[int, float]) -> None:
        self.count, self.period = int(limit[0]), float(limit[1])
        self.fresh = max(self.period * GUARD, FRESH_FLOOR)
        self.window = self.period + self.fresh  # what the group's log counts grants over
        self.per_call = 0.0  # seconds a message's call takes (0: not seen yet)

    def ask(self, left: int, together: bool = False) -> int:
        """How many permits to take with ``left`` messages to call: those whose calls
        will start while the permits are fresh (one until a call was seen), or all of
        them for one call (``together``: a batch handler), at most ``count``."""
        if together:
            return max(1, min(left, self.count))
        fits = int(self.fresh / self.per_call) + 1 if self.per_call > 0 else 1
        return max(1, min(left, self.count, fits))

    def called(self, messages: int, seconds: float) -> None:
        """``messages`` were handled in ``seconds`` of handler calls."""
        if messages <= 0:
            return
        seen = max(seconds / messages, 1e-9)
        now = self.per_call
        self.per_call = seen if now <= 0 or seen > now else now + (seen - now) * _GROW


class Permits:
    """The permits one worker holds for the batch it handles: ``held`` of them, asked
    for at ``since`` (monotonic seconds); ``first``: none of them used yet."""

    __slots__ = ("first", "held", "since")

    def __init__(self) -> None:
        self.held = 0
        self.since = 0.0
        self.first = False

    def use(self, want: int, now: float, fresh: float) -> int:
        """Up to ``want`` held permits for calls that start ``now``; 0 when none is
        fresh. A stale one is dropped (its call would count outside its grant's window),
        but for the first of a grant whose reply came back late: that one is used at
        once, so a slow round trip slows the calls and never stops them."""
        if self.held and now - self.since > fresh:
            self.held = 1 if self.first else 0
        used = min(want, self.held)
        self.held -= used
        self.first = self.first and not used
        return used

    def got(self, granted: int, since: float) -> None:
        """``granted`` permits came back for a request sent at ``since``."""
        self.held, self.since, self.first = granted, since, granted > 0


_RATE = script("rate-take")


def take(keys: Any, count: int, period: float, want: int) -> Call:
    """Take up to ``want`` permits of the limit whose log is ``keys`` (``rate`` and
    ``rate_state``: a consumer group's, or a Spark write's), ``count`` per ``period``
    seconds for every taker together; reply: (granted, seconds until the next permit)."""
    return _RATE.call(
        keys,
        [count, validate.to_ms(period), want],
        lambda r: (int(r[0]), int(r[1]) / 1000),
    )


__all__ = ["FRESH_FLOOR", "GUARD", "Permits", "RateLimit", "take"]
