"""Every queue operation as pure requests: builders, reply parsers and flows (no I/O).

:class:`QueueOps` knows one queue's keys and settings. Each method validates its
arguments (raising typed errors before anything is sent), then returns either one request
(a :class:`~.calls.Call`, :class:`~.calls.Cmd` or :class:`~.calls.Batch` whose ``parse``
makes the result) for ``backend.run``, or a flow (a generator of requests) for
``backend.drive``. The sync and asyncio queues are thin shells over this class.
"""

from __future__ import annotations

import itertools
import logging
import random
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ..errors import (
    GONE,
    LEASED,
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    QueueConfigError,
    QueueGone,
    RecordError,
    ReplicationError,
    gone_error,
    raise_for,
)
from ..message import Message, QueueStats, ShardStats
from . import codec, layout, validate
from .calls import Batch, Call, Cmd, Flow, Wake, pairs
from .keyed import KeyedOps
from .keys import QueueKeys, ShardKeys, registry_key, shard_of
from .lua import script
from .schedules import ScheduleOps, occurrence_of
from .settings import QueueSettings, merge

log = logging.getLogger("dynoq")

PUSH_CHUNK = 500  # messages per push call: bounded script time, few round trips
# Bytes of message bodies one push call carries: the server reads and copies each (about
# 2 ms a megabyte), so 500 messages of 100 KB in one call held it for 110 ms (DESIGN §2.14).
PUSH_BYTES = 8 * 1024 * 1024
IDS_CHUNK = 1000  # ids per ack / replay call
SWEEP_LIMIT = 1000  # deliveries one requeue / replay / purge call handles
# Shards one call reads or renews where a script may span hash tags (one server): a probe,
# a pop naming other shards, a sweeper's due, a lease renewal. Each script refuses more
# (lua/lib/bounds.lua: one call stays within ~50 ms of the server's time, DESIGN §2.14).
CALL_SHARDS = 256
OPEN_TRIES = 3  # reads of a queue's settings while it keeps being created anew
ANY = validate.MAX_PRIORITY  # a pop's ceiling that claims every priority
# A pop's lease: the lease's value ("" = none), or each shard's (a consumer holds each
# shard in a tenure of its own: _core/group.py).
Lease = str | Mapping[int, str]

_PUSH, _POP, _ACK, _NACK = script("push"), script("pop"), script("ack"), script("nack")
_EXTEND, _REQUEUE, _PROBE = script("extend"), script("requeue"), script("probe")
_OPEN, _EPOCH, _CLEAR = script("open"), script("epoch-set"), script("clear")
_KOLDEST = script("koldest")


def _ints(reply: Any) -> list[int]:
    return [int(x) for x in reply]


