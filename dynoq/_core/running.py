"""A queue's max_running (DESIGN §3.9) as its consumers keep it (pure: no I/O).

The cap counts deliveries in flight across every consumer, whichever shard or server they
come from, so no pop script can keep it (a queue's shards are on other slots of a Redis
Cluster). Its consumers keep it instead: a worker takes slots (lua/slots-2.lua, one hash
by the queue's hash tag) for the messages it is about to pop, and frees those the pop did
not fill and, when its batch ends, the rest (the consumer keeps freed slots for its next
pops while busy: dynoq/asyncio/consumer/running.py); the slots of a consumer that stops
renewing them (killed) go back when its lease runs out. A plain ``q.pop()`` takes no
slot: the cap is the consumers'.
"""

from __future__ import annotations

from typing import Any

from . import validate
from .calls import Call
from .keys import QueueKeys
from .lua import script

_SLOTS = script("slots")
SLOT_LEASE = 30.0  # seconds a consumer's slots outlive its last renewal (its heartbeat's)
SLOT_NAP = 1.0  # seconds a worker waits for a slot at most before it asks again


class SlotOps:
    """The slot calls of one consumer (``holder``) of a queue capped at ``most``."""

    def __init__(self, keys: QueueKeys, most: int, holder: str, lease: float) -> None:
        self.keys, self.most, self.holder = keys, most, holder
        self.lease_ms = max(validate.to_ms(lease), 1)

    def change(self, n: int) -> Call:
        """Take up to ``n`` slots (n > 0), give ``-n`` back (n < 0) or renew (0); the
        reply: how many were taken or given back."""
        return _SLOTS.call(
            self.keys,
            [self.most, self.holder, n, self.lease_ms, self.keys.wake_channel],
            _first,
        )


def _first(reply: Any) -> int:
    return int(reply[0])
