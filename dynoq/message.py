"""Messages and statistics as the user sees them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from .errors import Cancelled, InvalidArgument, InvalidType

MAX_PROGRESS = 1024  # bytes of one progress report, as JSON text (lua/lib/bounds.lua)
_UNSET: Any = object()


@dataclass(frozen=True)
class Failure:
    """Why a message failed: its last error and when it first and last failed (seconds,
    server clock). ``consumer`` is the instance id of the consumer that saw the last
    failure ("" when none said: its visibility ran out, or the record was unreadable)."""

    error_type: str
    error: str
    traceback: str
    consumer: str
    first_failed_at: float
    last_failed_at: float


@dataclass
class Message:
    """A message: what you send (first seven fields, and ``expires``) and, once popped,
    how it was delivered.

    ``token`` and ``lease`` are opaque: they tie an ack, nack or extend to this one
    delivery, so a stale ack cannot remove a newer delivery. ``fence`` (a consumer's
    message of an ordered shard) grows at every lease takeover of the shard, so a handler
    writing elsewhere can refuse a write from an older holder. ``failure`` says why a
    dead-lettered (or retried) message failed. ``keep`` is set by a task's worker (a
    result to keep with the ack, see dynoq.Tasks). ``unreadable`` says why a stored
    record cannot be read (a message of ``peek``, ``get`` or ``dead`` only: its payload,
    key, headers and tag are then None; a pop never delivers one, it dead-letters it).

    A handler that runs long tells how far it got with :meth:`progress` and hears a
    cancel (``q.cancel(id)``) in :attr:`cancelled`, or as ``dynoq.Cancelled`` from
    :meth:`progress` and :meth:`heartbeat`.
    """

    payload: Any
    id: str | None = None
    delay: float = 0.0
    priority: int = 0
    key: str | None = None
    headers: dict[str, Any] | None = None
    tag: str | None = None
    shard: int | None = field(default=None, compare=False)
    attempts: int = field(default=0, compare=False)
    deliver_at: float | None = field(default=None, compare=False)
    enqueued_at: float | None = field(default=None, compare=False)
    token: str | None = field(default=None, repr=False, compare=False)
    lease: str | None = field(default=None, repr=False, compare=False)
    fence: int | None = field(default=None, compare=False)
    failure: Failure | None = field(default=None, compare=False)
    # Set by a handler that wants something kept with the ack (a task's kept result):
    # (key, record, ms to keep it), written just before the ack, in its round trip.
    keep: tuple[str, bytes, int] | None = field(default=None, repr=False, compare=False)
    # Set by a handler that wants something sent before the ack, and what its reply asks
    # for (a flow's step that ended: dynoq._core.endings.Ending), one batch per round trip.
    ending: Any = field(default=None, repr=False, compare=False)
    unreadable: str | None = field(default=None, compare=False)
    # A consumer's side of a delivery that runs (Steer): made at the first progress report
    # or the consumer's first look at a long delivery, not for every message.
    steer: Steer | None = field(default=None, repr=False, compare=False)
    # The progress its handler last reported (JSON text): kept while it runs (q.get).
    reported: str | None = field(default=None, repr=False, compare=False)
    # Seconds after its push (a commit's, a publish's) by which it must be delivered, else
    # it is dead-lettered as expired (None: never). Last: the fields before are positional.
    expires: float | None = None

    @property
    def cancelled(self) -> bool:
        """True once this delivery was cancelled while it runs: stop; it ends "cancelled"
        whatever the handler does next (a consumer learns it within a second)."""
        return self.steer is not None and self.steer.cancelled

    def progress(self, value: Any = _UNSET) -> Any:
        """``msg.progress(value)``: report how far the handler got, a number or a small
        dict (JSON, at most 1,024 bytes; InvalidArgument or InvalidType otherwise), kept
        with the delivery while it runs (the consumer sends the latest within a second;
        ``q.get(id)``, ``TaskHandle.progress()``, ``dynoq get``, the dashboard). Raises
        dynoq.Cancelled once the message was cancelled. ``msg.progress()``: the last
        value reported (of a message ``q.get`` read: what its handler last reported while
        it runs; None when none was)."""
        if value is _UNSET:
            return None if self.reported is None else json.loads(self.reported)
        text = progress_text(value)
        if self.steer is None:
            self.steer = Steer()
        self.steer.check()
        self.reported = self.steer.pending = text
        return value

    def heartbeat(self) -> None:
        """Raise dynoq.Cancelled once the message was cancelled (a sync handler that runs
        long calls it now and then; its delivery stays invisible on its own)."""
        if self.steer is not None:
            self.steer.check()


class Steer:
    """What a consumer and the handler of one running delivery share: the cancel the
    consumer heard, and the progress the handler reported and not yet sent."""

    __slots__ = ("cancelled", "pending")

    def __init__(self) -> None:
        self.cancelled = False
        self.pending: str | None = None

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled("this message was cancelled while its handler ran: stop")


def progress_text(value: Any) -> str:
    """A progress report as JSON text, or a typed error naming what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float, dict)):
        raise InvalidType(f"progress must be a number or a dict, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(f"progress must be a finite number, got {value!r}")
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:  # (nested past what JSON writes)
        raise InvalidArgument(f"progress must be JSON (numbers, text, lists, dicts): {exc}") from (
            None
        )
    if len(text.encode()) > MAX_PROGRESS:
        raise InvalidArgument(
            f"progress must be at most {MAX_PROGRESS} bytes as JSON, got {len(text.encode())}"
        )
    return text


@dataclass(frozen=True)
class ShardStats:
    """One shard's counts, as :meth:`Queue.stats` returns them in ``QueueStats.shards``."""

    shard: int
    ready: int
    delayed: int
    unacked: int
    dead: int
    oldest_ready_at: float | None  # enqueue/due time of the oldest waiting message
    # Cumulative counts since the shard was created (a dashboard's rates are their deltas)
    pushed: int = 0
    acked: int = 0
    retried: int = 0  # given back by a failed handler (nack)
    expired: int = 0  # given back because their visibility ran out
    dead_lettered: int = 0
    # Transactional messages (DESIGN.md §3.6): prepared now (stored, not waiting), and
    # cumulative commits and rollbacks (a rollback by a checker's max_checks included)
    prepared: int = 0
    committed: int = 0
    rolled_back: int = 0
    cancelled: int = 0  # cancelled (waiting, or while running: DESIGN §3.9)
    lapsed: int = 0  # not delivered before their expiry: dead-lettered (counted in dead too)


@dataclass(frozen=True)
class QueueStats:
    """Counts of one queue, summed and per shard."""

    queue: str
    shards: tuple[ShardStats, ...]
    keys: int = 0  # ordered="key": keys with messages waiting or in flight (else 0)
    paused: bool = False  # Queue.pause(): nothing is delivered until Queue.resume()

    @property
    def ready(self) -> int:
        return sum(s.ready for s in self.shards)

    @property
    def delayed(self) -> int:
        return sum(s.delayed for s in self.shards)

    @property
    def unacked(self) -> int:
        return sum(s.unacked for s in self.shards)

    @property
    def dead(self) -> int:
        return sum(s.dead for s in self.shards)

    @property
    def prepared(self) -> int:
        """Prepared (half) messages: stored, not waiting until committed."""
        return sum(s.prepared for s in self.shards)

    @property
    def size(self) -> int:
        """Waiting messages (ready + delayed), as ``Queue.size()``."""
        return self.ready + self.delayed

    def total(self, count: str) -> int:
        """A cumulative count summed over the shards: pushed, acked, retried, expired,
        dead_lettered, committed, rolled_back, cancelled or lapsed."""
        return sum(getattr(s, count) for s in self.shards)


@dataclass(frozen=True)
class ConsumerStats:
    """A consumer's counts since it was created.

    handled: handler returned (acked); failed: handler (or a before hook) raised;
    retried: given back for a later retry; dead_lettered: sent to the dead-letter set;
    handler_seconds: total time inside handlers; lease_lost: shards whose lease was gone;
    rebalances: allocations computed; timed_out: handler calls that ran past
    consume_timeout; abandoned: such calls still running now in a thread no worker waits
    for (another worker took its place), at most ``concurrency``."""

    handled: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    handler_seconds: float = 0.0
    lease_lost: int = 0
    rebalances: int = 0
    timed_out: int = 0
    abandoned: int = 0


@dataclass(frozen=True)
class KeyState:
    """One key of a message-group queue (ordered="key"): messages waiting (a retry that
    waits for its delay counts as in flight: it holds the key), in flight, the attempts
    of its head so far (as ``msg.attempts``) and its fence (1 until a takeover). All 0
    for a key the queue does not hold."""

    waiting: int = 0
    in_flight: int = 0
    attempts: int = 0
    fence: int = 0