def _decode_str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class QueueOps(KeyedOps):
    """One queue's operations. Thread-safe: it holds no state but a pop rotation and
    whether the last look saw priorities (a hint for the cost of the next one).

    ``epoch`` is the creation of the queue these operations were opened for
    ("<epoch>|<shards>", see :func:`open_queue`): every script refuses a call whose shard
    no longer holds it, and the operation raises QueueGone (after calling ``on_gone``, so
    that whoever opened it opens it afresh next time). "" checks nothing (a queue stored
    before epochs existed, opened read-only)."""

    def __init__(self, prefix: str, name: str, settings: QueueSettings,
                 max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
                 keys: QueueKeys | None = None, *, cross_slot: bool = False,
                 epoch: str = "", on_gone: Callable[[], None] | None = None) -> None:
        self.name = name
        # One script may read every shard (one server, not Redis Cluster): see _pop.
        self.cross_slot = cross_slot
        self.settings = settings
        self.limit = max_payload_bytes
        self.keys = keys or QueueKeys(prefix, name)
        self.epoch = epoch
        self.on_gone = on_gone
        self.lost = False  # a shard refused this epoch: a cache of Queue objects reopens
        self._parsers: dict[tuple[str, int, Any], Callable[[Any], Any]] = {}
        # What a refusal names: a topic's group queue lives and dies with its topic.
        self.what = (f"topic {self.keys.tag!r}" if self.keys.sub
                     else f"queue {self.name!r}")
        self.wake = self.keys.wake_channel
        self.shard_keys: tuple[ShardKeys, ...] = tuple(
            self.keys.shard(i) for i in range(settings.shards))
        # KEYS lists of the hot-path scripts, per shard, built once
        self._push_keys = [_PUSH.key_list(k) for k in self.shard_keys]
        self._pop_keys = [_POP.key_list(k) for k in self.shard_keys]
        self._ack_keys = [_ACK.key_list(k) for k in self.shard_keys]
        self._probe_keys = [_PROBE.key_list(k) for k in self.shard_keys]
        self._ordered = "1" if settings.by_shard else "0"
        # Message groups (ordered="key"): keyed.py's requests take over
        self.keyed = settings.keyed
        self._conc = settings.key_concurrency or 1
        self._max_retries = settings.max_retries
        self._shards = settings.shards
        if self.keyed:  # a probe reads the keys that may deliver where others read ready
            self._probe_keys = [[k.kturn, k.delayed, k.unack, k.epoch]
                                for k in self.shard_keys]
        self._window_ms = validate.to_ms(settings.dedupe_window)
        self._rotation = itertools.count()
        self._ranked = False  # see the ranked property

    @classmethod
    def of_keys(cls, keys: QueueKeys, settings: QueueSettings,
                max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES, *,
                cross_slot: bool = False, epoch: str = "",
                on_gone: Callable[[], None] | None = None) -> QueueOps:
        """The operations of a queue with these keys (a topic's group queue)."""
        return cls(keys.prefix, keys.queue, settings, max_payload_bytes, keys,
                   cross_slot=cross_slot, epoch=epoch, on_gone=on_gone)

    # -- the queue's epoch ----------------------------------------------------------------

    def refused(self, reply: Any, context: str) -> None:
        """Raise the typed error of a script's refusal (``context``: what was refused);
        return quietly for any other reply."""
        if type(reply) is int and reply == GONE:
            raise self.gone(context)
        raise_for(reply, context)

    def gone(self, context: str) -> QueueGone:
        """The QueueGone to raise (and ``on_gone`` told) when a shard refused this epoch."""
        self.lost = True
        if self.on_gone is not None:
            self.on_gone()
        return gone_error(self.what, context)

    def checked(self, context: str, parse: Callable[[Any], Any] | None = None
                ) -> Callable[[Any], Any]:
        """A reply parser that raises a script's refusal first, then applies ``parse``."""
        def check(reply: Any) -> Any:
            self.refused(reply, context)
            return reply if parse is None else parse(reply)
        return check

    def _parser(self, what: str, shard: int, parse: Callable[[Any], Any]
                ) -> Callable[[Any], Any]:
        """:meth:`checked` for the hot paths: made once per operation and shard (a push
        or an ack builds no closure nor message text)."""
        key = (what, shard, parse)
        found = self._parsers.get(key)
        if found is None:
            where = f"shard {shard} of {self.name!r}" if shard >= 0 else repr(self.name)
            found = self._parsers.setdefault(key, self.checked(f"{what} on {where}", parse))
        return found

    def epoch_checks(self, shards: Iterable[int], context: str) -> list[Cmd]:
        """Reads to put first in the batch of a plain (scriptless) read or write of
        ``shards``: each raises QueueGone when its shard does not hold this epoch (not
        atomic with the rest of the batch, which a script is; enough to tell a vanished or
        re-created queue). None for a queue opened without an epoch."""
        if not self.epoch:
            return []

        def check(held: Any) -> None:
            if held is None or _decode_str(held) != self.epoch:
                raise self.gone(context)

        return [Cmd(("GET", self.shard_keys[s].epoch), check) for s in sorted(set(shards))]

    # -- producing ------------------------------------------------------------------------

    def prepare(self, item: Any) -> codec.Outgoing:
        """A payload or Message, validated and encoded for this queue."""
        msg = item if isinstance(item, Message) else Message(item)
        return codec.prepare(msg, ordered=self.settings.ordered, limit=self.limit)

    def shard_for(self, routing: str) -> int:
        """The shard of an id (concurrent queues) or ordering key (ordered queues)."""
        return shard_of(routing, self.settings.shards)

    def _push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        call = self.push_call(mode, shard, outs)
        call.parse = self._parser("push", shard, _ints)
        return call

    def push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        """One push call of validated messages to one shard, its reply unparsed: one
        result a message (1 pushed, 0 skipped), or a refusal (see :meth:`refused`)."""
        if self.keyed:
            return self._kpush_call(mode, shard, outs)
        args: list[Any] = [self.epoch, mode, self._window_ms, self.wake]
        for o in outs:
            args += (o.id, o.delay_ms, o.priority, o.body)
        return Call(_PUSH, self._push_keys[shard], args)

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
            raise InvalidArgument(f"at most {validate.MAX_ITEMS} messages per call, got "
                                  f"{len(outs)}: push them in several calls")
        if len(outs) == 1 and not self.settings.min_replicas:
            o = outs[0]
            shard = self.shard_for(o.routing)
            call = self._push_call(mode or _mode(o), shard, outs)
            call.parse = self._parser("push", shard, _first)
            return call
        groups: dict[tuple[int, str], list[codec.Outgoing]] = defaultdict(list)
        for o in outs:
            groups[(self.shard_for(o.routing), mode or _mode(o))].append(o)
        calls: list[Call | Cmd] = [
            self._push_call(how, shard, part)
            for (shard, how), group in groups.items() for part in chunks(group, body_size)]
        return self._replicated(calls, _sum_of_sums)

    def _replicated(self, calls: list[Call | Cmd], parse: Any) -> Batch:
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
                    "fails now; pushing again is safe (by id)")
            return parse(results)

        return Batch(calls, wait=(wanted, validate.to_ms(timeout)), parse=check)

    def prepare_ensure(self, items: Iterable[Any]) -> list[codec.Outgoing]:
        """The messages of an ensure_many: each a Message with an id."""
        outs = []
        for item in validate.check_items(items, "ensure_many()"):
            if not isinstance(item, Message) or item.id is None:
                raise InvalidArgument("ensure_many() takes dynoq.Message objects, each "
                                      "with an id")
            outs.append(self.prepare(item))
        return outs

    def unique(self, outs: Sequence[codec.Outgoing]) -> list[str]:
        ids = [o.id for o in outs]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("push_many() got the same id twice; ids must be unique")
        return ids

    # -- consuming ------------------------------------------------------------------------

    def pop(self, count: int = 1, *, wait: float = 0.0, visibility: float | None = None,
            shards: Sequence[int] | None = None, lease: Lease = "", margin: float = 0.0,
            consumer: str = "", until_woken: bool = False) -> Flow[list[Message]]:
        """Claim up to ``count`` due messages for ``visibility`` seconds; wait up to
        ``wait`` seconds for the first one (woken by pushes, never polling).
        ``until_woken``: return, even with nothing, after the first wake-up (a consumer
        waiting for some shards on behalf of others hands the rest to its workers).

        A lease holder passes its ``lease`` (the lease's value, or one per shard) and a
        ``margin`` (seconds): a lease with less time left counts as lost (LeaseLost). A
        record that cannot be read is dead-lettered with the reason (``consumer`` names
        who saw it) and the rest is delivered."""
        count = validate.check_count(count, high=validate.MAX_BATCH)
        wait = validate.check_seconds(wait, "wait")
        vis = self.settings.unack_timeout if visibility is None else validate.check_seconds(
            visibility, "visibility", minimum=0.001)
        order = self.shard_order(shards)
        margin_ms = validate.to_ms(validate.check_seconds(margin, "margin"))
        return self._pop(count, wait, validate.to_ms(vis), order, lease, margin_ms, consumer,
                         until_woken)

    def shard_order(self, shards: Sequence[int] | None) -> list[int]:
        """The shards to try, in order: the given ones, else all, starting from a rotating
        shard so that none starves."""
        n = self.settings.shards
        if shards is None:
            start = next(self._rotation) % n
            return [(start + i) % n for i in range(n)]
        if isinstance(shards, (str, bytes)) or not isinstance(shards, Sequence):
            raise InvalidType("shards must be a sequence of shard numbers")
        for s in shards:
            validate.check_int(s, "shard", low=0, high=n - 1)
        return list(shards)

    def _pop(self, count: int, wait: float, vis_ms: int, order: list[int], lease: Lease,
             margin_ms: int, consumer: str, until_woken: bool) -> Flow[list[Message]]:
        deadline = time.monotonic() + wait
        woken = False
        while True:
            got, hint = yield from self._pass(count, vis_ms, order, lease, margin_ms, consumer)
            left = deadline - time.monotonic()
            if got or left <= 0 or (woken and until_woken):
                return got
            nap = left if hint < 0 else min(left, hint / 1000)  # no margin: see consuming.nap
            quiet = yield Wake(self.wake, nap)
            if quiet is True and nap >= left:
                # Nothing was published and nothing fell due (the hint): looking again
                # would find what we found. An idle pop costs one pass, not two.
                return got
            woken = quiet is not True

    def _pass(self, count: int, vis_ms: int, order: list[int], lease: Lease, margin_ms: int,
              consumer: str) -> Flow[tuple[list[Message], float]]:
        """One look at ``order``'s shards for up to ``count`` messages, the lowest
        priority values first across shards (ties: in ``order``). Returns them and the ms
        until something may be deliverable (-1: unknown).

        A shard's *rank* is what it may deliver: 0 nothing, 1 + a lower bound of its next
        message's priority (lib/rank.lua). Priority 0 goes first anywhere, so the first
        shard is asked for that alone before the others are seen: with every priority 0
        (the default), a pop is one call as before, and two on an empty queue (that pop,
        then one probe of the others). Otherwise each pop's ceiling is the best rank
        known, and each reply says what its shard still holds. When the last pass saw
        priorities above 0 (:attr:`ranked`), the first pop names the other shards' keys
        on one server: it claims nothing above what they may deliver, and says what
        they hold (one call when the first shard holds the best); on Redis Cluster the
        pass probes every shard first (two calls, where the optimistic pop makes three)."""
        got: list[Message] = []
        hint = -1.0
        ranks: dict[int, int] = {}
        first, others = order[0], order[1:]
        if others and self.ranked and (not self.cross_slot or len(others) >= CALL_SHARDS):
            ranks, hint = yield from self.look(order)
        else:
            ahead = others if others and self.ranked else []
            msgs, ranks[first], hint, seen = yield from self.take(
                first, count, 0 if others and not ahead else ANY, vis_ms,
                _lease_of(lease, first), margin_ms,
                consumer, others=ahead)
            if len(msgs) >= count and not ahead:
                return msgs, hint  # the common case: priority 0, unbeatable (and unranked)
            got += msgs
            ranks.update(seen)
            if ranks[first] < 0:  # a full batch, some unreadable: it may hold more
                ranks[first] = 1
            if len(got) < count and others and not ahead:
                more, h = yield from self.look(others)
                ranks.update(more)
                hint = _sooner(hint, h)
        while len(got) < count:
            live = {s: r for s, r in ranks.items() if r > 0}
            if not live:
                break
            best = min(live.values())
            shard = next(s for s in order if live.get(s) == best)
            msgs, rest, h, _ = yield from self.take(shard, count - len(got), best - 1, vis_ms,
                                                    _lease_of(lease, shard), margin_ms,
                                                    consumer)
            got += msgs
            hint = _sooner(hint, h)
            # rest > best, or 0: each shard is asked at most once per priority it holds
            ranks[shard] = rest if rest >= 0 else best
        self.note(ranks, got)
        return got, hint

    @property
    def ranked(self) -> bool:
        """Whether the last look saw a priority above 0 (then a look across shards starts
        with a probe: see :meth:`_pass`). A hint for the cost, never for the order."""
        return self._ranked

    def note(self, ranks: dict[int, int], got: Sequence[Message]) -> None:
        """Remember whether a look saw priorities above 0 (shard ranks, messages)."""
        self._ranked = (not self.settings.ordered
                        and (any(r > 1 for r in ranks.values()) or any(m.priority for m in got)))

    def take(self, shard: int, count: int, ceiling: int, vis_ms: int, lease: str = "",
             margin_ms: int = 0, consumer: str = "", *, others: Sequence[int] = (),
             ) -> Flow[tuple[list[Message], int, float, dict[int, int]]]:
        """One pop of ``shard``: up to ``count`` messages of priority ``ceiling`` or a lower
        value, and (one server only) no higher than what the shards ``others`` may
        deliver. Returns them, the shard's rank after (-1: not looked at, the batch was
        full), the ms until something may be deliverable (-1: unknown) and the ranks of
        ``others``."""
        if self.keyed:
            got = yield from self._ktake(shard, count, vis_ms, consumer)
            return got
        # A delivery token needs to differ between deliveries, not to be secret: random's
        # generator (reseeded in a forked child) instead of os.urandom, a system call
        # that hands the GIL to another thread at every pop.
        nonce = f"{random.getrandbits(32):08x}"
        keys = self._pop_keys[shard]
        if others:  # ready, delayed, unack: read, their epochs not checked (pop-11.lua)
            keys = keys + [k for s in others for k in self._probe_keys[s][:3]]
        reply = yield Call(_POP, keys, [
            self.epoch, count, vis_ms, nonce, self._ordered, lease,
            self.settings.max_retries, self.wake, margin_ms,
            ANY if self.settings.ordered else ceiling])
        if type(reply) is int:
            if reply == LEASED and not lease:
                return [], 0, -1.0, {}  # another consumer leases this ordered shard
            self.refused(reply, f"pop from shard {shard} of {self.name!r}")
        seen: dict[int, int] = {}
        if others:  # their ranks end the reply
            seen = dict(zip(others, (int(r) for r in reply[-len(others):]), strict=True))
            reply = reply[:-len(others)]
        if reply[0] == 0:
            return [], int(reply[2]), float(reply[1]), seen
        try:
            batch = self._decoded(reply, shard, nonce, lease)
        except RecordError:  # one or more unreadable: quarantine them, keep the rest
            batch = yield from self.quarantine(
                self._decoded(reply, shard, nonce, lease, codec.readable), consumer)
        for m in batch:  # a recurring message's occurrence: push the next one now
            sched = occurrence_of(m)
            if sched is not None:
                yield from ScheduleOps(self).fire_next(sched, shard)
        return batch, int(reply[1]), -1.0, seen

    def look(self, shards: Sequence[int]) -> Flow[tuple[dict[int, int], float]]:
        """Each shard's rank (see :meth:`_pass`) and the ms until something may be
        deliverable (-1: unknown): one probe call (CALL_SHARDS shards a call), or on Redis
        Cluster (a script's keys share a slot) one probe per shard, pipelined."""
        if self.cross_slot and len(shards) <= CALL_SHARDS:
            *ranks, hint = yield self.probe(shards)
            return dict(zip(shards, (int(r) for r in ranks), strict=True)), float(hint)
        step = CALL_SHARDS if self.cross_slot else 1
        groups = [shards[i:i + step] for i in range(0, len(shards), step)]
        replies = yield Batch([self.probe(g) for g in groups])
        found: dict[int, int] = {}
        hint = -1.0
        for group, (*seen, h) in zip(groups, replies, strict=True):
            found.update(zip(group, (int(r) for r in seen), strict=True))
            hint = _sooner(hint, float(h))
        return found, hint

    def probe(self, shards: Sequence[int]) -> Call:
        """One read-only look at ``shards`` (one server: a cluster's keys must share a
        slot): a rank per shard (see :meth:`_pass`), then the ms until something may be
        deliverable (-1: unknown); QueueGone when a shard is not this queue's any more.
        See probe-4.lua."""
        return Call(_PROBE, [k for s in shards for k in self._probe_keys[s]], [self.epoch],
                    self._parser("probe", -1, _same))

    def _decoded(self, reply: list[Any], shard: int, nonce: str, lease: str,
                 decode: Callable[..., Message] = codec.decode) -> list[Message]:
        """The messages of a pop reply (1, rest, the first deliveries' token, then id,
        record, attempts per message); ``decode``: codec.decode (RecordError for an
        unreadable record) or codec.readable (a message saying why)."""
        limit, held = self.limit, lease or None
        return [decode(reply[i].decode(), reply[i + 1], shard, reply[i + 2], token, held, limit)
                for i, token in zip(range(3, len(reply), 3), _tokens(reply, nonce),
                                    strict=True)]

    def quarantine(self, msgs: list[Message], consumer: str) -> Flow[list[Message]]:
        """Dead-letter the unreadable messages of a pop's (``codec.readable``), each with
        why (a RecordError, recorded as ``consumer``'s), in one round trip; the others.
        A record no consumer can read would otherwise come back at every visibility
        timeout and never reach its retry limit (no handler fails it). By id alone:
        whichever delivery of that record is current cannot be read either, and a
        delivery state written raw may not give back the token it made."""
        bad = [m for m in msgs if m.unreadable is not None]
        if bad:
            yield Batch([self._nack_call(self._shard_of(m), m.id or "", "", m.lease or "",
                                         0.0, "dead",
                                         codec.why(RecordError(m.unreadable), consumer))
                         for m in bad])
        return [m for m in msgs if m.unreadable is None]

    def _shard_of(self, msg: Message) -> int:
        """The shard a message was popped from, which must be one of this queue's."""
        shard = msg.shard
        if msg.id is None or shard is None:
            raise InvalidArgument("this message was not popped: ack, nack and extend "
                                  "take a popped message or an id")
        if type(shard) is not int or not 0 <= shard < self.settings.shards:
            raise InvalidArgument(
                f"message {msg.id!r} was popped from shard {shard!r}, which queue "
                f"{self.name!r} ({self.settings.shards} shards) does not have: ack, nack "
                "and extend a message on the queue it was popped from")
        return shard

    def _delivery(self, msg: Message | str) -> tuple[int | None, str, str, str]:
        """(shard or None when it must be located, id, delivery token, lease token)."""
        if isinstance(msg, Message):
            return self._shard_of(msg), msg.id or "", msg.token or "", msg.lease or ""
        msg_id = validate.check_id(msg)
        return self.home(msg_id), msg_id, "", ""

    def home(self, msg_id: str) -> int | None:
        """The shard of an id when it is known without asking the server: always on a
        concurrent queue; on an ordered queue (routed by key) only with one shard."""
        if not self.settings.ordered or self.settings.shards == 1:
            return self.shard_for(msg_id)
        return None

    def locate(self, ids: Sequence[str]) -> Flow[list[int]]:
        """The shard holding each id (an unknown id maps to its hash shard). Ordered queues
        route by key, so this asks every shard (one round trip for all the ids)."""
        homes = [self.home(i) for i in ids]
        unknown = [i for i, h in zip(ids, homes, strict=True) if h is None]
        where: dict[str, int] = {}
        if unknown:
            probes = [(shard, msg_id) for shard in range(self.settings.shards)
                      for msg_id in unknown]
            hits = yield Batch([Cmd(("HEXISTS", self.shard_keys[shard].msgs, msg_id))
                                for shard, msg_id in probes])
            for (shard, msg_id), hit in zip(probes, hits, strict=True):
                if hit:
                    where.setdefault(msg_id, shard)
        return [h if h is not None else where.get(i, self.shard_for(i))
                for i, h in zip(ids, homes, strict=True)]

    def _located(self, msgs: Iterable[Message | str]) -> Flow[list[tuple[int, str, str, str]]]:
        """(shard, id, delivery token, lease token) of popped messages or bare ids."""
        items = [self._delivery(m) for m in msgs]
        missing = [msg_id for shard, msg_id, _, _ in items if shard is None]
        found = iter((yield from self.locate(missing)) if missing else ())
        return [(next(found) if shard is None else shard, msg_id, token, lease)
                for shard, msg_id, token, lease in items]

    def ack_calls(self, msgs: Sequence[Message]) -> list[Call]:
        """Ack calls for popped messages (the hot path: one call per shard and lease);
        each reply is how many were acked."""
        groups: dict[tuple[int, str], list[str]] = defaultdict(list)
        shards = self.settings.shards
        for m in msgs:
            shard, msg_id = m.shard, m.id
            # _shard_of's checks, inline (a drain acks every message); it raises, saying why
            if not (type(shard) is int and msg_id is not None and 0 <= shard < shards):
                shard, msg_id = self._shard_of(m), m.id or ""
            groups[(shard, m.lease or "")] += (msg_id, m.token or "")
        return self._ack_calls(groups)

    def _ack_calls(self, groups: dict[tuple[int, str], list[str]]) -> list[Call]:
        if self.keyed:
            return self._kack_calls(groups)
        wake = self.wake if self.settings.ordered else ""
        calls: list[Call] = []
        for (shard, lease), ids in groups.items():
            check = self._parser("ack", shard, int)
            for i in range(0, len(ids), 2 * IDS_CHUNK):
                calls.append(Call(_ACK, self._ack_keys[shard],
                                  [self.epoch, lease, self._window_ms, wake,
                                   *ids[i:i + 2 * IDS_CHUNK]], check))
        return calls

    def ack_many(self, msgs: Iterable[Message | str]) -> Flow[int]:
        """Ack deliveries (popped messages or ids; one round trip); returns how many."""
        items = validate.check_items(msgs, "ack_many()")
        if not items:
            return 0
        if all(isinstance(m, Message) for m in items):  # a consumer's batch: no lookup
            return sum((yield Batch(self.ack_calls(items))))
        groups: dict[tuple[int, str], list[str]] = defaultdict(list)
        for shard, msg_id, token, lease in (yield from self._located(items)):
            groups[(shard, lease)] += (msg_id, token)
        return sum((yield Batch(self._ack_calls(groups))))

    def nack_call(self, msg: Message, *, delay: float, mode: str, why: bytes = b"") -> Call:
        """A nack of a popped message (mode "retry", "dead" or "back", see nack-8.lua)
        with the reason it failed (``codec.why``); reply: (given back, dead-lettered)."""
        return self._nack_call(self._shard_of(msg), msg.id or "", msg.token or "",
                               msg.lease or "", delay, mode, why)

    def _nack_call(self, shard: int, msg_id: str, token: str, lease: str, delay: float,
                   mode: str, why: bytes = b"") -> Call:
        if self.keyed:
            return self._knack_call(shard, msg_id, token, delay, mode, why)
        return Call(_NACK, _NACK.key_list(self.shard_keys[shard]), [
            self.epoch, lease, validate.to_ms(delay), self.settings.max_retries, mode,
            self._ordered, self.wake, why, msg_id, token],
            self._parser("nack", shard, _pair))

    def nack(self, msg: Message | str, *, delay: float = 0.0,
             mode: str = "retry") -> Flow[bool]:
        """Give a delivery back after ``delay`` seconds (mode "retry"), dead-letter it
        (mode "dead"), or give it back unhandled without counting the attempt (mode
        "back"); False if the delivery is no longer current."""
        delay = validate.check_seconds(delay, "delay")
        if mode not in ("retry", "dead", "back"):
            raise InvalidArgument(f"nack mode must be 'retry', 'dead' or 'back', got {mode!r}")
        [(shard, msg_id, token, lease)] = yield from self._located([msg])
        back, buried = yield self._nack_call(shard, msg_id, token, lease, delay, mode)
        return bool(back + buried > 0)

    def extend(self, msg: Message | str, timeout: float) -> Flow[bool]:
        """Set the delivery's visibility deadline to now + ``timeout`` seconds (0: it is
        given back at once, as when its visibility runs out; Dyno's setUnackTimeout)."""
        timeout = validate.check_seconds(timeout, "timeout")
        [(shard, msg_id, token, lease)] = yield from self._located([msg])
        reply = yield Call(_EXTEND, _EXTEND.key_list(self.shard_keys[shard]),
                           [self.epoch, lease, validate.to_ms(timeout), msg_id, token,
                            self.wake])
        self.refused(reply, f"extend on shard {shard} of {self.name!r}")
        return int(reply) == 1

    def requeue(self, shard: int, *, force: bool = False,
                lease: str = "") -> Flow[tuple[int, int]]:
        """Give back the expired (with ``force``: all) deliveries of one shard; returns
        (given back, dead-lettered)."""
        if self.keyed:
            got = yield from self._krequeue(shard)
            return got
        back = buried = 0
        keys = _REQUEUE.key_list(self.shard_keys[shard])
        while True:
            reply = yield Call(_REQUEUE, keys, [self.epoch, lease, "1" if force else "0",
                                                self.settings.max_retries, SWEEP_LIMIT,
                                                self.wake])
            self.refused(reply, f"requeue on shard {shard} of {self.name!r}")
            back += int(reply[0])
            buried += int(reply[1])
            if not int(reply[2]):
                return back, buried

    def requeue_expired(self) -> Flow[int]:
        """Give back every expired delivery of every shard (Dyno processUnacks)."""
        total = 0
        for shard in range(self.settings.shards):
            back, buried = yield from self.requeue(shard)
            total += back + buried
        return total

    # -- by id ----------------------------------------------------------------------------

    def reschedule(self, msg_id: str, *, delay: float) -> Flow[bool]:
        if self.settings.ordered:
            raise OrderedQueueError("ordered queues deliver in push order: reschedule "
                                    "is refused (remove and push again instead)")
        delay = validate.check_seconds(delay, "delay")
        msg_id = validate.check_id(msg_id)
        [shard] = yield from self.locate([msg_id])
        s = script("reschedule")
        return bool((yield s.call(self.shard_keys[shard],
                                  [self.epoch, msg_id, validate.to_ms(delay), self.wake],
                                  self.checked(f"reschedule on {self.name!r}"))))

    def remove(self, msg_id: str) -> Flow[bool]:
        msg_id = validate.check_id(msg_id)
        [shard] = yield from self.locate([msg_id])
        if self.keyed:
            return bool((yield self._kremove(shard, msg_id)))
        return bool((yield script("remove").call(self.shard_keys[shard],
                                                 [self.epoch, msg_id, self.wake],
                                                 self.checked(f"remove from {self.name!r}"))))

    def get(self, msg_id: str) -> Flow[Message | None]:
        msg_id = validate.check_id(msg_id)
        [shard] = yield from self.locate([msg_id])
        [found] = yield from self.stored([(shard, msg_id)])
        return found

    def stored(self, where: Sequence[tuple[int, str]]) -> Flow[list[Message | None]]:
        """The stored messages at (shard, id), with their attempts and failure (None for
        an id that is gone)."""
        fields = ("msgs", "dlv", "why")
        checks = self.epoch_checks((shard for shard, _ in where), f"read of {self.name!r}")
        reads: list[Cmd] = []
        for shard, msg_id in where:
            keys = self.shard_keys[shard]
            reads += [Cmd(("HGET", getattr(keys, f), msg_id)) for f in fields]
            reads.append(Cmd(("ZSCORE", keys.unack, msg_id)))
        raw = (yield Batch([*checks, *reads]))[len(checks):]
        out: list[Message | None] = []
        for k, (shard, msg_id) in enumerate(where):
            record, state, why, in_flight = raw[4 * k:4 * k + 4]
            if record is None:
                out.append(None)
                continue
            attempts = codec.attempts_of(state, in_flight is not None)
            m = codec.readable(msg_id, record, shard, attempts, limit=self.limit)
            m.failure = codec.failure(why)
            out.append(m)
        return out

    def contains(self, msg_id: str) -> Flow[bool]:
        msg_id = validate.check_id(msg_id)
        [shard] = yield from self.locate([msg_id])
        checks = self.epoch_checks([shard], f"contains on {self.name!r}")
        *_, found = yield Batch([*checks, Cmd(("HEXISTS", self.shard_keys[shard].msgs,
                                               msg_id))])
        return bool(found)

    # -- whole queue ----------------------------------------------------------------------

    def peek(self, count: int = 10) -> Flow[list[Message]]:
        """The next deliverable messages in delivery order, without claiming them (on a
        keyed queue: the heads of the next keys to be served, shard by shard)."""
        count = validate.check_count(count, high=validate.MAX_BATCH)
        if self.keyed:
            found: list[Message] = yield from self._kpeek(count)
            return found
        got: list[Message] = yield self._peek(count)
        return got

    def _peek(self, count: int) -> Batch:
        peek = script("peek")

        def parse(replies: list[Any]) -> list[Message]:
            ranked: list[tuple[tuple[int, float, int, int], Message]] = []
            for shard, reply in enumerate(replies):
                self.refused(reply, f"peek at shard {shard} of {self.name!r}")
                rank = (0, 0.0)
                for pos, i in enumerate(range(1, len(reply), 3)):
                    m = codec.readable(reply[i].decode(), reply[i + 1], shard,
                                       int(reply[i + 2]), limit=self.limit)
                    if m.unreadable is None:
                        rank = (m.priority, m.deliver_at or 0.0)
                    # an unreadable one (the pop that meets it dead-letters it) shows
                    # where its shard holds it: ranked as the message before it
                    ranked.append(((*rank, shard, pos), m))
            ranked.sort(key=lambda pair: pair[0])
            return [m for _, m in ranked[:count]]

        return Batch([peek.call(k, [self.epoch, count]) for k in self.shard_keys], parse=parse)

    def stats(self) -> Batch:
        stats = script("stats")
        n = len(self.shard_keys)

        def parse(replies: list[Any]) -> QueueStats:
            for i, r in enumerate(replies[:n]):
                self.refused(r, f"stats of shard {i} of {self.name!r}")
            out = []
            # a keyed shard: the oldest head of its next keys to serve (koldest-3.lua) too
            heads = replies[4 * n:] if self.keyed else [-1] * n
            for i, r in enumerate(replies[:n]):
                committed, rolled_back = (int(c or 0) for c in replies[n + 2 * i + 1])
                oldest = min((t for t in (int(r[4]), int(heads[i])) if t >= 0), default=-1)
                out.append(ShardStats(i, int(r[0]), int(r[1]), int(r[2]), int(r[3]),
                                      None if oldest < 0 else oldest / 1000,
                                      pushed=int(r[5]), acked=int(r[6]),
                                      retried=int(r[7]), expired=int(r[8]),
                                      dead_lettered=int(r[9]), prepared=int(replies[n + 2 * i]),
                                      committed=committed, rolled_back=rolled_back))
            counted = replies[3 * n:4 * n]
            return QueueStats(self.name, tuple(out), sum(int(c) for c in counted))

        # On a keyed queue the waiting messages are in kwait (a hash), in place of ready.
        calls: list[Call | Cmd] = [
            Call(stats, [k.kwait if self.keyed and f == "ready" else getattr(k, f)
                         for f in stats.keys], [self.epoch, "hash" if self.keyed else ""])
            for k in self.shard_keys]
        # prepared (half) messages: not part of the shard's atomic counts, read beside them
        calls += [c for k in self.shard_keys for c in (
            Cmd(("ZCARD", k.half)), Cmd(("HMGET", k.counts, "committed", "rolled_back")))]
        if self.keyed:
            calls += self.key_count()
            calls += [_KOLDEST.call(k, []) for k in self.shard_keys]
        return Batch(calls, parse=parse)

    def clear(self) -> Batch:
        """Delete every message of the queue (its settings stay); UNLINK, so the server
        frees large shards in the background (lua/clear-13.lua, lua/kclear-4.lua)."""
        calls: list[Call | Cmd] = [_CLEAR.call(k, [self.epoch], self.checked(
            f"clear of shard {i} of {self.name!r}")) for i, k in enumerate(self.shard_keys)]
        if self.keyed:
            calls += self._kclear()
        return Batch(calls, parse=_none)

    # -- dead letters ---------------------------------------------------------------------

    def dead(self, count: int = 100) -> Flow[list[Message]]:
        """Dead-lettered messages, oldest first."""
        count = validate.check_count(count, high=validate.MAX_BATCH)
        checks = self.epoch_checks(range(self.settings.shards), f"dead of {self.name!r}")
        heads = yield Batch([*checks, *(Cmd(("ZRANGE", k.dead, 0, count - 1, "WITHSCORES"))
                                        for k in self.shard_keys)])
        heads = heads[len(checks):]
        ranked = sorted((float(score), shard, _decode_str(member))
                        for shard, head in enumerate(heads)
                        for member, score in pairs(head))[:count]
        if not ranked:
            return []
        found = yield from self.stored([(shard, msg_id) for _, shard, msg_id in ranked])
        return [m for m in found if m is not None]

    def replay_dead(self, ids: Iterable[str] | None = None) -> Flow[int]:
        """Put dead-lettered messages (all, or these ids) back with attempts reset."""
        replay = script("replay")
        if ids is None:
            total = 0
            for shard in range(self.settings.shards):
                total += yield from self.drain_dead(shard, replay=True)
            return total
        if isinstance(ids, (str, bytes)):
            raise InvalidType("ids must be a list of message ids, not one string")
        wanted = [validate.check_id(i) for i in validate.check_items(ids, "replay_dead()")]
        by_shard: dict[int, list[str]] = defaultdict(list)
        for shard, msg_id in zip((yield from self.locate(wanted)), wanted, strict=True):
            by_shard[shard].append(msg_id)
        check = self.checked(f"replay on {self.name!r}", int)
        if self.keyed:
            return sum((yield Batch([self._kreplay(shard, group[i:i + IDS_CHUNK], SWEEP_LIMIT)
                                     for shard, group in by_shard.items()
                                     for i in range(0, len(group), IDS_CHUNK)])))
        calls: list[Call | Cmd] = [
            replay.call(self.shard_keys[shard], [self.epoch, SWEEP_LIMIT, self.wake,
                                                 *group[i:i + IDS_CHUNK]], check)
            for shard, group in by_shard.items() for i in range(0, len(group), IDS_CHUNK)]
        return sum((yield Batch(calls)))

    def purge_dead(self) -> Flow[int]:
        """Delete every dead-lettered message for good; returns how many."""
        total = 0
        for shard in range(self.settings.shards):
            total += yield from self.drain_dead(shard, replay=False)
        return total

    def drain_dead(self, shard: int, *, replay: bool) -> Flow[int]:
        """Replay (or purge) every dead letter of one shard, a bounded call at a time."""
        call = script("replay" if replay else "purge-dead")
        args = [self.epoch, SWEEP_LIMIT, self.wake] if replay else [self.epoch, SWEEP_LIMIT]
        check = self.checked(f"{'replay' if replay else 'purge'} of dead letters of "
                             f"{self.name!r}", int)
        total = 0
        while True:
            if replay and self.keyed:
                n = int((yield self._kreplay(shard, [], SWEEP_LIMIT)))
                total += n
                if n < SWEEP_LIMIT:
                    return total
                continue
            n = int((yield call.call(self.shard_keys[shard], args, check)))
            total += n
            if n < SWEEP_LIMIT:
                return total


