# Generated from dynoq/asyncio/consumer/running.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest 4f5a27e2d24782e5: of the text below, an edit by hand does not match).
"""A queue's max_running at the consumer (see _core.running for why there): a worker takes
slots before it pops and waits for one while all are taken. The slots a batch or a short
pop frees stay this consumer's, spare, for its next pops (no round trip while it is busy),
unless one of its workers waits for a slot; they go back to the queue when a pop finds
nothing (the consumer is idle), at every heartbeat, and when it stops."""

from __future__ import annotations

import logging

from .._core.running import SLOT_NAP, SlotOps
from ..errors import DynoqError
from ..events import Event, Guard, new_guard
from ..queue import Queue

log = logging.getLogger("dynoq.consumer")


class RunningGate:
    """One consumer's slots of its queue's max_running: ``held`` is what it holds in
    Redis (renewed by the upkeep's heartbeat), ``spare`` the part no batch uses."""

    def __init__(self, queue: Queue, ops: SlotOps, concurrency: int, stopping: Event) -> None:
        self.queue = queue
        self.ops = ops
        self.stopping = stopping
        self.held = self.spare = 0
        self.waiting = 0  # this consumer's workers waiting for a slot
        # What one pop takes at most: slots held by messages waiting in a worker's batch
        # run nothing, so a batch is a worker's share of the cap (one when it is small).
        self.share = max(1, ops.most // max(concurrency, 1))
        self._guard: Guard = new_guard()  # the sync twin's workers are threads

    def take(self, want: int) -> int:
        """Slots for up to ``want`` messages (at least one, at most its share): spare
        ones first, then the queue's; waits while every slot is taken (woken when one is
        given back, or after SLOT_NAP); 0 once stopping."""
        backend = self.queue.backend
        want = min(want, self.share)
        while not self.stopping.is_set():
            with self._guard:
                got = min(self.spare, want)
                self.spare -= got
            more = int(backend.run(self.ops.change(want - got))) if got < want else 0
            if more:
                with self._guard:
                    self.held += more
            if got + more:
                return got + more
            with self._guard:
                self.waiting += 1
            try:
                backend.wait(self.queue.ops.wake, SLOT_NAP)
            finally:
                with self._guard:
                    self.waiting -= 1
        return 0

    def give(self, n: int, idle: bool = False) -> None:
        """``n`` slots no longer used (a batch ended, a pop came short): kept spare, or
        given back with every spare one when ``idle`` (a pop found nothing) or when a
        worker of this consumer waits for one (the give wakes it)."""
        with self._guard:
            n = max(min(n, self.held - self.spare), 0)
            if not idle and not self.waiting:
                self.spare += n
                return
            n, self.spare = n + self.spare, 0
            self.held -= n
        if n:
            self.queue.backend.run(self.ops.change(-n))

    def renew(self) -> None:
        """The heartbeat: the spare slots go back, the rest stay this consumer's (they go
        back by themselves SLOT_LEASE after the last renewal)."""
        with self._guard:
            spare, self.spare = self.spare, 0
            self.held -= spare
            held = self.held
        if spare or held:
            self.queue.backend.run(self.ops.change(-spare))

    def release(self) -> None:
        """Stopping: every slot back (best effort: they go back by themselves anyway)."""
        with self._guard:
            n, self.held, self.spare = self.held, 0, 0
        try:
            if n:
                self.queue.backend.run(self.ops.change(-n))
        except DynoqError as exc:
            log.debug("dynoq: max_running slots of %r not given back: %s", self.queue.name, exc)
