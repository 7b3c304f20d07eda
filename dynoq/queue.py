"""One queue: the Dyno-queues operations, each an atomic script on one shard."""

from __future__ import annotations

import itertools
import secrets
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from . import codec
from .codec import Outgoing
from .connection import translate
from .errors import InvalidArgument, InvalidType, LeaseLost, OrderedQueueError, ReplicationError
from .keys import QueueKeys, ShardKeys, shard_of
from .message import Message, QueueStats, ShardStats
from .scripts import FENCED
from .settings import QueueSettings

if TYPE_CHECKING:
    from .client import Client

PUSH_CHUNK = 500  # messages per push script call: bounded script time, few round trips
SWEEP_LIMIT = 1000  # deliveries one requeue / purge call handles


class Queue:
    """A delay (or ordered) queue of ``settings.shards`` shards. Safe to share between threads.

    Get one with ``client.queue(name, ...)``; see DESIGN.md §3 for every operation.
    """

    def __init__(self, client: Client, name: str, settings: QueueSettings) -> None:
        self.client = client
        self.name = name
        self.settings = settings
        self.keys = QueueKeys(client.prefix, name)
        self._shard_keys = [self.keys.shard(i) for i in range(settings.shards)]
        self._rotation = itertools.count()
        self._redis = client.redis
        self._scripts = client.scripts

    def __repr__(self) -> str:
        return f"<dynoq.Queue {self.name!r} {self.settings}>"

    # -- producing -----------------------------------------------------------------------

    def push(self, payload: Any, *, id: str | None = None, delay: float = 0.0,
             priority: int = 0, key: str | None = None,
             headers: dict[str, Any] | None = None) -> str:
        """Add a message (replacing a message with the same id); return its id."""
        out = self._prepare(Message(payload, id=id, delay=delay, priority=priority, key=key,
                                    headers=headers))
        self._push_shard("push", self.shard_for(out.routing), [out])
        return out.id

    def ensure(self, payload: Any, *, id: str, delay: float = 0.0, priority: int = 0,
               key: str | None = None, headers: dict[str, Any] | None = None) -> bool:
        """Push unless a message with this id exists (or was acked within the dedupe
        window). Atomic: of concurrent callers with one id, exactly one pushes."""
        if id is None:
            raise InvalidArgument("ensure() needs an id: it pushes only if that id is absent")
        out = self._prepare(Message(payload, id=id, delay=delay, priority=priority, key=key,
                                    headers=headers))
        return bool(self._push_shard("ensure", self.shard_for(out.routing), [out])[0])

    def push_many(self, items: Iterable[Any], *, if_absent: bool = False) -> list[str]:
        """Push many payloads or :class:`Message` objects; all are validated before any
        is written. With ``if_absent``, ids already present are skipped (ensure)."""
        outs = [self._prepare(item if isinstance(item, Message) else Message(item))
                for item in items]
        ids = [o.id for o in outs]
        if len(set(ids)) != len(ids):
            raise InvalidArgument("push_many() got the same id twice; ids must be unique")
        self._push_batches("ensure" if if_absent else "push", outs)
        return ids

    def ensure_many(self, items: Iterable[Message]) -> int:
        """Push-if-absent for many messages with ids; returns how many were pushed."""
        outs = [self._prepare(item) for item in items]
        if any(item.id is None for item in outs):
            raise InvalidArgument("ensure_many() needs an id on every message")
        return self._push_batches("ensure", outs)

    def _prepare(self, msg: Message) -> Outgoing:
        if not isinstance(msg, Message):
            raise InvalidType(f"expected a dynoq.Message, got {type(msg).__name__}")
        return codec.prepare(msg, ordered=self.settings.ordered,
                             limit=self.client.max_payload_bytes)

    def _push_args(self, mode: str, outs: Sequence[Outgoing]) -> list[Any]:
        args: list[Any] = [mode, codec.to_ms(self.settings.dedupe_window),
                           self.keys.wake_channel]
        for o in outs:
            args += [o.id, o.delay_ms, o.priority, o.body]
        return args

    @translate
    def _push_shard(self, mode: str, shard: int, outs: Sequence[Outgoing]) -> list[int]:
        if self.settings.min_replicas:
            pipe = self._redis.pipeline(transaction=False)
            self._scripts.run("push", self._shard_keys[shard], self._push_args(mode, outs),
                              client=pipe)
            return list(self._execute_replicated(pipe)[0])
        result: list[int] = self._scripts.run("push", self._shard_keys[shard],
                                              self._push_args(mode, outs))
        return result

    def _execute_replicated(self, pipe: Any) -> list[Any]:
        """Execute ``pipe`` with WAIT after its writes, on the same connection (on a
        cluster: after each node's writes, on that node's connection)."""
        wanted, timeout = self.settings.min_replicas, self.settings.replica_timeout
        if not wanted:
            return list(pipe.execute())
        pipe.execute_command("WAIT", wanted, codec.to_ms(timeout))
        *replies, acked = pipe.execute()
        if int(acked) < wanted:
            raise ReplicationError(
                f"only {acked} of {wanted} replica(s) confirmed a push to {self.name!r} "
                f"within {timeout:g}s: it is on the master but may be lost if the master "
                "fails now; pushing again is safe (by id)")
        return list(replies)

    @translate
    def _push_batches(self, mode: str, outs: Sequence[Outgoing]) -> int:
        by_shard: dict[int, list[Outgoing]] = defaultdict(list)
        for o in outs:
            by_shard[self.shard_for(o.routing)].append(o)
        pipe = self._redis.pipeline(transaction=False)
        for shard, group in by_shard.items():
            for i in range(0, len(group), PUSH_CHUNK):
                self._scripts.run("push", self._shard_keys[shard],
                                  self._push_args(mode, group[i:i + PUSH_CHUNK]), client=pipe)
        if not by_shard:
            return 0
        return sum(sum(r) for r in self._execute_replicated(pipe))

    # -- consuming -----------------------------------------------------------------------

    def pop(self, count: int = 1, *, wait: float = 0.0, visibility: float | None = None,
            shards: Sequence[int] | None = None, lease: str | None = None) -> list[Message]:
        """Claim up to ``count`` due messages for ``visibility`` seconds (default: the
        queue's unack timeout). ``wait`` blocks up to that many seconds for the first one.

        ``shards`` limits (and orders) the shards tried; ``lease`` is the caller's lease
        token on them (consumers of ordered queues)."""
        count = codec.check_positive_int(count, "count")
        wait = codec.check_delay(wait, "wait")
        vis_ms = codec.to_ms(self.settings.unack_timeout if visibility is None
                             else codec.check_delay(visibility, "visibility"))
        if vis_ms <= 0:
            raise InvalidArgument("visibility must be > 0 seconds")
        order = self._shard_order(shards)
        deadline = time.monotonic() + wait
        while True:
            got, hint = self._pop_pass(order, count, vis_ms, lease or "")
            left = deadline - time.monotonic()
            if got or left <= 0:
                return got
            timeout = left if hint < 0 else min(left, hint / 1000 + 0.002)
            self._wait(timeout)

    @translate
    def _wait(self, timeout: float) -> None:
        # Subscribing just now means a push may have slipped in before: check again first.
        if not self.client.waiter.arm(self.keys.wake_channel):
            self.client.waiter.wait(timeout)

    def _shard_order(self, shards: Sequence[int] | None) -> list[int]:
        if shards is not None:
            bad = [s for s in shards if not (isinstance(s, int) and 0 <= s < self.settings.shards)]
            if bad:
                raise InvalidArgument(f"no such shard(s) {bad} in a queue of "
                                      f"{self.settings.shards} shards")
            return list(shards)
        # Rotate the starting shard so that no shard starves.
        n = self.settings.shards
        start = next(self._rotation) % n
        return [(start + i) % n for i in range(n)]

    @translate
    def _pop_pass(self, order: list[int], count: int, vis_ms: int,
                  lease: str) -> tuple[list[Message], float]:
        got: list[Message] = []
        hint = -1.0
        ordered = "1" if self.settings.ordered else "0"
        for shard in order:
            reply = self._scripts.run("pop", self._shard_keys[shard], [
                count - len(got), vis_ms, secrets.token_hex(4), ordered, lease,
                self.settings.max_retries])
            status = int(reply[0])
            if status == FENCED:
                if lease:
                    raise LeaseLost(f"lease on shard {shard} of {self.name!r} is gone; "
                                    "stop consuming it and rebalance")
                continue  # another consumer leases this ordered shard
            if status == 0:
                h = float(reply[1])
                if h >= 0 and (hint < 0 or h < hint):
                    hint = h
                continue
            held = lease or None
            decode = codec.decode
            got += [decode(reply[i].decode(), reply[i + 1], shard=shard,
                           attempts=int(reply[i + 2]), token=reply[i + 3].decode(), lease=held)
                    for i in range(2, len(reply), 4)]
            if len(got) >= count:
                break
        return got, hint

    def _delivery(self, msg: Message | str) -> tuple[int, str, str, str]:
        """(shard, id, delivery token, lease token) of a popped message or a bare id."""
        if isinstance(msg, Message):
            if msg.id is None or msg.shard is None:
                raise InvalidArgument("this message was not popped: ack/nack/extend take "
                                      "a popped message or an id")
            return msg.shard, msg.id, msg.token or "", msg.lease or ""
        msg_id = codec.check_id(msg)
        return self.locate(msg_id), msg_id, "", ""

    def ack(self, msg: Message | str) -> bool:
        """Finish a delivery. False if it is no longer current (expired, redelivered)."""
        return self.ack_many([msg]) == 1

    @translate
    def ack_many(self, msgs: Iterable[Message | str]) -> int:
        """Ack many deliveries (one script call per shard, pipelined); returns how many."""
        groups: dict[tuple[int, str], list[str]] = defaultdict(list)
        for m in msgs:
            if type(m) is Message and m.shard is not None and m.id is not None:
                # the common case, popped messages, without _delivery()'s checks
                pairs = groups[(m.shard, m.lease or "")]
                pairs.append(m.id)
                pairs.append(m.token or "")
                continue
            shard, msg_id, token, lease = self._delivery(m)
            groups[(shard, lease)] += [msg_id, token]
        if not groups:
            return 0
        window = codec.to_ms(self.settings.dedupe_window)
        pipe = self._redis.pipeline(transaction=False)
        for (shard, lease), pairs in groups.items():
            self._scripts.run("ack", self._shard_keys[shard], [lease, window, *pairs],
                              client=pipe)
        total = 0
        for (shard, _), n in zip(groups, pipe.execute(), strict=True):
            if int(n) == FENCED:
                raise LeaseLost(f"lease on shard {shard} of {self.name!r} is gone: not acked")
            total += int(n)
        return total

    def nack(self, msg: Message | str, *, delay: float = 0.0) -> bool:
        """Give a delivery back now or after ``delay`` seconds (dead-lettered instead once
        the queue's max_retries is spent). False if the delivery is no longer current."""
        return self._nack(msg, codec.check_delay(delay), "retry") > 0

    def dead_letter(self, msg: Message | str) -> bool:
        """Move a delivery to the dead-letter set now."""
        return self._nack(msg, 0.0, "dead") > 0

    @translate
    def _nack(self, msg: Message | str, delay: float, mode: str) -> int:
        shard, msg_id, token, lease = self._delivery(msg)
        reply = self._scripts.run("nack", self._shard_keys[shard], [
            lease, codec.to_ms(delay), self.settings.max_retries, mode,
            "1" if self.settings.ordered else "0", self.keys.wake_channel, msg_id, token])
        if reply == FENCED:
            raise LeaseLost(f"lease on shard {shard} of {self.name!r} is gone: not nacked")
        return int(reply[0]) + int(reply[1])

    @translate
    def extend(self, msg: Message | str, timeout: float) -> bool:
        """Set the delivery's visibility deadline to now + ``timeout`` seconds."""
        timeout = codec.check_delay(timeout, "timeout")
        shard, msg_id, token, lease = self._delivery(msg)
        reply = int(self._scripts.run("extend", self._shard_keys[shard],
                                      [lease, codec.to_ms(timeout), msg_id, token]))
        if reply == FENCED:
            raise LeaseLost(f"lease on shard {shard} of {self.name!r} is gone: not extended")
        return reply == 1

    # -- by id ---------------------------------------------------------------------------

    def shard_for(self, routing: str) -> int:
        """The shard of an id (concurrent queues) or ordering key (ordered queues)."""
        return shard_of(routing, self.settings.shards)

    @translate
    def locate(self, msg_id: str) -> int:
        """The shard holding ``msg_id``. Ordered queues route by key, so this searches
        every shard (one pipelined round trip); an unknown id maps to its hash shard."""
        home = self.shard_for(msg_id)
        if not self.settings.ordered or self.settings.shards == 1:
            return home
        pipe = self._redis.pipeline(transaction=False)
        for keys in self._shard_keys:
            pipe.hexists(keys.msgs, msg_id)
        found = [i for i, hit in enumerate(pipe.execute()) if hit]
        return found[0] if found else home

    @translate
    def reschedule(self, msg_id: str, *, delay: float) -> bool:
        """Move a waiting message's due time to now + ``delay``. False if not waiting."""
        if self.settings.ordered:
            raise OrderedQueueError("ordered queues deliver in push order: reschedule "
                                    "is refused (remove and push again instead)")
        delay = codec.check_delay(delay)
        msg_id = codec.check_id(msg_id)
        return bool(self._scripts.run("reschedule", self._shard_keys[self.locate(msg_id)],
                                      [msg_id, codec.to_ms(delay), self.keys.wake_channel]))

    @translate
    def remove(self, msg_id: str) -> bool:
        """Delete a message wherever it is (waiting, in flight or dead)."""
        msg_id = codec.check_id(msg_id)
        return bool(self._scripts.run("remove", self._shard_keys[self.locate(msg_id)],
                                      [msg_id]))

    @translate
    def get(self, msg_id: str) -> Message | None:
        """The stored message (with its attempts so far), or None."""
        msg_id = codec.check_id(msg_id)
        shard = self.locate(msg_id)
        keys = self._shard_keys[shard]
        record, dlv = self._redis.pipeline(transaction=False).hget(keys.msgs, msg_id).hget(
            keys.dlv, msg_id).execute()
        if record is None:
            return None
        attempts = int(dlv.split(b"|", 1)[0]) if dlv else 0
        return codec.decode(msg_id, record, shard=shard, attempts=attempts)

    def contains(self, msg_id: str) -> bool:
        msg_id = codec.check_id(msg_id)
        return bool(self._redis.hexists(self._shard_keys[self.locate(msg_id)].msgs, msg_id))

    # -- whole queue ---------------------------------------------------------------------

    @translate
    def peek(self, count: int = 10) -> list[Message]:
        """The next deliverable messages in delivery order (lower priority value first,
        then earlier ready time), without claiming them."""
        count = codec.check_positive_int(count, "count")
        pipe = self._redis.pipeline(transaction=False)
        for keys in self._shard_keys:
            self._scripts.run("peek", keys, [count], client=pipe)
        ranked: list[tuple[tuple[int, float, int, int], Message]] = []
        for shard, reply in enumerate(pipe.execute()):
            for pos, i in enumerate(range(1, len(reply), 3)):
                m = codec.decode(reply[i].decode(), reply[i + 1], shard=shard,
                                 attempts=int(reply[i + 2]))
                ranked.append(((m.priority, m.deliver_at or 0.0, shard, pos), m))
        ranked.sort(key=lambda pair: pair[0])
        return [m for _, m in ranked[:count]]

    @translate
    def stats(self) -> QueueStats:
        pipe = self._redis.pipeline(transaction=False)
        for keys in self._shard_keys:
            self._scripts.run("stats", keys, [], client=pipe)
        shards = tuple(
            ShardStats(i, int(r[0]), int(r[1]), int(r[2]), int(r[3]),
                       None if int(r[4]) < 0 else int(r[4]) / 1000)
            for i, r in enumerate(pipe.execute()))
        return QueueStats(self.name, shards)

    def size(self) -> int:
        """Waiting messages (ready + delayed), not in flight, not dead."""
        return self.stats().size

    @translate
    def clear(self) -> None:
        """Delete every message of the queue (its settings stay)."""
        pipe = self._redis.pipeline(transaction=False)
        for keys in self._shard_keys:
            pipe.delete(*[k for k in keys.all() if k != keys.lease])
        pipe.execute()

    @translate
    def requeue_expired(self, shards: Iterable[int] | None = None) -> int:
        """Give back every delivery whose visibility ran out (Dyno processUnacks), over
        all shards; returns how many went back or to the dead-letter set."""
        total = 0
        for shard in range(self.settings.shards) if shards is None else shards:
            total += self.requeue_shard(shard)
        return total

    def requeue_shard(self, shard: int, *, force: bool = False, lease: str = "") -> int:
        """Requeue the expired (or with ``force``, all) deliveries of one shard."""
        return sum(self.requeue_counts(shard, force=force, lease=lease))

    def requeue_counts(self, shard: int, *, force: bool = False,
                       lease: str = "") -> tuple[int, int]:
        """As :meth:`requeue_shard`, counted apart: (given back, dead-lettered)."""
        back = buried = 0
        while True:
            reply = self._scripts.run("requeue", self._shard_keys[shard], [
                lease, "1" if force else "0", self.settings.max_retries, SWEEP_LIMIT,
                self.keys.wake_channel])
            if reply == FENCED:
                raise LeaseLost(f"lease on shard {shard} of {self.name!r} is gone")
            back += int(reply[0])
            buried += int(reply[1])
            if not int(reply[2]):
                return back, buried

    # -- dead letters --------------------------------------------------------------------

    @translate
    def dead(self, count: int = 100) -> list[Message]:
        """Dead-lettered messages, oldest first."""
        count = codec.check_positive_int(count, "count")
        pipe = self._redis.pipeline(transaction=False)
        for keys in self._shard_keys:
            pipe.zrange(keys.dead, 0, count - 1, withscores=True)
        heads = pipe.execute()
        ranked = sorted((score, shard, member.decode())
                        for shard, head in enumerate(heads) for member, score in head)[:count]
        pipe = self._redis.pipeline(transaction=False)
        for _, shard, msg_id in ranked:
            pipe.hget(self._shard_keys[shard].msgs, msg_id)
            pipe.hget(self._shard_keys[shard].dlv, msg_id)
        raw = pipe.execute()
        out = []
        for (_, shard, msg_id), record, dlv in zip(ranked, raw[::2], raw[1::2], strict=True):
            if record is not None:
                attempts = int(dlv.split(b"|", 1)[0]) if dlv else 0
                out.append(codec.decode(msg_id, record, shard=shard, attempts=attempts))
        return out

    @translate
    def replay_dead(self, ids: Iterable[str] | None = None) -> int:
        """Put dead-lettered messages (all, or these ids) back with attempts reset."""
        total = 0
        if ids is None:
            for keys in self._shard_keys:
                while True:
                    n = int(self._scripts.run("replay", keys,
                                              [SWEEP_LIMIT, self.keys.wake_channel]))
                    total += n
                    if n < SWEEP_LIMIT:
                        break
            return total
        by_shard: dict[int, list[str]] = defaultdict(list)
        for msg_id in ids:
            msg_id = codec.check_id(msg_id)
            by_shard[self.locate(msg_id)].append(msg_id)
        for shard, group in by_shard.items():
            total += int(self._scripts.run("replay", self._shard_keys[shard],
                                           [SWEEP_LIMIT, self.keys.wake_channel, *group]))
        return total

    @translate
    def purge_dead(self) -> int:
        """Delete every dead-lettered message for good; returns how many."""
        total = 0
        for keys in self._shard_keys:
            while True:
                n = int(self._scripts.run("purge-dead", keys, [SWEEP_LIMIT]))
                total += n
                if n < SWEEP_LIMIT:
                    break
        return total

    def shard_keys(self, shard: int) -> ShardKeys:
        return self._shard_keys[shard]
