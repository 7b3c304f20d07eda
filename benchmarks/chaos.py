"""A chaos soak: producers, consumers (threads, and by default one on dynoq.asyncio) and
sweepers in their own processes, SIGKILLed and restarted at random, connections killed,
the server restarted (or a cluster master failed over); then a drain and a verdict on
every message.

    python -m benchmarks.chaos --minutes 3              # a private Valkey with AOF
    python -m benchmarks.chaos --cluster --minutes 2    # a local 3+3 Valkey Cluster
    python -m benchmarks.chaos --url redis://host:6379/0 --minutes 1
    python -m benchmarks.chaos --plant unordered --minutes 0.2   # the checker must object

Three queues: ``jobs`` (concurrent; delays and priorities), ``ordered`` (keyed
messages, each with its per-key sequence number) and ``groups`` (the same stream on a
queue with ordered="key": message groups, whose keys may also not be handled twice at
once; ``--plant overlap`` opens it with key_concurrency=3, which the checker must catch).
Every handler call is recorded in Redis under the soak's prefix
(benchmarks/chaos_roles.py); :func:`benchmarks.chaos_check.check` judges the records.
Exit status 1 when a figure that must be 0 is not.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import dynoq

from . import chaos_check as cc
from .chaos_procs import Proc, crew
from .chaos_roles import GROUPS, JOBS, ORDERED, ended_key, pushed_key, record_key
from .chaos_servers import Cluster, Embedded, Given, Server
from .common import table


@dataclass
class Config:
    seconds: float = 180.0  # of chaos; then the drain
    url: str | None = None  # None: a private embedded Valkey with AOF
    cluster: bool = False  # a local 3-master cluster with replicas instead
    plant: str | None = None  # "unordered": the ordered stream on a plain queue;
    # "overlap": the message groups' queue with key_concurrency=3
    chaos: bool = True  # kill and restart things (off: a plain run, e.g. for --plant)
    producers: int = 2
    consumers: int = 3
    async_consumers: int = 1  # of those, on dynoq.asyncio (the others: threads)
    sweepers: int = 2
    rate: float = 20.0  # producer steps per second (a step pushes to both queues)
    shards: int = 4
    keys: int = 8  # ordering keys per producer
    restarts: int = 1  # server restarts (or failovers), spread over the run
    every: float = 1.5  # mean seconds between chaos actions
    backlog: float = 2.0  # seconds the producers run before the consumers start
    backlog_min: int = 0  # ... and at least this many ordered messages waiting (a loaded
    # machine can take seconds to start a producer process; a planted fault needs a backlog)
    visibility: float = 3.0  # the queues' unack timeout
    lease_ttl: float = 3.0
    drain_timeout: float = 90.0
    seed: int | None = None
    log_dir: str | None = None  # kept; default a temporary one, removed when all is well
    out: Callable[[str], None] = print


class Soak:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.prefix = f"chaos-{uuid.uuid4().hex[:8]}"
        self.events: list[cc.Event] = []
        self.offset = 0.0  # server clock - local clock, seconds
        self.notes: list[str] = []

    # -- setting up --------------------------------------------------------------------

    def server(self) -> Server:
        if self.cfg.cluster:
            return Cluster(self.prefix)
        if self.cfg.url:
            return Given(self.prefix, self.cfg.url)
        return Embedded(self.prefix)

    def procs(self, server: Server, logs: Path) -> dict[str, list[Proc]]:
        cfg = self.cfg
        common = ["--replicas", str(server.replicas), "--visibility", str(cfg.visibility)]
        return crew(
            server.url,
            self.prefix,
            logs,
            producers=cfg.producers,
            consumers=cfg.consumers,
            sweepers=cfg.sweepers,
            async_consumers=cfg.async_consumers,
            producer_args=[*common, "--rate", str(cfg.rate), "--keys", str(cfg.keys)],
            consumer_args=[*common, "--lease-ttl", str(cfg.lease_ttl)],
        )

    def now_us(self) -> int:
        return int((time.time() + self.offset) * 1_000_000)

    def event(self, kind: str, target: str = "") -> None:
        self.events.append(cc.Event(self.now_us(), kind, target))

    # -- the run -----------------------------------------------------------------------

    def run(self) -> cc.Report:
        cfg = self.cfg
        logs = Path(cfg.log_dir or tempfile.mkdtemp(prefix="dynoq-chaos-logs-"))
        logs.mkdir(parents=True, exist_ok=True)
        server = self.server()
        client = None
        procs: dict[str, list[Proc]] = {}
        try:
            client = dynoq.connect(server.url, prefix=self.prefix, client_name=server.me)
            self.offset = client.server_time() - time.time()
            queues = self.queues(client, server)
            procs = self.procs(server, logs)
            for p in procs["producer"] + procs["sweeper"]:
                p.start()
            time.sleep(cfg.backlog)  # so that consumers start on a backlog of every key
            self.await_backlog(queues)
            for p in procs["consumer"]:
                p.start()
            self.out(
                f"soak {self.prefix} on {client.backend.display_url}: "
                f"{cfg.seconds:g}s of {'chaos' if cfg.chaos else 'calm'}, logs in {logs}"
            )
            self.chaos(server, procs)
            self.drain(queues, procs)
            report = self.verdict(client, queues, logs)
        finally:
            for p in (p for group in procs.values() for p in group):
                p.kill()
            if client is not None:
                with contextlib.suppress(dynoq.DynoqError):
                    if isinstance(server, Given):
                        self.delete_keys(client)
                client.close()
            server.close()
        if report.failures():
            self.out(f"process logs kept in {logs}")
        elif cfg.log_dir is None:
            shutil.rmtree(logs, ignore_errors=True)
        return report

    def out(self, line: str) -> None:
        self.cfg.out(line)

    def await_backlog(self, queues: list[dynoq.Queue], timeout: float = 120.0) -> None:
        ordered = next(q for q in queues if q.name == ORDERED)
        deadline = time.monotonic() + timeout
        while ordered.size() < self.cfg.backlog_min:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the producers pushed fewer than {self.cfg.backlog_min} "
                    f"ordered messages in {timeout:g}s"
                )
            time.sleep(0.1)

    def queues(self, client: dynoq.Client, server: Server) -> list[dynoq.Queue]:
        cfg = self.cfg
        # The dedupe window makes a producer's resent ensure a no-op for the whole soak.
        return [
            client.queue(
                name,
                ordered=ordered,
                shards=cfg.shards,
                unack_timeout=cfg.visibility,
                dedupe_window=3600.0,
                min_replicas=server.replicas or None,
                key_concurrency=(3 if cfg.plant == "overlap" else 1) if ordered == "key" else None,
            )
            for name, ordered in (
                (JOBS, False),
                (ORDERED, cfg.plant != "unordered"),
                (GROUPS, "key"),
            )
        ]

    def chaos(self, server: Server, procs: dict[str, list[Proc]]) -> None:
        cfg, rng = self.cfg, self.rng
        start = time.monotonic()
        end = start + cfg.seconds
        restarts = (
            [start + cfg.seconds * (k + 1) / (cfg.restarts + 1) for k in range(cfg.restarts)]
            if cfg.chaos and server.restart_kind
            else []
        )
        next_action = start + rng.expovariate(1 / cfg.every)
        kinds = {
            "consumer": cc.KILL_CONSUMER,
            "producer": cc.KILL_PRODUCER,
            "sweeper": cc.KILL_SWEEPER,
        }
        while time.monotonic() < end:
            now = time.monotonic()
            for p in (p for group in procs.values() for p in group):
                if p.restart_at is not None and now >= p.restart_at:
                    p.start()
            if restarts and now >= restarts[0]:
                restarts.pop(0)
                at = self.now_us()  # the event covers the whole outage
                target = server.restart(rng)
                self.events.append(cc.Event(at, server.restart_kind, target, self.now_us()))
                self.out(f"  {server.restart_kind}: {target}")
            elif cfg.chaos and now >= next_action:
                next_action = now + rng.expovariate(1 / cfg.every)
                what = rng.choices(
                    ["consumer", "producer", "sweeper", "connections"], weights=[3, 2, 1, 3]
                )[0]
                if what == "connections":
                    for _ in range(server.kill_connections(rng, rng.randint(1, 3))):
                        self.event(cc.KILL_CONNECTION)
                    continue
                live = [p for p in procs[what] if p.alive]
                if live:
                    victim = rng.choice(live)
                    victim.kill()
                    self.event(kinds[what], victim.incarnation)
                    victim.restart_at = time.monotonic() + rng.uniform(0.2, 2.0)
            time.sleep(0.05)
        for p in (p for group in procs.values() for p in group):
            if not p.alive:
                p.start()

    def drain(self, queues: list[dynoq.Queue], procs: dict[str, list[Proc]]) -> None:
        """Stop the producers (each finishes its step), then wait until both queues are
        empty (nothing waiting or in flight) twice in a row; then stop the consumers."""
        for p in procs["producer"]:
            if not p.stop(60):
                self.notes.append(f"producer {p.incarnation} had to be killed at the end")
        deadline = time.monotonic() + self.cfg.drain_timeout
        empty = 0
        while time.monotonic() < deadline and empty < 2:
            time.sleep(0.5)
            try:
                stats = [q.stats() for q in queues]
            except dynoq.DynoqError:
                continue
            empty = empty + 1 if sum(s.size + s.unacked for s in stats) == 0 else 0
        if empty < 2:
            self.notes.append(
                f"the queues were not empty {self.cfg.drain_timeout:g}s after the producers stopped"
            )
        for p in procs["consumer"] + procs["sweeper"]:
            if not p.stop(20):
                self.notes.append(f"{p.incarnation} did not stop on SIGTERM")

    def verdict(self, client: dynoq.Client, queues: list[dynoq.Queue], logs: Path) -> cc.Report:
        r = client.redis
        pushed_raw = [
            (k.decode(), v.decode())
            for i in range(self.cfg.producers)
            for k, v in r.hgetall(pushed_key(self.prefix, f"p{i}")).items()
        ]
        ended = {
            k.decode(): v.decode()
            for q in queues
            for s in range(q.settings.shards)
            for k, v in r.hgetall(ended_key(self.prefix, q.name, s)).items()
        }
        handled_raw = [
            (k.decode(), v.decode())
            for q in queues
            for s in range(q.settings.shards)
            for k, v in r.hgetall(record_key(self.prefix, q.name, s)).items()
        ]
        dead = [m.id or "" for q in queues for m in q.dead(1000)]
        stats = [q.stats() for q in queues]
        with open(logs / "records.txt", "w") as f:  # for a post-mortem
            f.writelines(f"pushed {k} {v}\n" for k, v in pushed_raw)
            f.writelines(f"handled {v} {ended.get(k, '')}\n" for k, v in handled_raw)
            f.writelines(f"dead {i}\n" for i in dead)
            f.writelines(f"event {e.at} {e.until or ''} {e.kind} {e.target}\n" for e in self.events)
        pushed = [cc.parse_pushed(k, v) for k, v in pushed_raw]
        handlings = [cc.parse_handling(v, ended.get(k)) for k, v in handled_raw]
        return cc.check(
            pushed,
            handlings,
            dead,
            self.events,
            visibility=self.cfg.visibility,
            left_in_flight=sum(s.unacked for s in stats),
            left_waiting=sum(s.size for s in stats),
            keyed=[GROUPS],
        )

    def delete_keys(self, client: dynoq.Client) -> None:
        for key in client.redis.scan_iter(match=f"{self.prefix}:*", count=1000):
            client.redis.delete(key)


def run(cfg: Config) -> cc.Report:
    """Run one soak; its report (``report.failures()`` lists the figures that are not 0
    and must be)."""
    return Soak(cfg).run()


def render(report: cc.Report, title: str, notes: Sequence[str] = ()) -> str:
    lines = [
        title,
        "",
        *(r.rstrip() for r in table([("figure", "count", ""), *report.rows()]).splitlines()),
    ]
    if report.lost_ids:
        lines.append(f"lost ids (first 10): {', '.join(report.lost_ids[:10])}")
    lines += [f"order violation: {v}" for v in report.violation_examples]
    lines += [f"same-key overlap: {v}" for v in report.overlap_examples]
    lines += [f"stale fence: {v}" for v in report.stale_examples]
    lines += [f"unexplained duplicate: {d}" for d in report.unexplained]
    lines += [f"note: {n}" for n in notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=3.0, help="of chaos (then the drain)")
    ap.add_argument(
        "--url",
        default=None,
        help="run on this server (never restarted; only the soak's own connections are killed)",
    )
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="a local 3-master Valkey Cluster with replicas; a master fails over",
    )
    ap.add_argument(
        "--plant",
        choices=["unordered", "overlap"],
        default=None,
        help="plant a fault the checker must catch: the ordered stream on a "
        "plain (unordered) queue, or the message groups' queue with "
        "key_concurrency=3",
    )
    ap.add_argument(
        "--restarts",
        type=int,
        default=None,
        help="server restarts or failovers (default: one per 90 s, at least 1)",
    )
    ap.add_argument(
        "--rate",
        type=float,
        default=Config.rate,
        help="producer steps per second (each pushes to both queues)",
    )
    ap.add_argument(
        "--async-consumers",
        type=int,
        default=Config.async_consumers,
        help=f"of the {Config.consumers} consumers, how many run on dynoq.asyncio",
    )
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--log-dir", default=None, help="keep the processes' logs here")
    args = ap.parse_args(argv)
    if args.url and args.cluster:
        ap.error("--url and --cluster exclude each other")
    seconds = args.minutes * 60
    restarts = args.restarts if args.restarts is not None else max(1, int(seconds // 90))
    cfg = Config(
        seconds=seconds,
        url=args.url,
        cluster=args.cluster,
        plant=args.plant,
        restarts=restarts,
        rate=args.rate,
        seed=args.seed,
        log_dir=args.log_dir,
        async_consumers=args.async_consumers,
    )
    soak = Soak(cfg)
    report = soak.run()
    where = "cluster" if args.cluster else ("--url" if args.url else "embedded Valkey, AOF")
    print(
        render(
            report,
            f"chaos soak: {args.minutes:g} min on {where}"
            + (f", planted fault: {args.plant}" if args.plant else ""),
            soak.notes,
        )
    )
    failures = report.failures()
    if failures:
        print("FAILED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
