"""The tasks apps of tests/task_apps.py in both flavors, behind one sync-looking API
(:class:`Setup`, and the ``setup`` fixture), for tests/test_tasks.py and
tests/test_flows.py."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import task_apps
from helpers import delete_prefix

import dynoq
import dynoq.asyncio

FAST = {"idle_wait": 0.2, "lease_ttl": 2.0, "rebalance_interval": 5.0}


# -- both flavors through one sync-looking API --------------------------------------------


class Synced:
    """An asyncio tasks object seen as a sync one: a call that gives an awaitable runs on
    the test's event loop thread; tasks objects it gives back are seen the same way."""

    def __init__(self, target: Any, loop: Any) -> None:
        self._target, self._loop = target, loop

    def _wrap(self, value: Any) -> Any:
        kinds = (
            dynoq.asyncio.Tasks,
            dynoq.asyncio.Task,
            dynoq.asyncio.TaskHandle,
            dynoq.asyncio.Consumers,
            dynoq.asyncio.Half,
            dynoq.asyncio.FlowHandle,
        )
        return Synced(value, self._loop) if isinstance(value, kinds) else value

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        async def go() -> Any:
            out = fn(*args, **kwargs)
            return await out if inspect.isawaitable(out) else out

        return self._wrap(self._loop.run(go()))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or inspect.isclass(value):
            return self._wrap(value)
        return lambda *args, **kwargs: self._run(value, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._run(self._target, *args, **kwargs)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Setup:
    """A test's app (of its flavor) and a sync client on the same server and prefix to
    look under it (queues, dead letters, the tasks' log)."""

    def __init__(self, flavor: str, url: str, prefix: str, loop: Any) -> None:
        self.flavor, self.url, self.prefix = flavor, url, prefix
        self.client = dynoq.connect(url, prefix=prefix)
        if flavor == "sync":
            self.app: Any = task_apps.build("sync", dynoq.connect(url, prefix=prefix))
            self._own = self.app.client
        else:
            self._own = dynoq.asyncio.connect(url, prefix=prefix)
            self.app = Synced(task_apps.build("async", self._own), loop)
        self.loop = loop
        self.workers: list[Any] = []

    def task(self, name: str) -> Any:
        return self.app.get(name)

    def start(self, flow: Any) -> Any:
        """Start a flow (a chain, group or chord, or one signature): its handle."""
        if self.flavor == "sync":
            return flow.delay()
        return Synced(self.loop.run(flow.delay()), self.loop)

    def worker(self, **options: Any) -> Any:
        w = self.app.worker(**{**FAST, "concurrency": 2, **options})
        w.start()
        self.workers.append(w)
        return w

    def log(self) -> list[list[Any]]:
        return [json.loads(x) for x in self.client.redis.lrange(f"{self.prefix}:log", 0, -1)]

    def logged(self, kind: str) -> list[list[Any]]:
        return [entry[1:-1] for entry in self.log() if entry[0] == kind]

    def open_gate(self, name: str) -> None:
        self.client.redis.set(f"{self.prefix}:gate:{name}", 1)

    def close(self) -> None:
        for w in self.workers:
            w.stop(10)
        if self.flavor == "sync":
            self._own.close()
        else:
            self.loop.run(self._own.close())
        self.client.close()


def setups(flavor: str, url: str, prefix: str, request: pytest.FixtureRequest) -> Iterator[Setup]:
    """The body of a test module's ``setup`` fixture: a Setup, closed and its keys
    deleted after the test."""
    loop = request.getfixturevalue("event_loop_thread") if flavor == "async" else None
    s = Setup(flavor, url, prefix, loop)
    try:
        yield s
    finally:
        s.close()
        delete_prefix(url, prefix)
