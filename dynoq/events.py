"""Waiting and running loops on threads: the sync twin of ``dynoq.asyncio.events`` (same
names), so a shell generated from its asyncio twin (scripts/unasync.py) runs on threads
without a line of its own. What the flavors differ by is here: an event, a lock, a guard
(a lock tasks do without), a thread or a task, running calls side by side."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .signals import StopOnSignals

T = TypeVar("T")

Event = threading.Event
Lock = threading.Lock
Spawned = threading.Thread  # what spawn() returns
# A lock where threads share state that tasks read and write between two awaits.
Guard = contextlib.AbstractContextManager[Any]


def new_event() -> threading.Event:
    return threading.Event()


def new_lock() -> threading.Lock:
    return threading.Lock()


def new_guard() -> Guard:
    """A lock (the asyncio twin's is empty: tasks cannot interleave inside a block
    without an await)."""
    return threading.Lock()


def wait_event(event: threading.Event, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``event``; whether it is set."""
    return event.wait(max(timeout, 0.0))


def until_stopped(event: threading.Event, first: Callable[[], Any] | None = None) -> None:
    """Wait until ``event`` is set, SIGINT and SIGTERM setting it meanwhile (in the main
    thread: dynoq.signals). ``first`` runs once the handlers are in place (a start: a
    signal during it stops, never kills)."""
    with StopOnSignals(event):
        if first is not None:
            first()
        while not event.wait(1.0):  # timed: the relay thread may set it any time
            pass


def spawn(target: Callable[[], Any], name: str) -> threading.Thread:
    """Run ``target`` in a daemon thread named ``name``."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def join(workers: list[threading.Thread], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds in all for ``workers``; whether all ended."""
    end = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, end - time.monotonic()))
    return not any(w.is_alive() for w in workers)


def end(worker: threading.Thread, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``worker`` to end. A thread cannot be stopped:
    one still running then is left to end on its own (a daemon; the asyncio twin
    cancels its task)."""
    worker.join(max(timeout, 0.0))


def gather(calls: Sequence[Callable[[], T]], name: str) -> list[T]:
    """Run ``calls`` side by side, each in a thread named ``name``, and return their
    results in order once all ended; if one raised, its error is raised (the first in
    order)."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            errors[i] = exc

    threads = [
        threading.Thread(target=run, args=(i,), name=name, daemon=True) for i in range(len(calls))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return results
