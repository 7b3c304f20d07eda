"""Waiting and running loops on threads: the sync twin of ``dynoq.asyncio.events`` (same
names), so a shell generated from its asyncio twin (scripts/unasync.py) runs on threads
without a line of its own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .signals import StopOnSignals


def new_event() -> threading.Event:
    return threading.Event()


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
    import time

    end = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, end - time.monotonic()))
    return not any(w.is_alive() for w in workers)
