"""Waiting with a timeout on asyncio: an Event (what threading.Event.wait(timeout) does),
and an awaitable that must finish in time."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it is set."""
    if not event.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    return event.is_set()


class Overran(Exception):
    """:func:`within`'s time ran out (never what the awaited code raised itself)."""


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """Await ``awaitable``, cancelling it after ``seconds`` (then Overran)."""
    if sys.version_info >= (3, 11):  # a timer on this task, not a task per call
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                return await awaitable
        except TimeoutError:
            if limit.expired():
                raise Overran from None
            raise
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(seconds, fire)
    try:
        return await awaitable
    except asyncio.CancelledError:
        if fired:
            raise Overran from None
        raise
    finally:
        timer.cancel()
