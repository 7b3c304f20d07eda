"""Celery's chord of N no-op tasks and a callback: the anchor of benchmarks/bench_flows.py.

    /path/to/celery-venv/bin/python benchmarks/celery_chord.py redis://host:port/db N

Run by an interpreter that has celery[redis] (not a dynoq dependency). Redis is the broker
and the result backend (the chord's counter lives there); a worker of this module runs in
a subprocess with a thread pool of concurrency 4, warm before the chord is sent. Prints
one JSON line: {"rate": messages a second, from apply_async to the callback's result
(publishing the N tasks included: Celery sends them from here one by one)}.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from celery import Celery, chord

URL = os.environ.get("CELERY_CHORD_URL", "redis://127.0.0.1:6379/0")
app = Celery("celery_chord", broker=URL, backend=URL)
app.conf.update(task_default_queue="dynoq-bench-chord", worker_prefetch_multiplier=100)


@app.task(name="noop")
def noop(i: int) -> int:
    return i


@app.task(name="done")
def done(values: list[int]) -> int:
    return len(values)


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2])
    env = {**os.environ, "CELERY_CHORD_URL": url}
    here = os.path.dirname(os.path.abspath(__file__))
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_chord",
            "worker",
            "--pool",
            "threads",
            "-c",
            "4",
            "-Q",
            "dynoq-bench-chord",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=here,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        app.conf.broker_url = app.conf.result_backend = url
        deadline = time.monotonic() + 60
        while not app.control.ping(timeout=0.5):
            if time.monotonic() > deadline:
                raise SystemExit("the Celery worker did not start")
        t0 = time.perf_counter()
        result = chord(noop.s(i) for i in range(n))(done.s())
        assert result.get(timeout=900) == n
        spent = time.perf_counter() - t0
        print(json.dumps({"rate": n / spent}))
    finally:
        worker.terminate()
        worker.wait(30)


if __name__ == "__main__":
    main()