# -- queues under a prefix -----------------------------------------------------------------
#
# A queue's metadata hash holds its epoch, "<13-digit ms><8 hex>": the server's clock and
# a random suffix when the queue was created (lua/open-1.lua). Each shard holds
# "<epoch>|<shards>" in its epoch key, written by every open (lua/epoch-set-1.lua), and
# every script that reads or writes the shard checks it. So when a queue's keys vanish
# (a restart without persistence, a flush) or it is created anew (other settings, other
# shards), the Queue objects and caches that knew the old one are refused: QueueGone.

def epoch_token(epoch: str, shards: int) -> str:
    """What a queue's shards hold and its scripts check: "<epoch>|<shards>"."""
    return f"{epoch}|{shards}"


def shard_epoch(prefix: str, name: str) -> Callable[[int], str]:
    """The epoch key of each shard of queue ``name``."""
    keys = QueueKeys(prefix, name)
    return lambda shard: keys.shard(shard).epoch


def open_queue(prefix: str, name: str,
               asked: dict[str, Any]) -> Flow[tuple[QueueSettings, str]]:
    """Store a new queue's settings (or read the stored ones), register it, and return
    the settings to use and the queue's epoch token; QueueConfigError when ``asked``
    conflicts with what is stored."""
    validate.check_name(name, "queue name")
    opened: tuple[QueueSettings, str] = yield from open_stored(
        QueueKeys(prefix, name).meta, registry_key(prefix), name, asked, QueueSettings,
        "queue", shard_epoch(prefix, name))
    return opened


