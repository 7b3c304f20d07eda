"""Consumer throughput with 1, 2 and 4 consumer processes, steady state only.

    python -m benchmarks.bench_scale [--url redis://...] [--repeats 3] [--procs 1,2,4]
                                     [--window 4] [--shards 16] [--backlog 400000]

One queue per kind (concurrent; ordered with 1,024 keys so every shard has work), 16
shards, a large backlog pushed before each run. Each consumer process is its own
interpreter (``--child``) running a dynoq consumer with a no-op handler, batch 100 (the
other options at their defaults: concurrency 4). The parent only coordinates over the
children's stdin/stdout:

  1. every child imports, connects and builds its consumer, then says "ready";
  2. the parent starts them all together and polls their assignments until the shards
     are split evenly (16 / N each, disjoint, all covered) and stay so for a moment;
  3. t0: each child reports (monotonic time, handled, process CPU time); the server's
     INFO cpu and the machine's /proc/stat are read; the window runs (--window s);
  4. t1: the same again. Start-up, connecting, joining and the first rebalance are all
     before t0. The run is void if the backlog ran out before t1.

msgs/s is the sum over children of handled delta / their own time delta. CPU per message:
client = children's process_time delta / handled; server = INFO cpu (used_cpu_user +
used_cpu_sys) delta / handled. The bound two cores allow is 2 / (client + server CPU per
message); the server, one thread, also caps at 1 / server CPU per message. The machine is
shared: "others" is the CPU other programs took during the window (/proc/stat busy minus
ours), and "bound on cores left" = min((cores - others) / CPU per message, server bound).
Every figure is the median of --repeats runs (repetition-major: 1, 2, 4 processes, then
again).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

KEYS = 1024  # ordered queue: routing keys (spread over every shard)
BODY = "x" * 100
FILL_CHUNK = 5000
SETTLE_TIMEOUT = 30.0


# -- the child: one consumer process ------------------------------------------------------


def child(url: str, prefix: str, queue: str, group: str, batch: int, concurrency: int) -> None:
    client = dynoq.connect(url, prefix=prefix)
    c = client.consumer(
        client.queue(queue),
        lambda m: None,
        group=group,
        batch_size=batch,
        concurrency=concurrency,
        lease_ttl=6.0,
    )
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "start":
            c.start()
            out.write("started\n")
        elif cmd == "snap":
            # one line: monotonic, handled, process CPU (all threads), assignment
            st = c.stats()
            shards = ",".join(str(s) for s in sorted(c.assignment))
            out.write(
                f"{time.monotonic():.6f} {st.handled} {time.process_time():.6f} "
                f"{st.rebalances} {shards}\n"
            )
        elif cmd == "stop":
            clean = c.stop(10.0)
            out.write(f"stopped {clean}\n")
            out.flush()
            break
        out.flush()
    client.close()


# -- the parent ---------------------------------------------------------------------------


@dataclass
class Snap:
    t: float
    handled: int
    cpu: float
    rebalances: int
    shards: frozenset[int]


class Child:
    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.bench_scale", "--child", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        )

    def send(self, cmd: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"child {self.proc.pid} said nothing (exit {self.proc.poll()})")
        return line.strip()

    def expect(self, word: str) -> None:
        line = self.read()
        if not line.startswith(word):
            raise RuntimeError(f"child {self.proc.pid}: expected {word!r}, got {line!r}")

    def snap(self) -> Snap:
        self.send("snap")
        t, handled, cpu, rebalances, *rest = self.read().split(" ")
        shards = frozenset(int(s) for s in rest[0].split(",")) if rest and rest[0] else frozenset()
        return Snap(float(t), int(handled), float(cpu), int(rebalances), shards)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("stop")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


def server_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def fill(q: dynoq.Queue, want: int, ordered: bool) -> None:
    """Top the queue's ready messages up to ``want``."""
    have = q.stats().ready
    n, start = max(want - have, 0), have
    for i in range(0, n, FILL_CHUNK):
        count = min(FILL_CHUNK, n - i)
        if ordered:
            q.push_many(
                [dynoq.Message(BODY, key=f"k{(start + i + j) % KEYS}") for j in range(count)]
            )
        else:
            q.push_many([BODY] * count)


