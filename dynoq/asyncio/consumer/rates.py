"""The group's rate limit at the handler calls (see _core.rates for why there): a worker
takes permits for the calls it is about to make, and waits for them while none is free."""

from __future__ import annotations

import time

from ..._core.rates import Permits, RateLimit
from ..events import Event, wait_event
from .group import Membership


class RateGate:
    """Permits of ``limit`` for one consumer's workers, taken through ``membership``
    (the group's log in Redis); a wait for them ends early when ``stopping`` is set,
    and lasts at most ``idle_wait`` at a time (the upkeep keeps the batch's deliveries
    extended meanwhile)."""

    def __init__(
        self, membership: Membership, limit: tuple[int, float], stopping: Event, idle_wait: float
    ) -> None:
        self.membership = membership
        self.limit = RateLimit(limit)
        self.stopping = stopping
        self.idle_wait = idle_wait

    async def take(self, held: Permits, want: int, left: int, together: bool = False) -> int:
        """Permits for up to ``want`` messages called now (at least one), asking for up
        to ``left`` when more must be taken; 0 once the consumer stops."""
        limit = self.limit
        while True:
            used = held.use(want, time.monotonic(), limit.fresh)
            if used:
                return used
            asked = time.monotonic()
            granted, wait = await self.membership.take(
                limit.count, limit.window, limit.ask(left, together)
            )
            held.got(granted, asked)
            if not granted and await wait_event(self.stopping, min(wait, self.idle_wait)):
                return 0
