"""Hooks around each handler call (dramatiq's middleware), and the call itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._core.callables import call_sync
from .._core.middleware import CallableHooks, Middleware, chain, invocation
from ..message import Message


class Invoker:
    """Calls the user's handler (one message, or a list with a batch handler) inside the
    middleware; returns the error it raised (or None) and the seconds it took."""

    def __init__(self, handler: Callable[..., Any], middleware: Sequence[Middleware]) -> None:
        self.handler = handler
        self.middleware = list(middleware)

    def call(self, arg: Any, msgs: Sequence[Message]) -> tuple[Exception | None, float]:
        flow = invocation(self.handler, self.middleware, arg, msgs)
        error: Exception | None = None
        while True:
            try:
                step = flow.send(None) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            try:
                call_sync(step.fn, *step.args)
            except Exception as exc:  # noqa: BLE001 - handed to the flow, which decides
                error = exc

    def interrupt(self, msgs: Sequence[Message]) -> None:
        """A thread cannot be cut short: its handler hears the cancel from
        msg.cancelled, msg.progress() and msg.heartbeat()."""


__all__ = ["CallableHooks", "Invoker", "Middleware", "chain"]
