"""How the pages write times, spans and payloads (the templates' filters; pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from .._core.jsontext import to_json
from ..message import Message

PREVIEW = 120  # characters of a payload in a list
FULL = 64 * 1024  # characters of a payload, headers or traceback on a message's page


def span(seconds: float | None) -> str:
    """A short span: 850ms, 4.2s, 3m07s, 2h05m, 3d04h; "-" for none."""
    if seconds is None:
        return "-"
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def relative(at: float | None, now: float) -> str:
    """A time against ``now`` (both server clock): "in 4.2s" or "4.2s ago"."""
    if at is None:
        return "-"
    return f"in {span(at - now)}" if at > now else f"{span(now - at)} ago"


def clock(at: float | None) -> str:
    """A time as UTC, to the millisecond."""
    if at is None or at <= 0:
        return "-"
    when = dt.datetime.fromtimestamp(at, tz=dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit:,} more)"


def preview(value: Any, limit: int = PREVIEW) -> str:
    """A payload (or headers) as one line of JSON, cut at ``limit`` characters."""
    return clip(to_json(value), limit)


def pretty(value: Any, limit: int = FULL) -> str:
    """A payload (or headers) as indented JSON, cut at ``limit`` characters."""
    return clip(to_json(value, indent=2), limit)


def payload(msg: Message, limit: int = PREVIEW) -> str:
    """A message's payload as one line of JSON, cut at ``limit`` characters; of a record
    that cannot be read, why."""
    if msg.unreadable is not None:
        return clip(f"(unreadable: {msg.unreadable})", limit)
    return preview(msg.payload, limit)


def link(path: str, **params: Any) -> str:
    """A path with its query (names and ids go in the query: they may hold '/')."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    return f"{path}?{query}" if query else path


FILTERS = {
    "span": span,
    "clock": clock,
    "preview": preview,
    "pretty": pretty,
    "clip": clip,
    "payload": payload,
}
