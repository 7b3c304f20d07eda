"""How much one call carries at most, and how a list is cut into calls (pure: no I/O).

These are the client's side of ``lua/lib/bounds.lua``: each script refuses a call that
carries more (``tests/test_bounds.py`` checks the two agree), so that one call stays
within ~50 ms of the server's time (DESIGN §2.14).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from .codec import Outgoing

PUSH_CHUNK = 500  # messages per push call: bounded script time, few round trips
# Bytes of message bodies one push call carries: the server reads and copies each (about
# 2 ms a megabyte), so 500 messages of 100 KB in one call held it for 110 ms (DESIGN §2.14).
PUSH_BYTES = 8 * 1024 * 1024
IDS_CHUNK = 1000  # ids per ack / replay call
SWEEP_LIMIT = 1000  # deliveries one requeue / replay / purge call handles
# Shards one call reads or renews where a script may span hash tags (one server): a probe,
# a pop naming other shards, a sweeper's due, a lease renewal.
CALL_SHARDS = 256

T = TypeVar("T")


def chunks(
    items: Sequence[T], size: Callable[[T], int], most: int = PUSH_CHUNK, budget: int = PUSH_BYTES
) -> Iterator[Sequence[T]]:
    """``items`` in calls of at most ``most`` items and ``budget`` bytes (``size`` of
    each; an item larger than that goes alone)."""
    for i in range(0, len(items), most):
        part = items[i : i + most]
        if sum(map(size, part)) <= budget:
            yield part
            continue
        start, held = 0, 0
        for j, item in enumerate(part):
            n = size(item)
            if j > start and held + n > budget:
                yield part[start:j]
                start, held = j, 0
            held += n
        yield part[start:]


def body_size(out: Outgoing) -> int:
    """What a message weighs in a push call (its encoded body)."""
    return len(out.body)
