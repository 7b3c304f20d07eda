"""The asyncio client seen through a sync-looking view, so that one test runs on both.

``View(target)`` runs each method of an async dynoq object (client, queue, consumer) on
one event loop in a helper thread and waits for its result; a queue or consumer it
returns is viewed too. Attributes the tests use to reach under the API (``redis``,
``backend``) come from a sync client on the same server and prefix (``memory://<name>``
is one in-process server for both), which is also sync/async interoperation at work.
A sync handler given to ``consumer()`` runs with ``run_in_thread=True``.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

import dynoq
import dynoq.asyncio
from dynoq._core.callables import is_coroutine_function


class Loop:
    """An event loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, daemon=True, name="async-view-loop"
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class View:
    def __init__(self, target: Any, loop: Loop, sync: Any = None) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_loop", loop)
        object.__setattr__(self, "_sync", sync)

    def __repr__(self) -> str:
        return repr(self._target)

    def __getattr__(self, name: str) -> Any:
        if name in ("redis", "backend") and self._sync is not None:
            return getattr(self._sync, name)

        async def read() -> Any:
            return getattr(self._target, name)

        value = self._loop.run(read())
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            async def go() -> Any:
                result = value(*args, **kwargs)
                return await result if inspect.isawaitable(result) else result

            return self._wrap(self._loop.run(go()))

        return call

    def _wrap(self, result: Any) -> Any:
        if isinstance(result, dynoq.asyncio.Queue):
            return View(
                result,
                self._loop,
                dynoq.Queue(self._sync.backend, result.ops)
                if isinstance(self._sync, dynoq.Client)
                else self._sync,
            )
        if isinstance(result, dynoq.asyncio.Topic):
            return View(
                result,
                self._loop,
                dynoq.Topic(self._sync.backend, result.ops)
                if isinstance(self._sync, dynoq.Client)
                else self._sync,
            )
        if isinstance(result, dynoq.asyncio.Consumer):
            return ConsumerView(result, self._loop)
        if isinstance(result, (dynoq.asyncio.Sweeper, dynoq.asyncio.Half)):
            return View(result, self._loop)
        if isinstance(result, dynoq.asyncio.Transaction):
            return TransactionView(result, self._loop)
        if isinstance(result, dynoq.asyncio.Checker):
            return ConsumerView(result, self._loop)
        return result


class ConsumerView(View):
    """A consumer's view is a context manager too (start, then stop), as a Consumer is."""

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class TransactionView(View):
    """``with q.transaction(...) as half:`` on the async flavor: ``async with`` run on the
    view's loop."""

    def __enter__(self) -> Any:
        return View(self._loop.run(self._target.__aenter__()), self._loop)

    def __exit__(self, *exc: Any) -> None:
        self._loop.run(self._target.__aexit__(*exc))


class ClientView(View):
    """The view of an async client, with a sync client on the same server beside it."""

    def queue(self, name: str, **settings: Any) -> View:
        q = self._loop.run(self._target.queue(name, **settings))
        return View(q, self._loop, dynoq.Queue(self._sync.backend, q.ops))

    def topic(self, name: str, **settings: Any) -> View:
        t = self._loop.run(self._target.topic(name, **settings))
        return View(t, self._loop, dynoq.Topic(self._sync.backend, t.ops))

    def consumer(self, queue: Any, handler: Any, **options: Any) -> Any:
        q = self.queue(queue) if isinstance(queue, str) else queue
        target = q._target if isinstance(q, View) else q
        if callable(handler) and not is_coroutine_function(handler):
            options["run_in_thread"] = True

        async def make() -> Any:
            return self._target.consumer(target, handler, **options)

        return ConsumerView(self._loop.run(make()), self._loop)

    def checker(self, queue: Any, check: Any, **options: Any) -> Any:
        target = queue._target if isinstance(queue, View) else queue

        async def make() -> Any:
            return self._target.checker(target, check, **options)

        return ConsumerView(self._loop.run(make()), self._loop)

    def close(self) -> None:
        self._loop.run(self._target.close())
        self._sync.close()

    def __enter__(self) -> ClientView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unwrap(obj: Any) -> Any:
    """The async object behind a view (or the object itself)."""
    return obj._target if isinstance(obj, View) else obj


def async_client(loop: Loop, url: str, **options: Any) -> ClientView:
    sync = dynoq.connect(url, **options)
    return ClientView(dynoq.asyncio.connect(url, **options), loop, sync)
