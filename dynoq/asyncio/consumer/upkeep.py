"""The upkeep loop (a task; a thread in the sync twin): heartbeat, lease renewal,
rebalance, lease takeover, keeping slow deliveries invisible, and the workers' handler
calls past consume_timeout (Workers.enforce_timeouts).

It rebalances every ``rebalance_interval`` seconds, and at once when the group's channel
says a member joined, left or released a shard.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

from ..._core.board import extended
from ..._core.consuming import CHANNEL_TICK, UpkeepClock
from ..._core.sizing import STALLED
from ..._core.steering import LOOK_EVERY, look
from ...errors import DynoqError, LeaseLost, QueueGone
from ...retry import backoff
from ..backend.wakeup import Subscription
from ..events import Spawned, end, new_event, spawn, wait_event
from .context import Shared
from .workers import Workers

log = logging.getLogger("dynoq.consumer")


class Upkeep:
    def __init__(self, shared: Shared, subscription: Subscription, workers: Workers) -> None:
        self.shared = shared
        self._subscription = subscription
        self._workers = workers
        self._processor = workers.processor
        self._stop = new_event()
        self._runner: Spawned | None = None
        self._next_acquire = math.inf
        self._wanted: set[int] = set()  # ordered queues: shards to lease
        self._recorded: tuple[list[str], set[int]] | None = None  # last history entry

    def start(self) -> None:
        self._runner = spawn(self._loop, f"dynoq-{self.shared.queue.name}-upkeep")

    async def stop(self, timeout: float) -> None:
        """Stop the loop: wait up to ``timeout`` seconds for it (at least a few ticks of
        the channel it listens on), then a task is cancelled; a thread cannot be, and
        ends on its own (events.end)."""
        self._stop.set()
        if self._runner is not None:
            await end(self._runner, max(timeout, CHANNEL_TICK * 4))

    async def _loop(self) -> None:
        settings = self.shared.plan.settings
        clock = UpkeepClock(
            settings.heartbeat_interval, settings.rebalance_interval, time.monotonic()
        )
        failures = 0
        try:
            notified = False
            while not self._stop.is_set():
                now = time.monotonic()
                try:
                    beat, rebalance = clock.due(now, notified)
                    if beat or rebalance:
                        clock.ran(now, await self.tick(rebalance=rebalance))
                    if self._dropped():
                        self._next_acquire = now  # take it again now, not at a rebalance
                    if now >= self._next_acquire:
                        await self._acquire()
                    self._workers.enforce_timeouts()
                    await self._extend_slow()
                    await self._look()
                    await self._hand_back_stalled()
                    failures = 0
                except QueueGone as exc:
                    self.shared.gone(exc)  # the consumer stops
                    return
                except DynoqError as exc:  # the server is away: try again, backing off
                    failures += 1
                    pause = backoff(failures)
                    log.warning("dynoq: consumer upkeep failed (retrying in %.1fs): %s", pause, exc)
                    await wait_event(self._stop, pause)
                    clock.failed(time.monotonic())
                    continue
                wait = clock.wait(time.monotonic(), self._next_acquire)
                notified = await self._subscription.get(wait)
        finally:
            await self._subscription.close()

    async def tick(self, *, rebalance: bool) -> bool:
        """Heartbeat, renew leases; rebalance when asked or when the group changed.
        Returns whether it rebalanced. (Slow deliveries are extended at every look of the
        loop, a few times a second: a heartbeat interval can be longer than a visibility.)"""
        s = self.shared
        changed, members = await s.membership.heartbeat()
        if s.running is not None:
            await s.running.renew()
        if s.plan.ordered:
            await s.check_leases(sorted(s.board.leased()))
        if rebalance or changed:
            await self._rebalance(members)
        return rebalance or changed

    async def _rebalance(self, members: list[str]) -> None:
        s = self.shared
        target = s.plan.target(members)
        aside = s.plan.stands_aside(members)
        if aside != s.aside:
            log.warning(
                "dynoq: a streaming source consumes group %r alone: this consumer %s",
                s.membership.group,
                "takes nothing until it stops" if aside else "consumes again",
            )
            s.aside = aside
        s.stats.add(rebalances=1)
        if (members, target) != self._recorded:  # history: the rebalances that changed
            await s.membership.record(members, sorted(target))
            self._recorded = (members, target)
        if not s.plan.ordered:
            s.preferred = sorted(target)
            return
        self._wanted = target
        released = s.board.rebalance(target)
        for shard in released:
            await s.leases.release(shard)
        if released:
            await s.membership.notify()
        await self._acquire()

    def _dropped(self) -> bool:
        """Whether a worker dropped a shard this member should hold (its lease was lost,
        or taken again since a batch was popped) while no acquisition is due."""
        return (
            self.shared.plan.ordered
            and self._next_acquire == math.inf
            and bool(self._wanted - self.shared.board.leased())
        )

    async def _acquire(self) -> None:
        """Try to lease wanted shards; retry when the other holder's lease may end."""
        s = self.shared
        held = s.board.leased()
        retry_in = math.inf
        for shard in sorted(self._wanted - held):
            if s.stopping.is_set():
                break
            wait = await s.leases.acquire(shard)
            if wait == 0.0:
                s.board.add(shard)
            else:
                retry_in = min(retry_in, wait + 0.005)
        self._next_acquire = (
            time.monotonic() + min(retry_in, s.plan.settings.heartbeat_interval)
            if retry_in < math.inf
            else math.inf
        )

    async def _hand_back_stalled(self) -> None:
        """The messages waiting behind a stalled handler call go back to the queue, for
        other workers, and those handled before it are settled (see _core/sizing.py)."""
        if self._processor.hands_back:
            for rest, handled in self.shared.deliveries.stalled(time.monotonic(), STALLED):
                with contextlib.suppress(DynoqError):  # they expire and come again
                    await self._processor.give_back(rest, handled)

    async def _look(self) -> None:
        """Send the progress of long deliveries and hear their cancels (_core/steering.py):
        a coroutine handler whose message was cancelled is cut short."""
        s = self.shared
        msgs = s.deliveries.to_look(time.monotonic(), LOOK_EVERY)
        if msgs:
            heard = await s.queue.backend.drive(look(s.queue.ops, msgs))
            if heard:
                log.info("dynoq: %d running message(s) of %r cancelled", len(heard), s.queue.name)
                s.deliveries.interrupt(heard)
                self._processor.invoker.interrupt(heard)

    async def _extend_slow(self) -> None:
        # Keep slow handlers' messages invisible to others (and ordered shards blocked).
        s = self.shared
        vis = s.plan.visibility
        # At half their visibility, before it can run out: else another consumer could
        # be handed the messages still waiting in a slow batch (and on a keyed queue, a
        # delivery is its key's lock: the key's next holder could start meanwhile).
        older = vis / 2
        for batch in s.deliveries.slow(time.monotonic(), older):
            sent, results = time.monotonic(), []
            try:
                for m in batch.mine:
                    results.append(await s.queue.extend(m, vis))
            except LeaseLost:
                continue  # the shard's worker finds it lost and drops it
            extended(batch, sent, results)
