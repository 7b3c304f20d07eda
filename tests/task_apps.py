"""The tasks app of tests/test_tasks.py, in both flavors, with the same task names, so a
test sends with the app it built and a worker process runs ``task_apps:sync_app`` or
``task_apps:async_app``. The tasks log what they do to ``<prefix>:log`` through the app's
own client (a worker binds the app to its connection), as JSON lists."""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import dynoq
import dynoq.asyncio

QUEUE, ORDERED, TIMED = "tq", "tq-ordered", "tq-timed"
GATE_WAIT = 30.0  # seconds a gated task waits for its gate at most
THROTTLE = (4, 1.0)  # the rate limit of task "throttled", its own on the shared queue


def _step_key(key: str, n: int) -> str:
    return key


def _json(parts: list[Any]) -> str:
    """A log line: bytes as {"hex": ...} (JSON has none), so they are seen as sent."""
    return json.dumps([*parts, os.getpid()], default=lambda b: {"hex": bytes(b).hex()})


def build(flavor: str, client: Any = None) -> Any:
    """A fresh app of ``flavor`` ("sync" or "async") on ``client`` (None: bound later)."""
    return _sync(client) if flavor == "sync" else _async(client)


def _sync(client: dynoq.Client | None) -> dynoq.Tasks:
    app = dynoq.Tasks(client, queue=QUEUE)

    def log(*parts: Any) -> None:
        assert app.client is not None
        app.client.redis.rpush(f"{app.client.prefix}:log", _json(list(parts)))

    def gate_open(name: str) -> bool:
        assert app.client is not None
        return bool(app.client.redis.exists(f"{app.client.prefix}:gate:{name}"))

    @app.task(name="record")
    def record(x: Any, *rest: Any, tag: Any = None) -> Any:
        log("record", x, list(rest), tag)
        return x

    @app.task(name="add", keep_result=30)
    def add(x: int, y: int) -> int:
        log("add", x, y)
        return x + y

    @app.task(name="mul")
    def mul(x: int, y: int) -> int:
        log("mul", x, y)
        return x * y

    @app.task(name="throttled", rate_limit=THROTTLE)
    def throttled(x: int) -> int:
        log("throttled", x, time.time())
        return x

    @app.task(name="total")
    def total(xs: list[int]) -> int:  # a chord's callback: logs each run
        log("total", xs)
        return sum(xs)

    @app.task(name="describe")
    def describe(xs: list[Any]) -> list[Any]:  # a chord's callback that continues
        return [f"failed: {x.error_type}" if isinstance(x, dynoq.TaskFailed) else x for x in xs]

    @app.task(name="flaky", max_retries=2, retry_delays=(0.05,))
    def flaky(n: int) -> None:
        log("flaky", n)
        raise RuntimeError(f"flaky {n} failed")

    @app.task(name="fussy", max_retries=0)
    def fussy(n: int) -> None:
        log("fussy", n)
        raise ValueError(f"fussy {n} refused")

    @app.task(name="again", max_retries=1, retry_delays=(3600,), keep_result=30)
    def again(n: int) -> None:  # retrying for an hour, unless rescheduled
        log("again", n)
        raise RuntimeError(f"again {n} failed")

    @app.task(
        name="backoff",
        max_retries=3,
        retry_backoff=100,
        retry_backoff_max=250,
        retry_jitter=False,
        keep_result=30,
    )
    def backoff(n: int) -> None:  # 100, 200, then 250 s (capped) before each retry
        log("backoff", n)
        raise RuntimeError(f"backoff {n} failed")

    @app.task(name="third", max_retries=5, retry_delays=(0.05,), keep_result=30)
    def third(n: int) -> int:  # fails twice, returns on its third run
        assert app.client is not None
        if app.client.redis.incr(f"{app.client.prefix}:runs:{n}") < 3:
            raise RuntimeError(f"third {n} not yet")
        return n

    @app.task(name="gated", keep_result=30)
    def gated(name: str) -> str:
        log("gated", name, "start")
        deadline = time.monotonic() + GATE_WAIT
        while not gate_open(name) and time.monotonic() < deadline:
            time.sleep(0.01)
        log("gated", name, "end")
        return name

    @app.task(name="steps", keep_result=30)
    def steps(limit: int) -> int:  # reports progress until cancelled (or done)
        msg = dynoq.current_message()
        assert msg is not None
        for i in range(limit):
            msg.progress({"step": i})
            time.sleep(0.02)
        return limit

    @app.task(name="slow")
    def slow(seconds: float) -> None:
        log("slow", seconds, "start")
        time.sleep(seconds)
        log("slow", seconds, "end")

    @app.task(name="brief", keep_result=0.5)
    def brief(x: Any) -> Any:
        return x

    @app.task(name="odd", keep_result=30)
    def odd() -> Any:
        return {1, 2}  # msgpack cannot carry a set: the end is kept, the value is not

    @app.task(name="hands_back", max_retries=0, keep_result=30)
    def hands_back(n: int) -> Any:  # a plain def returning a coroutine: nothing awaits it
        async def body() -> None:
            log("hands_back", n)

        return body()

    @app.task(name="step", queue=ORDERED, ordered=True, key=_step_key)
    def step(key: str, n: int) -> None:
        log("step", key, n)

    @app.task(name="sleepy", queue=TIMED, timeout=0.3, max_retries=0)
    def sleepy(seconds: float) -> None:
        log("sleepy", seconds)
        time.sleep(seconds)

    @app.task(name="patient", queue=TIMED, timeout=10, max_retries=0, keep_result=30)
    def patient(seconds: float) -> float:  # sleepy's queue, a timeout of its own
        time.sleep(seconds)
        return seconds

    return app


