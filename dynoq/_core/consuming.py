"""A consumer's decisions, shared by the thread and asyncio consumers (pure: no I/O).

RocketMQ's ConsumeMessageConcurrentlyService and ConsumeMessageOrderlyService, minus the
threads: which shards this member should hold, and what to do with a handled batch (ack
what succeeded; retry, dead-letter or give back the rest), written once as flows.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .. import allocation
from ..errors import Cancelled, ConsumeTimeout, InvalidArgument, InvalidType
from ..message import ConsumerStats, Message
from . import validate
from .calls import Batch, Call, Flow
from .endings import endings
from .failures import failure_call
from .lua import script
from .popping import quarantine
from .queue import QueueOps
from .retry import RateLimited, RetryPolicy
from .settings import ConsumerSettings, QueueSettings
from .streams import STREAM_MEMBER
from .topics import TopicOps

log = logging.getLogger("dynoq.consumer")
_KEEP = script("task-keep")


def default_instance_id() -> str:
    return f"{platform.node()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Plan:
    """A consumer's settings, resolved for one queue."""

    settings: ConsumerSettings
    ordered: bool
    shards: int
    strategy: allocation.Strategy
    strategy_options: Mapping[str, Any]
    retry: RetryPolicy
    instance_id: str
    in_flight: int
    visibility: float  # seconds a popped message stays invisible
    max_retries: int

    def timeout_of(self, msgs: Sequence[Message]) -> float:
        """Seconds one handler call on ``msgs`` may take: their first message's own (a
        task's ``timeout``: RetryPolicy.timeout), else consume_timeout."""
        own = self.retry.of(msgs[0]).timeout if msgs else None
        return self.settings.consume_timeout if own is None else own

    @property
    def own_timeouts(self) -> bool:
        """Whether a message may have a timeout of its own (a task queue's)."""
        return self.retry.has_timeouts()

    @property
    def lease_margin(self) -> float:
        """Seconds a shard lease must have left for its holder to pop or call a handler:
        a third of its lifetime (it is renewed every third, so a healthy lease has at
        least two thirds left; less means renewals are failing)."""
        return self.settings.lease_ttl / 3

    def stands_aside(self, members: Sequence[str]) -> bool:
        """Whether a streaming source (dynoq.spark) holds the group: it consumes the group
        alone (it does not start beside this member), so this member takes nothing."""
        return any(m.startswith(STREAM_MEMBER) for m in members)

    def target(self, members: Sequence[str]) -> set[int]:
        """The shards this member should hold, given the group's live members (every
        member computes the same split from the same list)."""
        if self.instance_id not in members:
            return set()
        if self.stands_aside(members):
            return set()
        return set(
            self.strategy(
                list(range(self.shards)), list(members), self.instance_id, **self.strategy_options
            )
        )


def resolve(settings: ConsumerSettings, queue: QueueSettings) -> Plan:
    """Resolve ``settings`` for ``queue``; raises typed errors for options that do not fit
    (an unknown strategy option fails now, not at the first rebalance)."""
    fn = allocation.resolve(settings.strategy)
    options = dict(settings.strategy_options or {})
    me = settings.instance_id or default_instance_id()
    fn(list(range(queue.shards)), [me], me, **options)
    # A keyed queue (ordered="key") takes no shard leases (plan.ordered is shard order
    # only): any consumer takes any key; its retries are the ordered ones (a 1 s suspend).
    return Plan(
        settings=settings,
        ordered=queue.by_shard,
        shards=queue.shards,
        strategy=fn,
        strategy_options=options,
        retry=RetryPolicy.make(
            settings.retry_delays, ordered=bool(queue.ordered), max_retries=settings.max_retries
        ),
        instance_id=me,
        in_flight=settings.in_flight_limit,
        visibility=settings.visibility or queue.unack_timeout,
        max_retries=queue.max_retries,
    )


def settings_of(settings: ConsumerSettings | None, named: dict[str, Any]) -> ConsumerSettings:
    """The settings: ``settings=`` as given, or the options given by name (not both)."""
    if settings is None:
        return ConsumerSettings(**named)
    if not isinstance(settings, ConsumerSettings):
        raise InvalidType(
            f"settings must be a dynoq.ConsumerSettings, got {type(settings).__name__}"
        )
    defaults = {f.name: f.default for f in dataclasses.fields(ConsumerSettings)}
    changed = sorted(k for k, v in named.items() if k not in defaults or v != defaults[k])
    if changed:
        raise InvalidArgument(
            f"give the consumer's options either as settings= or by name, "
            f"not both (also given by name: {', '.join(changed)}); use "
            "dataclasses.replace(settings, ...) to change a few"
        )
    return settings


