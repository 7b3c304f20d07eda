"""A queue: the Dyno-queues operations, each an atomic script on one shard.

Every method is a shell: the decisions (validation, keys, script arguments, reply parsing,
multi-step flows) are in the core, shared by both flavors (:class:`dynoq._core.queue.QueueOps`
builds single calls; the flows are the pop planner's, ``_core/popping.py``, and those of
``_core/byid.py`` and ``_core/deadletters.py``); this class only runs them on a backend.
The asyncio shell (``dynoq/asyncio/queue.py``) is written by hand; the sync one is
generated from it (scripts/unasync.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import tracing
from .._core import byid, deadletters, sweeper
from .._core.popping import Planner
from .._core.queue import QueueOps
from .._core.schedules import Schedule, ScheduleOps
from .._core.transactions import Prepared, TransactionOps
from .._core.validate import check_id, check_items
from ..errors import InvalidArgument
from ..message import KeyState, Message, QueueStats
from ..settings import QueueSettings
from .backend import AsyncBackend
from .transactions import Half, Transaction


class Queue:
    """A delay (or ordered) queue of ``settings.shards`` shards. Get one with
    ``await client.queue(name, ...)``. Safe to share between threads (sync client) or
    between the tasks of its client's event loop (asyncio)."""

    def __init__(self, backend: AsyncBackend, ops: QueueOps) -> None:
        self.backend = backend  # the seam the consumer and sweeper run on
        self.ops = ops  # the pure operations of this queue
        self.name = ops.name
        self.settings: QueueSettings = ops.settings
        self.transactions = TransactionOps(
            ops
        )  # transactional messages (dynoq/_core/transactions.py)
        self.planner = Planner(ops)  # every pop of this queue (dynoq/_core/popping.py)

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.Queue {self.name!r} {self.settings}>"

    # -- producing ---------------------------------------------------------------------------

    async def push(
        self,
        payload: Any,
        *,
        id: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
        expires: float | None = None,
        debounce: float | None = None,
    ) -> str:
        """Add a message; return its id.

        payload: bytes, str, numbers, bools, None, and lists or dicts of those (msgpack).
        id: the message id (default: a random one); a message with the same id is
        replaced (Dyno's upsert), and its current delivery becomes stale. delay: seconds
        before it is due (>= 0). priority: 0..99, lower first. key: the ordering key
        (ordered queues route by it). headers: a dict stored with the message.
        expires: seconds from now: a message not delivered by then is dead-lettered
        (reason "Expired"), counted in ``stats().total("lapsed")``. debounce: seconds
        (with an ``id``): the message waits that long after the latest push of its id; a
        push while it waits replaces its payload and moves it, a push while it runs makes
        one copy wait (the latest payload). On an ordered queue it goes last in its shard
        (or key) when its wait ends.
        Raises InvalidArgument / InvalidType for bad arguments, PayloadTypeError /
        PayloadTooLarge for a payload that cannot be stored, OrderedQueueError for a delay
        or priority on an ordered queue, ConnectionFailed when Redis is unreachable."""
        hold = 0
        if debounce is not None:
            delay, hold = self.ops.debounced(id, delay, debounce, expires)
        with tracing.span("push", self.name, ids=[id] if id else None, producer=True):
            out = self.ops.prepare(
                Message(
                    payload,
                    id=id,
                    delay=delay,
                    priority=priority,
                    key=key,
                    headers=tracing.inject(headers),
                    expires=expires,
                )
            )
            if hold:
                await self.backend.run(self.ops.hold(out, hold))
            elif self.ops.combines():  # sent with other callers' single pushes, if any
                await self.backend.push(self.ops, out, self.ops.mode_of(out))
            else:
                await self.backend.run(self.ops.push([out]))
        return out.id

    async def ensure(
        self,
        payload: Any,
        *,
        id: str,
        delay: float = 0.0,
        priority: int = 0,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
        expires: float | None = None,
    ) -> bool:
        """Push unless a message with this id exists (or was acked within the queue's
        dedupe window); True if it was pushed. Atomic: of concurrent callers with one id,
        exactly one pushes. Arguments and errors as :meth:`push`."""
        if id is None:
            raise InvalidArgument("ensure() needs an id: it pushes only if that id is absent")
        out = self.ops.prepare(
            Message(
                payload,
                id=id,
                delay=delay,
                priority=priority,
                key=key,
                headers=headers,
                expires=expires,
            )
        )
        if self.ops.combines():
            return bool(await self.backend.push(self.ops, out, "ensure"))
        return bool(await self.backend.run(self.ops.push([out], mode="ensure")))

    async def push_many(self, items: Iterable[Any]) -> list[str]:
        """Push payloads or :class:`dynoq.Message` objects (at most 100,000 per call); all
        are validated before any is written. Returns their ids, in order. A repeated id
        is refused (InvalidArgument); errors otherwise as :meth:`push`."""
        with tracing.span("push", self.name, producer=True):
            outs = [
                self.ops.prepare(tracing.traced(item)) for item in check_items(items, "push_many()")
            ]
            ids = self.ops.unique(outs)
            if outs:
                await self.backend.run(self.ops.push(outs))
        return ids

    async def ensure_many(self, items: Iterable[Message]) -> int:
        """Push-if-absent for many :class:`dynoq.Message` objects, each with an id (at most
        100,000 per call); returns how many were pushed. If one call repeats an id, the
        first copy wins."""
        outs = self.ops.prepare_ensure(items)
        return int(await self.backend.run(self.ops.push(outs, mode="ensure"))) if outs else 0

    # -- transactional messages ------------------------------------------------------------

    async def prepare(
        self,
        payload: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        headers: dict[str, Any] | None = None,
        check_after: float = 60.0,
    ) -> Half:
        """Store a message that is not delivered, peeked or counted as waiting until
        ``await half.commit()`` (RocketMQ's half message); ``half.rollback()`` drops it.
        Use it to enqueue if and only if your own database transaction commits: prepare,
        commit your transaction, then commit the half. One left undecided for
        ``check_after`` seconds is asked about by a checker (``client.checker``). A delay
        counts from the commit; on an ordered queue the message takes its place at the
        commit. A given ``id`` already stored is refused (InvalidArgument); other
        arguments and errors as :meth:`push`."""
        msg_id, shard, call = self.transactions.prepare(
            payload,
            id=id,
            key=key,
            delay=delay,
            priority=priority,
            headers=headers,
            check_after_s=check_after,
        )
        await self.backend.run(call)
        return Half(self.backend, self.transactions, msg_id, shard)

    def transaction(
        self,
        payload: Any,
        *,
        id: str | None = None,
        key: str | None = None,
        delay: float = 0.0,
        priority: int = 0,
        headers: dict[str, Any] | None = None,
        check_after: float = 60.0,
    ) -> Transaction:
        """``async with q.transaction(payload, ...) as half:`` prepares the message, then
        commits it when the block ends cleanly and rolls it back when it raises.
        Arguments as :meth:`prepare`."""
        return Transaction(
            self.backend,
            self.transactions,
            payload,
            {
                "id": id,
                "key": key,
                "delay": delay,
                "priority": priority,
                "headers": headers,
                "check_after_s": check_after,
            },
        )

    def half(self, id: str) -> Half:
        """The handle of a message prepared earlier (by this process or another), to
        commit or roll it back by id."""
        return Half(self.backend, self.transactions, check_id(id))

    async def prepared(self, limit: int = 100) -> list[Prepared]:
        """Up to ``limit`` (1..1000) prepared messages, the next to be checked first,
        with when each was prepared and how many checks it had."""
        return await self.backend.drive(self.transactions.prepared(limit))

    # -- consuming ---------------------------------------------------------------------------

    async def pop(
        self, count: int = 1, *, wait: float = 0.0, visibility: float | None = None
    ) -> list[Message]:
        """Claim up to ``count`` (1..1000) due messages.

        Each stays invisible to other consumers for ``visibility`` seconds (default: the
        queue's unack_timeout); ack, nack or extend it before then, or it is delivered
        again with ``attempts`` incremented. ``wait``: seconds to block for the first
        message (woken by pushes, not polling). Returns [] when nothing came. On asyncio,
        cancelling a task that waits here claims nothing."""
        with tracing.span("receive", self.name):
            return await self.backend.drive(
                self.planner.pop(count, wait=wait, visibility=visibility)
            )

    async def ack(self, msg: Message | str) -> bool:
        """Finish a delivery (a popped message, or an id: slower on ordered queues). False
        if it is no longer current (its visibility ran out and it was redelivered).
        Raises LeaseLost when the popping consumer's shard lease is gone."""
        return await self.ack_many([msg]) == 1

    async def ack_many(self, msgs: Iterable[Message | str]) -> int:
        """Ack many deliveries (at most 100,000; one round trip); returns how many were
        current. Errors as :meth:`ack`."""
        with tracing.span("ack", self.name):
            return await self.backend.drive(byid.ack_many(self.ops, msgs))

    async def nack(self, msg: Message | str, *, delay: float = 0.0) -> bool:
        """Give a delivery back now or after ``delay`` seconds; it counts as an attempt, and
        once the queue's max_retries is spent the message is dead-lettered instead. False
        if the delivery is no longer current."""
        return await self.backend.drive(byid.nack(self.ops, msg, delay=delay))

    async def extend(self, msg: Message | str, timeout: float) -> bool:
        """Set a delivery's visibility deadline to now + ``timeout`` seconds (Dyno's
        setUnackTimeout; 0: deliverable again at once, as when its visibility runs out);
        False if it is no longer in flight."""
        return await self.backend.drive(byid.extend(self.ops, msg, timeout))

    # -- by id -------------------------------------------------------------------------------

    async def reschedule(self, id: str, *, delay: float) -> bool:
        """Move a waiting message's due time to now + ``delay`` seconds (Dyno's setTimeout);
        False if it is not waiting (unknown, in flight or dead). Refused on ordered queues
        (OrderedQueueError)."""
        return await self.backend.drive(byid.reschedule(self.ops, id, delay=delay))

    async def remove(self, id: str) -> bool:
        """Delete a message wherever it is (waiting, in flight or dead); False if unknown."""
        return await self.backend.drive(byid.remove(self.ops, id))

    async def cancel(self, id: str) -> bool:
        """Cancel a message: one that waits is taken off at once; one that runs is asked to
        stop (its handler sees ``msg.cancelled`` within a second, a coroutine handler is
        cancelled, ``msg.progress()`` / ``msg.heartbeat()`` raise dynoq.Cancelled). Either
        ends "cancelled": counted in ``stats()``, never delivered again, not a dead
        letter. False when it neither waits nor runs (ended, dead-lettered or unknown)."""
        return await self.backend.drive(byid.cancel(self.ops, id))

    async def get(self, id: str) -> Message | None:
        """The stored message with its attempts so far and, while it runs, the progress its
        handler reported (``msg.progress()``), or None."""
        return await self.backend.drive(byid.get(self.ops, id))

    async def contains(self, id: str) -> bool:
        """Whether a message with this id is stored (waiting, held by a debounce, in flight
        or dead)."""
        return await self.backend.drive(byid.contains(self.ops, id))

    def shard_for(self, routing: str) -> int:
        """The shard of an id (concurrent queues) or ordering key (ordered queues)."""
        return self.ops.shard_for(routing)

    # -- whole queue -------------------------------------------------------------------------

    async def peek(self, count: int = 10) -> list[Message]:
        """The next ``count`` (1..1000) deliverable messages in delivery order (lower
        priority value first, then earlier ready time), without claiming them. On a
        queue with ordered="key": the heads of the next keys to be served."""
        return await self.backend.drive(self.ops.kind.peek(count))

    async def size(self) -> int:
        """Waiting messages (ready + delayed), not in flight, not dead."""
        stats = await self.stats()
        return stats.size

    async def stats(self) -> QueueStats:
        """Ready, delayed, in-flight (unacked) and dead messages, per shard and summed."""
        return await self.backend.run(self.ops.stats())  # type: ignore[no-any-return]

    async def key_state(self, key: str) -> KeyState:
        """One key of a queue with ordered="key": messages waiting, in flight (a retry
        waiting for its delay holds its key: in flight), the attempts of its head so far
        and its fence; all 0 for a key the queue does not hold."""
        return await self.backend.drive(self.ops.kind.key_state(key))

    async def keys(self, limit: int = 20) -> dict[str, list[dict[str, Any]]]:
        """A queue with ordered="key": its busiest keys (``{key, waiting, in_flight}``)
        and the keys blocked by a failing message (``{key, id, attempts, reason}``), at
        most ``limit`` (1..1000) of each (``dynoq keys QUEUE``)."""
        return await self.backend.drive(self.ops.kind.keys_report(limit))

    async def set_weight(self, key: str, weight: int) -> int:
        """A queue with ordered="key": give ``key`` ``weight`` turns (1..100, default 1)
        for each turn of a weight-1 key of its shard while both have messages waiting
        (weighted round-robin, enforced in Redis for every consumer); kept until set
        back to 1, across clears. Returns the key's weight before. At most 10,000 keys
        of a shard have a weight other than 1 (InvalidArgument beyond)."""
        return await self.backend.drive(self.ops.kind.set_weight(key, weight))

    async def weight(self, key: str) -> int:
        """A queue with ordered="key": the fairness weight of ``key`` (1 unless set)."""
        return await self.backend.drive(self.ops.kind.weight(key))

    async def clear(self) -> None:
        """Delete every message of the queue (its settings stay)."""
        await self.backend.run(self.ops.clear())

    async def pause(self) -> bool:
        """Stop deliveries, server side, until :meth:`resume`: pops deliver nothing (an
        idle consumer costs what it costs on an empty queue), pushes are kept, messages
        in flight may still be acked. It holds across restarts of every process. False if
        the queue was paused already."""
        return await self.backend.run(self.ops.pause(True))  # type: ignore[no-any-return]

    async def resume(self) -> bool:
        """Deliver again after :meth:`pause`, waking the queue's consumers at once. False
        if the queue was not paused."""
        return await self.backend.run(self.ops.pause(False))  # type: ignore[no-any-return]

    async def paused(self) -> bool:
        """Whether the queue is paused."""
        return await self.backend.run(self.ops.paused())  # type: ignore[no-any-return]

    async def requeue_expired(self) -> int:
        """Give back every delivery whose visibility ran out, over all shards (Dyno's
        processUnacks), and dead-letter what was pushed with an expiry and not delivered
        by then; returns how many went back or to the dead letters. The sweeper and every
        pop do this too."""
        return await self.backend.drive(sweeper.requeue_expired(self.ops))

    # -- recurring messages ------------------------------------------------------------------

    async def schedule(
        self,
        id: str,
        payload: Any,
        *,
        every: float | None = None,
        cron: str | None = None,
        tz: str | None = None,
        overlap: str = "allow",
        priority: int = 0,
        key: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> float:
        """Push ``payload`` again and again: every ``every`` seconds, or on a ``cron``
        expression (5 fields, in the IANA time zone ``tz``: default UTC; across a
        daylight-saving change a time skipped runs once at the jump, and a time repeated
        once, its first), exactly one occurrence per tick however many consumers and
        sweepers run. ``overlap="skip"``: an occurrence delivered while the last one that
        ran still waits or runs (a retry included) is skipped (acked unhandled, logged);
        "allow" (the default) runs them side by side. An occurrence's id is
        ``<id>@<tick ms>`` and its headers carry ``dynoq.schedule`` and ``dynoq.tick``.
        The next occurrence is pushed when the current one is delivered (or by the
        sweeper); a tick up to a second late is pushed late, ticks missed for longer
        (nothing ran) are skipped. Scheduling an existing id replaces it. Returns the
        first tick (seconds, server clock)."""
        return await self.backend.drive(
            ScheduleOps(self.ops).schedule(
                id,
                payload,
                every=every,
                cron=cron,
                tz=tz,
                overlap=overlap,
                priority=priority,
                key=key,
                headers=headers,
            )
        )

    async def unschedule(self, id: str) -> bool:
        """Stop a recurring message (its waiting occurrence is removed); False if unknown."""
        return await self.backend.drive(ScheduleOps(self.ops).unschedule(id))

    async def schedules(self) -> list[Schedule]:
        """Every recurring message of the queue."""
        return await self.backend.drive(ScheduleOps(self.ops).schedules())

    # -- dead letters ------------------------------------------------------------------------

    async def dead(self, count: int = 100) -> list[Message]:
        """Up to ``count`` (1..1000) dead-lettered messages, oldest first."""
        return await self.backend.drive(deadletters.dead(self.ops, count))

    async def replay_dead(self, ids: Iterable[str] | None = None) -> int:
        """Put dead-lettered messages (all, or these ids: at most 100,000) back on the
        queue with their attempts reset; returns how many."""
        return await self.backend.drive(deadletters.replay_dead(self.ops, ids))

    async def purge_dead(self) -> int:
        """Delete every dead-lettered message for good; returns how many."""
        return await self.backend.drive(deadletters.purge_dead(self.ops))
