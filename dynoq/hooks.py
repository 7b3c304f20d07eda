"""Middleware around the handler, and a consumer's statistics."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .message import Message

log = logging.getLogger("dynoq.consumer")


class Middleware:
    """Hooks around each handler call (dramatiq-style). Override what you need.

    ``before`` raising fails the message as if the handler had raised; errors in
    ``after`` are logged and ignored (the message's fate is already decided)."""

    def before(self, msg: Message) -> None:
        """Called before the handler, in the worker thread."""

    def after(self, msg: Message, error: BaseException | None, seconds: float) -> None:
        """Called after the handler with its error (None on success) and duration."""


class CallableHooks(Middleware):
    """Plain ``before(msg)`` / ``after(msg, error)`` callables as a middleware."""

    def __init__(self, before: Callable[[Message], Any] | None,
                 after: Callable[[Message, BaseException | None], Any] | None) -> None:
        self._before = before
        self._after = after

    def before(self, msg: Message) -> None:
        if self._before is not None:
            self._before(msg)

    def after(self, msg: Message, error: BaseException | None, seconds: float) -> None:
        if self._after is not None:
            self._after(msg, error)


@dataclass(frozen=True)
class ConsumerStats:
    """Counts since the consumer was created.

    handled: handler returned (acked); failed: handler (or a before hook) raised;
    retried: given back for a later retry; dead_lettered: sent to the dead-letter set;
    handler_seconds: total time inside handlers; lease_lost: shards whose lease was gone;
    rebalances: allocations computed."""

    handled: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    handler_seconds: float = 0.0
    lease_lost: int = 0
    rebalances: int = 0


class StatsCounter:
    _FIELDS = ("handled", "failed", "retried", "dead_lettered", "handler_seconds",
               "lease_lost", "rebalances")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(self._FIELDS, 0)

    def add(self, **deltas: float) -> None:
        with self._lock:
            for name, value in deltas.items():
                self._values[name] += value

    def snapshot(self) -> ConsumerStats:
        with self._lock:
            v = dict(self._values)
        return ConsumerStats(**{k: (v[k] if k == "handler_seconds" else int(v[k]))
                                for k in self._FIELDS})  # type: ignore[arg-type]


class Invoker:
    """Calls the user's handler (one message, or a list with a batch handler) inside the
    middleware; returns the error it raised, or None."""

    def __init__(self, handler: Callable[..., Any], middleware: Sequence[Middleware]) -> None:
        self.handler = handler
        self.middleware = list(middleware)

    def call(self, arg: Any, msgs: Sequence[Message]) -> tuple[Exception | None, float]:
        t0 = time.perf_counter()
        error: Exception | None = None
        try:
            for m in self.middleware:
                for msg in msgs:
                    m.before(msg)
            self.handler(arg)
        except Exception as exc:  # noqa: BLE001 - the handler's failure is data for retries
            error = exc
        seconds = time.perf_counter() - t0
        for m in reversed(self.middleware):
            for msg in msgs:
                try:
                    m.after(msg, error, seconds)
                except Exception:
                    log.exception("dynoq: an after-hook raised; ignored")
        return error, seconds