def for_topic(
    settings: ConsumerSettings, topic: TopicOps
) -> tuple[ConsumerSettings, QueueOps, Flow[tuple[str, QueueOps]]]:
    """A topic consumer's settings (with its instance id fixed: a broadcasting member's
    queue is named by it), the queue it would consume in its mode (None: clustering
    until the start says otherwise), and the flow to run when it starts: it reads the
    group's subscription (whose mode decides when ``settings.mode`` is None; an explicit
    conflicting one raises GroupConflict), subscribes it if needed, and returns the mode
    and queue to consume (``TopicOps.join``)."""
    if settings.instance_id is None:
        settings = dataclasses.replace(settings, instance_id=default_instance_id())
    me = settings.instance_id
    assert me is not None
    queue = topic.group_queue(settings.group, me if settings.mode == "broadcasting" else None)
    return settings, queue, topic.join(settings.group, settings.mode, me)


def check_mode(settings: ConsumerSettings, queue: QueueOps) -> None:
    if settings.mode == "broadcasting" and not queue.keys.tag:
        raise InvalidArgument(
            "broadcasting is for topics (client.topic): on a queue, "
            "each message goes to one member of one group"
        )


# Batches a worker of a keyed queue takes in a row from its acks (a hot key alone: see
# settle's refill) before it looks at the whole queue again.
MAX_CARRIED = 16
CHANNEL_TICK = 0.25  # longest wait on the group channel between upkeep checks


class UpkeepClock:
    """When a consumer's upkeep heartbeats and rebalances (monotonic seconds): a heartbeat
    every ``beat_every``, a rebalance every ``rebalance_every`` or at once when the group's
    channel said the group changed; after a failure, beat as soon as the backoff ends.
    One schedule for the sync and asyncio upkeep loops."""

    def __init__(self, beat_every: float, rebalance_every: float, now: float) -> None:
        self.beat_every, self.rebalance_every = beat_every, rebalance_every
        self.next_beat, self.next_rebalance = now + beat_every, now + rebalance_every

    def due(self, now: float, notified: bool) -> tuple[bool, bool]:
        """(heartbeat now, rebalance now)."""
        return now >= self.next_beat, notified or now >= self.next_rebalance

    def ran(self, now: float, rebalanced: bool) -> None:
        self.next_beat = now + self.beat_every
        if rebalanced:
            self.next_rebalance = now + self.rebalance_every

    def failed(self, now: float) -> None:
        self.next_beat = min(self.next_beat, now)

    def wait(self, now: float, other: float) -> float:
        """How long to listen on the group channel before looking again (``other``: the
        next time something else is due)."""
        return min(max(min(self.next_beat, self.next_rebalance, other) - now, 0.0), CHANNEL_TICK)


def pop_order(preferred: Sequence[int], shards: int, turn: int) -> list[int]:
    """Shards to pop from: the consumer's own first, then every other (Dyno's local-shard
    preference), each part rotated by ``turn`` so that no shard starves."""
    mine = list(preferred)
    mine_set = set(mine)
    rest = [s for s in range(shards) if s not in mine_set]
    if mine:
        k = turn % len(mine)
        mine = mine[k:] + mine[:k]
    if rest:
        k = turn % len(rest)
        rest = rest[k:] + rest[:k]
    return mine + rest


class LastLook:
    """What a concurrent worker's last look found (monotonic seconds), for its next turn:
    whether it filled the batch (a backlog: ``Planner.fetch(backlog=True)``) and when
    something may fall due (``nap``). The sync and asyncio worker loops share it."""

    def __init__(self) -> None:
        self.full = False
        self.due_at: float | None = None  # None: nothing is waiting, or unknown

    def saw(self, found: int, wanted: int, hint: float | None, now: float) -> None:
        """A look found ``found`` of ``wanted``; ``hint`` as ``Planner.fetch`` returns it."""
        self.full = found >= wanted
        self.due_at = None if hint is None or hint < 0 else now + hint / 1000

    def nap(self, now: float, idle_wait: float) -> float:
        return nap(self.due_at, now, idle_wait)

    @property
    def in_turn(self) -> bool:
        """Whether the next look waits for the other workers' looks to end (one at a
        time: overlapping looks raced for the same due messages and, in threads, passed
        the GIL back and forth at every reply). Not after a full batch: a backlog's looks
        overlap, for throughput (one at a time, four threads drained a deep queue at
        0.75x)."""
        return not self.full


