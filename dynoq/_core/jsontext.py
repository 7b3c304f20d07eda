"""JSON for humans (pure: no I/O): payloads and messages as the CLI, the dashboard and
exports show them. Every payload dynoq stores shows, and so does a record not written by
dynoq (msgpack Timestamps, nesting deeper than ``json`` goes)."""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import msgpack

from ..message import Message


def json_default(value: object) -> Any:
    """``json.dumps`` default: bytes become ``{"$base64": "..."}`` (JSON has no bytes), a
    msgpack Timestamp (in a record not pushed by dynoq) ``{"$timestamp": [seconds,
    nanoseconds]}``; an ExtType, a named tuple, shows as the list [code, data]."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, msgpack.Timestamp):
        return {"$timestamp": [value.seconds, value.nanoseconds]}
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def to_json(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """Strict JSON text (RFC 8259) of a payload (or anything made of what payloads hold):
    every valid payload shows. Bytes become ``{"$base64": "..."}``; a float JSON has no
    number for becomes the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the
    value kept, as Spark and PostgreSQL write it); a dict key JSON has no form for (bytes)
    becomes ``"$base64:..."``, and with ``sort_keys`` keys of mixed types are sorted as
    the text JSON writes for them. A value nested deeper than the encoder goes (a record
    not written by dynoq: msgpack reads 1,024 levels) shows its first :data:`SHOWN_DEPTH`."""
    try:
        return _json(value, indent, sort_keys)
    except RecursionError:
        return _json(_shallow(value, SHOWN_DEPTH), indent, sort_keys)


SHOWN_DEPTH = 100  # levels of lists and dicts JSON shows of a deeper value


def _shallow(value: Any, depth: int) -> Any:
    """``value`` with what is nested more than ``depth`` levels down as "..."."""
    if isinstance(value, dict):
        return {k: _shallow(v, depth - 1) for k, v in value.items()} if depth else "..."
    if isinstance(value, (list, tuple)):
        return [_shallow(v, depth - 1) for v in value] if depth else "..."
    return value


def _json(value: Any, indent: int | None, sort_keys: bool) -> str:
    try:
        return json.dumps(
            value,
            default=json_default,
            ensure_ascii=False,
            indent=indent,
            sort_keys=sort_keys,
            allow_nan=False,
        )
    except (TypeError, ValueError):  # rare: a bytes key, keys of mixed types to sort, or
        # a NaN or infinity (a second pass)
        return json.dumps(
            _text_keys(value),
            default=json_default,
            ensure_ascii=False,
            indent=indent,
            sort_keys=sort_keys,
            allow_nan=False,
        )


def _text_keys(value: Any) -> Any:
    """``value`` with every dict key as the text JSON writes for it (a bytes key as
    ``"$base64:..."``), and every float JSON has no number for as its name."""
    if isinstance(value, dict):
        return {_key_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text_keys(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return value


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, (bytes, bytearray, memoryview)):
        return "$base64:" + base64.b64encode(bytes(key)).decode()
    text: str = json.dumps(key, default=json_default)
    return text


def message_json(m: Message) -> dict[str, Any]:
    """A message as a JSON-ready dict (payload and headers as they are)."""
    f = m.failure
    return {
        "id": m.id,
        "payload": m.payload,
        "priority": m.priority,
        "key": m.key,
        "headers": m.headers,
        "tag": m.tag,
        "shard": m.shard,
        "attempts": m.attempts,
        "deliver_at": m.deliver_at,
        "enqueued_at": m.enqueued_at,
        "unreadable": m.unreadable,
        "progress": m.progress(),
        "failure": None
        if f is None
        else {
            "error_type": f.error_type,
            "error": f.error,
            "traceback": f.traceback,
            "consumer": f.consumer,
            "first_failed_at": f.first_failed_at,
            "last_failed_at": f.last_failed_at,
        },
    }