def read_queue(prefix: str, name: str) -> Flow[tuple[QueueSettings, str] | None]:
    """The settings and epoch token of a registered queue, or None; never creates one
    (nor writes anything: a queue stored before epochs gets the token "", unchecked)."""
    validate.check_name(name, "queue name")
    found: tuple[QueueSettings, str] | None = yield from read_stored(
        QueueKeys(prefix, name).meta, registry_key(prefix), name, QueueSettings, "queue")
    return found


def open_stored(meta: str, registry: str, name: str, asked: dict[str, Any], kind: Any,
                what: str, epoch_key: Callable[[int], str]) -> Flow[tuple[Any, str]]:
    """A queue's or topic's settings and epoch token: stored on first open (``kind``
    validates what was asked before anything is written), checked against ``asked``
    after; its epoch written into every shard (``epoch_key(shard)``); registered."""
    wanted = merge(None, asked, name, kind, what)
    flat = [x for kv in wanted.to_hash().items() for x in kv]
    for _ in range(OPEN_TRIES):
        reply = yield Call(_OPEN, [meta], [secrets.token_hex(4), *layout.READS, *flat])
        raise_for(reply, f"open of {what} {name!r}")  # BOUNDS: a hash dynoq did not write
        if int(reply[0]) < 0:  # a layout this version does not read: nothing written
            raise layout.refusal(what, name, int(reply[1]))
        fields = {_decode_str(k): _decode_str(v) for k, v in pairs(reply[1:])}
        try:
            stored = kind.from_hash(fields)
        except QueueConfigError as exc:
            raise QueueConfigError(f"{what} {name!r}: {exc}") from None
        settings = merge(stored, asked, name, kind, what)  # a conflict writes nothing more
        token = epoch_token(fields["epoch"], stored.shards)
        later = yield from _stamp(epoch_key, token, stored.shards, f"{what} {name!r}")
        if later:
            # A shard holds a later epoch: the queue was created anew since it was read
            # (read it again), or, if the stored epoch is still this one, the shard is left
            # from a creation whose settings vanished (a server clock that went back).
            held = yield Cmd(("HGET", meta, "epoch"))
            if held is None or _decode_str(held) != fields["epoch"]:
                continue
            yield Batch([Call(_EPOCH, [epoch_key(s)], [token, "force"]) for s in later])
        yield Cmd(("SADD", registry, name))
        return settings, token
    raise QueueGone(f"{what} {name!r} was created anew {OPEN_TRIES} times while it was "
                    "being opened; open it again")