def nap(due_at: float | None, now: float, idle_wait: float) -> float:
    """How long a watcher waits for a wake-up: until something may fall due (``due_at``,
    monotonic; None: nothing is waiting), at most ``idle_wait``. No margin past the due
    time: the server's hint is in whole ms from its floored clock and is counted from
    when the reply arrived, so the wait never ends before the due time (a margin of 1 ms
    was 1 ms of lateness at low rates: benchmarks/RESULTS.md, "Fourth session")."""
    if due_at is None:
        return idle_wait
    return min(idle_wait, max(due_at - now, 0.0))


# -- what to do with a handled batch -----------------------------------------------------


@dataclass
class Tally:
    """What settling a batch did (the consumer's stats add it up)."""

    handled: int = 0  # acked
    failed: int = 0  # the handler raised
    retried: int = 0  # given back for a later retry
    dead_lettered: int = 0  # sent to the dead letters
    # delivered with the acks (a keyed queue's hot key: see settle's ``refill``)
    refilled: list[Message] = dataclasses.field(default_factory=list)


def keeps(done: Sequence[Message]) -> list[Call]:
    """What handled messages asked to keep with their ack (``Message.keep``: a task's
    kept result): one task-keep script per shard, sent just before the acks in their
    round trip, so that a task's id is always stored somewhere (its message, then its
    kept record) and an ``apply(id=...)`` never finds it absent in between. (One script
    for a batch's records costs the client a third of a SET each: bench_tasks.) Nothing
    for messages that ask for nothing: no command, no cost."""
    groups: dict[int | None, tuple[list[str], list[Any]]] = {}
    for m in done:
        k = m.keep
        if k is not None:
            keys, args = groups.setdefault(m.shard, ([], []))
            keys.append(k[0])
            args += (k[2], k[1])
    return [Call(_KEEP, keys, args) for keys, args in groups.values()]


def settle(
    ops: QueueOps,
    ok: Sequence[Message],
    failed: Sequence[tuple[Message, BaseException]],
    policy: RetryPolicy,
    consumer: str,
    back: Sequence[Message] = (),
    refill: tuple[int, float] | None = None,
) -> Flow[Tally]:
    """Concurrent queues: ack what succeeded, retry or dead-letter each failure on its own
    (recording why), give back what was not handled (no attempt counted); one round trip
    for all of it, with what the messages asked to keep (:func:`keeps`) before their acks.
    ``refill`` (count, visibility seconds), on a keyed queue when every message of one
    shard succeeded: the ack also delivers up to count more when no other key of the
    shard is ready (a hot key alone: ack and the key's next pop share a round trip);
    they are in ``Tally.refilled``. What handled messages send before their ack (their
    ``ending``: :mod:`dynoq._core.endings`) goes first, a round trip of its own."""
    if any(m.cancelled for m in ok):  # it ended well, but too late: it ends cancelled
        failed = [*failed, *((m, cancelled()) for m in ok if m.cancelled)]
        ok = [m for m in ok if not m.cancelled]
    handled = yield from endings(ok)
    if len(handled) < len(ok):  # an ending failed: its message goes back, to run again
        sent = {id(m) for m in handled}
        back = [*back, *(m for m in ok if id(m) not in sent)]
    ok = handled
    kept = keeps(ok)
    took = (
        ops.kind.ack_and_take(ok, refill[0], validate.to_ms(refill[1]))
        if refill and ok and not failed and not back
        else None
    )
    acking = [took[0]] if took else ops.ack_calls(ok)
    acks = len(acking)
    calls: list[Call] = [*kept, *acking]
    calls += [failure_call(ops, msg, error, policy, consumer) for msg, error in failed]
    calls += [ops.nack_call(m, delay=0.0, mode="back") for m in back]
    replies = (yield Batch(calls))[len(kept) :]
    tally = Tally(
        handled=sum(replies[:acks]),
        failed=sum(not isinstance(e, RateLimited) and not m.cancelled for m, e in failed),
        refilled=took[1] if took else [],
    )
    for given, buried in replies[acks : acks + len(failed)]:
        tally.retried += given
        tally.dead_lettered += buried
    if any(m.unreadable is not None for m in tally.refilled):
        tally.refilled = yield from quarantine(ops, tally.refilled, consumer)
    return tally