def _async(client: dynoq.asyncio.Client | None) -> dynoq.asyncio.Tasks:
    app = dynoq.asyncio.Tasks(client, queue=QUEUE)

    async def log(*parts: Any) -> None:
        assert app.client is not None
        r = await app.client.redis()
        await r.rpush(f"{app.client.prefix}:log", _json(list(parts)))

    async def gate_open(name: str) -> bool:
        assert app.client is not None
        r = await app.client.redis()
        return bool(await r.exists(f"{app.client.prefix}:gate:{name}"))

    @app.task(name="record")
    async def record(x: Any, *rest: Any, tag: Any = None) -> Any:
        await log("record", x, list(rest), tag)
        return x

    @app.task(name="steps", keep_result=30)
    async def steps(limit: int) -> int:  # a coroutine: cancelled where it awaits
        msg = dynoq.asyncio.current_message()
        assert msg is not None
        for i in range(limit):
            msg.progress({"step": i})
            await asyncio.sleep(0.02)
        return limit

    @app.task(name="add", keep_result=30)
    async def add(x: int, y: int) -> int:
        await log("add", x, y)
        return x + y

    @app.task(name="mul")
    async def mul(x: int, y: int) -> int:
        await log("mul", x, y)
        return x * y

    @app.task(name="throttled", rate_limit=THROTTLE)
    async def throttled(x: int) -> int:
        await log("throttled", x, time.time())
        return x

    @app.task(name="total")
    async def total(xs: list[int]) -> int:
        await log("total", xs)
        return sum(xs)

    @app.task(name="describe")
    async def describe(xs: list[Any]) -> list[Any]:
        return [f"failed: {x.error_type}" if isinstance(x, dynoq.TaskFailed) else x for x in xs]

    @app.task(name="flaky", max_retries=2, retry_delays=(0.05,))
    async def flaky(n: int) -> None:
        await log("flaky", n)
        raise RuntimeError(f"flaky {n} failed")

    @app.task(name="fussy", max_retries=0)
    async def fussy(n: int) -> None:
        await log("fussy", n)
        raise ValueError(f"fussy {n} refused")

    @app.task(name="again", max_retries=1, retry_delays=(3600,), keep_result=30)
    async def again(n: int) -> None:
        await log("again", n)
        raise RuntimeError(f"again {n} failed")

    @app.task(
        name="backoff",
        max_retries=3,
        retry_backoff=100,
        retry_backoff_max=250,
        retry_jitter=False,
        keep_result=30,
    )
    async def backoff(n: int) -> None:
        await log("backoff", n)
        raise RuntimeError(f"backoff {n} failed")

    @app.task(name="third", max_retries=5, retry_delays=(0.05,), keep_result=30)
    async def third(n: int) -> int:
        assert app.client is not None
        r = await app.client.redis()
        if await r.incr(f"{app.client.prefix}:runs:{n}") < 3:
            raise RuntimeError(f"third {n} not yet")
        return n

    @app.task(name="gated", keep_result=30)
    async def gated(name: str) -> str:
        await log("gated", name, "start")
        deadline = time.monotonic() + GATE_WAIT
        while not await gate_open(name) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await log("gated", name, "end")
        return name

    @app.task(name="slow")
    async def slow(seconds: float) -> None:
        await log("slow", seconds, "start")
        await asyncio.sleep(seconds)
        await log("slow", seconds, "end")

    @app.task(name="brief", keep_result=0.5, run_in_thread=True)
    def brief(x: Any) -> Any:  # a sync function of an asyncio app, in a thread
        return x

    @app.task(name="odd", keep_result=30)
    async def odd() -> Any:
        return {1, 2}

    @app.task(name="hands_back", max_retries=0, keep_result=30, run_in_thread=True)
    def hands_back(n: int) -> Any:  # a sync function in a thread returning a coroutine
        async def body() -> None:
            await log("hands_back", n)

        return body()

    @app.task(name="step", queue=ORDERED, ordered=True, key=_step_key)
    async def step(key: str, n: int) -> None:
        await log("step", key, n)

    @app.task(name="sleepy", queue=TIMED, timeout=0.3, max_retries=0)
    async def sleepy(seconds: float) -> None:
        await log("sleepy", seconds)
        await asyncio.sleep(seconds)

    @app.task(name="patient", queue=TIMED, timeout=10, max_retries=0, keep_result=30)
    async def patient(seconds: float) -> float:  # sleepy's queue, a timeout of its own
        await asyncio.sleep(seconds)
        return seconds

    return app


sync_app = build("sync")  # for `dynoq worker --tasks task_apps:sync_app`
async_app = build("async")
not_an_app = 42
