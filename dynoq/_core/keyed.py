"""Message groups (ordered="key", DESIGN §3.5): the requests of a keyed queue (pure).

:class:`KeyedOps` is mixed into :class:`~.ops.QueueOps`, whose methods hand over to it
when the queue is keyed: a key's messages are delivered in push order, at most
``key_concurrency`` of a key in flight, keys round-robin, and a failing or slow message
holds back only its key. The storage is lua/lib/keyed.lua's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..message import KeyState, Message
from . import codec, validate
from .calls import Batch, Call, Cmd, Flow, pairs
from .keys import ShardKeys, shard_of
from .lua import script

_KPUSH, _KPOP, _KACK, _KNACK = script("kpush"), script("kpop"), script("kack"), script("knack")
_KREMOVE, _KREQUEUE, _KREPLAY = script("kremove"), script("krequeue"), script("kreplay")
_KCLEAR = script("kclear")
MAX_KEYS_REPORT = 1000  # keys one `dynoq keys` report lists at most
# Deliveries one krequeue call gives back (each about 40 µs of the server's time: a call
# stays well within DESIGN §2.14's 50 ms)
EXPIRE_LIMIT = 500


def _ints(reply: Any) -> list[int]:
    return [int(x) for x in reply]


def _pair(reply: Any) -> tuple[int, int]:
    return int(reply[0]), int(reply[1])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def parse_state(raw: bytes | str | None) -> tuple[int, int, str, str]:
    """A key's stored state (lua/lib/keyed.lua's kstate): (in flight, waiting, last
    delivered id, the id of its first waiting message or "")."""
    if not raw:
        return 0, 0, "", ""
    data = raw.encode() if isinstance(raw, str) else raw
    parts = data.split(b"|", 4)
    if len(parts) != 5 or not all(x.isdigit() for x in parts[:4]):
        return 0, 0, "", ""  # not written by dynoq
    f, w, a, b = (int(x) for x in parts[:4])
    ids = parts[4]
    return f, w, ids[:a].decode(errors="replace"), ids[a:a + b].decode(errors="replace")


class KeyedOps:
    """The keyed half of QueueOps (what it provides is declared here)."""

    name: str
    keyed: bool
    epoch: str
    wake: str
    limit: int
    shard_keys: tuple[ShardKeys, ...]
    _window_ms: int
    _conc: int
    _max_retries: int
    _shards: int

    def _parser(self, what: str, shard: int, parse: Callable[[Any], Any]
                ) -> Callable[[Any], Any]:
        raise NotImplementedError

    def refused(self, reply: Any, context: str) -> None:
        raise NotImplementedError

    def checked(self, context: str, parse: Callable[[Any], Any] | None = None
                ) -> Callable[[Any], Any]:
        raise NotImplementedError

    def epoch_checks(self, shards: Iterable[int], context: str) -> list[Cmd]:
        raise NotImplementedError

    def quarantine(self, msgs: list[Message], consumer: str) -> Flow[list[Message]]:
        raise NotImplementedError

    def _keyed_only(self, what: str) -> None:
        if not self.keyed:
            raise InvalidArgument(f"{what} is for queues with ordered=\"key\"; queue "
                                  f"{self.name!r} is not one")

    # -- producing ------------------------------------------------------------------------

    def _kpush_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        args: list[Any] = [self.epoch, mode, self._window_ms, self.wake, self._conc]
        for o in outs:
            args += (o.id, o.routing, o.body)
        return Call(_KPUSH, _KPUSH.key_list(self.shard_keys[shard]), args)

    # -- consuming ------------------------------------------------------------------------

    def _ktake(self, shard: int, count: int, vis_ms: int, consumer: str = ""
               ) -> Flow[tuple[list[Message], int, float, dict[int, int]]]:
        """One pop of a keyed shard: the heads of up to ``count`` keys, round-robin.
        Returns them (an unreadable one dead-lettered: ``quarantine``), 1 when a key
        there may deliver more (else 0), the ms until something may be deliverable when
        nothing was (-1: unknown), and {}."""
        nonce = f"{random.getrandbits(32):08x}"
        reply = yield Call(_KPOP, _KPOP.key_list(self.shard_keys[shard]), [
            self.epoch, count, vis_ms, nonce, self._max_retries, self.wake, self._conc])
        if type(reply) is int:
            self.refused(reply, f"pop from shard {shard} of {self.name!r}")
        if reply[0] == 0:
            return [], int(reply[2]), float(reply[1]), {}
        got = self._kdecoded(reply, 2, shard, nonce)
        if any(m.unreadable is not None for m in got):
            got = yield from self.quarantine(got, consumer)
        return got, int(reply[1]), -1.0, {}

    def _kdecoded(self, reply: list[Any], start: int, shard: int, nonce: str
                  ) -> list[Message]:
        """The messages of a kpop (or kack with take) reply, from ``start`` on: id,
        record, attempts, fence each; an unreadable one says why (``codec.readable``:
        the caller quarantines it)."""
        read, limit = codec.readable, self.limit
        out = []
        for i in range(start, len(reply), 4):
            n = int(reply[i + 2])
            m = read(_text(reply[i]), reply[i + 1], shard, n, f"{nonce}.{n}", None, limit)
            m.fence = int(reply[i + 3])
            out.append(m)
        return out

    def ack_and_take(self, msgs: Sequence[Message], count: int, vis_ms: int
                     ) -> tuple[Call, list[Message]] | None:
        """One kack of ``msgs`` (all of one shard) that also delivers up to ``count``
        messages when that is fair (kack-12.lua): the call, and the list its reply's
        messages are put in once it has run (the caller quarantines the unreadable
        ones). None when ``msgs`` span shards, or are more than one call carries."""
        shards = {m.shard for m in msgs}
        if len(shards) != 1 or not self.keyed or len(msgs) > validate.MAX_BATCH:
            return None
        [shard] = shards
        assert shard is not None
        nonce = f"{random.getrandbits(32):08x}"
        got: list[Message] = []
        ids = [x for m in msgs for x in (m.id or "", m.token or "")]

        def parse(reply: Any) -> int:
            self.refused(reply, f"ack on shard {shard} of {self.name!r}")
            got.extend(self._kdecoded(reply, 1, shard, nonce))
            return int(reply[0])

        return Call(_KACK, _KACK.key_list(self.shard_keys[shard]), [
            self.epoch, self._window_ms, self.wake, self._conc, count, vis_ms, nonce, *ids],
            parse), got

    def _kack_calls(self, groups: dict[tuple[int, str], list[str]]) -> list[Call]:
        calls: list[Call] = []
        for (shard, _), ids in groups.items():
            check = self._parser("ack", shard, int)
            keys = _KACK.key_list(self.shard_keys[shard])
            for i in range(0, len(ids), 2000):
                calls.append(Call(_KACK, keys, [self.epoch, self._window_ms, self.wake,
                                                self._conc, 0, 0, "", *ids[i:i + 2000]],
                                  check))
        return calls

    def _knack_call(self, shard: int, msg_id: str, token: str, delay: float, mode: str,
                    why: bytes = b"") -> Call:
        return Call(_KNACK, _KNACK.key_list(self.shard_keys[shard]), [
            self.epoch, validate.to_ms(delay), self._max_retries, mode, self.wake, why,
            self._conc, msg_id, token], self._parser("nack", shard, _pair))

    def _krequeue(self, shard: int) -> Flow[tuple[int, int]]:
        back = buried = 0
        keys = _KREQUEUE.key_list(self.shard_keys[shard])
        while True:
            reply = yield Call(_KREQUEUE, keys, [self.epoch, self._max_retries, EXPIRE_LIMIT,
                                                 self.wake, self._conc])
            self.refused(reply, f"requeue on shard {shard} of {self.name!r}")
            back += int(reply[0])
            buried += int(reply[1])
            if not int(reply[2]):
                return back, buried

    def _kremove(self, shard: int, msg_id: str) -> Call:
        return Call(_KREMOVE, _KREMOVE.key_list(self.shard_keys[shard]),
                    [self.epoch, msg_id, self.wake, self._conc],
                    self.checked(f"remove from {self.name!r}", bool))

    def _kreplay(self, shard: int, ids: Sequence[str], limit: int) -> Call:
        return Call(_KREPLAY, _KREPLAY.key_list(self.shard_keys[shard]),
                    [self.epoch, limit, self.wake, self._conc, *ids],
                    self.checked(f"replay on {self.name!r}", int))

    def _kclear(self) -> list[Call]:
        return [Call(_KCLEAR, _KCLEAR.key_list(k), [self.epoch], self.checked(
            f"clear of shard {i} of {self.name!r}")) for i, k in enumerate(self.shard_keys)]

    # -- reading --------------------------------------------------------------------------

    def key_count(self) -> list[Cmd]:
        """One HLEN a shard: the keys with messages waiting or in flight."""
        return [Cmd(("HLEN", k.kstate)) for k in self.shard_keys]

    def key_state(self, key: object) -> Flow[KeyState]:
        """The state of one key (all 0 for a key the queue does not hold)."""
        self._keyed_only("key_state()")
        text = validate.check_key(key)
        if text is None:
            raise InvalidArgument("key_state() needs a key")
        shard = shard_of(text, self._shards)
        keys = self.shard_keys[shard]
        # a vanished queue raises QueueGone here, not "no such key"
        checks = self.epoch_checks([shard], f"key_state() of {self.name!r}")
        *_, raw, fence = yield Batch([*checks, Cmd(("HGET", keys.kstate, text)),
                                      Cmd(("HGET", keys.kfence, text))])
        in_flight, waiting, last, first = parse_state(raw)
        if not (in_flight or waiting):
            return KeyState()
        # in flight: the last delivered; else the head waits (it may have been delivered)
        head = last if in_flight else first
        attempts = codec.attempts_of((yield Cmd(("HGET", keys.dlv, head)))) if head else 0
        return KeyState(waiting, in_flight, attempts, int(fence or 1))

    def keys_report(self, limit: int = 20) -> Flow[dict[str, list[dict[str, Any]]]]:
        """The busiest keys (most messages waiting or in flight) and the keys blocked by
        a failing message (a retry waiting for its delay), with its attempts and reason.
        Bounded: reads at most ``limit`` keys of each kind a shard (HSCAN pages)."""
        self._keyed_only("keys()")
        limit = validate.check_count(limit, "limit", high=MAX_KEYS_REPORT)
        busiest: list[dict[str, Any]] = []
        blocked: list[dict[str, Any]] = []
        for shard, keys in enumerate(self.shard_keys):
            cursor, seen = b"0", 0
            # a vanished queue raises QueueGone (with the first page), not "no keys"
            checks = self.epoch_checks([shard], f"keys() of {self.name!r}")
            while seen < 10 * limit:
                *_, (cursor, page) = yield Batch(
                    [*checks, Cmd(("HSCAN", keys.kstate, cursor, "COUNT", 100))])
                checks = []
                items = page.items() if isinstance(page, dict) else pairs(page)
                for k, v in items:
                    f, w, _, _ = parse_state(v)
                    busiest.append({"key": _text(k), "waiting": w, "in_flight": f})
                    seen += 1
                if int(cursor) == 0:
                    break
            ids = yield Cmd(("ZRANGE", keys.delayed, 0, limit - 1))
            if ids:
                raw = yield Batch([Cmd(("HGET", getattr(keys, f), i))
                                   for i in ids for f in ("msgs", "dlv", "why")])
                for j, msg_id in enumerate(ids):
                    rec, state, why = raw[3 * j:3 * j + 3]
                    if rec is None:
                        continue
                    m = codec.readable(_text(msg_id), rec, limit=self.limit)
                    fail = codec.failure(why)
                    blocked.append({"key": m.key, "id": m.id,
                                    "attempts": codec.attempts_of(state),
                                    "reason": None if fail is None else
                                    f"{fail.error_type}: {fail.error}"})
        busiest.sort(key=lambda d: (-(d["waiting"] + d["in_flight"]), str(d["key"])))
        return {"busiest": busiest[:limit], "blocked": blocked[:limit]}

    def _kpeek(self, count: int) -> Flow[list[Message]]:
        """The heads of the next keys to be served, in turn order (not claimed)."""
        out: list[Message] = []
        for shard, keys in enumerate(self.shard_keys):
            checks = self.epoch_checks([shard], f"peek at {self.name!r}")
            *_, turns = yield Batch([*checks, Cmd(("ZRANGE", keys.kturn, 0, count - 1))])
            if not turns:
                continue
            states = yield Cmd(("HMGET", keys.kstate, *turns))
            ids = [parse_state(v)[3] for v in states]
            recs = yield Batch([Cmd(("HGET", keys.msgs, i or "")) for i in ids])
            for msg_id, rec in zip(ids, recs, strict=True):
                if msg_id and rec is not None:
                    out.append(codec.readable(msg_id, rec, shard, limit=self.limit))
        return out[:count]