def _stamp(epoch_key: Callable[[int], str], token: str, shards: int,
           what: str) -> Flow[list[int]]:
    """Write ``token`` into the epoch key of every shard, taking over the shards of an
    earlier creation of the queue (and those it had beyond ``shards``, so that its Queue
    objects are refused there too); returns the shards that hold a later epoch."""
    replies = yield Batch([Call(_EPOCH, [epoch_key(s)], [token, "newer"])
                           for s in range(shards)])
    later, earlier = [], 0
    for shard, (written, held) in enumerate(replies):
        held = _decode_str(held)
        if not int(written) and held != token:
            later.append(shard)
        elif int(written) and held:
            earlier = max(earlier, _shards_of(held), 1)
    if earlier:
        if earlier > shards:
            yield Batch([Call(_EPOCH, [epoch_key(s)], [token, "newer"])
                         for s in range(shards, earlier)])
        log.warning(
            "dynoq: %s was created anew where an earlier %s's shards remain (its settings "
            "had vanished: a server that evicts keys or lost part of its data; `dynoq "
            "check` says what puts messages at risk). Objects that had the earlier one "
            "open get QueueGone; messages left in its shards %s are not delivered by this "
            "one.", what, what.split()[0], f"{shards}-{earlier - 1}" if earlier > shards
            else "(none beyond this one's)")
    return later


