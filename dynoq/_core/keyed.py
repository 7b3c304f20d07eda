"""Message groups (ordered="key", DESIGN §3.5): the keyed kind of queue (pure: no I/O).

:class:`Keyed` is the :class:`~.plain.Kind` of a queue with ordered="key": a key's
messages are delivered in push order, at most ``key_concurrency`` of a key in flight,
keys round-robin, and a failing or slow message holds back only its key. The storage is
lua/lib/keyed.lua's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidArgument
from ..message import KeyState, Message
from . import codec, delivered, reasons, validate
from .bounds import SWEEP_LIMIT
from .calls import Batch, Call, Cmd, Flow, int_pair, pairs, text
from .keys import HELD_FROM, ShardKeys, shard_of
from .lua import script
from .opening import Opened
from .plain import Kind, Popped, nonce
from .settings import QueueSettings

_KPUSH, _KPOP, _KACK, _KNACK = script("kpush"), script("kpop"), script("kack"), script("knack")
_KREMOVE, _KREQUEUE, _KREPLAY = script("kremove"), script("krequeue"), script("kreplay")
_KCANCEL, _WEIGHT, _KHOLD = script("kcancel"), script("weight"), script("khold")
_KCLEAR, _KOLDEST, _STATS = script("kclear"), script("koldest"), script("stats")
MAX_KEYS_REPORT = 1000  # keys one `dynoq keys` report lists at most
# Deliveries one krequeue call gives back (each about 40 µs of the server's time: a call
# stays well within DESIGN §2.14's 50 ms)
EXPIRE_LIMIT = 500
MAX_WEIGHT = 100  # a key's fairness weight at most (lua/lib/kweight.lua)
MAX_WEIGHTED = 10_000  # keys of one shard with a weight other than 1, at most


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
    return f, w, ids[:a].decode(errors="replace"), ids[a : a + b].decode(errors="replace")


def parse_weight(raw: bytes | str | None) -> int:
    """A key's weight from its ``w:<key>`` field (lua/lib/kweight.lua): 1 when none."""
    head = text(raw).split("|", 1)[0] if raw else ""
    return int(head) if head.isdigit() and 1 <= int(head) <= MAX_WEIGHT else 1


