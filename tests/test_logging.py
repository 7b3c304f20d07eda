"""What dynoq logs: one line per failed attempt (message id, attempt, error type and
message), the traceback only at DEBUG, never a payload; and an application that did not
configure logging gets nothing on stderr (dynoq's logger has a NullHandler, so Python's
last-resort handler never prints its records). ``dynoq worker --log-format json``: one
object a line, and a line made while a message is handled names its delivery."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FAST, delete_prefix, wait_for

import dynoq
from dynoq._core import logcontext, logs
from dynoq.cli.worker import setup_logging

FLAVORS = ("sync", "async")

SECRET_PAYLOAD = "payload-that-must-not-be-logged"


def _failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "handler failed" in r.getMessage()]


def test_a_failed_attempt_is_one_line(
    client: dynoq.Client, consumers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    q = client.queue("failing", shards=1, max_retries=2)
    caplog.set_level(logging.INFO, logger="dynoq")

    def handle(msg: dynoq.Message) -> None:
        raise ValueError("boom\nsecond line")

    c = client.consumer(q, handle, retry_delays=[0.01], **FAST)
    consumers.append(c.start())
    mid = q.push({"data": SECRET_PAYLOAD})
    wait_for(lambda: q.stats().dead == 1, what="dead-lettered after 3 attempts")
    records = _failures(caplog)
    assert len(records) == 3
    for attempt, r in enumerate(records, 1):
        text = r.getMessage()
        assert mid in text and f"attempt {attempt}" in text
        assert "ValueError: boom second line" in text  # type and message, on one line
        assert "\n" not in caplog.handler.format(r)  # no traceback at INFO and above
        assert r.exc_info is None and r.levelno == logging.WARNING
    assert SECRET_PAYLOAD not in caplog.text and "Traceback" not in caplog.text
    # The dead letter keeps the traceback: that is where to read it.
    [dead] = q.dead()
    assert dead.failure is not None and "Traceback" in dead.failure.traceback


def test_the_traceback_comes_at_debug(
    client: dynoq.Client, consumers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    q = client.queue("failing-debug", shards=1, max_retries=0)
    caplog.set_level(logging.DEBUG, logger="dynoq")

    def handle(msg: dynoq.Message) -> None:
        raise KeyError("missing")

    consumers.append(client.consumer(q, handle, **FAST).start())
    q.push("x")
    wait_for(lambda: q.stats().dead == 1, what="dead-lettered")
    [r] = _failures(caplog)
    assert r.exc_info is not None and r.exc_info[0] is KeyError
    assert "Traceback" in caplog.text


def test_describe_is_bounded_and_on_one_line() -> None:
    long = ValueError("x" * 5000 + "\n\ty")
    text = logs.describe(long)
    assert text.startswith("ValueError: xxx") and text.endswith("...")
    assert len(text) <= len("ValueError: ") + logs.MAX_TEXT + 3 and "\n" not in text
    assert logs.describe(RuntimeError()) == "RuntimeError"


SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    import dynoq, dynoq.asyncio

    url, prefix, flavor = sys.argv[1:4]

    def handle(msg):
        raise ValueError("boom")

    def sync():
        with dynoq.connect(url, prefix=prefix) as client:
            q = client.queue("unconfigured", shards=1, max_retries=3)
            c = client.consumer(q, handle, retry_delays=[0.01], idle_wait=0.2)
            c.start()
            q.push("x")
            deadline = time.monotonic() + 30
            while q.stats().dead < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            c.stop(10)
            print(q.stats().dead, c.stats().failed)

    async def main():
        async with dynoq.asyncio.connect(url, prefix=prefix) as client:
            q = await client.queue("unconfigured", shards=1, max_retries=3)
            c = client.consumer(q, handle, run_in_thread=True, retry_delays=[0.01],
                                idle_wait=0.2)
            await c.start()
            await q.push("x")
            deadline = time.monotonic() + 30
            while (await q.stats()).dead < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await c.stop(10)
            print((await q.stats()).dead, c.stats().failed)

    sync() if flavor == "sync" else asyncio.run(main())
""")


def test_nothing_reaches_stderr_when_logging_is_not_configured(
    url: str, flavor: str, tmp_path: Any
) -> None:
    # The trial printed 141 tracebacks (988 lines) through Python's last-resort
    # handler. A process of its own: pytest configures logging in this one.
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    script = tmp_path / "unconfigured.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = str(Path(dynoq.__file__).parent.parent)  # this dynoq, not another
    try:
        done = subprocess.run(
            [sys.executable, str(script), url, prefix, flavor],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
    finally:
        delete_prefix(url, prefix)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "4"]  # 4 failed attempts, then dead-lettered
    assert done.stderr == ""


