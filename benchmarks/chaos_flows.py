"""Workflows under chaos (DESIGN §3.8): each run starts a chord of N members and a chain
of S steps on task worker processes that are SIGKILLed every few seconds, on a private
Valkey with an append-only file that is killed and started again once a run: the chord's
callback and the chain's last step are each pushed exactly once, the callback gets all N
results, the chain's value is S; every run.

    python -m benchmarks.chaos_flows [--runs 20] [--members 1000] [--steps 50]
        [--workers 3] [--every 1.5] [--seed N]

Pushed once is read from the callbacks' queue's own count of pushes (the callback and the
chain's last step are its only messages: 2 a run). A call runs at least once (a worker
killed between its return and its ack runs it again), so the callback may run twice;
each of its runs must have all N results. ``--plant`` pushes one run's callback a second
time, as a flow without its once-marker would: the checker must say so.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dynoq
from benchmarks.chaos_procs import ROOT, Proc
from benchmarks.chaos_servers import Embedded

VISIBILITY = 2.0  # the task queues' unack timeout: a killed worker's calls come back soon


@dataclass
class Report:
    runs: int = 0
    members: int = 0
    steps: int = 0
    kills: int = 0
    restarts: int = 0
    callbacks_pushed: int = 0
    results: list[tuple[int, int]] = field(default_factory=list)  # (chord, chain) per run
    collected: list[dict[str, int]] = field(default_factory=list)
    seconds: float = 0.0

    def failures(self) -> list[str]:
        out = []
        if self.callbacks_pushed != 2 * self.runs:
            out.append(f"callbacks pushed {self.callbacks_pushed}, not {2 * self.runs}")
        for run, (chord, chain) in enumerate(self.results):
            if chord != self.members:
                out.append(f"run {run}: the chord's value is {chord}, not {self.members}")
            if chain != self.steps - 1:  # step(0), then steps - 2 more, then last: as it is
                out.append(f"run {run}: the chain's value is {chain}, not {self.steps - 1}")
        want = self.members * (self.members - 1) // 2
        for note in self.collected:
            if note["n"] != self.members or note["sum"] != want:
                out.append(f"run {note['run']}: a callback got {note['n']} results")
        if {n["run"] for n in self.collected} != set(range(self.runs)):
            out.append("a run's callback never ran")
        return out


def run(
    runs: int = 20,
    members: int = 1000,
    steps: int = 50,
    workers: int = 3,
    every: float = 1.5,
    seed: int | None = None,
    plant: bool = False,
    out: object = print,
) -> Report:
    rng = random.Random(seed)
    prefix = f"chaos-flows-{uuid.uuid4().hex[:8]}"
    server = Embedded(prefix)
    logs = Path(tempfile.mkdtemp(prefix="dynoq-chaos-flows-"))
    env = {
        **os.environ,
        "DYNOQ_URL": server.url,
        "DYNOQ_PREFIX": prefix,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    argv = [
        sys.executable,
        "-m",
        "dynoq",
        "worker",
        "--tasks",
        "benchmarks.chaos_flow_app:app",
        "--concurrency",
        "4",
    ]
    crew = [Proc(f"w{i}", lambda gen, a=argv: a, env, logs) for i in range(workers)]
    report = Report(members=members, steps=steps)
    begun = time.monotonic()
    client = dynoq.connect(server.url, prefix=prefix)
    try:
        from benchmarks.chaos_flow_app import app, collect, last, member, step

        app.bind(client)
        for name in ("members", "steps", "callbacks"):  # short visibility, before any worker
            client.queue(name, unack_timeout=VISIBILITY)
        for p in crew:
            p.start()
        for r in range(runs):
            chord = app.chord([member.s(i) for i in range(members)], collect.s(r)).delay()
            chain = app.chain(step.s(0), *[step.s() for _ in range(steps - 2)], last.s()).delay()
            stop = threading.Event()
            chaos = threading.Thread(
                target=_chaos, args=(crew, server, rng, every, stop, report), daemon=True
            )
            chaos.start()
            try:
                report.results.append((_wait(chord), _wait(chain)))
            finally:
                stop.set()
                chaos.join()
            report.runs += 1
            if plant and r == 0:  # a second push of this run's callback
                client.queue("callbacks").push(
                    {"task": "collect", "args": [list(range(members)), r], "kwargs": {}}
                )
            for p in crew:  # every worker up again before the next run
                if not p.alive:
                    p.start()
        callbacks = client.queue("callbacks")
        deadline = time.monotonic() + 60
        while callbacks.stats().total("acked") < report.runs * 2 + plant:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        report.callbacks_pushed = callbacks.stats().total("pushed")
        report.collected = [
            json.loads(x) for x in client.redis.lrange(f"{prefix}:collected", 0, -1)
        ]
    finally:
        report.seconds = time.monotonic() - begun
        for p in crew:
            p.kill()
        client.close()
        server.close()
    out(render(report))  # type: ignore[operator]
    return report


def _wait(handle: dynoq.FlowHandle) -> int:
    """A flow's value, waiting through the server's restart (a wait that meets the
    server away for longer than the client's retry window asks again)."""
    deadline = time.monotonic() + 300
    while True:
        try:
            return int(handle.result(timeout=max(1.0, deadline - time.monotonic())))
        except dynoq.ConnectionFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _chaos(
    crew: list[Proc],
    server: Embedded,
    rng: random.Random,
    every: float,
    stop: threading.Event,
    report: Report,
) -> None:
    """SIGKILL a worker at once, then every ``every`` seconds on average (each starts
    again half a second later); after the first kill, kill the server and start it again
    on its append-only file (once a run)."""
    wait, restarted = rng.uniform(0.1, 0.4), False
    while not stop.wait(wait):
        victim = rng.choice(crew)
        victim.kill()
        report.kills += 1
        if not restarted:
            server.restart(rng)
            report.restarts += 1
            restarted = True
        if stop.wait(0.5):
            break
        for p in crew:
            if not p.alive:
                p.start()
        wait = rng.expovariate(1 / every)


def render(report: Report) -> str:
    lines = [
        f"{report.runs} run(s) of a chord of {report.members} and a chain of {report.steps}: "
        f"{report.kills} worker SIGKILLs, {report.restarts} server restart(s), "
        f"{report.seconds:.0f}s",
        f"callbacks pushed: {report.callbacks_pushed} (want {2 * report.runs}); callback "
        f"runs: {len(report.collected)}",
    ]
    failures = report.failures()
    lines.append("OK" if not failures else "FAILED: " + "; ".join(failures))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--members", type=int, default=1000)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--every", type=float, default=1.5)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--plant", action="store_true")
    a = p.parse_args(argv)
    report = run(a.runs, a.members, a.steps, a.workers, a.every, a.seed, a.plant)
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
