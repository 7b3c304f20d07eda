"""The handler call inside the middleware, for asyncio: the hook order is the core's
(:func:`dynoq._core.middleware.invocation`); a hook or handler that returns an awaitable
is awaited, a sync handler the user allowed runs in a thread of the consumer's own pool,
and a handler call longer than consume_timeout fails its message: a coroutine is
cancelled (and has ended when the failure is settled); a thread cannot be stopped, so
what happens to it is the workers' decision (``Workers.overran``)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..._core.callables import call_sync
from ..._core.consuming import cancelled, timed_out
from ..._core.middleware import Middleware, invocation
from ...message import Message
from ..events import Overran, take_back, within

# What the consumer does with a call that ran past consume_timeout: the call still running
# in its thread, or None (a coroutine, cancelled and ended), and the call's messages.
OnOverrun = Callable[["asyncio.Future[Any] | None", Sequence[Message]], Awaitable[None]]


class Invoker:
    """Awaits the user's handler (one message, or a list with a batch handler) inside the
    middleware; returns the error it raised (or None) and the seconds it took.
    ``threads``: the size of the pool a sync handler runs in (0: an async handler)."""

    def __init__(
        self,
        handler: Callable[..., Any],
        middleware: Sequence[Middleware],
        *,
        threads: int,
        timeout: float,
        name: str = "dynoq",
        timeout_of: Callable[[Sequence[Message]], float] | None = None,
    ) -> None:
        self.handler = handler
        self.middleware = list(middleware)
        self.in_thread = threads > 0
        # Its own pool: the loop's default one is shared with the application, and a call
        # queued behind others would use up its consume_timeout before it started.
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{name}-h") if threads else None
        self.timeout = timeout  # consume_timeout, seconds
        # A call's own timeout, when its messages may have one (a task's): Plan.timeout_of
        self.timeout_of = timeout_of
        # Coroutine calls on one message, by id(message), and those cut short because
        # their message was cancelled (interrupt)
        self._running: dict[int, asyncio.Task[Any]] = {}
        self._cut: set[int] = set()
        self.on_overrun: OnOverrun | None = None  # set by the consumer's workers

    async def call(self, arg: Any, msgs: Sequence[Message]) -> tuple[Exception | None, float]:
        flow = invocation(self.handler, self.middleware, arg, msgs)
        error: Exception | None = None
        while True:
            try:
                step = flow.send(None) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            try:
                if step.handler:
                    await self.handle(step.args[0], msgs)
                else:
                    result = step.fn(*step.args)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                error = exc

    def seconds(self, msgs: Sequence[Message]) -> float:
        """How long a call on ``msgs`` may take: consume_timeout, or its message's own."""
        return self.timeout if self.timeout_of is None or not msgs else self.timeout_of(msgs)

    async def handle(self, arg: Any, msgs: Sequence[Message] = ()) -> None:
        """One call of the handler, within its timeout (then ConsumeTimeout)."""
        seconds = self.seconds(msgs)
        if self.pool is None:
            await self._coroutine(arg, msgs, seconds)
            return
        job = self.pool.submit(contextvars.copy_context().run, call_sync, self.handler, arg)
        call = asyncio.wrap_future(job)
        call.add_done_callback(_retrieve)  # also when nobody awaits it any more
        try:
            await within(asyncio.shield(call), seconds)
            return
        except Overran:
            pass
        # Still queued (cancelled now, it never runs), or running: it cannot be stopped.
        await self.overran(None if job.cancel() else call, msgs)
        raise timed_out(seconds) from None

    async def _coroutine(self, arg: Any, msgs: Sequence[Message], seconds: float) -> None:
        """A coroutine handler's call, cut short by its timeout (ConsumeTimeout) or by a
        cancel of its one message (dynoq.Cancelled: :meth:`interrupt`)."""
        task = asyncio.current_task()
        one = id(msgs[0]) if len(msgs) == 1 and task is not None else None
        if one is not None:
            self._running[one] = task  # type: ignore[assignment]
        try:
            await within(self.handler(arg), seconds)
        except Overran:
            await self.overran(None, msgs)
            raise timed_out(seconds) from None
        except asyncio.CancelledError:
            if not self._took_back(one, task):
                raise
            raise cancelled() from None
        finally:
            if one is not None:
                self._running.pop(one, None)
        if self._took_back(one, task):  # it swallowed the cancellation
            raise cancelled()

    def _took_back(self, one: int | None, task: asyncio.Task[Any] | None) -> bool:
        """Whether the call on message ``one`` was cut short by :meth:`interrupt` (its
        cancellation is then taken back; one from elsewhere too is raised)."""
        if one is None or task is None or one not in self._cut:
            return False
        self._cut.discard(one)
        take_back(task)
        return True

    def interrupt(self, msgs: Sequence[Message]) -> None:
        """Cut short the coroutine calls running on ``msgs`` (cancelled messages)."""
        for m in msgs:
            task = self._running.get(id(m))
            if task is not None and id(m) not in self._cut:
                self._cut.add(id(m))
                task.cancel()

    async def overran(self, call: asyncio.Future[Any] | None, msgs: Sequence[Message]) -> None:
        if self.on_overrun is not None:
            await self.on_overrun(call, msgs)

    def close(self) -> None:
        """No new calls; the ones running end on their own (a thread cannot be stopped)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def _retrieve(call: asyncio.Future[Any]) -> None:
    # A call nobody awaits any more (left running past its timeout, or its worker was
    # cancelled) must not make asyncio log "exception was never retrieved".
    if not call.cancelled():
        call.exception()
