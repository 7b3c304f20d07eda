"""How dynoq logs an error: one line (what failed, the error's type and message), and the
traceback only when the logger is enabled for DEBUG. A consumer whose handler fails on
every message must not fill a log with tracebacks (the dead-letter record keeps one)."""

from __future__ import annotations

import logging
from typing import Any

MAX_TEXT = 300  # characters of an error's message in a log line


def describe(error: BaseException) -> str:
    """``Type: message``, the message bounded and on one line."""
    text = " ".join(str(error).split())
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def error(
    log: logging.Logger,
    level: int,
    what: str,
    *args: object,
    exc: BaseException,
    extra: dict[str, Any] | None = None,
) -> None:
    """Log ``what % args`` and ``: <describe(exc)>`` at ``level``, on one line; with the
    traceback attached only when ``log`` is enabled for DEBUG. ``extra``: fields for a
    structured (JSON) log line."""
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        what + ": %s",
        *args,
        describe(exc),
        exc_info=exc if log.isEnabledFor(logging.DEBUG) else None,
        extra=extra,
    )
