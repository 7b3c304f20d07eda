"""``dynoq worker`` as a subprocess: graceful stop mid-batch, a supervisor restarting a
crashed child, JSON logs, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

import dynoq

TESTS = Path(__file__).parent


def _start(url: str, prefix: str, *args: str, sleep: float = 0.3,
           log_key: str = "log") -> subprocess.Popen[str]:
    env = {**os.environ, "DYNOQ_URL": url, "TEST_LOG_URL": url,
           "TEST_LOG_KEY": f"{prefix}:{log_key}", "TEST_SLEEP": str(sleep),
           "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    return subprocess.Popen([sys.executable, "-m", "dynoq", "--prefix", prefix, "worker",
                             *args], cwd=TESTS, env=env, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_sigterm_mid_batch_finishes_or_gives_back(real_url: str,
                                                  real_client: dynoq.Client) -> None:
    client = real_client
    q = client.queue("jobs", shards=1)
    q.push_many([dynoq.Message(i, id=f"j{i}") for i in range(10)])
    p = _start(real_url, client.prefix, "worker_handlers:slow", "--queue", "jobs",
               "--batch-size", "10", "--concurrency", "1", "--stop-timeout", "0.5",
               "--log-format", "json", sleep=0.4)
    log = f"{client.prefix}:log"
    wait_for(lambda: client.redis.llen(log) >= 1, timeout=20, what="the first handler call")
    p.send_signal(signal.SIGTERM)
    assert p.wait(15) == 0
    assert p.stderr is not None
    lines = [json.loads(line) for line in p.stderr.read().splitlines() if line.startswith("{")]
    assert any("worker stopped" in line["message"] for line in lines)
    handled = client.redis.llen(log)
    s = q.stats()
    assert s.unacked == 0  # nothing left in flight until its visibility timeout
    acked = s.total("acked")
    assert s.ready + acked == 10 and handled >= acked  # the rest went back (at least once)
    assert all(m.attempts == 1 for m in q.pop(10))  # given back without an attempt


@pytest.mark.slow
def _children(pid: int) -> set[int]:
    """The live child processes of ``pid`` (Linux /proc)."""
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found |= {int(x) for x in f.read().split()}
    return found


def test_supervisor_restarts_a_crashed_worker(embedded_server: Any, prefix: str) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue("jobs", shards=2)
        p = _start(url, prefix, "worker_handlers:slow", "--queue", "jobs", "--processes",
                   "2", "--stop-timeout", "1", sleep=0.0)
        log = f"{prefix}:log"
        try:
            q.push_many(range(20))
            wait_for(lambda: client.redis.llen(log) >= 20, timeout=30, what="20 handled")
            pids = {int(x.decode().split("|")[0]) for x in client.redis.lrange(log, 0, -1)}
            victim = next(iter(pids))
            # Every child the supervisor has now: the other worker may not have handled
            # any of the 20 yet, and must not count as the restarted one.
            children = _children(p.pid)
            os.kill(victim, signal.SIGKILL)

            def a_new_child_handles() -> bool:
                q.push_many(range(5))
                time.sleep(0.2)
                later = {int(x.decode().split("|")[0]) for x in client.redis.lrange(log, 20, -1)}
                assert victim not in later
                return bool(later - pids - children)

            wait_for(a_new_child_handles, timeout=30, what="a restarted child to handle")
        finally:
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0
            if p.stderr:
                err = p.stderr.read()
                assert "exited with -9; starting it again" in err, err
        for key in client.redis.scan_iter(match=f"{prefix}:*"):
            client.redis.delete(key)


@pytest.mark.parametrize(("args", "code", "text"), [
    (("worker_handlers:missing", "--queue", "jobs"), 4, "cannot import handler"),
    (("worker_handlers:not_callable", "--queue", "jobs"), 4, "not callable"),
    (("nonexistent_module:f", "--queue", "jobs"), 4, "cannot import handler"),
    (("worker_handlers:slow",), 2, "exactly one of --queue and --topic"),
    (("worker_handlers:slow", "--queue", "nope"), 1, "no queue 'nope'"),
    (("worker_handlers:slow", "--queue", "jobs", "--ordered-only"), 1, "not ordered"),
    (("worker_handlers:slow", "--queue", "jobs", "--rate-limit", "x/y"), 2, "COUNT/SECONDS"),
])
def test_worker_errors_are_one_line_with_documented_codes(
        embedded_server: Any, prefix: str, args: tuple[str, ...], code: int, text: str) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    with dynoq.connect(url, prefix=prefix) as client:
        client.queue("jobs", shards=1)
        p = _start(url, prefix, *args)
        assert p.wait(30) == code
        assert p.stderr is not None
        err = p.stderr.read()
        assert text in err and "Traceback" not in err, err
        client.redis.delete(f"{prefix}:queues", f"{prefix}:queue:jobs")
