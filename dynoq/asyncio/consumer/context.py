"""What a consumer's workers and upkeep share (threads in the sync twin: there each piece
is thread-safe on its own; tasks of one event loop need no lock)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..._core.consuming import Counts, Plan
from ..._core.running import SLOT_LEASE, SlotOps
from ...errors import QueueGone
from ...message import Message
from ..events import Event, Guard, Lock, new_event, new_guard, new_lock
from ..queue import Queue
from .board import Deliveries, IdleGate, InFlight, ShardBoard
from .group import Membership
from .lease import Leases
from .rates import RateGate
from .running import RunningGate

log = logging.getLogger("dynoq.consumer")


@dataclass
class Shared:
    queue: Queue
    plan: Plan
    stats: Counts
    leases: Leases
    membership: Membership
    board: ShardBoard = field(default_factory=ShardBoard)  # ordered: leased shards
    in_flight: InFlight = field(init=False)
    gate: RateGate | None = field(init=False)  # the group's rate limit (None: none)
    running: RunningGate | None = field(init=False)  # the queue's max_running (None: none)
    deliveries: Deliveries = field(default_factory=Deliveries)
    idle: IdleGate = field(default_factory=IdleGate)  # concurrent queues: one waits
    # Concurrent queues: one look at a time (see Workers._look).
    looking: Lock = field(default_factory=new_lock)
    stopping: Event = field(default_factory=new_event)
    # Concurrent queues: the allocated shards, popped first. Replaced whole (an atomic
    # rebinding), never changed in place, so readers need no lock.
    preferred: list[int] = field(default_factory=list)
    # A streaming source holds the group (Plan.stands_aside): the workers take nothing.
    aside: bool = False
    # The QueueGone that stopped the consumer (its queue vanished or was created anew),
    # and what stops it (the facade's: stop() in a thread, or a task, of its own).
    failure: QueueGone | None = None
    on_gone: Callable[[], None] | None = None
    _gone_guard: Guard = field(default_factory=new_guard)

    def __post_init__(self) -> None:
        self.in_flight = InFlight(self.plan.in_flight)
        limit = self.plan.settings.rate_limit
        self.gate = (
            None
            if limit is None
            else RateGate(self.membership, limit, self.stopping, self.plan.settings.idle_wait)
        )
        self.running = self._running_gate()

    def _running_gate(self) -> RunningGate | None:
        """The queue's max_running as this consumer keeps it (None: no cap)."""
        most = self.queue.ops.settings.max_running
        if most is None:
            return None
        holder = f"{self.membership.member}:{uuid.uuid4().hex[:8]}"
        # renewed at every heartbeat: a lease of three of them at least
        lease = max(SLOT_LEASE, 3 * self.plan.settings.heartbeat_interval)
        ops = SlotOps(self.queue.ops.keys, most, holder, lease)
        return RunningGate(self.queue, ops, self.plan.settings.concurrency, self.stopping)

    async def slots(self, count: int) -> int:
        """How many of ``count`` messages to pop: all of them, or under max_running the
        slots taken for them (waits for one; 0 once stopping)."""
        return count if self.running is None else await self.running.take(count)

    async def unused(self, taken: int, msgs: list[Message]) -> None:
        """The slots a pop did not fill are free (all of them back when it found none)."""
        if self.running is not None:
            await self.running.give(taken - len(msgs), idle=not msgs)

    async def finish(self, worker: int) -> None:
        """The worker's batch ended: forgotten, and its slots (max_running) go back."""
        batch = self.deliveries.finish(worker)
        if self.running is not None and batch is not None:
            await self.running.give(len(batch.msgs))

    async def pop(
        self, count: int, *, shards: list[int], wait: float = 0.0, until_woken: bool = False
    ) -> list[Message]:
        """Pop for this consumer: its shards, its lease (refused when it has less than the
        margin left), its visibility timeout; ordered messages carry their shard's fence."""
        plan = self.plan
        count = await self.slots(count)
        if not count:
            return []
        # Each shard is popped in the tenure its lease is held in now (a stale one is
        # refused), and its messages carry that tenure's fence.
        tenures = self.leases.tenures(shards) if plan.ordered else None
        msgs: list[Message] = []
        try:
            msgs = await self._pop(count, shards, wait, until_woken, tenures)
        finally:
            await self.unused(count, msgs)
        return msgs

    async def _pop(
        self,
        count: int,
        shards: list[int],
        wait: float,
        until_woken: bool,
        tenures: dict[int, int | None] | None,
    ) -> list[Message]:
        plan = self.plan
        msgs: list[Message] = await self.queue.backend.drive(
            self.queue.planner.pop(
                count,
                wait=wait,
                visibility=plan.visibility,
                shards=shards,
                lease="" if tenures is None else self.leases.values(tenures),
                margin=plan.lease_margin if plan.ordered else 0.0,
                consumer=plan.instance_id,
                until_woken=until_woken,
            )
        )
        if tenures is not None:  # the server checked each shard's tenure: exact
            for m in msgs:
                m.fence = tenures[m.shard] if m.shard is not None else None
        return msgs

    async def fetch(
        self, count: int, *, shards: list[int], backlog: bool = False
    ) -> tuple[list[Message], float | None]:
        """A concurrent consumer's look for due messages, without waiting: every shard in
        two round trips. The messages, or the ms until something may be due (see
        Planner.fetch)."""
        count = await self.slots(count)
        if not count:
            return [], None
        got: tuple[list[Message], float | None] = ([], None)
        try:
            got = await self.queue.backend.drive(
                self.queue.planner.fetch(
                    count,
                    shards,
                    visibility=self.plan.visibility,
                    consumer=self.plan.instance_id,
                    backlog=backlog,
                )
            )
        finally:
            await self.unused(count, got[0])
        return got

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up on the queue's channel; True
        ("quiet") when none came (see backend.wait)."""
        return bool(await self.queue.backend.wait(self.queue.ops.wake, timeout))

    async def check_leases(self, shards: list[int]) -> None:
        """Renew the leases on ``shards``; stop handing out the ones that are gone."""
        for s in await self.leases.renew(shards):
            self.stats.add(lease_lost=1)
            self.board.drop(s)
            log.warning("dynoq: lease on shard %d of %r lost; dropped it", s, self.queue.name)

    def gone(self, exc: QueueGone) -> None:
        """The queue is gone: retrying cannot help (its keys vanished, or it is another
        queue now), so the consumer stops, once, and says why."""
        with self._gone_guard:
            if self.failure is not None:
                return
            self.failure = exc
        log.error("dynoq: the consumer of %r stops: %s", self.queue.name, exc)
        if self.on_gone is not None:
            self.on_gone()

    async def release(self, shard: int) -> None:
        """Give ``shard``'s lease back and tell the group, so its new owner takes it now."""
        await self.leases.release(shard)
        await self.membership.notify()
