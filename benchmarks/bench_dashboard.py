"""Dashboard pages on a queue of a million messages against the same pages on a queue of
a thousand, in one run: every page must stay bounded (its time must not grow with the
queue).

    python -m benchmarks.bench_dashboard [--url redis://...] [--n 1000000] [--repeats 9]

Each queue (4 shards, under its own prefix, with its own dashboard) holds 70% ready, 25%
delayed, 5% in flight and 0.1% (at least 50: a full page) dead letters, each with a
failure reason and traceback, and a consumer group with two members and their
rebalances. Both dashboards run at once; each page is fetched over HTTP from the two in
turn (one warm-up, then ``repeats`` times); the table gives the median milliseconds per
page and the ratio big/small.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq._core import codec
from dynoq._core.calls import Batch
from dynoq._core.group import GroupOps
from dynoq.dashboard import DashboardConfig, Running

CHUNK = 100_000


def fill(client: dynoq.Client, n: int) -> dict[str, Any]:
    """A queue of ``n`` messages in every state; returns ids to look up."""
    q = client.queue("orders", shards=4, max_retries=3)
    ready, delayed = int(n * 0.70), int(n * 0.25)
    flying, dead = int(n * 0.05), max(int(n * 0.001), 50)  # dead: at least a full page
    body = {"order": 0, "sku": "SKU-0001-RED-XL", "qty": 2, "note": "leave at the door"}
    made = 0
    for kind, count, delay in (("r", ready + flying + dead, 0.0), ("d", delayed, 3600.0)):
        for start in range(0, count, CHUNK):
            stop = min(start + CHUNK, count)
            q.push_many(
                [
                    dynoq.Message(
                        {**body, "order": i},
                        id=f"{kind}{i}",
                        delay=delay + (i % 1000) if delay else 0.0,
                    )
                    for i in range(start, stop)
                ]
            )
            made += stop - start
    popped = []
    while len(popped) < flying + dead:
        popped += q.pop(min(1000, flying + dead - len(popped)), visibility=3600)
    try:
        raise RuntimeError("payment gateway timed out after 30s")
    except RuntimeError as exc:
        why = codec.why(exc, "bench-worker")
    doomed = popped[:dead]
    for i in range(0, dead, 1000):
        q.backend.run(
            Batch(
                [q.ops.nack_call(m, delay=0.0, mode="dead", why=why) for m in doomed[i : i + 1000]]
            )
        )
    for member, shards in (("worker-a", [0, 1]), ("worker-b", [2, 3])):
        g = GroupOps(q.ops.keys, "billing", member, ttl=3600)
        q.backend.run(g.heartbeat())
        q.backend.run(g.record(["worker-a", "worker-b"], shards))
    stats = q.stats()
    return {
        "queue": q,
        "dead_id": popped[0].id,
        "ready_id": f"r{ready // 2}",
        "stats": stats,
        "made": made,
    }


def pages(info: dict[str, Any]) -> list[tuple[str, str]]:
    st = info["stats"]
    deep = max(st.shards[0].delayed // 2, 0)
    return [
        ("overview", "/"),
        ("overview JSON (live)", "/api/overview"),
        ("queue", "/queue?q=orders"),
        ("queue JSON (live)", "/api/queue?q=orders"),
        ("in flight, all shards", "/queue/list?q=orders&kind=in_flight"),
        ("delayed, all shards", "/queue/list?q=orders&kind=delayed"),
        ("delayed, shard 0, middle", f"/queue/list?q=orders&kind=delayed&shard=0&offset={deep}"),
        ("dead letters", "/queue/dead?q=orders"),
        ("search by id", f"/queue/dead?q=orders&id={info['ready_id']}"),
        ("message", f"/queue/message?q=orders&id={info['dead_id']}"),
        ("groups", "/queue/groups?q=orders"),
    ]


def get_ms(url: str) -> float:
    """Milliseconds of one GET of ``url`` (the whole reply read)."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        r.read()
        assert r.status == 200, (url, r.status)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=1_000_000)
    p.set_defaults(repeats=9)
    args = p.parse_args()
    with server_url(args.url) as url:
        run = uuid.uuid4().hex[:8]
        prefixes = {"small": f"benchdash-s-{run}", "big": f"benchdash-b-{run}"}
        sizes = {"small": 1000, "big": args.n}
        r = redis.Redis.from_url(url)
        clients = {k: dynoq.connect(url, prefix=v) for k, v in prefixes.items()}
        try:
            infos = {}
            for k in ("small", "big"):
                start = time.perf_counter()
                infos[k] = fill(clients[k], sizes[k])
                st = infos[k]["stats"]
                print(
                    f"{k}: {infos[k]['made']:,} messages in {time.perf_counter() - start:.1f}s"
                    f" (ready {st.ready:,}, delayed {st.delayed:,}, in flight "
                    f"{st.unacked:,}, dead {st.dead:,})",
                    flush=True,
                )
            memory = r.info("memory")["used_memory_human"]
            results: dict[str, dict[str, float]] = {"small": {}, "big": {}}
            with (
                Running(clients["small"], DashboardConfig(port=0)) as small,
                Running(clients["big"], DashboardConfig(port=0)) as big,
            ):
                bases = {"small": small.url.rstrip("/"), "big": big.url.rstrip("/")}
                paths = {k: dict(pages(infos[k])) for k in bases}
                for name in paths["big"]:
                    times: dict[str, list[float]] = {"small": [], "big": []}
                    for i in range(args.repeats + 1):  # the two in turn; the first: warm-up
                        for k in ("small", "big"):
                            ms = get_ms(bases[k] + paths[k][name])
                            if i:
                                times[k].append(ms)
                    for k in times:
                        results[k][name] = median(times[k])
            rows = [
                ("page", f"{sizes['small']:,} msgs (ms)", f"{sizes['big']:,} msgs (ms)", "ratio")
            ]
            for name, _ in pages(infos["big"]):
                s, b = results["small"][name], results["big"][name]
                rows.append((name, f"{s:.1f}", f"{b:.1f}", f"{b / s:.2f}"))
            version = server_version(r)
            print(
                f"server {version}; Redis memory with both queues: {memory}; median of "
                f"{args.repeats} GETs per page over HTTP (uvicorn, one process)"
            )
            print(table(rows))
        finally:
            for c in clients.values():
                c.close()
            for prefix in prefixes.values():
                drop_prefix(r, prefix + ":")
            r.close()


if __name__ == "__main__":
    main()