def _shards_of(token: str) -> int:
    """The shard count in an epoch token (0 when it is not one)."""
    try:
        return min(max(int(token.rpartition("|")[2]), 0), validate.MAX_SHARDS)
    except ValueError:
        return 0


def read_stored(meta: str, registry: str, name: str, kind: Any,
                what: str) -> Flow[tuple[Any, str] | None]:
    """The settings and epoch token of a registered queue or topic, or None; never creates
    one."""
    member, raw = yield Batch([Cmd(("SISMEMBER", registry, name)), Cmd(("HGETALL", meta))])
    if not member or not raw:
        return None
    fields = {_decode_str(k): _decode_str(v) for k, v in pairs(raw)}
    layout.check(fields, what, name)
    try:
        settings = kind.from_hash(fields)
    except QueueConfigError as exc:
        raise QueueConfigError(f"{what} {name!r}: {exc}") from None
    epoch = fields.get("epoch")
    return settings, "" if epoch is None else epoch_token(epoch, settings.shards)


def queue_names(prefix: str) -> Cmd:
    """Every registered queue under ``prefix``, sorted."""
    return Cmd(("SMEMBERS", registry_key(prefix)),
               lambda raw: sorted(_decode_str(n) for n in raw))


# -- push calls --------------------------------------------------------------------------