def settle_in_order(
    ops: QueueOps,
    msgs: Sequence[Message],
    done: int,
    error: BaseException | None,
    policy: RetryPolicy,
    consumer: str,
) -> Flow[tuple[Tally, bool]]:
    """Ordered queues: the first ``done`` messages succeeded; ``error`` (if any) is the
    failure of the next one, which is then retried in place (blocking its shard) or
    dead-lettered, while the messages after it go back to their places unhandled (no
    attempt counted). Returns (tally, True when the shard now waits for a retry). A
    message cancelled while it ran ends there, as a failure would (it ends cancelled)."""
    heard = next((i for i in range(done) if msgs[i].cancelled), None)
    if heard is not None:
        error, done = cancelled(), heard
    handled = yield from endings(msgs[:done])
    ended = 0  # the handled prefix whose endings went out: order holds past none of them
    while ended < len(handled) and handled[ended] is msgs[ended]:
        ended += 1
    back: Sequence[Message] = ()
    if ended < done:  # one's ending failed: it and those after it go back, in order
        error, done, back = None, ended, msgs[ended:]
    kept = keeps(msgs[:done])
    acking = ops.ack_calls(msgs[:done])
    acks = len(acking)
    calls: list[Call] = [*kept, *acking]
    if error is not None:
        calls.append(failure_call(ops, msgs[done], error, policy, consumer))
        back = msgs[done + 1 :]
    calls += [ops.nack_call(m, delay=0.0, mode="back") for m in back]
    replies = (yield Batch(calls))[len(kept) :]
    tally = Tally(handled=sum(replies[:acks]))
    blocked = False
    if error is not None:
        given, buried = replies[acks]
        tally.failed = 0 if isinstance(error, RateLimited) or msgs[done].cancelled else 1
        tally.retried, tally.dead_lettered = given, buried
        blocked = given > 0
    return tally, blocked


def cancelled() -> Cancelled:
    """The outcome of a handler call whose message was cancelled while it ran."""
    return Cancelled("the message was cancelled while its handler ran: it ends cancelled")


def timed_out(timeout: float) -> ConsumeTimeout:
    return ConsumeTimeout(
        f"the handler ran longer than consume_timeout ({timeout:g}s): the "
        "message is treated as failed"
    )


def call_of(msgs: Sequence[Message]) -> str:
    """How a log line names a handler call: its message's id and attempt, or a batch's
    size and first id (never a payload)."""
    if len(msgs) == 1:
        return f"message {msgs[0].id} (attempt {msgs[0].attempts})"
    return f"a batch of {len(msgs)} messages from {msgs[0].id if msgs else '-'}"


def overran(
    log: logging.Logger,
    queue: str,
    msgs: Sequence[Message],
    timeout: float,
    *,
    left: int | None,
    cap: int,
    shard: int | None,
    keyed: bool = False,
) -> None:
    """Log a handler call past consume_timeout (one line): ``left`` is how many calls
    are left running now counting this one (None: at the cap, its worker waits for it);
    ``shard``: the ordered shard it keeps blocked until it returns; ``keyed``: a message
    group's call, whose message stays in flight (so its key blocked) until it returns."""
    if keyed:  # the key is not named: it may be user data, as a payload is
        then = (
            "its key stays blocked until it returns, then the message fails and is "
            "retried as any failure (the other keys flow)"
        )
    elif shard is not None:
        then = f"shard {shard} stays blocked until it returns"
    else:
        then = "the message fails now and is retried as any failure"
    if left is None:
        log.warning(
            "dynoq: the handler call on %s of %r ran past consume_timeout (%gs); "
            "%d calls are left running already (the most per consumer): its "
            "worker waits for it; %s",
            call_of(msgs),
            queue,
            timeout,
            cap,
            then,
        )
    else:
        log.warning(
            "dynoq: the handler call on %s of %r ran past consume_timeout (%gs); "
            "its thread is left running (%d of at most %d) and another worker "
            "takes its place; %s",
            call_of(msgs),
            queue,
            timeout,
            left,
            cap,
            then,
        )


def returned(log: logging.Logger, queue: str, msgs: Sequence[Message], seconds: float) -> None:
    log.warning(
        "dynoq: the handler call on %s of %r that ran past consume_timeout returned after %.1fs",
        call_of(msgs),
        queue,
        seconds,
    )


class Counts:
    """A consumer's counts (:class:`dynoq.ConsumerStats`) as they are added up."""

    def __init__(self) -> None:
        self._values: dict[str, float] = asdict(ConsumerStats())

    def add(self, **deltas: float) -> None:
        for name, value in deltas.items():
            self._values[name] += value

    def add_tally(self, tally: Tally, seconds: float = 0.0) -> None:
        self.add(
            handled=tally.handled,
            failed=tally.failed,
            retried=tally.retried,
            dead_lettered=tally.dead_lettered,
            handler_seconds=seconds,
        )

    def snapshot(self) -> ConsumerStats:
        return ConsumerStats(
            **{
                k: (x if k == "handler_seconds" else int(x))  # type: ignore[arg-type]
                for k, x in self._values.items()
            }
        )


def summed(stats: Sequence[ConsumerStats]) -> ConsumerStats:
    """Several consumers' counts added up (a task worker's, one consumer per queue)."""
    out = Counts()
    for s in stats:
        out.add(**asdict(s))
    return out.snapshot()
