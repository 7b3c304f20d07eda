"""The delivery a log record was made under: a consumer sets the message it is handling
(and its queue) around each handler call (a batch handler's: only when the batch holds
one message), and :class:`DeliveryFilter` copies the message id, queue, attempt and
trace id onto every record made meanwhile (dynoq's own lines and the handler's), so that
a JSON log line says which delivery it is about. Pure: a ContextVar, no I/O; asyncio
tasks and worker threads each see their own."""

from __future__ import annotations

import logging
from contextvars import ContextVar, Token
from typing import Any

from ..message import Message

DELIVERY: ContextVar[tuple[str, Message] | None] = ContextVar("dynoq_delivery", default=None)


def handling(queue: str, msg: Message) -> Token[tuple[str, Message] | None]:
    """Mark ``msg`` of ``queue`` as the delivery being handled; reset with the token."""
    return DELIVERY.set((queue, msg))


def done(token: Token[tuple[str, Message] | None]) -> None:
    DELIVERY.reset(token)


def current_message() -> Message | None:
    """The message whose handler runs here (in this thread or task), or None: a task's
    function reports progress or hears a cancel through it
    (``dynoq.current_message().progress(50)``)."""
    current = DELIVERY.get()
    return None if current is None else current[1]


def trace_id(msg: Message) -> str | None:
    """The W3C trace id of the message's ``traceparent`` header, if it carries one."""
    headers = msg.headers
    parent = headers.get("traceparent") if isinstance(headers, dict) else None
    if isinstance(parent, str):
        parts = parent.split("-")
        if len(parts) == 4 and len(parts[1]) == 32:
            return parts[1]
    return None


def fields(queue: str, msg: Message) -> dict[str, Any]:
    """A delivery's fields, as ``extra=`` for a log call about it."""
    out: dict[str, Any] = {"message_id": msg.id, "queue": queue, "attempt": msg.attempts}
    trace = trace_id(msg)
    if trace is not None:
        out["trace_id"] = trace
    return out


class DeliveryFilter(logging.Filter):
    """Adds the current delivery's fields to each record, on a handler (so that records
    of every logger get them); a field the call passed itself in ``extra=`` is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = DELIVERY.get()
        if current is not None:
            for name, value in fields(*current).items():
                if not hasattr(record, name):
                    setattr(record, name, value)
        return True
