"""Hooks around each handler call (dramatiq's middleware): what a consumer runs, shared
by the thread and asyncio consumers (pure: no I/O). The asyncio consumer also awaits a
hook that is a coroutine function."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..errors import InvalidType
from ..message import Message
from . import logs
from .callables import refuse_coroutine_function

log = logging.getLogger("dynoq.consumer")


class Middleware:
    """Hooks around each handler call. Override what you need.

    ``before`` raising fails the message as if the handler had raised; errors in
    ``after`` are logged and ignored (the message's fate is already decided)."""

    def before(self, msg: Message) -> None:
        """Called before the handler (in the worker thread, or awaited on the loop)."""

    def after(self, msg: Message, error: BaseException | None, seconds: float) -> None:
        """Called after the handler with its error (None on success) and duration."""


class CallableHooks(Middleware):
    """Plain ``before(msg)`` / ``after(msg, error)`` callables as a middleware."""

    def __init__(
        self,
        before: Callable[[Message], Any] | None,
        after: Callable[[Message, BaseException | None], Any] | None,
    ) -> None:
        self._before = before
        self._after = after

    # What the callables return goes back to the driver: the asyncio consumer awaits an
    # awaitable, the thread consumer fails it (nothing there awaits it).
    def before(self, msg: Message) -> Any:
        return None if self._before is None else self._before(msg)

    def after(self, msg: Message, error: BaseException | None, seconds: float) -> Any:
        return None if self._after is None else self._after(msg, error)


def chain(
    middleware: Sequence[Any], before: Callable[..., Any] | None, after: Callable[..., Any] | None
) -> list[Middleware]:
    """The middleware a consumer runs: the before/after callables first, then the rest."""
    hooks = list(middleware)
    for m in hooks:
        if not isinstance(m, Middleware):
            raise InvalidType(
                f"middleware must be dynoq.Middleware objects, got {type(m).__name__}"
            )
    if before is not None or after is not None:
        hooks.insert(0, CallableHooks(before, after))
    return hooks


def refuse_async_hooks(hooks: Sequence[Middleware]) -> None:
    """The thread consumer refuses an ``async def`` hook: nothing there awaits it."""
    for m in hooks:
        fns = (m._before, m._after) if isinstance(m, CallableHooks) else (m.before, m.after)
        for fn in fns:
            if fn is not None:
                refuse_coroutine_function(fn, "the hook", "a dynoq.asyncio consumer")


# -- one handler call inside the middleware, as a flow of calls --------------------------


class Step:
    """A call the driver makes: ``fn(*args)``; ``handler`` marks the user's handler (the
    asyncio consumer may run a sync one in a thread). The driver sends back nothing, or
    throws in what the call raised."""

    __slots__ = ("args", "fn", "handler")

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], handler: bool = False
    ) -> None:
        self.fn = fn
        self.args = args
        self.handler = handler


def invocation(
    handler: Callable[..., Any], middleware: Sequence[Middleware], arg: Any, msgs: Sequence[Message]
) -> Generator[Step, None, tuple[Exception | None, float]]:
    """Every ``before`` hook (in order, for each message), the handler, then every
    ``after`` hook (in reverse order); returns the error the hooks or the handler raised
    (None on success) and the seconds it took. Errors in ``after`` hooks are logged and
    ignored (the message's fate is already decided)."""
    t0 = time.perf_counter()
    error: Exception | None = None
    try:
        for m in middleware:
            for msg in msgs:
                yield Step(m.before, (msg,))
        yield Step(handler, (arg,), handler=True)
    except Exception as exc:  # noqa: BLE001 - the handler's failure is data for retries
        error = exc
    seconds = time.perf_counter() - t0
    for m in reversed(middleware):
        for msg in msgs:
            try:
                yield Step(m.after, (msg, error, seconds))
            except Exception as exc:  # noqa: BLE001 - a hook's failure is logged, not raised
                logs.error(log, logging.ERROR, "dynoq: an after-hook raised (ignored)", exc=exc)
    return error, seconds
