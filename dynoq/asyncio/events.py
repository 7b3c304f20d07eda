"""Waiting and running loops on asyncio: what ``dynoq.events`` does with threads, with the
same names (so a shell written here is generated for threads by scripts/unasync.py): an
event, a lock, a guard (a lock tasks do without), a task, running calls side by side;
and an awaitable that must finish in time."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

Event = asyncio.Event
Lock = asyncio.Lock
Spawned = asyncio.Task[Any]  # what spawn() returns
# dynoq.events' is a lock; tasks cannot interleave inside a block without an await.
Guard = contextlib.AbstractContextManager[Any]


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it is set."""
    if not event.is_set():
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), max(timeout, 0.0))
    return event.is_set()


class Overran(Exception):
    """:func:`within`'s time ran out (never what the awaited code raised itself)."""


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """Await ``awaitable``, cancelling it after ``seconds`` (then Overran, once it has
    ended: also when it swallowed the cancellation and returned)."""
    if sys.version_info >= (3, 11):  # a timer on this task, not a task per call
        limit = asyncio.timeout(seconds)
        try:
            async with limit:
                result = await awaitable
        except TimeoutError:
            if limit.expired():
                raise Overran from None
            raise
        if limit.expired():
            raise Overran
        return result
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(seconds, fire)
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if fired:
            raise Overran from None
        raise
    finally:
        timer.cancel()
    if fired:  # it swallowed the cancellation, but ran over
        raise Overran
    return result


def take_back(task: asyncio.Task[Any]) -> None:
    """Take back a cancellation of ``task`` this process made itself (a timeout, a
    cancelled message's call cut short); one from elsewhere that came too is raised, not
    swallowed (3.11+: Task.uncancel counts them; before, there is nothing to take back)."""
    if sys.version_info >= (3, 11) and task.uncancel() > 0:
        raise asyncio.CancelledError


class Watch:
    """consume_timeout over a run of handler calls on the current task with one timer,
    not one per call (Python 3.11+: it takes back its own cancellation). Call
    :meth:`start` before each call and :meth:`overran` after it (also when it raised): a
    call that ran ``seconds`` is cancelled, and ``overran()`` then says so once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.started = self.loop.time()
        self.fired = False
        self._timer: asyncio.TimerHandle | None = None
        self.running: object = None  # the message the current call runs on
        self.heard = False  # the current call was cut short: its message was cancelled

    def start(self, running: object = None, seconds: float | None = None) -> None:
        """A call begins (on ``running``); ``seconds``: its own timeout, when it has one."""
        self.started = self.loop.time()
        self.running = running
        if seconds is not None and seconds != self.seconds:
            self.seconds = seconds
            if self._timer is not None:  # armed for another timeout: arm it for this one
                self._timer.cancel()
                self._timer = None
        if self._timer is None:
            self._timer = self.loop.call_at(self.started + self.seconds, self._check)

    def _check(self) -> None:
        due = self.started + self.seconds
        if self.loop.time() < due:  # the call that armed it ended: watch the current one
            self._timer = self.loop.call_at(due, self._check)
            return
        self._timer = None
        self.fired = True
        self.task.cancel()

    def overran(self) -> bool:
        """Whether the call just ended was cut short here (its cancellation is taken
        back). A cancellation from elsewhere that came too is raised, not swallowed."""
        if not self.fired:
            return False
        self.fired = False
        take_back(self.task)
        return True

    def interrupt(self, msg: object) -> None:
        """Cut the current call short if it runs on ``msg`` (its message was cancelled)."""
        if msg is self.running and not self.heard:
            self.heard = True
            self.task.cancel()

    def cancelled_here(self) -> bool:
        """Whether the call just ended was cut short by :meth:`interrupt` (its cancellation
        is taken back, as :meth:`overran` does); the watch then runs on nothing."""
        self.running = None
        if not self.heard:
            return False
        self.heard = False
        take_back(self.task)
        return True

    def close(self) -> None:
        self.running = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def until_stopped(
    event: asyncio.Event, first: Callable[[], Awaitable[Any]] | None = None
) -> None:
    """Wait until ``event`` is set, SIGINT and SIGTERM setting it meanwhile (where the
    loop can take signal handlers: its main thread, not every platform). ``first`` runs
    once the handlers are in place (a start: a signal during it stops, never kills)."""
    import signal

    loop = asyncio.get_running_loop()
    signals: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, event.set)
            signals.append(sig)
    try:
        if first is not None:
            await first()
        await event.wait()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def new_event() -> asyncio.Event:
    return asyncio.Event()


def new_lock() -> asyncio.Lock:
    return asyncio.Lock()


def new_guard() -> Guard:
    """No lock: tasks cannot interleave inside a block without an await (dynoq.events'
    is a lock, for threads)."""
    return contextlib.nullcontext()


def spawn(target: Callable[[], Coroutine[Any, Any, Any]], name: str) -> asyncio.Task[Any]:
    """Run ``target()`` as a task named ``name`` (dynoq.events: a thread)."""
    return asyncio.get_running_loop().create_task(target(), name=name)


async def join(workers: list[asyncio.Task[Any]], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds in all for ``workers``; whether all ended."""
    if not workers:
        return True
    _, pending = await asyncio.wait(workers, timeout=timeout)
    return not pending


async def end(worker: asyncio.Task[Any], timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``worker`` to end; one still running then is
    cancelled, and awaited (dynoq.events: a thread is left to end on its own)."""
    _, busy = await asyncio.wait([worker], timeout=max(timeout, 0.0))
    for t in busy:
        t.cancel()
        with contextlib.suppress(BaseException):
            await t


async def gather(calls: Sequence[Callable[[], Awaitable[T]]], name: str) -> list[T]:
    """Await ``calls`` side by side and return their results in order (asyncio.gather:
    the first error raised is raised). ``name``: dynoq.events names its threads."""
    return list(await asyncio.gather(*(call() for call in calls)))
