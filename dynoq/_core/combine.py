"""Group commit: single pushes waiting on one client go out together (pure: no I/O).

A web service pushes one message per request from many threads or tasks. One round trip
and one script call each would cap them all at the single-push rate, so a client lets
one caller at a time send (:meth:`Combiner.claim`); what arrives while that send is on
its way waits, and the next send takes all of it: one push call per queue, shard and mode
(push-11.lua takes many messages and answers for each), all in one round trip. Nothing
lingers: a push arriving at an idle client is sent at once, alone, as before.

Each caller keeps its own answer: its message's result (1 pushed, 0 skipped by ensure),
or the typed error of its own call (a queue that is gone fails the pushes to that queue,
not the others sent with them). Bad arguments never get here: ``QueueOps.prepare``
refuses them in the caller. The shells (``dynoq/backend/combine.py`` and its asyncio
twin) hold the lock, wake the callers and run the request.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DynoqError
from .bounds import body_size, chunks
from .calls import Batch, Call

if TYPE_CHECKING:
    from .codec import Outgoing
    from .queue import QueueOps


class Pending:
    """One caller's single push, waiting for its answer."""

    __slots__ = ("batch", "error", "mode", "ops", "out", "result", "signal")

    def __init__(self, ops: QueueOps, out: Outgoing, mode: str) -> None:
        self.ops = ops
        self.out = out
        self.mode = mode
        self.result = 0
        self.error: BaseException | None = None
        self.signal: Any = None  # the shell's wake-up (an Event, a Future); None: none needed
        self.batch: list[Pending] | None = None  # handed this batch to send (sync shell)


class Combiner:
    """Who sends, and what. One per client; the shell calls it under its lock (or on its
    event loop). ``senders``: sends that may be on their way at once."""

    __slots__ = ("senders", "sending", "waiting")

    def __init__(self, senders: int = 1) -> None:
        self.senders = senders
        self.sending = 0
        self.waiting: list[Pending] = []

    def claim(self) -> bool:
        """A caller's push arrives: True when it sends now, alone (nothing waits while a
        sender's place is free: a finished send takes what waits, see :meth:`done`);
        False: it must :meth:`wait` for a send to take it."""
        if self.sending < self.senders:
            self.sending += 1
            return True
        return False

    def wait(self, pending: Pending) -> None:
        """Queue a push for the next send."""
        self.waiting.append(pending)

    def leave(self, pending: Pending) -> bool:
        """A waiting caller gives up (interrupted): True when its push was still waiting
        (it is not sent now), False when a send has taken it already."""
        if pending in self.waiting:
            self.waiting.remove(pending)
            return True
        return False

    def take(self) -> list[Pending]:
        """Everything waiting, for one send."""
        taken, self.waiting = self.waiting, []
        return taken

    def done(self) -> list[Pending]:
        """A send is finished: what waits now, for the next send by the same sender
        (empty: nothing waits, and the sender's place is free)."""
        if self.waiting:
            return self.take()
        self.sending -= 1
        return []


def alone(items: Sequence[Pending]) -> Call | Batch | None:
    """The request of a send of one push (the common case of a quiet client): the very
    request ``Queue.push`` sends without group commit, which raises its own error; None
    for a send of several (see :func:`plan`)."""
    if len(items) != 1:
        return None
    p = items[0]
    return p.ops.push([p.out], mode=p.mode)


def plan(items: Sequence[Pending]) -> tuple[Call | Batch, list[list[Pending]]]:
    """The request that sends ``items`` (one push call per queue, shard and mode, in
    chunks; the calls of one round trip in a Batch that answers each call alone), and the
    pendings each call answers for, in the order of the calls."""
    groups: dict[tuple[int, int, str], list[Pending]] = {}
    for p in items:
        groups.setdefault((id(p.ops), p.ops.shard_for(p.out.routing), p.mode), []).append(p)
    calls: list[Call] = []
    owners: list[list[Pending]] = []
    for (_, shard, mode), members in groups.items():
        ops = members[0].ops
        for part in chunks(members, _body_size):
            calls.append(ops.push_call(mode, shard, [p.out for p in part]))
            owners.append(list(part))
    if len(calls) == 1:
        return calls[0], owners
    return Batch(calls, each=True), owners


def _body_size(p: Pending) -> int:
    return body_size(p.out)


def settle(owners: Sequence[Sequence[Pending]], replies: Sequence[Any]) -> None:
    """Give each pending its answer from its call's reply: the result for its message,
    or the error of the call (raised from a refusal, or the DynoqError in its place)."""
    for part, reply in zip(owners, replies, strict=True):
        error: BaseException | None = reply if isinstance(reply, BaseException) else None
        if error is None and type(reply) is int:
            p0 = part[0]
            shard = p0.ops.shard_for(p0.out.routing)
            try:
                p0.ops.refused(reply, f"push on shard {shard} of {p0.ops.name!r}")
            except DynoqError as exc:
                error = exc
        for i, p in enumerate(part):
            if error is not None:
                p.error = error if i == 0 else own(error)
            else:
                p.result = int(reply[i])


def fail(items: Sequence[Pending], error: BaseException) -> None:
    """The send failed as a whole (a dropped connection past the retry window, say):
    every pending gets the error (each its own copy: each caller raises it)."""
    for i, p in enumerate(items):
        p.error = error if i == 0 else own(error)


def own(error: BaseException) -> BaseException:
    """A copy of ``error`` for one more caller to raise (raising one exception object in
    several threads would mix their tracebacks); the same object when it cannot be
    copied."""
    try:
        mine = copy.copy(error)
    except Exception:  # noqa: BLE001 - an exception type that does not copy: share it
        return error
    mine.__traceback__ = None
    return mine