class Keyed(Kind):
    """A message-group queue's calls and reads."""

    recurring = False  # recurring messages are refused on a keyed queue (schedules.py)
    PUSH, POP, ACK = _KPUSH, _KPOP, _KACK

    def __init__(
        self,
        opened: Opened,
        shard_keys: tuple[ShardKeys, ...],
        settings: QueueSettings,
        limit: int,
        wake: str,
    ) -> None:
        super().__init__(opened, shard_keys, settings, limit, wake)
        self.conc = settings.key_concurrency or 1
        # the key_rate_limit as the scripts take it: count, period ms (0, 0: none)
        per, period = settings.key_rate_limit or (0, 0.0)
        self.rate = (per, validate.to_ms(period))
        # a probe reads the keys that may deliver where others read ready
        self.probe_keys = [
            [k.kturn, k.delayed, k.unack, k.epoch, k.control, k.krest] for k in shard_keys
        ]

    # -- producing and consuming --------------------------------------------------------

    def push_call(self, mode: str, shard: int, outs: Sequence[codec.Outgoing]) -> Call:
        args: list[Any] = [self.epoch, mode, self.window_ms, self.wake, self.conc]
        for o in outs:
            args += (o.id, o.routing, o.body)
        return Call(_KPUSH, self.push_keys[shard], args)

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
        """The heads of up to ``count`` keys, round-robin (a keyed shard has no lease
        and no priorities: ``ceiling``, ``lease``, ``margin_ms`` and ``others`` do not
        apply)."""
        return Call(
            _KPOP,
            self.pop_keys[shard],
            [
                self.epoch,
                count,
                vis_ms,
                nonce,
                self.settings.max_retries,
                self.wake,
                self.conc,
                *self.rate,
            ],
        )

    def popped(
        self, reply: Any, shard: int, nonce: str, lease: str, others: Sequence[int]
    ) -> Popped:
        """Rank 1 when a key there may deliver more (else 0); no other shard's ranks."""
        if type(reply) is int:
            self.opened.refused(reply, f"pop from shard {shard} of {self.name!r}")
        if reply[0] == 0:
            return [], int(reply[2]), float(reply[1]), {}, False
        got = self.decoded(reply, 3, shard, nonce)
        return (got, int(reply[1]), -1.0, {}, any(m.unreadable is not None for m in got))

    def decoded(self, reply: list[Any], start: int, shard: int, nonce: str) -> list[Message]:
        """The messages of a kpop (or kack with take) reply, from ``start`` on: id,
        record, attempts, fence each; an unreadable one says why (``codec.readable``:
        the caller quarantines it). The score their tokens are made of is the item just
        before ``start`` (``delivered.tokens``)."""
        made = delivered.tokens(reply[start - 1], reply[start + 2 :: 4], nonce)
        attempts = [int(n) for n in reply[start + 2 :: 4]]
        out = delivered.messages(
            reply[start::4], reply[start + 1 :: 4], attempts, made, shard, None, self.limit
        )
        for m, fence in zip(out, reply[start + 3 :: 4], strict=True):
            m.fence = int(fence)
        return out

    def ack_and_take(
        self, msgs: Sequence[Message], count: int, vis_ms: int
    ) -> tuple[Call, list[Message]] | None:
        """One kack of ``msgs`` (all of one shard) that also delivers up to ``count``
        messages when that is fair (kack-16.lua): the call, and the list its reply's
        messages are put in once it has run (the caller quarantines the unreadable
        ones). None when ``msgs`` span shards, or are more than one call carries."""
        shards = {m.shard for m in msgs}
        if len(shards) != 1 or len(msgs) > validate.MAX_BATCH:
            return None
        [shard] = shards
        assert shard is not None
        made = nonce()
        got: list[Message] = []
        ids = [x for m in msgs for x in (m.id or "", m.token or "")]

        def parse(reply: Any) -> int:
            self.opened.refused(reply, f"ack on shard {shard} of {self.name!r}")
            got.extend(self.decoded(reply, 2, shard, made))
            return int(reply[0])

        return Call(
            _KACK,
            self.ack_keys[shard],
            [
                self.epoch,
                self.window_ms,
                self.wake,
                self.conc,
                count,
                vis_ms,
                made,
                *self.rate,
                *delivered.ack_args(ids),
            ],
            parse,
        ), got

    def ack_calls(self, groups: dict[tuple[int, str], list[str]]) -> list[Call]:
        calls: list[Call] = []
        for (shard, _), ids in groups.items():
            check = self.opened.parser("ack", shard, int)
            keys = self.ack_keys[shard]
            for i in range(0, len(ids), 2000):
                calls.append(
                    Call(
                        _KACK,
                        keys,
                        [
                            self.epoch,
                            self.window_ms,
                            self.wake,
                            self.conc,
                            0,
                            0,
                            "",
                            *self.rate,
                            *delivered.ack_args(ids[i : i + 2000]),
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
            _KNACK,
            _KNACK.key_list(self.shard_keys[shard]),
            [
                self.epoch,
                validate.to_ms(delay),
                self.settings.max_retries,
                mode,
                self.wake,
                why,
                self.conc,
                msg_id,
                token,
            ],
            self.opened.parser("nack", shard, int_pair),
        )

    def requeue(self, shard: int, *, force: bool = False, lease: str = "") -> Flow[tuple[int, int]]:
        """Expired deliveries and due retries go back to the head of their key
        (krequeue-15.lua, which promotes too); a keyed shard has no lease to force."""
        back = buried = 0
        keys = _KREQUEUE.key_list(self.shard_keys[shard])
        while True:
            reply = yield Call(
                _KREQUEUE,
                keys,
                [self.epoch, self.settings.max_retries, EXPIRE_LIMIT, self.wake, self.conc],
            )
            self.opened.refused(reply, f"requeue on shard {shard} of {self.name!r}")
            back += int(reply[0])
            buried += int(reply[1])
            if not int(reply[2]):
                return back, buried

    # -- by id and whole queue ----------------------------------------------------------

    def remove_call(self, shard: int, msg_id: str) -> Call:
        return Call(
            _KREMOVE,
            _KREMOVE.key_list(self.shard_keys[shard]),
            [self.epoch, msg_id, self.wake, self.conc],
            self.opened.checked(f"remove from {self.name!r}", bool),
        )

    def hold_call(self, shard: int, out: codec.Outgoing, wait_ms: int) -> Call:
        return _KHOLD.call(
            self.shard_keys[shard],
            [self.epoch, self.wake, self.conc, out.id, out.routing, wait_ms, out.body],
            self.opened.checked(f"push to {self.name!r}", int),
        )

    def cancel_call(self, shard: int, msg_id: str) -> Call:
        return _KCANCEL.call(
            self.shard_keys[shard],
            [self.epoch, msg_id, self.wake, self.conc],
            self.opened.checked(f"cancel on {self.name!r}", int),
        )

    def replay_call(self, shard: int, ids: Sequence[str], parse: Callable[[Any], Any]) -> Call:
        return Call(
            _KREPLAY,
            _KREPLAY.key_list(self.shard_keys[shard]),
            [self.epoch, SWEEP_LIMIT, self.wake, self.conc, *ids],
            parse,
        )

    def heads(self, count: int) -> Flow[list[Message]]:
        """The heads of the next keys to be served, in turn order, then those of keys
        resting for the key_rate_limit, the first to go first (not claimed)."""
        out: list[Message] = []
        for shard, keys in enumerate(self.shard_keys):
            checks = self.opened.epoch_checks([shard], f"peek at {self.name!r}")
            *_, turns, resting = yield Batch(
                [
                    *checks,
                    Cmd(("ZRANGE", keys.kturn, 0, count - 1)),
                    Cmd(("ZRANGE", keys.krest, 0, count - 1)),
                ]
            )
            turns = [*turns, *resting][:count]
            if not turns:
                continue
            states = yield Cmd(("HMGET", keys.kstate, *turns))
            ids = [parse_state(v)[3] for v in states]
            recs = yield Batch([Cmd(("HGET", keys.msgs, i or "")) for i in ids])
            for msg_id, rec in zip(ids, recs, strict=True):
                if msg_id and rec is not None:
                    out.append(codec.readable(msg_id, rec, shard, limit=self.limit))
        return out[:count]

    def stats_call(self, keys: ShardKeys) -> Call:
        # the waiting messages are in kwait (a hash), in place of ready
        return Call(
            _STATS,
            [keys.kwait if f == "ready" else getattr(keys, f) for f in _STATS.keys],
            [self.epoch, "hash"],
        )

    def stats_extra(self) -> list[Call | Cmd]:
        """Per shard, the keys with messages waiting or in flight (one HLEN), then the
        oldest head of its next keys to serve (koldest-3.lua)."""
        return [
            *(Cmd(("HLEN", k.kstate)) for k in self.shard_keys),
            *(_KOLDEST.call(k, []) for k in self.shard_keys),
        ]

    def clear_calls(self) -> list[Call]:
        return [
            Call(
                _KCLEAR,
                _KCLEAR.key_list(k),
                [self.epoch],
                self.opened.checked(f"clear of shard {i} of {self.name!r}"),
            )
            for i, k in enumerate(self.shard_keys)
        ]

    def set_weight(self, key: object, weight: object) -> Flow[int]:
        """Give ``key`` ``weight`` turns (1..100) for each turn of a weight-1 key of its
        shard while both wait (lua/lib/kweight.lua); the result: its weight before."""
        name, shard = self._key_shard(key, "set_weight()")
        w = validate.check_int(weight, "weight", low=1, high=MAX_WEIGHT)
        context = f"set_weight() on shard {shard} of {self.name!r}"
        old = yield _WEIGHT.call(
            self.shard_keys[shard], [self.epoch, name, w], self.opened.checked(context)
        )
        if old == 0:
            raise InvalidArgument(
                f"shard {shard} of {self.name!r} holds {MAX_WEIGHTED} weighted keys already: "
                f"set one of them back to 1 first"
            )
        return int(old)

    def weight(self, key: object) -> Flow[int]:
        """The fairness weight of ``key`` (1 unless set)."""
        name, shard = self._key_shard(key, "weight()")
        checks = self.opened.epoch_checks([shard], f"weight() of {self.name!r}")
        *_, raw = yield Batch([*checks, Cmd(("HGET", self.shard_keys[shard].control, "w:" + name))])
        return parse_weight(raw)

    def _key_shard(self, key: object, what: str) -> tuple[str, int]:
        """A key's name, checked, and its shard."""
        name = validate.check_key(key)
        if name is None:
            raise InvalidArgument(f"{what} needs a key")
        return name, shard_of(name, self.settings.shards)

    def key_state(self, key: object) -> Flow[KeyState]:
        """The state of one key (all 0 for a key the queue does not hold)."""
        name, shard = self._key_shard(key, "key_state()")
        keys = self.shard_keys[shard]
        # a vanished queue raises QueueGone here, not "no such key"
        checks = self.opened.epoch_checks([shard], f"key_state() of {self.name!r}")
        *_, raw, fence = yield Batch(
            [*checks, Cmd(("HGET", keys.kstate, name)), Cmd(("HGET", keys.kfence, name))]
        )
        in_flight, waiting, last, first = parse_state(raw)
        if not (in_flight or waiting):
            return KeyState()
        # in flight: the last delivered; else the head waits (it may have been delivered)
        head = last if in_flight else first
        state = (yield Cmd(("HGET", keys.dlv, head))) if head else None
        attempts = delivered.attempts_of(state, bool(in_flight)) if head else 0
        return KeyState(waiting, in_flight, attempts, int(fence or 1))

    def keys_report(self, limit: int = 20) -> Flow[dict[str, list[dict[str, Any]]]]:
        """The busiest keys (most messages waiting or in flight) and the keys blocked by
        a failing message (a retry waiting for its delay), with its attempts and reason.
        Bounded: reads at most ``limit`` keys of each kind a shard (HSCAN pages)."""
        limit = validate.check_count(limit, "limit", high=MAX_KEYS_REPORT)
        busiest: list[dict[str, Any]] = []
        blocked: list[dict[str, Any]] = []
        for shard, keys in enumerate(self.shard_keys):
            busiest += yield from self._busiest(shard, keys, limit)
            blocked += yield from self._blocked(keys, limit)
        busiest.sort(key=lambda d: (-(d["waiting"] + d["in_flight"]), str(d["key"])))
        return {"busiest": busiest[:limit], "blocked": blocked[:limit]}

    def _busiest(self, shard: int, keys: ShardKeys, limit: int) -> Flow[list[dict[str, Any]]]:
        out: list[dict[str, Any]] = []
        cursor, seen = b"0", 0
        # a vanished queue raises QueueGone (with the first page), not "no keys"
        checks = self.opened.epoch_checks([shard], f"keys() of {self.name!r}")
        while seen < 10 * limit:
            *_, (cursor, page) = yield Batch(
                [*checks, Cmd(("HSCAN", keys.kstate, cursor, "COUNT", 100))]
            )
            checks = []
            items = page.items() if isinstance(page, dict) else pairs(page)
            for k, v in items:
                f, w, _, _ = parse_state(v)
                out.append({"key": text(k), "waiting": w, "in_flight": f})
                seen += 1
            if int(cursor) == 0:
                break
        return out

    def _blocked(self, keys: ShardKeys, limit: int) -> Flow[list[dict[str, Any]]]:
        out: list[dict[str, Any]] = []
        # the retries (held debounced copies score above them: keys.HELD_FROM)
        ids = yield Cmd(("ZRANGEBYSCORE", keys.delayed, "-inf", f"({HELD_FROM}", "LIMIT", 0, limit))
        if ids:
            raw = yield Batch(
                [Cmd(("HGET", getattr(keys, f), i)) for i in ids for f in ("msgs", "dlv", "why")]
            )
            for j, msg_id in enumerate(ids):
                rec, state, why = raw[3 * j : 3 * j + 3]
                if rec is None:
                    continue
                m = codec.readable(text(msg_id), rec, limit=self.limit)
                fail = reasons.failure(why)
                out.append(
                    {
                        "key": m.key,
                        "id": m.id,
                        "attempts": delivered.attempts_of(state),
                        "reason": None if fail is None else f"{fail.error_type}: {fail.error}",
                    }
                )
        return out