@dataclass
class Result:
    rate: float
    client_cpu: float  # seconds per message
    server_cpu: float  # seconds per message
    client_cores: float  # children's CPU / window
    server_cores: float
    machine_cores: float  # busy cores of the whole machine over the window
    rebalances: int  # during the window (0 = steady state)


def settled(snaps: list[Snap], shards: int) -> bool:
    n = len(snaps)
    sets = [s.shards for s in snaps]
    union = frozenset().union(*sets)
    return (
        len(union) == shards
        and sum(len(s) for s in sets) == shards
        and max(len(s) for s in sets) - min(len(s) for s in sets) <= (shards % n > 0)
    )


def run(
    url: str,
    prefix: str,
    r: redis.Redis,
    q: dynoq.Queue,
    *,
    procs: int,
    window: float,
    batch: int,
    concurrency: int,
) -> Result:
    group = f"g{uuid.uuid4().hex[:6]}"
    args = [url, prefix, q.name, group, str(batch), str(concurrency)]
    children: list[Child] = []
    try:
        children = [Child(args) for _ in range(procs)]
        for c in children:
            c.expect("ready")
        for c in children:
            c.send("start")
        for c in children:
            c.expect("started")
        deadline = time.monotonic() + SETTLE_TIMEOUT
        stable = 0
        while stable < 3:  # the same even split three polls in a row, 0.1 s apart
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"assignments did not settle: {[sorted(c.snap().shards) for c in children]}"
                )
            snaps = [c.snap() for c in children]
            stable = stable + 1 if settled(snaps, q.ops.settings.shards) else 0
            time.sleep(0.1)
        cpu0, mach0 = server_cpu(r), machine_cpu()
        first = [c.snap() for c in children]
        time.sleep(window)
        last = [c.snap() for c in children]
        cpu1, mach1 = server_cpu(r), machine_cpu()
        left = q.stats().ready
        if left == 0:
            raise RuntimeError("the backlog ran out inside the window: raise --backlog")
    finally:
        for c in children:
            c.close()
    handled = sum(b.handled - a.handled for a, b in zip(first, last, strict=True))
    rate = sum((b.handled - a.handled) / (b.t - a.t) for a, b in zip(first, last, strict=True))
    elapsed = median([b.t - a.t for a, b in zip(first, last, strict=True)])
    client = sum(b.cpu - a.cpu for a, b in zip(first, last, strict=True))
    server = cpu1 - cpu0
    busy, total = mach1[0] - mach0[0], mach1[1] - mach0[1]
    ncpu = os.cpu_count() or 1
    return Result(
        rate,
        client / handled,
        server / handled,
        client / elapsed,
        server / elapsed,
        ncpu * busy / total if total else 0.0,
        sum(b.rebalances - a.rebalances for a, b in zip(first, last, strict=True)),
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        a = sys.argv[2:]
        child(a[0], a[1], a[2], a[3], int(a[4]), int(a[5]))
        return
    p = parser(__doc__ or "")
    p.add_argument("--procs", default="1,2,4")
    p.add_argument("--kinds", default="concurrent,ordered")
    p.add_argument("--window", type=float, default=4.0, help="timed seconds per run")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument(
        "--backlog",
        type=int,
        default=400_000,
        help="ready messages pushed before each run (topped up)",
    )
    args = p.parse_args()
    procs = [int(x) for x in args.procs.split(",")]
    kinds = args.kinds.split(",")
    prefix = f"bs-{uuid.uuid4().hex[:8]}"
    results: dict[tuple[str, int], list[Result]] = {}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix=prefix)
        version = server_version(r)
        try:
            queues = {k: client.queue(k, shards=args.shards, ordered=k == "ordered") for k in kinds}
            for rep in range(args.repeats):
                for kind in kinds:
                    for n in procs:
                        fill(queues[kind], args.backlog, kind == "ordered")
                        res = run(
                            url,
                            prefix,
                            r,
                            queues[kind],
                            procs=n,
                            window=args.window,
                            batch=args.batch,
                            concurrency=args.concurrency,
                        )
                        results.setdefault((kind, n), []).append(res)
                        print(
                            f"round {rep + 1}: {kind:<10} {n} proc  {res.rate:>9,.0f} "
                            f"msgs/s  client {res.client_cpu * 1e6:5.1f} us/msg  server "
                            f"{res.server_cpu * 1e6:5.1f} us/msg  cores: client "
                            f"{res.client_cores:.2f} server {res.server_cores:.2f} "
                            f"machine {res.machine_cores:.2f}  rebalances "
                            f"{res.rebalances}",
                            flush=True,
                        )
        finally:
            drop_prefix(r, f"{prefix}:")
            client.close()
            r.close()
    print(
        f"\nserver {version}; {args.shards} shards; batch {args.batch}, concurrency "
        f"{args.concurrency}, no-op handler; window {args.window:g} s; "
        f"{os.cpu_count()} cores; medians of {args.repeats}"
    )
    rows = [
        (
            "queue",
            "procs",
            "msgs/s",
            "vs 1 proc",
            "client us/msg",
            "server us/msg",
            "bound 2 cores",
            "server bound",
            "measured/bound",
            "cores: client+server/machine",
            "others",
            "bound on cores left",
            "measured/that",
        )
    ]
    notes = []
    ncpu = os.cpu_count() or 1
    for kind in kinds:
        base = median([x.rate for x in results[(kind, procs[0])]])
        for n in procs:
            rs = results[(kind, n)]
            rate = median([x.rate for x in rs])
            c, s = median([x.client_cpu for x in rs]), median([x.server_cpu for x in rs])
            bound, sbound = 2 / (c + s), 1 / s
            cc, sc = median([x.client_cores for x in rs]), median([x.server_cores for x in rs])
            mc = median([x.machine_cores for x in rs])
            others = max(
                median([x.machine_cores - x.client_cores - x.server_cores for x in rs]), 0.0
            )
            left = min((ncpu - others) / (c + s), sbound)
            rows.append(
                (
                    kind,
                    str(n),
                    f"{rate:,.0f}",
                    f"{rate / base:.2f}x",
                    f"{c * 1e6:.1f}",
                    f"{s * 1e6:.1f}",
                    f"{bound:,.0f}",
                    f"{sbound:,.0f}",
                    f"{rate / bound:.2f}",
                    f"{cc:.2f}+{sc:.2f}/{mc:.2f}",
                    f"{others:.2f}",
                    f"{left:,.0f}",
                    f"{rate / left:.2f}",
                )
            )
            notes.append(verdict(kind, n, rate, bound, sbound, cc, sc, mc))
            if n == 2 and procs[0] == 1:
                notes.append(
                    f"{kind}: 2 procs / 1 proc = {rate / base:.2f}x (goal >= 1.3x: "
                    f"{'met' if rate / base >= 1.3 else 'not met'})"
                )
    print(table(rows))
    print()
    for line in notes:
        print(line)


def verdict(
    kind: str,
    n: int,
    rate: float,
    bound: float,
    sbound: float,
    client: float,
    server: float,
    machine: float,
) -> str:
    """One line on what limits this row."""
    why = []
    if machine >= 1.8:
        why.append(
            f"the machine's 2 cores are saturated ({machine:.2f} busy, "
            f"{client + server:.2f} of it ours)"
        )
    if server >= 0.85:
        why.append(f"the server thread is near one full core ({server:.2f})")
    if rate >= 0.85 * sbound:
        why.append(f"at the server's one-thread bound ({sbound:,.0f} msgs/s)")
    if rate >= 0.85 * bound:
        why.append("at the 2-core bound")
    elif not why:
        why.append(
            f"below the bound with idle CPU (client {client:.2f} + server "
            f"{server:.2f} cores): waiting on round trips / locks"
        )
    return f"{kind}, {n} proc: {rate / bound:.0%} of the 2-core bound, " + "; ".join(why)


if __name__ == "__main__":
    main()
