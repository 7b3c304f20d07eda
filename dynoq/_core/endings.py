"""What a handler asks to send before its message is acked (pure: no I/O): a flow's step
that ended (dynoq.Tasks' workflows, :mod:`dynoq._core.flows`), recorded before the ack so
that a worker killed between the two runs the step again and is told the same.

A handler sets ``Message.ending`` to an :class:`Ending`; the consumer's settle sends the
endings of a handled batch in one round trip, then what their replies ask for (the pushes
of what starts) in one more, then the acks: the per-message round trips a handler would
make, one per batch instead. A message whose ending failed is not acked: the settle gives
it back, and it runs again (its ending, recorded once, says the same again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DynoqError
from ..message import Message
from .calls import Batch, Call, Flow
from .validate import MAX_BATCH

log = logging.getLogger("dynoq.consumer")


@dataclass(frozen=True)
class Ending:
    """One message's part (``part``) of a call sent before the ack: the parts of one
    ``key`` (a flow) go in one call, ``make(parts)``, whose reply holds one answer per
    part, in order; ``then(its answer)``: the calls to send after it, still before the
    ack."""

    key: Hashable
    part: Any
    make: Callable[[list[Any]], Call]
    then: Callable[[Any], Sequence[Call]]


def endings(ok: Sequence[Message]) -> Flow[list[Message]]:
    """Send the endings of handled messages, one call per key (MAX_BATCH parts at most),
    then what their answers ask for, one batch each (nothing when none has an ending);
    the messages that may be acked."""
    by_key: dict[Hashable, list[Message]] = {}
    for m in ok:
        if isinstance(m.ending, Ending):
            by_key.setdefault(m.ending.key, []).append(m)
    if not by_key:
        return list(ok)
    groups = [g[i : i + MAX_BATCH] for g in by_key.values() for i in range(0, len(g), MAX_BATCH)]
    replies = yield Batch([g[0].ending.make([m.ending.part for m in g]) for g in groups], each=True)
    failed: set[int] = set()
    follow: list[tuple[Message, Call]] = []
    for group, reply in zip(groups, replies, strict=True):
        if isinstance(reply, DynoqError):
            failed.update(id(m) for m in group)
            log.warning(
                "dynoq: %d message(s)' ending failed (%s): they run again", len(group), reply
            )
            continue
        for m, answer in zip(group, reply, strict=True):
            follow += [(m, c) for c in m.ending.then(answer)]
    if follow:
        replies = yield Batch([c for _, c in follow], each=True)
        for (m, _), reply in zip(follow, replies, strict=True):
            if isinstance(reply, DynoqError):
                failed.add(id(m))
                log.warning("dynoq: message %s's ending failed (%s): it runs again", m.id, reply)
    return [m for m in ok if id(m) not in failed]
