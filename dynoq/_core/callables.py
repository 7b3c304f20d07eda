"""What a user's handler, hook, check or task is, and what its call gave back (pure).

One rule for both flavours: the sync client refuses a coroutine function where it would
call it (nothing there awaits what it returns: the body would never run, and the message
would be acked or the check answered with a coroutine), and a call made in a thread that
returns an awaitable anyway fails, never succeeds."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..errors import AwaitableReturned, InvalidType


def is_coroutine_function(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine (async def, behind partials or as an
    object's ``async def __call__``)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def name_of(fn: Any) -> str:
    """How an error names a callable: its qualified name, else its type's."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def refuse_coroutine_function(fn: Any, what: str, instead: str) -> None:
    """Refuse an ``async def`` ``fn`` where the sync client would call it (``what``: "the
    handler", "the check"; ``instead``: the asyncio call to use)."""
    if is_coroutine_function(fn):
        raise InvalidType(
            f"{what} {name_of(fn)} is async def: the sync client cannot await "
            f"it (its body would never run); use {instead}, or make it a "
            "plain def"
        )


def not_awaitable(value: Any, fn: Any) -> Any:
    """``value``, which a sync call of ``fn`` returned, unless it is awaitable: then
    AwaitableReturned (a coroutine is closed first, so it is not reported as never
    awaited)."""
    if value is not None and inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if inspect.iscoroutine(value) and close is not None:
            close()
        raise AwaitableReturned(
            f"{name_of(fn)} returned {type(value).__name__}, an awaitable, where nothing "
            "awaits it (a sync consumer, checker or task, or a thread of the asyncio "
            "consumer): it did not run; make it a plain def, or an async def on dynoq.asyncio"
        )
    return value


def call_sync(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` where nothing awaits its result (see :func:`not_awaitable`)."""
    return not_awaitable(fn(*args, **kwargs), fn)


__all__ = [
    "call_sync",
    "is_coroutine_function",
    "name_of",
    "not_awaitable",
    "refuse_coroutine_function",
]
