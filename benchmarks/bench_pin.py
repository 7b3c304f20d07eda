"""What lua/lib/pin.lua buys: a batch in flight in a listpack against a pinned key.

    python -m benchmarks.bench_pin [--url redis://...] [--batch 100] [--rounds 2000]
                                   [--repeats 3]

A batch in flight is what pop and ack do to a shard's in-flight keys: ZADD the batch to
the `unack` zset, ZMSCORE and ZREM it; HSET its delivery states in the `dlv` hash, HMGET
and HDEL them. Redis keeps a zset or hash of up to 128 entries of up to 64 bytes as a
listpack, searched entry by entry; one entry over 64 bytes (the pin) makes it a skiplist /
hashtable for good. Each case runs ``--rounds`` batches inside one script (no round trips,
no client: only the server's work) on a key left as Redis makes it ("listpack") and on a
pinned one, side by side in the same run; medians of ``--repeats``.
"""

from __future__ import annotations

import time

import redis

from benchmarks.common import median, parser, server_url, server_version, table

ROUNDS = """
local n, rounds, pinned = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] == '1'
local ids, members, fields = {}, {}, {}
for i = 1, n do
  ids[i] = string.format('msg%013d', i)  -- 16 characters, as dynoq's made ids
  members[#members + 1] = 1763900000000 + 30000
  members[#members + 1] = ids[i]
  fields[#fields + 1] = ids[i]
  fields[#fields + 1] = '1|70368744177665|abcd1234.1'
end
if pinned then
  redis.call('ZADD', KEYS[1], '+inf', string.rep('.', 513))
  redis.call('HSET', KEYS[2], string.rep('.', 513), '')
end
local enc
for _ = 1, rounds do
  if ARGV[4] == 'zset' then
    redis.call('ZADD', KEYS[1], unpack(members))
    enc = enc or redis.call('OBJECT', 'ENCODING', KEYS[1])
    redis.call('ZMSCORE', KEYS[1], unpack(ids))
    redis.call('ZREM', KEYS[1], unpack(ids))
  else
    redis.call('HSET', KEYS[2], unpack(fields))
    enc = enc or redis.call('OBJECT', 'ENCODING', KEYS[2])
    redis.call('HMGET', KEYS[2], unpack(ids))
    redis.call('HDEL', KEYS[2], unpack(ids))
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
return enc
"""


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2000)
    args = p.parse_args()
    cases = [("unack: ZADD + ZMSCORE + ZREM", "zset"), ("dlv: HSET + HMGET + HDEL", "hash")]
    us: dict[tuple[str, str], list[float]] = {}
    encodings: dict[tuple[str, str], str] = {}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        script = r.register_script(ROUNDS)
        keys = ["benchpin:{x}:unack", "benchpin:{x}:dlv"]
        for _ in range(args.repeats):
            for name, kind in cases:
                for how in ("listpack", "pinned"):
                    t = time.perf_counter()
                    enc = script(
                        keys=keys, args=[args.batch, args.rounds, int(how == "pinned"), kind]
                    )
                    took = time.perf_counter() - t
                    us.setdefault((name, how), []).append(took / (args.rounds * args.batch) * 1e6)
                    encodings[(name, how)] = enc.decode()
        version = server_version(r)
        r.close()
    rows = [
        (
            "in-flight key",
            "as Redis keeps it",
            "us per message",
            "pinned",
            "us per message",
            "pinned / listpack",
        )
    ]
    for name, _ in cases:
        loose, pinned = median(us[(name, "listpack")]), median(us[(name, "pinned")])
        rows.append(
            (
                name,
                encodings[(name, "listpack")],
                f"{loose:.2f}",
                encodings[(name, "pinned")],
                f"{pinned:.2f}",
                f"{pinned / loose:.2f}x",
            )
        )
    print(
        f"server {version}; batches of {args.batch}, {args.rounds} a run; medians of {args.repeats}"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