def test_a_worker_error_is_one_line(
    client: dynoq.Client, consumers: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # An unexpected error in a worker loop (here: a hook that is not dynoq's to judge
    # raising in the middle of settling) is logged on one line, and the worker goes on.
    q = client.queue("worker-error", shards=1)
    caplog.set_level(logging.INFO, logger="dynoq")
    handled = threading.Event()

    class Broken(dynoq.Middleware):
        def after(self, msg: dynoq.Message, error: BaseException | None, seconds: float) -> None:
            raise RuntimeError("after-hook bug")

    def handle(msg: dynoq.Message) -> None:
        handled.set()

    consumers.append(client.consumer(q, handle, middleware=[Broken()], **FAST).start())
    q.push("x")
    assert handled.wait(15)
    wait_for(lambda: "after-hook raised" in caplog.text, what="the hook's error logged")
    [r] = [r for r in caplog.records if "after-hook raised" in r.getMessage()]
    assert "RuntimeError: after-hook bug" in r.getMessage() and r.exc_info is None
    wait_for(lambda: q.stats().unacked == 0 and q.size() == 0, what="acked anyway")


@contextlib.contextmanager
def json_logging() -> Iterator[Callable[[], list[Any]]]:
    """The worker's ``setup_logging("json", "info")``, its stderr in memory: yields a
    function that parses what was logged, one JSON value a line. The root logger is put
    back as it was afterwards (pytest's handlers on it)."""
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with contextlib.redirect_stderr(out):  # the handler takes sys.stderr when made
        setup_logging("json", "info")
    try:
        yield lambda: [json.loads(line) for line in out.getvalue().splitlines()]
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


DELIVERY = {"message_id", "queue", "attempt", "trace_id"}
BASE = {"time", "level", "logger", "message", "pid"}


def _traceparent(trace_id: str) -> dict[str, Any]:
    return {"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"}


def test_a_record_made_while_a_message_is_handled_names_its_delivery() -> None:
    trace = "0af7651916cd43dd8448eb211c80319c"
    traced = dynoq.Message({"x": 1}, id="m-1", attempts=2, headers=_traceparent(trace))
    untraced = dynoq.Message("y", id="m-2", attempts=1)
    log = logging.getLogger("shop.test")
    with json_logging() as lines:
        log.info("before", extra={"order": 41})
        token = logcontext.handling("orders", traced)
        try:
            log.info("inside", extra={"order": 42})
            log.info("its own id", extra={"message_id": "mine"})  # the call's value wins
            try:
                raise ValueError("boom\nsecond line")
            except ValueError:
                log.exception("failed")
        finally:
            logcontext.done(token)
        log.info("after")
        token = logcontext.handling("other", untraced)
        try:
            log.warning("untraced")
        finally:
            logcontext.done(token)
        records = lines()  # a line each: the traceback stays inside its object
    before, inside, own, failed, after, bare = records
    assert set(before) == BASE | {"order"} and set(after) == BASE  # no delivery: no fields
    assert set(inside) == BASE | DELIVERY | {"order"}
    assert inside["message"] == "inside" and inside["level"] == "INFO"
    assert inside["logger"] == "shop.test" and inside["pid"] == os.getpid()
    assert {k: inside[k] for k in (*DELIVERY, "order")} == {
        "message_id": "m-1",
        "queue": "orders",
        "attempt": 2,
        "trace_id": trace,
        "order": 42,
    }
    assert own["message_id"] == "mine" and own["queue"] == "orders" and own["attempt"] == 2
    assert failed["level"] == "ERROR" and failed["message_id"] == "m-1"
    assert (
        failed["exc"].startswith("Traceback") and "ValueError: boom\nsecond line" in failed["exc"]
    )
    assert set(bare) == BASE | {"message_id", "queue", "attempt"}  # no traceparent: no trace_id
    assert (bare["message_id"], bare["queue"], bare["attempt"]) == ("m-2", "other", 1)


def test_each_line_names_its_own_delivery_under_concurrency(
    client: dynoq.Client, consumers: list[Any], flavor: str
) -> None:
    # Deliveries handled at once, on the sync consumer's worker threads, the asyncio
    # consumer's tasks (async def) and the threads it runs a plain def on: each line
    # names the message its own call handles, and the consumer's failure line too.
    log = logging.getLogger("shop.test")

    def handle(msg: dynoq.Message) -> None:
        log.info("start", extra={"n": msg.payload})
        time.sleep(0.02)  # the other deliveries run meanwhile
        log.info("end", extra={"n": msg.payload})
        if msg.payload == 0 and msg.attempts == 1:
            raise RuntimeError("the first attempt fails")

    async def handle_async(msg: dynoq.Message) -> None:
        log.info("start", extra={"n": msg.payload})
        await asyncio.sleep(0.02)
        log.info("end", extra={"n": msg.payload})
        if msg.payload == 0 and msg.attempts == 1:
            raise RuntimeError("the first attempt fails")

    handlers: dict[str, Callable[[dynoq.Message], Any]] = {"threads": handle}
    if flavor == "async":
        handlers["tasks"] = handle_async
    n = 8
    traces = [uuid.uuid4().hex for _ in range(n)]
    with json_logging() as lines:
        ids: dict[str, list[str]] = {}
        for name, fn in handlers.items():
            q = client.queue(name, shards=1, max_retries=3)
            ids[name] = [q.push(i, headers=_traceparent(traces[i])) for i in range(n)]
            c = client.consumer(q, fn, concurrency=4, batch_size=1, retry_delays=[0.01], **FAST)
            consumers.append(c.start())
        for name in handlers:
            q = client.queue(name)
            wait_for(lambda q=q: q.stats().total("acked") == n, what=f"{name}: all handled")
        log.info("after")
        records = lines()
    [after] = [r for r in records if r["message"] == "after"]
    assert set(after) == BASE  # handled by no one: no fields
    for name in handlers:
        mine = [r for r in records if r.get("queue") == name and r["logger"] == "shop.test"]
        assert len(mine) == 2 * (n + 1)  # start and end of each call, message 0 twice
        for r in mine:
            i = r["n"]
            assert (r["message_id"], r["trace_id"]) == (ids[name][i], traces[i]), r
        assert sorted(r["attempt"] for r in mine if r["n"] == 0) == [1, 1, 2, 2]
        assert {r["attempt"] for r in mine if r["n"] != 0} == {1}
        [failed] = [r for r in records if "handler failed" in r["message"] and name in r["message"]]
        assert failed["logger"].startswith("dynoq") and failed["level"] == "WARNING"
        assert (failed["message_id"], failed["queue"], failed["attempt"], failed["trace_id"]) == (
            ids[name][0],
            name,
            1,
            traces[0],
        )


@pytest.mark.slow
def test_a_json_worker_logs_each_delivery_with_its_fields(
    real_url: str, real_client: dynoq.Client, flavor: str
) -> None:
    # dynoq worker --log-format json: a plain def runs on the sync consumer, an async def
    # on the asyncio one. Every stderr line is one JSON object.
    handler = "logs_and_fails_once" + ("_async" if flavor == "async" else "")
    q = real_client.queue("orders", shards=1)
    traced = "4bf92f3577b34da6a3ce929d0e0e4736"
    q.push({"n": 1}, id="o-1", headers=_traceparent(traced))
    q.push({"n": 2}, id="o-2")
    tests = Path(__file__).resolve().parent
    env = {
        **os.environ,
        "DYNOQ_URL": real_url,
        "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)]),
    }
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dynoq",
            "--prefix",
            real_client.prefix,
            "worker",
            f"worker_handlers:{handler}",
            "--queue",
            "orders",
            "--retry-delays",
            "0.1",
            "--log-format",
            "json",
        ],
        cwd=tests,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: q.stats().total("acked") == 2, timeout=30, what="the retried messages")
    finally:
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=30)
    assert p.returncode == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines()]
    assert lines and all(isinstance(x, dict) and set(x) >= BASE for x in lines), stderr
    mine = [x for x in lines if x["logger"] == "shop.orders"]
    assert sorted((x["message_id"], x["attempt"]) for x in mine) == [
        ("o-1", 1),
        ("o-1", 2),
        ("o-2", 1),
        ("o-2", 2),
    ]
    for x in mine:
        assert x["queue"] == "orders" and x["order"] == {"n": int(x["message_id"][-1])}
        assert x.get("trace_id") == (traced if x["message_id"] == "o-1" else None)
    failed = sorted(
        (x for x in lines if "handler failed" in x["message"]), key=lambda x: x["message_id"]
    )
    assert [(x["message_id"], x["attempt"], x["queue"]) for x in failed] == [
        ("o-1", 1, "orders"),
        ("o-2", 1, "orders"),
    ]
    assert failed[0]["trace_id"] == traced and "trace_id" not in failed[1]
    [started] = [x for x in lines if x["message"].startswith("worker started")]
    assert not DELIVERY & set(started)  # not about a delivery: no fields
