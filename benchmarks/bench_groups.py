"""Message groups (ordered="key", DESIGN §3.5) against an unordered queue, in one run.

    python -m benchmarks.bench_groups [--url redis://...] [--keys 10000] [--per-key 10]
                                      [--stuck 30] [--workers 4] [--hot 5000]
                                      [--memory 100000] [--repeats 3] [--batch auto]
                                      [--cases throughput,stuck,hot,memory,weights]
    python -m benchmarks.bench_groups --scale 1000000   # pop at 10 keys vs that many

  throughput   --keys x --per-key messages waiting, a default no-op-handler consumer (4
               shards; concurrency 4, batch_size "auto"; --batch to set one): msgs/s from
               the first handler call to the last, keyed against unordered (goal >= 0.8x)
  stuck key    a steady stream (200 keys, 500 msgs/s for 10 s) while one key's first
               handler call sleeps --stuck seconds: the other keys' p99 lateness from push
               to handler call, against the same run without the stuck key (goal <= 1.5x);
               a consumer of --workers threads, batch_size "auto" (or --batch)
  hot key      --hot messages of one key alone, one consumer (concurrency 1, batch 1):
               msgs/s handled in order (goal >= 2,000); beside it, the same consumer
               draining --hot messages of an unordered queue (the machine's pace)
  weights      throughput as above, keyed alone: no key weighted against one key in 100 of
               weight 3 (q.set_weight: the deficit round-robin's reads and writes on the
               pops and acks; goal within 5%)
  memory       --memory messages waiting (100 keys, a 100-byte payload, the same ids and
               keys in both), used_memory delta per message, keyed against unordered
               (goal <= 1.2x)
  --scale N    server time of a pop (count 10) and its ack in one shard holding 10 keys,
               then N keys (one message each, written straight into the keys' layout by a
               script: N pushes would take minutes), from INFO commandstats: it must not
               grow with the number of keys; beside it an unordered shard of that many
               messages (a shard's size costs every command some cache misses). Each
               measurement runs on a fresh private server (with --url: once the server
               has freed the previous one's keys), the big shards last
Every figure is the median of --repeats runs; the ratio is of the medians.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

import dynoq
from benchmarks.bench_memory import used
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

SHARDS = 4


def fresh(url: str) -> dynoq.Client:
    return dynoq.connect(url, prefix=f"bg-{uuid.uuid4().hex[:8]}")


def cleanup(client: dynoq.Client) -> None:
    drop_prefix(client.redis, client.prefix + ":")
    client.close()


def _queue(client: dynoq.Client, keyed: bool, **options: Any) -> dynoq.Queue:
    return client.queue("g", shards=SHARDS, ordered="key" if keyed else False, **options)


def fill(q: dynoq.Queue, keys: int, per_key: int) -> None:
    for i in range(per_key):
        batch = [dynoq.Message({"i": i}, key=f"key-{k}") for k in range(keys)]
        for j in range(0, len(batch), 5000):
            q.push_many(batch[j : j + 5000])


def throughput(
    url: str, keyed: bool, keys: int, per_key: int, batch: int | str, weighted: int = 0
) -> float:
    """msgs/s of a default consumer; ``weighted``: every that-many-th key of a keyed
    queue has a weight of 3."""
    client = fresh(url)
    calls: list[float] = []
    try:
        q = _queue(client, keyed)
        fill(q, keys, per_key)
        for k in range(0, keys, weighted) if weighted else ():
            q.set_weight(f"key-{k}", 3)
        n = keys * per_key
        c = client.consumer(
            q, lambda m: calls.append(time.perf_counter()), concurrency=4, batch_size=batch
        )
        c.start()
        while c.stats().handled < n:
            time.sleep(0.005)
        c.stop()
        return (n - 1) / (max(calls) - min(calls))
    finally:
        cleanup(client)


def stuck(
    url: str,
    keyed: bool,
    stuck_for: float,
    seconds: float = 10.0,
    rate: float = 500.0,
    keys: int = 200,
    workers: int = 4,
    batch: int | str = "auto",
) -> float:
    """p99 ms from push to handler call of every key but the stuck one."""
    client = fresh(url)
    late: list[float] = []
    try:
        q = _queue(client, keyed)

        def handler(m: dynoq.Message) -> None:
            if m.key == "stuck" and stuck_for:
                time.sleep(stuck_for)
                return
            late.append(time.time() - m.payload["t"])

        c = client.consumer(q, handler, concurrency=workers, batch_size=batch, idle_wait=0.5)
        c.start()
        q.push({"t": time.time()}, key="stuck")
        n = int(seconds * rate)
        t0 = time.perf_counter()
        for i in range(n):
            while time.perf_counter() < t0 + i / rate:
                time.sleep(0.0005)
            q.push({"t": time.time()}, key=f"key-{i % keys}")
        while len(late) < n:
            time.sleep(0.01)
        c.stop(timeout=stuck_for + 5)
        late.sort()
        return late[int(0.99 * (len(late) - 1))] * 1000
    finally:
        cleanup(client)


def hot(url: str, n: int, keyed: bool = True) -> float:
    client = fresh(url)
    calls: list[float] = []
    last: list[int] = [-1]
    try:
        q = _queue(client, keyed)
        for j in range(0, n, 5000):
            q.push_many([dynoq.Message(i, key="hot") for i in range(j, min(j + 5000, n))])

        def handler(m: dynoq.Message) -> None:
            if keyed:
                assert m.payload == last[0] + 1, "out of order"
                last[0] = m.payload
            calls.append(time.perf_counter())

        c = client.consumer(q, handler, concurrency=1, batch_size=1)
        c.start()
        while c.stats().handled < n:
            time.sleep(0.005)
        c.stop()
        return (n - 1) / (max(calls) - min(calls))
    finally:
        cleanup(client)


def memory(url: str, keyed: bool, n: int, keys: int = 100) -> float:
    client = fresh(url)
    r = redis.Redis.from_url(url)
    try:
        q = _queue(client, keyed)
        payload = "x" * 100
        before = used(r)
        for j in range(0, n, 5000):
            q.push_many(
                [
                    dynoq.Message(payload, id=f"m{i:09d}", key=f"key-{i % keys}")
                    for i in range(j, min(j + 5000, n))
                ]
            )
        return (used(r) - before) / n
    finally:
        r.close()
        cleanup(client)


FILL = """
local n, from, per = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local links, states, turns, recs = {}, {}, {}, {}
for i = from, from + n - 1 do
  local key = 'key-' .. i
  local p = #key .. ':' .. key
  local function id(j) return j >= 1 and j <= per and 'id-' .. i .. '-' .. j or '' end
  for j = 1, per do
    local seq = string.format('%d', i * per + j)
    seq = string.char(96 + #seq) .. seq  -- as lib/keyed.lua's kseq (digits sort the same)
    links[#links + 1] = id(j)
    links[#links + 1] = #id(j - 1) .. '|' .. id(j - 1) .. id(j + 1)  -- "<#prev>|<prev><next>"
    recs[#recs + 1] = id(j)
    recs[#recs + 1] = 'lfls9x9c,0,0,K' .. p .. seq .. '\\145\\001'  -- msgpack [1]
  end
  states[#states + 1] = key  -- "<in flight>|<waiting>|<#last>|<#head>|<last><head><tail>"
  states[#states + 1] = '0|' .. per .. '|0|' .. #id(1) .. '|' .. id(1) .. id(per)
  turns[#turns + 1] = i
  turns[#turns + 1] = key
end
redis.call('HSET', KEYS[1], unpack(links))
redis.call('HSET', KEYS[2], unpack(states))
redis.call('ZADD', KEYS[3], unpack(turns))
redis.call('HSET', KEYS[4], unpack(recs))
return n
"""
FILL_PLAIN = """
local n, from = tonumber(ARGV[1]), tonumber(ARGV[2])
local ready, recs = {}, {}
for i = from, from + n - 1 do
  local id = 'id-' .. i
  ready[#ready + 1] = i
  ready[#ready + 1] = id
  recs[#recs + 1] = id
  recs[#recs + 1] = 'lfls9x9c,0,0,\\145\\001'
end
redis.call('ZADD', KEYS[1], unpack(ready))
redis.call('HSET', KEYS[2], unpack(recs))
return n
"""
ROUNDS = 200


def scale(url: str, keys: int, keyed: bool = True, clean: bool = True) -> float:
    """Server microseconds of one pop of 10 and its ack, in a shard of ``keys`` keys
    (holding 2,500 messages or more in all, so that every round finds 10); unordered:
    a shard of that many messages (at least 2,500)."""
    client = fresh(url)
    r = redis.Redis.from_url(url)
    try:
        q = client.queue("g", shards=1, ordered="key" if keyed else False)
        k = q.ops.shard_keys[0]
        per = max(1, -(-(ROUNDS + 20) * 10 // keys))
        step = max(1, 2000 // per)
        if not keyed:
            plain = r.register_script(FILL_PLAIN)
            total = keys * per
            for start in range(0, total, 2000):
                plain(keys=[k.ready, k.msgs], args=[min(2000, total - start), start])
            r.set(k.seq, total + 1)
        fill = r.register_script(FILL)
        for start in range(0, keys if keyed else 0, step):
            fill(
                keys=[k.kwait, k.kstate, k.kturn, k.msgs],
                args=[min(step, keys - start), start, per],
            )
        r.set(k.seq, keys * per + keys + 1)
        for _ in range(20):  # warm up
            q.ack_many(q.pop(count=10))
        r.config_resetstat()
        for _ in range(ROUNDS):
            got = q.pop(count=10)
            assert len(got) == 10 and (not keyed or len({m.key for m in got}) == min(10, keys))
            q.ack_many(got)
        stats = r.info("commandstats")["cmdstat_evalsha"]
        return float(stats["usec"]) / ROUNDS
    finally:
        if clean:  # a private server is stopped instead
            cleanup(client)
            settle(r)
        else:
            client.close()
        r.close()


def settle(r: redis.Redis, timeout: float = 600.0) -> None:
    """Wait until the server has freed what a cleanup deleted (it frees large keys in the
    background, and a measurement taken meanwhile pays for it)."""
    end = time.monotonic() + timeout
    while int(r.info("memory").get("lazyfree_pending_objects", 0)) and time.monotonic() < end:
        time.sleep(0.1)
    time.sleep(0.5)


def scale_case(url: str | None, keys: int, keyed: bool) -> float:
    """One :func:`scale` measurement: on a fresh private server unless --url is given."""
    if url:
        return scale(url, keys, keyed)
    with server_url(None) as fresh_url:
        return scale(fresh_url, keys, keyed, clean=False)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--per-key", type=int, default=10)
    p.add_argument("--stuck", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--hot", type=int, default=5000)
    p.add_argument("--memory", type=int, default=100_000)
    p.add_argument("--scale", type=int, default=0)
    p.add_argument(
        "--cases",
        default="throughput,stuck,hot,memory",
        help="which of the measures to run, comma-separated",
    )
    p.add_argument(
        "--batch", type=lambda v: v if v == "auto" else int(v), default="auto", help="batch_size"
    )
    args = p.parse_args()
    if args.scale:
        # The small shards first, the big ones last; each on a fresh server (or, with
        # --url, once the previous one's cleanup is freed): no case pays for another.
        got = {
            (keyed, n): median([scale_case(args.url, n, keyed) for _ in range(args.repeats)])
            for keyed, n in ((True, 10), (False, 10), (False, args.scale), (True, args.scale))
        }
        print(
            table(
                [
                    ("server us per pop(10) + ack", "10", f"{args.scale:,}", "ratio"),
                    *(
                        (
                            f"{name}: keys (messages)",
                            f"{got[(keyed, 10)]:.0f}",
                            f"{got[(keyed, args.scale)]:.0f}",
                            f"{got[(keyed, args.scale)] / got[(keyed, 10)]:.2f}x",
                        )
                        for name, keyed in (("keyed", True), ("unordered", False))
                    ),
                ]
            )
        )
        return
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        version = server_version(r)
        r.close()
        rows: list[tuple[str, ...]] = [("measure", "unordered", "keyed", "ratio", "goal")]

        def pair(name: str, fn: Any, goal: str, unit: str) -> None:
            a = median([fn(False) for _ in range(args.repeats)])
            b = median([fn(True) for _ in range(args.repeats)])
            rows.append((name, f"{a:,.1f} {unit}", f"{b:,.1f} {unit}", f"{b / a:.2f}x", goal))
            print(rows[-1], flush=True)

        cases = set(args.cases.split(","))
        if "throughput" in cases:
            pair(
                f"throughput, {args.keys:,} keys x {args.per_key}, batch_size {args.batch}",
                lambda k: throughput(url, k, args.keys, args.per_key, args.batch),
                ">= 0.8x",
                "msg/s",
            )
        if "weights" in cases:
            runs: dict[int, list[float]] = {0: [], 100: []}
            for r in range(args.repeats):  # alternated: both see the same machine
                for w in (0, 100) if r % 2 == 0 else (100, 0):
                    runs[w].append(throughput(url, True, args.keys, args.per_key, args.batch, w))
            plain, weighted = median(runs[0]), median(runs[100])
            rows.append(
                (
                    "keyed throughput, 1 key in 100 of weight 3",
                    f"{plain:,.1f} msg/s (none weighted)",
                    f"{weighted:,.1f} msg/s",
                    f"{weighted / plain:.2f}x",
                    ">= 0.95x",
                )
            )
            print(rows[-1], flush=True)
        if "stuck" in cases:
            lateness = {
                stuck_for: median(
                    [
                        stuck(url, True, stuck_for, workers=args.workers, batch=args.batch)
                        for _ in range(args.repeats)
                    ]
                )
                for stuck_for in (0.0, args.stuck)
            }
            free, held = lateness[0.0], lateness[args.stuck]
            rows.append(
                (
                    f"p99 lateness, one key stuck {args.stuck:g} s, {args.workers} workers",
                    f"{free:,.1f} ms (none stuck)",
                    f"{held:,.1f} ms",
                    f"{held / free:.2f}x",
                    "<= 1.5x",
                )
            )
            print(rows[-1], flush=True)
        if "hot" in cases:
            pair(
                "one hot key alone, in order (1 worker, batch 1)",
                lambda k: hot(url, args.hot, k),
                ">= 2,000 msg/s",
                "msg/s",
            )
        if "memory" in cases:
            pair(
                f"memory per waiting message ({args.memory:,})",
                lambda k: memory(url, k, args.memory),
                "<= 1.2x",
                "B",
            )
    print(f"\nserver: {version}; medians of {args.repeats}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
