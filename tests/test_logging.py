"""What dynoq logs: one line per failed attempt (message id, attempt, error type and
message), the traceback only at DEBUG, never a payload; and an application that did not
configure logging gets nothing on stderr (dynoq's logger has a NullHandler, so Python's
last-resort handler never prints its records)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import FAST, delete_prefix, wait_for

import dynoq
from dynoq._core import logs

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


def test_a_record_made_while_a_message_is_handled_names_its_delivery() -> None:
    """--log-format json: the delivery's id, queue, attempt and trace id, and extra=."""
    import io
    import json

    from dynoq._core import logcontext
    from dynoq.cli.worker import json_formatter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(json_formatter())
    handler.addFilter(logcontext.DeliveryFilter())
    logger = logging.getLogger(f"t-{uuid.uuid4().hex}")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    trace = "0af7651916cd43dd8448eb211c80319c"
    msg = dynoq.Message(
        {"x": 1}, id="m-1", attempts=2, headers={"traceparent": f"00-{trace}-b7ad6b7169203331-01"}
    )
    token = logcontext.handling("orders", msg)
    try:
        logger.info("inside", extra={"order": 42})
        try:
            raise ValueError("boom\nsecond line")
        except ValueError:
            logger.exception("failed")
    finally:
        logcontext.done(token)
    logger.info("outside")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # a traceback stays inside its object
    inside, failed, outside = (json.loads(line) for line in lines)
    assert inside["message"] == "inside" and inside["level"] == "INFO"
    assert {k: inside[k] for k in ("message_id", "queue", "attempt", "trace_id", "order")} == {
        "message_id": "m-1",
        "queue": "orders",
        "attempt": 2,
        "trace_id": trace,
        "order": 42,
    }
    assert {"time", "logger", "pid"} <= set(inside)
    assert "ValueError: boom" in failed["exc"] and failed["message_id"] == "m-1"
    assert not {"message_id", "queue", "attempt", "trace_id"} & set(outside)


@pytest.mark.slow
def test_a_json_worker_logs_each_delivery_with_its_fields(
    real_url: str, real_client: dynoq.Client
) -> None:
    import json

    q = real_client.queue("orders", shards=1)
    traced = "4bf92f3577b34da6a3ce929d0e0e4736"
    q.push({"n": 1}, id="o-1", headers={"traceparent": f"00-{traced}-00f067aa0ba902b7-01"})
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
            "worker_handlers:logs_and_fails_once",
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
        wait_for(lambda: q.stats().total("acked") == 1, timeout=30, what="the retried message")
    finally:
        p.send_signal(__import__("signal").SIGTERM)
        p.wait(15)
    assert p.stderr is not None
    lines = [json.loads(line) for line in p.stderr.read().splitlines() if line.strip()]
    mine = [x for x in lines if x["logger"] == "shop.orders"]
    assert [x["attempt"] for x in mine] == [1, 2]
    assert all(
        x["message_id"] == "o-1"
        and x["queue"] == "orders"
        and x["order"] == {"n": 1}
        and x["trace_id"] == traced
        for x in mine
    )
    [failed] = [x for x in lines if "handler failed" in x["message"]]
    assert failed["message_id"] == "o-1" and failed["attempt"] == 1 and failed["queue"] == "orders"