T = TypeVar("T")


def chunks(items: Sequence[T], size: Callable[[T], int], most: int = PUSH_CHUNK,
           budget: int = PUSH_BYTES) -> Iterator[Sequence[T]]:
    """``items`` in calls of at most ``most`` items and ``budget`` bytes (``size`` of
    each; an item larger than that goes alone)."""
    for i in range(0, len(items), most):
        part = items[i:i + most]
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


def body_size(out: codec.Outgoing) -> int:
    """What a message weighs in a push call (its encoded body)."""
    return len(out.body)


# -- small parsers -------------------------------------------------------------------------

def _lease_of(lease: Lease, shard: int) -> str:
    return lease if isinstance(lease, str) else lease[shard]


def _sooner(hint: float, other: float) -> float:
    """The nearer of two "ms until something may be deliverable" hints (-1: unknown)."""
    return other if other >= 0 and (hint < 0 or other < hint) else hint


def _tokens(reply: list[Any], nonce: str) -> list[str]:
    """The delivery token of each message of a pop reply: of a first delivery, its unack
    score on a concurrent queue (lua/lib/delivery.lua: the reply's third item, else "")
    or "<nonce>.1"; of any other, "<nonce>.<attempts>"."""
    first = _decode_str(reply[2]) or f"{nonce}.1"
    return [first if n == 1 else f"{nonce}.{n}" for n in reply[5::3]]


def _mode(out: codec.Outgoing) -> str:
    return "ensure" if out.generated else "push"


def _first(reply: list[Any]) -> int:
    return int(reply[0])


def _sum_of_sums(replies: list[list[Any]]) -> int:
    return sum(sum(int(x) for x in r) for r in replies)


def _none(_: Any) -> None:
    return None


def _same(reply: Any) -> Any:
    return reply


def _pair(reply: Any) -> tuple[int, int]:
    return int(reply[0]), int(reply[1])
