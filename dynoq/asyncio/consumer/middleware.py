"""The handler call inside the middleware, for asyncio: the hook order is the core's
(:func:`dynoq._core.middleware.invocation`); a hook or handler that returns an awaitable
is awaited, a sync handler the user allowed runs in a thread, and a handler call longer
than consume_timeout is cancelled and fails its message."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ..._core.consuming import timed_out
from ..._core.middleware import Middleware, invocation
from ...message import Message
from ..events import Overran, within


class Invoker:
    """Awaits the user's handler (one message, or a list with a batch handler) inside the
    middleware; returns the error it raised (or None) and the seconds it took."""

    def __init__(self, handler: Callable[..., Any], middleware: Sequence[Middleware], *,
                 in_thread: bool, timeout: float) -> None:
        self.handler = handler
        self.middleware = list(middleware)
        self.in_thread = in_thread
        self.timeout = timeout  # consume_timeout, seconds

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
                    await self.handle(*step.args)
                else:
                    result = step.fn(*step.args)
                    if inspect.isawaitable(result):
                        await result
            except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                error = exc

    async def handle(self, arg: Any) -> None:
        """One call of the handler, within consume_timeout (ConsumeTimeout after it: a
        handler in a thread cannot be stopped, it is only no longer waited for)."""
        call = asyncio.to_thread(self.handler, arg) if self.in_thread else self.handler(arg)
        try:
            await within(call, self.timeout)
        except Overran:
            raise timed_out(self.timeout) from None
