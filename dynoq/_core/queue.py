"""A queue's single calls: the builders of its requests and their reply parsers (no I/O).

:class:`QueueOps` knows one queue's keys, settings and epoch, and its kind: plain or
message groups (``plain.py``, ``keyed.py``), picked once when it is made. Each method
validates its arguments (raising typed errors before anything is sent), then returns one
request (a :class:`~.calls.Call`, :class:`~.calls.Cmd` or :class:`~.calls.Batch` whose
``parse`` makes the result) for ``backend.run``. The flows made of them, for
``backend.drive``, are in ``popping.py`` (pop, the consumer's fetch), ``byid.py`` (ack,
nack, extend and the other operations on a message by id), ``deadletters.py`` and the
kinds (peek, requeue, the keyed reads). The sync and asyncio queues are thin shells over
them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import InvalidArgument, ReplicationError
from ..message import Message, QueueStats, ShardStats
from . import codec, validate
from .bounds import body_size, chunks
from .calls import Batch, Call, Cmd, ints
from .keyed import Keyed
from .keys import QueueKeys, ShardKeys, shard_of
from .lua import script
from .opening import Opened
from .plain import Kind, Plain
from .settings import QueueSettings

_EXTEND, _PROBE, _CLEAR = script("extend"), script("probe"), script("clear")
_RESCHEDULE, _PAUSE = script("reschedule"), script("pause")


class QueueOps(Opened):
    """One queue's operations. Thread-safe: it holds no state (its reply parsers are
    made once each). ``epoch`` and ``on_gone``: see :class:`~.opening.Opened`."""

    def __init__(
        self,
        prefix: str,
        name: str,
        settings: QueueSettings,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
        keys: QueueKeys | None = None,
        *,
        cross_slot: bool = False,
        epoch: str = "",
        on_gone: Callable[[], None] | None = None,
    ) -> None:
        self.keys = keys or QueueKeys(prefix, name)
        self.shard_keys: tuple[ShardKeys, ...] = tuple(
            self.keys.shard(i) for i in range(settings.shards)
        )
        # What a refusal names: a topic's group queue lives and dies with its topic.
        super().__init__(
            name,
            f"topic {self.keys.tag!r}" if self.keys.sub else f"queue {name!r}",
            epoch,
            self._epoch_key,
            on_gone,
        )
        # One script may read every shard (one server, not Redis Cluster): see popping.
        self.cross_slot = cross_slot
        self.settings = settings
        self.limit = max_payload_bytes
        self.wake = self.keys.wake_channel
        self.keyed = settings.keyed
        # Everything a message-group queue (ordered="key") does its own way, chosen once.
        self.kind: Kind = (Keyed if settings.keyed else Plain)(
            self, self.shard_keys, settings, max_payload_bytes, self.wake
        )

    @classmethod
    def of_keys(
        cls,
        keys: QueueKeys,
        settings: QueueSettings,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
        *,
        cross_slot: bool = False,
        epoch: str = "",
        on_gone: Callable[[], None] | None = None,
    ) -> QueueOps:
        """The operations of a queue with these keys (a topic's group queue)."""
        return cls(
            keys.prefix,
            keys.queue,
            settings,
            max_payload_bytes,
            keys,
            cross_slot=cross_slot,
            epoch=epoch,
            on_gone=on_gone,
        )

    def _epoch_key(self, shard: int) -> str:
        return self.shard_keys[shard].epoch

    # -- producing ------------------------------------------------------------------------

    def prepare(self, item: Any) -> codec.Outgoing:
        """A payload or Message, validated and encoded for this queue."""
        msg = item if isinstance(item, Message) else Message(item)
        return codec.prepare(msg, ordered=self.settings.ordered, limit=self.limit)

    def debounced(
        self, msg_id: object, delay: object, debounce: object, expires: object = None
    ) -> tuple[float, int]:
        """A push with ``debounce`` (DESIGN §3.9) as (its delay, ms to hold it): the
        message waits that long after the latest push of its id, which replaces the
        waiting copy (or waits behind the running one). On a concurrent queue that is the
        plain push's upsert with the debounce as its delay (hold 0); an ordered queue
        holds it apart until then (:meth:`hold`). Checked: an id, no delay of its own,
        and no expiry on an ordered queue."""
        if msg_id is None:
            raise InvalidArgument("debounce collapses the pushes of one id: give an id")
        if delay:
            raise InvalidArgument("debounce is the message's delay: give delay or debounce")
        seconds = validate.check_seconds(debounce, "debounce", minimum=0.001)
        if not self.settings.ordered:
            return seconds, 0
        if expires is not None:
            raise InvalidArgument(
                "a debounced message of an ordered queue is delivered after its wait: "
                "it takes no expires"
            )
        return 0.0, max(validate.to_ms(seconds), 1)

    def hold(self, out: codec.Outgoing, wait_ms: int) -> Call | Batch:
        """A debounced push on an ordered queue: ``out`` waits ``wait_ms`` apart from its
        shard's (or key's) order, then goes last in it (lua/lib/debounce.lua)."""
        shard = self.shard_for(out.routing)
        return self.replicated([self.kind.hold_call(shard, out, wait_ms)], _first)

    def shard_for(self, routing: str) -> int:
        """The shard of an id (concurrent queues) or ordering key (ordered queues)."""
        return shard_of(routing, self.settings.shards)

    def push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        """One push call of validated messages to one shard, its reply unparsed: one
        result a message (1 pushed, 0 skipped), or a refusal (see :meth:`refused`)."""
        return self.kind.push_call(mode, shard, outs)

    def _push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        call = self.kind.push_call(mode, shard, outs)
        call.parse = self.parser("push", shard, ints)
        return call

    def combines(self) -> bool:
        """Whether a single push may go out with others (group commit, _core/combine.py):
        not when the queue waits for replicas (its batch ends with WAIT)."""
        return not self.settings.min_replicas

    def mode_of(self, out: codec.Outgoing) -> str:
        """The mode :meth:`push` gives a message when none is asked."""
        return _mode(out)

    def push(self, outs: Sequence[codec.Outgoing], *, mode: str | None = None) -> Call | Batch:
        """Push validated messages; the reply is how many were added. Mode "push" replaces
        a message with the same id, "ensure" skips it; None: "push" for ids the caller
        gave, "ensure" for ids made here, so that a call resent after a dropped connection
        cannot replace a copy that was already delivered (a made id cannot exist before)."""
        if len(outs) > validate.MAX_ITEMS:
            raise InvalidArgument(
                f"at most {validate.MAX_ITEMS} messages per call, got "
                f"{len(outs)}: push them in several calls"
            )
        if len(outs) == 1 and not self.settings.min_replicas:
            o = outs[0]
            shard = self.shard_for(o.routing)
            call = self._push_call(mode or _mode(o), shard, outs)
            call.parse = self.parser("push", shard, _first)
            return call
        groups: dict[tuple[int, str], list[codec.Outgoing]] = defaultdict(list)
        for o in outs:
            groups[(self.shard_for(o.routing), mode or _mode(o))].append(o)
        calls: list[Call | Cmd] = [
            self._push_call(how, shard, part)
            for (shard, how), group in groups.items()
            for part in chunks(group, body_size)
        ]
        return self.replicated(calls, _sum_of_sums)

    def replicated(self, calls: list[Call | Cmd], parse: Any) -> Batch:
        """A batch of writes, followed by WAIT when the queue asks for replicas."""
        wanted, timeout = self.settings.min_replicas, self.settings.replica_timeout
        if not wanted:
            return Batch(calls, parse=parse)

        def check(replies: list[Any]) -> Any:
            *results, acked = replies
            if int(acked) < wanted:
                raise ReplicationError(
                    f"only {acked} of {wanted} replica(s) confirmed a write to {self.name!r} "
                    f"within {timeout:g}s: it is on the master but may be lost if the master "
                    "fails now; pushing again is safe (by id)"
                )
            return parse(results)

        return Batch(calls, wait=(wanted, validate.to_ms(timeout)), parse=check)

    def prepare_ensure(self, items: Iterable[Any]) -> list[codec.Outgoing]:
        """The messages of an ensure_many: each a Message with an id."""
        outs = []
        for item in validate.check_items(items, "ensure_many()"):
            if not isinstance(item, Message) or item.id is None:
                raise InvalidArgument("ensure_many() takes dynoq.Message objects, each with an id")
            outs.append(self.prepare(item))
        return outs

    def unique(self, outs: Sequence[codec.Outgoing]) -> list[str]:
        ids = [o.id for o in outs]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("push_many() got the same id twice; ids must be unique")
        return ids

    # -- deliveries -----------------------------------------------------------------------

    def shard_of(self, msg: Message) -> int:
        """The shard a message was popped from, which must be one of this queue's."""
        shard = msg.shard
        if msg.id is None or shard is None:
            raise InvalidArgument(
                "this message was not popped: ack, nack and extend take a popped message or an id"
            )
        if type(shard) is not int or not 0 <= shard < self.settings.shards:
            raise InvalidArgument(
                f"message {msg.id!r} was popped from shard {shard!r}, which queue "
                f"{self.name!r} ({self.settings.shards} shards) does not have: ack, nack "
                "and extend a message on the queue it was popped from"
            )
        return shard

    def home(self, msg_id: str) -> int | None:
        """The shard of an id when it is known without asking the server: always on a
        concurrent queue; on an ordered queue (routed by key) only with one shard."""
        if not self.settings.ordered or self.settings.shards == 1:
            return self.shard_for(msg_id)
        return None

    def ack_calls(self, msgs: Sequence[Message]) -> list[Call]:
        """Ack calls for popped messages (the hot path: one call per shard and lease);
        each reply is how many were acked."""
        groups: dict[tuple[int, str], list[str]] = {}
        shards = self.settings.shards
        at: tuple[Any, Any] = (None, None)  # the last message's group: most share it
        group: list[str] = []
        for m in msgs:
            shard, msg_id, lease = m.shard, m.id, m.lease or ""
            # shard_of's checks, inline (a drain acks every message); it raises, saying why
            if not (type(shard) is int and msg_id is not None and 0 <= shard < shards):
                shard, msg_id = self.shard_of(m), m.id or ""
            if shard != at[0] or lease != at[1]:
                at = (shard, lease)
                group = groups.setdefault(at, [])
            group.append(msg_id)
            group.append(m.token or "")
        return self.kind.ack_calls(groups)

    def nack_call(self, msg: Message, *, delay: float, mode: str, why: bytes = b"") -> Call:
        """A nack of a popped message (mode "retry", "dead" or "back", see nack-10.lua)
        with the reason it failed (``reasons.why``); reply: (given back, dead-lettered)."""
        return self.kind.nack_call(
            self.shard_of(msg), msg.id or "", msg.token or "", msg.lease or "", delay, mode, why
        )

    def extend_call(self, shard: int, msg_id: str, token: str, lease: str, timeout: float) -> Call:
        """Set a delivery's visibility deadline to now + ``timeout`` seconds (checked);
        reply: whether it was still in flight."""
        context = f"extend on shard {shard} of {self.name!r}"

        def parse(reply: Any) -> bool:
            self.refused(reply, context)
            return int(reply) == 1

        return Call(
            _EXTEND,
            _EXTEND.key_list(self.shard_keys[shard]),
            [self.epoch, lease, validate.to_ms(timeout), msg_id, token, self.wake],
            parse,
        )

    def reschedule_call(self, shard: int, msg_id: str, delay: float) -> Call:
        """Move a waiting message's due time to now + ``delay`` seconds (checked); reply:
        true when it was waiting."""
        return _RESCHEDULE.call(
            self.shard_keys[shard],
            [self.epoch, msg_id, validate.to_ms(delay), self.wake],
            self.checked(f"reschedule on {self.name!r}"),
        )

    def probe(self, shards: Sequence[int]) -> Call:
        """One read-only look at ``shards`` (one server: a cluster's keys must share a
        slot): a rank per shard (see popping.py), then the ms until something may be
        deliverable (-1: unknown); QueueGone when a shard is not this queue's any more.
        See probe-6.lua."""
        probe_keys = self.kind.probe_keys
        return Call(
            _PROBE,
            [k for s in shards for k in probe_keys[s]],
            [self.epoch],
            self.parser("probe", -1, _same),
        )

    # -- whole queue ----------------------------------------------------------------------

    def stats(self) -> Batch:
        n = len(self.shard_keys)

        def parse(replies: list[Any]) -> QueueStats:
            paused = _any_paused(replies[-n:])
            replies = replies[:-n]
            for i, r in enumerate(replies[:n]):
                self.refused(r, f"stats of shard {i} of {self.name!r}")
            out = []
            # a keyed shard: the oldest head of its next keys to serve (koldest-3.lua) too
            heads = replies[4 * n :] or [-1] * n
            for i, r in enumerate(replies[:n]):
                committed, rolled_back, cancelled, lapsed = (
                    int(c or 0) for c in replies[n + 2 * i + 1]
                )
                oldest = min((t for t in (int(r[4]), int(heads[i])) if t >= 0), default=-1)
                out.append(
                    ShardStats(
                        i,
                        int(r[0]),
                        int(r[1]),
                        int(r[2]),
                        int(r[3]),
                        None if oldest < 0 else oldest / 1000,
                        pushed=int(r[5]),
                        acked=int(r[6]),
                        retried=int(r[7]),
                        expired=int(r[8]),
                        dead_lettered=int(r[9]),
                        prepared=int(replies[n + 2 * i]),
                        committed=committed,
                        rolled_back=rolled_back,
                        cancelled=cancelled,
                        lapsed=lapsed,
                    )
                )
            counted = replies[3 * n : 4 * n]  # a keyed queue's keys, per shard
            return QueueStats(self.name, tuple(out), sum(int(c) for c in counted), paused)

        calls: list[Call | Cmd] = [self.kind.stats_call(k) for k in self.shard_keys]
        # prepared (half) messages: not part of the shard's atomic counts, read beside them
        # (and the counts added since: transactions' ends, cancels)
        counts = ("committed", "rolled_back", "cancelled", "lapsed")
        calls += [
            c
            for k in self.shard_keys
            for c in (Cmd(("ZCARD", k.half)), Cmd(("HMGET", k.counts, *counts)))
        ]
        calls += self.kind.stats_extra()
        calls += self._paused_reads()
        return Batch(calls, parse=parse)

    def pause(self, on: bool) -> Batch:
        """Pause (``on``) or resume every shard (lua/pause-2.lua); the result: whether
        any shard changed."""
        flag = "1" if on else "0"
        what = "pause" if on else "resume"
        return Batch(
            [
                _PAUSE.call(k, [self.epoch, flag, self.wake], self.parser(what, i, int))
                for i, k in enumerate(self.shard_keys)
            ],
            parse=any,
        )

    def paused(self) -> Batch:
        """Whether the queue is paused: any shard is (a pause cut short by a lost
        connection half-way shows, and ``pause``/``resume`` finish it)."""
        n = len(self.shard_keys)
        checks = self.epoch_checks(range(n), f"paused of {self.name!r}")
        return Batch([*checks, *self._paused_reads()], parse=lambda r: _any_paused(r[-n:]))

    def _paused_reads(self) -> list[Cmd]:
        """Each shard's pause flag (lua/pause-2.lua), read with :func:`_any_paused`."""
        return [Cmd(("HEXISTS", k.control, "paused")) for k in self.shard_keys]

    def clear(self) -> Batch:
        """Delete every message of the queue (its settings stay); UNLINK, so the server
        frees large shards in the background (lua/clear-15.lua, lua/kclear-5.lua)."""
        calls: list[Call | Cmd] = [
            _CLEAR.call(k, [self.epoch], self.checked(f"clear of shard {i} of {self.name!r}"))
            for i, k in enumerate(self.shard_keys)
        ]
        calls += self.kind.clear_calls()
        return Batch(calls, parse=_none)


# -- small parsers -------------------------------------------------------------------------


def _mode(out: codec.Outgoing) -> str:
    return "ensure" if out.generated else "push"


def _first(reply: list[Any]) -> int:
    return int(reply[0])


def _any_paused(flags: Sequence[Any]) -> bool:
    """A queue is paused when any shard is (a pause cut short half-way shows)."""
    return any(int(f) for f in flags)


def _sum_of_sums(replies: list[list[Any]]) -> int:
    return sum(sum(int(x) for x in r) for r in replies)


def _none(_: Any) -> None:
    return None


def _same(reply: Any) -> Any:
    return reply
