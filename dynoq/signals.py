"""Stopping on SIGTERM / SIGINT without running threading code in a signal handler.

A Python signal handler runs in the main thread between two bytecodes, wherever that
thread was. ``Event.set()`` there takes the event's lock, which the main thread holds
for a moment inside every ``Event.wait()``: a signal landing in that moment deadlocks the
process for good (a sweeper once ignored SIGTERM in CI; a loop of ``wait(0)`` hung on 56
of 100 signals). Here the handler only writes a byte to a pipe, and a relay thread sets
the event.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopOnSignals:
    """While the ``with`` block runs, ``signals`` set ``event``; the handlers that were
    there before come back at its end. Outside the main thread (where Python cannot set
    handlers) it does nothing."""

    def __init__(
        self, event: threading.Event, signals: Iterable[signal.Signals] = STOP_SIGNALS
    ) -> None:
        self.event = event
        self.signals = tuple(signals)
        self._previous: dict[signal.Signals, Any] = {}
        self._write = -1

    def __enter__(self) -> StopOnSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        read, self._write = os.pipe()
        os.set_blocking(self._write, False)  # a handler must never block
        threading.Thread(
            target=self._relay, args=(read,), daemon=True, name="dynoq-signals"
        ).start()
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        if self._write >= 0:
            os.close(self._write)  # the relay reads the end of the pipe and ends
            self._write = -1

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # full (a signal is pending anyway) or closed
            os.write(self._write, b"\0")

    def _relay(self, read: int) -> None:
        try:
            while os.read(read, 64):
                self.event.set()
        finally:
            os.close(read)
