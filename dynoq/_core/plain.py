"""The kinds of queue, and the plain one: what each makes differently (pure: no I/O).

A plain queue (concurrent, or ordered by shard) keeps its waiting messages in ``ready``
and ``delayed`` sorted sets; a message-group queue (ordered="key", ``keyed.py``) chains
them per key. Everything that differs between the two, the scripts they run and their
arguments, the decoding of a pop, a peek, the keyed reads, is a method of :class:`Kind`,
and :class:`~.queue.QueueOps` picks one kind when it is made (``QueueOps.kind``): no
operation asks which kind it runs on.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import LEASED, InvalidArgument
from ..message import KeyState, Message
from . import codec, validate
from .bounds import IDS_CHUNK, SWEEP_LIMIT
from .calls import Batch, Call, Cmd, Flow, Script, int_pair
from .delivered import ack_args, messages, tokens
from .keys import ShardKeys
from .lua import script
from .opening import Opened
from .settings import QueueSettings

ANY = validate.MAX_PRIORITY  # a pop's ceiling that claims every priority
_PUSH, _POP, _ACK, _NACK = script("push"), script("pop"), script("ack"), script("nack")
_REQUEUE, _PROBE, _STATS = script("requeue"), script("probe"), script("stats")
_REMOVE, _REPLAY, _PEEK = script("remove"), script("replay"), script("peek")
_CANCEL, _HOLD = script("cancel"), script("hold")
# A pop's reply as the planner reads it: the messages (unreadable ones among them say why:
# ``Message.unreadable``), the shard's rank after it (-1: not looked at, the batch was
# full), the ms until something may be deliverable when nothing was (-1: unknown), the
# ranks of the other shards it named, and whether any message was unreadable.
Popped = tuple[list[Message], int, float, dict[int, int], bool]


def nonce() -> str:
    """The first part of a pop's delivery tokens. A delivery token needs to differ between
    deliveries, not to be secret: random's generator (reseeded in a forked child) instead
    of os.urandom, a system call that hands the GIL to another thread at every pop."""
    return f"{random.getrandbits(32):08x}"


class Kind(ABC):
    """What one kind of queue makes its own way (the shards' keys, settings and epoch are
    the queue's; ``opened`` is its :class:`~.opening.Opened`, for its refusals)."""

    conc: int | str  # the scripts' key_concurrency argument ("" when not keyed)
    recurring: bool  # whether a delivery may be a schedule's occurrence (see popping)
    PUSH: Script  # the push, pop and ack scripts: their KEYS lists are built once
    POP: Script
    ACK: Script

    def __init__(
        self,
        opened: Opened,
        shard_keys: tuple[ShardKeys, ...],
        settings: QueueSettings,
        limit: int,
        wake: str,
    ) -> None:
        self.opened = opened
        self.name = opened.name
        self.epoch = opened.epoch
        self.shard_keys = shard_keys
        self.settings = settings
        self.limit = limit
        self.wake = wake
        self.window_ms = validate.to_ms(settings.dedupe_window)
        # KEYS lists of the hot-path scripts, per shard, built once
        self.push_keys = [self.PUSH.key_list(k) for k in shard_keys]
        self.pop_keys = [self.POP.key_list(k) for k in shard_keys]
        self.ack_keys = [self.ACK.key_list(k) for k in shard_keys]
        # what a probe reads of each shard (probe-6.lua: the keys that may deliver)
        self.probe_keys = [_PROBE.key_list(k) for k in shard_keys]

    # -- producing and consuming --------------------------------------------------------

    @abstractmethod
    def push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        """One push call of validated messages to one shard, its reply unparsed: one
        result a message (1 pushed, 0 skipped), or a refusal."""

    @abstractmethod
    def pop_call(
        self,
        shard: int,
        count: int,
        ceiling: int,
        vis_ms: int,
        nonce: str,
        lease: str,
        margin_ms: int,
        others: Sequence[int],
    ) -> Call:
        """One pop of ``shard``, its reply unparsed (read it with :meth:`popped`)."""

    @abstractmethod
    def popped(
        self, reply: Any, shard: int, nonce: str, lease: str, others: Sequence[int]
    ) -> Popped:
        """A pop's reply (its refusal raised)."""

    @abstractmethod
    def ack_calls(self, groups: dict[tuple[int, str], list[str]]) -> list[Call]:
        """Ack calls of (shard, lease) -> [id, token, id, token, ...]; each reply is how
        many were acked."""

    def ack_and_take(
        self, msgs: Sequence[Message], count: int, vis_ms: int
    ) -> tuple[Call, list[Message]] | None:
        """An ack that also delivers (a keyed queue's hot key: see keyed.py); None."""
        return None

    @abstractmethod
    def nack_call(
        self,
        shard: int,
        msg_id: str,
        token: str,
        lease: str,
        delay: float,
        mode: str,
        why: bytes = b"",
    ) -> Call:
        """A nack (mode "retry", "dead" or "back") with the reason it failed
        (``reasons.why``); reply: (given back, dead-lettered)."""

    @abstractmethod
    def requeue(self, shard: int, *, force: bool = False, lease: str = "") -> Flow[tuple[int, int]]:
        """Give back the expired (with ``force``: all) deliveries of one shard; returns
        (given back, dead-lettered)."""

    # -- by id and whole queue ----------------------------------------------------------

    @abstractmethod
    def remove_call(self, shard: int, msg_id: str) -> Call:
        """Delete a message wherever it is; reply: true when it was there."""

    @abstractmethod
    def hold_call(self, shard: int, out: codec.Outgoing, wait_ms: int) -> Call:
        """A debounced push on an ordered queue (lua/lib/debounce.lua): the message is
        held ``wait_ms`` and then goes last in its shard (or key); reply: 1."""

    @abstractmethod
    def cancel_call(self, shard: int, msg_id: str) -> Call:
        """Cancel a message (reply: 1 it waited and is cancelled, 2 it runs and is asked to
        stop, 0 neither)."""

    @abstractmethod
    def replay_call(self, shard: int, ids: Sequence[str], parse: Callable[[Any], Any]) -> Call:
        """Put dead letters of one shard back (these ids, or at most SWEEP_LIMIT of the
        oldest); reply: how many."""

    def peek(self, count: int = 10) -> Flow[list[Message]]:
        """The next deliverable messages in delivery order, without claiming them (on a
        keyed queue: the heads of the next keys to be served, shard by shard)."""
        count = validate.check_count(count, high=validate.MAX_BATCH)
        found: list[Message] = yield from self.heads(count)
        return found

    @abstractmethod
    def heads(self, count: int) -> Flow[list[Message]]:
        """:meth:`peek`, its count checked."""

    @abstractmethod
    def stats_call(self, keys: ShardKeys) -> Call:
        """The stats-7.lua call of one shard."""

    def stats_extra(self) -> list[Call | Cmd]:
        """What a queue's stats read besides each shard's stats and prepared messages."""
        return []

    def clear_calls(self) -> list[Call]:
        """What a clear deletes besides each shard's messages (clear-15.lua)."""
        return []

    def key_state(self, key: object) -> Flow[KeyState]:
        """One key's state (a keyed queue's; refused on any other)."""
        raise self.not_keyed("key_state()")

    def keys_report(self, limit: int = 20) -> Flow[dict[str, list[dict[str, Any]]]]:
        """The busiest and the blocked keys (a keyed queue's; refused on any other)."""
        raise self.not_keyed("keys()")

    def set_weight(self, key: object, weight: object) -> Flow[int]:
        """Set a key's fairness weight (a keyed queue's; refused on any other)."""
        raise self.not_keyed("set_weight()")

    def weight(self, key: object) -> Flow[int]:
        """A key's fairness weight (a keyed queue's; refused on any other)."""
        raise self.not_keyed("weight()")

    def not_keyed(self, what: str) -> InvalidArgument:
        return InvalidArgument(
            f'{what} is for queues with ordered="key"; queue {self.name!r} is not one'
        )


class Plain(Kind):
    """A concurrent queue, or one ordered by shard (its shards leased to one consumer)."""

    conc = ""
    recurring = True
    PUSH, POP, ACK = _PUSH, _POP, _ACK

    def __init__(
        self,
        opened: Opened,
        shard_keys: tuple[ShardKeys, ...],
        settings: QueueSettings,
        limit: int,
        wake: str,
    ) -> None:
        super().__init__(opened, shard_keys, settings, limit, wake)
        self.ordered = "1" if settings.by_shard else "0"

    def push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        args: list[Any] = [self.epoch, mode, self.window_ms, self.wake]
        for o in outs:
            args += (o.id, o.delay_ms, o.priority, o.body)
        return Call(_PUSH, self.push_keys[shard], args)

    def pop_call(
        self,
        shard: int,
        count: int,
        ceiling: int,
        vis_ms: int,
        nonce: str,
        lease: str,
        margin_ms: int,
        others: Sequence[int],
    ) -> Call:
        """Up to ``count`` messages of priority ``ceiling`` or a lower value (any on an
        ordered queue: it delivers in push order) and, naming ``others`` (one server
        only), no higher than what they may deliver (pop-13.lua)."""
        keys = self.pop_keys[shard]
        if others:  # ready, delayed, unack: read, their epochs not checked (pop-13.lua)
            keys = keys + [k for s in others for k in self.probe_keys[s][:3]]
        return Call(
            _POP,
            keys,
            [
                self.epoch,
                count,
                vis_ms,
                nonce,
                self.ordered,
                lease,
                self.settings.max_retries,
                self.wake,
                margin_ms,
                ANY if self.settings.ordered else ceiling,
            ],
        )

    def popped(
        self, reply: Any, shard: int, nonce: str, lease: str, others: Sequence[int]
    ) -> Popped:
        if type(reply) is int:
            if reply == LEASED and not lease:
                return [], 0, -1.0, {}, False  # another consumer leases this ordered shard
            self.opened.refused(reply, f"pop from shard {shard} of {self.name!r}")
        seen: dict[int, int] = {}
        if others:  # their ranks end the reply
            seen = dict(zip(others, (int(r) for r in reply[-len(others) :]), strict=True))
            reply = reply[: -len(others)]
        if reply[0] == 0:
            return [], int(reply[2]), float(reply[1]), seen, False
        got = self.decoded(reply, shard, nonce, lease)
        return got, int(reply[1]), -1.0, seen, any(m.unreadable is not None for m in got)

    def decoded(self, reply: list[Any], shard: int, nonce: str, lease: str) -> list[Message]:
        """The messages of a pop reply (1, rest, the first deliveries' token, then id,
        record, attempts per message); an unreadable one says why (the caller
        quarantines it)."""
        made = tokens(reply[2], reply[5::3], nonce)
        held = lease or None
        return messages(reply[3::3], reply[4::3], reply[5::3], made, shard, held, self.limit)

    def ack_calls(self, groups: dict[tuple[int, str], list[str]]) -> list[Call]:
        wake = self.wake if self.settings.ordered else ""
        calls: list[Call] = []
        for (shard, lease), ids in groups.items():
            check = self.opened.parser("ack", shard, int)
            for i in range(0, len(ids), 2 * IDS_CHUNK):
                calls.append(
                    Call(
                        _ACK,
                        self.ack_keys[shard],
                        [
                            self.epoch,
                            lease,
                            self.window_ms,
                            wake,
                            *ack_args(ids[i : i + 2 * IDS_CHUNK]),
                        ],
                        check,
                    )
                )
        return calls

    def nack_call(
        self,
        shard: int,
        msg_id: str,
        token: str,
        lease: str,
        delay: float,
        mode: str,
        why: bytes = b"",
    ) -> Call:
        return Call(
            _NACK,
            _NACK.key_list(self.shard_keys[shard]),
            [
                self.epoch,
                lease,
                validate.to_ms(delay),
                self.settings.max_retries,
                mode,
                self.ordered,
                self.wake,
                why,
                msg_id,
                token,
            ],
            self.opened.parser("nack", shard, int_pair),
        )

    def requeue(self, shard: int, *, force: bool = False, lease: str = "") -> Flow[tuple[int, int]]:
        back = buried = 0
        keys = _REQUEUE.key_list(self.shard_keys[shard])
        while True:
            reply = yield Call(
                _REQUEUE,
                keys,
                [
                    self.epoch,
                    lease,
                    "1" if force else "0",
                    self.settings.max_retries,
                    SWEEP_LIMIT,
                    self.wake,
                ],
            )
            self.opened.refused(reply, f"requeue on shard {shard} of {self.name!r}")
            back += int(reply[0])
            buried += int(reply[1])
            if not int(reply[2]):
                return back, buried

    def remove_call(self, shard: int, msg_id: str) -> Call:
        return _REMOVE.call(
            self.shard_keys[shard],
            [self.epoch, msg_id, self.wake],
            self.opened.checked(f"remove from {self.name!r}"),
        )

    def hold_call(self, shard: int, out: codec.Outgoing, wait_ms: int) -> Call:
        return _HOLD.call(
            self.shard_keys[shard],
            [self.epoch, self.wake, out.id, wait_ms, out.body],
            self.opened.checked(f"push to {self.name!r}", int),
        )

    def cancel_call(self, shard: int, msg_id: str) -> Call:
        return _CANCEL.call(
            self.shard_keys[shard],
            [self.epoch, msg_id],
            self.opened.checked(f"cancel on {self.name!r}", int),
        )

    def replay_call(self, shard: int, ids: Sequence[str], parse: Callable[[Any], Any]) -> Call:
        return _REPLAY.call(
            self.shard_keys[shard], [self.epoch, SWEEP_LIMIT, self.wake, *ids], parse
        )

    def heads(self, count: int) -> Flow[list[Message]]:
        got: list[Message] = yield self._peek(count)
        return got

    def _peek(self, count: int) -> Batch:
        def parse(replies: list[Any]) -> list[Message]:
            ranked: list[tuple[tuple[int, float, int, int], Message]] = []
            for shard, reply in enumerate(replies):
                self.opened.refused(reply, f"peek at shard {shard} of {self.name!r}")
                rank = (0, 0.0)
                for pos, i in enumerate(range(1, len(reply), 3)):
                    m = codec.readable(
                        reply[i].decode(), reply[i + 1], shard, int(reply[i + 2]), limit=self.limit
                    )
                    if m.unreadable is None:
                        rank = (m.priority, m.deliver_at or 0.0)
                    # an unreadable one (the pop that meets it dead-letters it) shows
                    # where its shard holds it: ranked as the message before it
                    ranked.append(((*rank, shard, pos), m))
            ranked.sort(key=lambda pair: pair[0])
            return [m for _, m in ranked[:count]]

        return Batch([_PEEK.call(k, [self.epoch, count]) for k in self.shard_keys], parse=parse)

    def stats_call(self, keys: ShardKeys) -> Call:
        return Call(_STATS, [getattr(keys, f) for f in _STATS.keys], [self.epoch, ""])
