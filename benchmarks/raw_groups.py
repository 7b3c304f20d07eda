"""The least a message-group queue stores and does, in raw Redis: the baseline for
``ordered="key"`` in benchmarks/bench_server.py (a plain delay layout does not keep order
per key, so it is not the same work).

What it keeps, per queue: ``msgs`` (id -> payload), a list of waiting ids per key, the
keys that have a message deliverable (``ready``, a sorted set scored by arrival), the key
each id belongs to (``owner``) and the deliveries in flight (``unack``, scored by the
visibility deadline). A key whose head is in flight is not in ``ready``: the next
message of a key is delivered only once the one before it is acked (order per key), and
a pop takes the heads of many keys at once (no head-of-line blocking, fair across keys).
Left out (dynoq does them, the baseline does not): delays and priorities, attempts and
redelivery of expired deliveries, fences, epochs, counts, quarantine of bad records.

Every step is one Lua script, as a Redis user would write it; all keys of a queue share
one hash slot (``{prefix}``).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from benchmarks.common import drop_prefix

# KEYS: msgs ready owner; ARGV: (key, id, payload) triples.
# A key gets a place in `ready` when its list was empty and it has nothing in flight.
PUSH = """
local seq = redis.call('INCRBY', KEYS[3] .. ':seq', #ARGV / 3)
for i = 1, #ARGV, 3 do
  local key, id = ARGV[i], ARGV[i + 1]
  redis.call('HSET', KEYS[1], id, ARGV[i + 2])
  redis.call('HSET', KEYS[3], id, key)
  local list = KEYS[3] .. ':k:' .. key
  if redis.call('RPUSH', list, id) == 1 and redis.call('HEXISTS', KEYS[3] .. ':busy', key) == 0
  then
    redis.call('ZADD', KEYS[2], 'NX', seq, key)
  end
end
return #ARGV / 3
"""

# KEYS: msgs ready owner unack; ARGV: count, visibility ms.
# The heads of up to `count` keys, each key marked busy until its head is acked.
POP = """
local t = redis.call('TIME')
local deadline = t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(ARGV[2])
local keys = redis.call('ZPOPMIN', KEYS[2], ARGV[1])
local ids, unack, busy = {}, {}, {}
for i = 1, #keys, 2 do
  local key = keys[i]
  local id = redis.call('LPOP', KEYS[3] .. ':k:' .. key)
  ids[#ids + 1] = id
  unack[#unack + 1] = deadline
  unack[#unack + 1] = id
  busy[#busy + 1] = key
  busy[#busy + 1] = id
end
if #ids == 0 then return {} end
redis.call('ZADD', KEYS[4], unpack(unack))
redis.call('HSET', KEYS[3] .. ':busy', unpack(busy))
return {ids, redis.call('HMGET', KEYS[1], unpack(ids))}
"""

# KEYS: msgs ready owner unack; ARGV: ids.
# Each acked id frees its key: the key's next message (if any) becomes deliverable.
ACK = """
local seq = redis.call('INCRBY', KEYS[3] .. ':seq', #ARGV)
local done = 0
for _, id in ipairs(ARGV) do
  if redis.call('ZREM', KEYS[4], id) == 1 then
    done = done + 1
    local key = redis.call('HGET', KEYS[3], id)
    redis.call('HDEL', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[3] .. ':busy', key)
    if redis.call('LLEN', KEYS[3] .. ':k:' .. key) > 0 then
      redis.call('ZADD', KEYS[2], seq, key)
    end
  end
end
return done
"""


class RawGroups:
    """One raw group queue: its keys share the hash slot of ``{prefix}`` (the per-key
    lists are named in the scripts, from KEYS[3]: one server or one slot only)."""

    def __init__(self, r: redis.Redis, prefix: str) -> None:
        self.r, self.prefix = r, prefix
        self.keys = [f"{{{prefix}}}:{name}" for name in ("msgs", "ready", "owner", "unack")]
        self._push, self._pop, self._ack = (r.register_script(s) for s in (PUSH, POP, ACK))

    def push(self, items: Sequence[tuple[str, str, bytes]]) -> int:
        """Push (key, id, payload) items, 1,000 a call."""
        done = 0
        for i in range(0, len(items), 1000):
            args = [x for item in items[i : i + 1000] for x in item]
            done += int(self._push(keys=self.keys[:3], args=args))
        return done

    def pop(self, count: int = 100, visibility_ms: int = 60_000) -> list[tuple[str, bytes]]:
        """Claim the heads of up to ``count`` keys: (id, payload) each."""
        reply = self._pop(keys=self.keys, args=[count, visibility_ms])
        if not reply:
            return []
        return [(i.decode(), p) for i, p in zip(reply[0], reply[1], strict=True)]

    def ack(self, ids: Sequence[str]) -> int:
        """Ack deliveries by id; returns how many were in flight."""
        return int(self._ack(keys=self.keys, args=list(ids)))

    def drain(self) -> int:
        """Pop 100 and ack them until nothing is deliverable; returns how many."""
        done = 0
        while batch := self.pop():
            done += self.ack([i for i, _ in batch])
        return done

    def drop(self) -> None:
        """Delete this queue's keys."""
        drop_prefix(self.r, f"{{{self.prefix}}}:")
