"""Encoding of messages and validation of what users send (pure: no I/O).

A stored record is ``b"<enqueued ms>,<due offset ms>,<priority>," + msgpack body``: the Lua
scripts write the numeric header (they own the server clock) and read the priority back,
and the body is msgpack of ``[payload, key, headers]`` with trailing Nones dropped.
Never pickle: a queue must not be a code-execution path.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import msgpack

from .errors import (
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    PayloadTooLarge,
    PayloadTypeError,
)
from .message import Message

MAX_PRIORITY = 99
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024


def new_id() -> str:
    """A random 16-character URL-safe id (96 bits): short ids keep Redis memory low."""
    return secrets.token_urlsafe(12)


def check_id(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidType(f"message id must be a str or int, got {type(value).__name__}")
    text = str(value)
    if not text or len(text) > 512:
        raise InvalidArgument("message id must be 1-512 characters long")
    return text


def check_positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(f"{what} must be >= 1, got {value}")
    return value


def check_delay(value: object, what: str = "delay") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"priority must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_PRIORITY:
        raise InvalidArgument(
            f"priority must be in 0..{MAX_PRIORITY} (lower goes first), got {value}")
    return value


def check_key(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidType(f"key must be a str or int, got {type(value).__name__}")
    return str(value)


def to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def encode_body(payload: Any, key: str | None, headers: dict[str, Any] | None,
                limit: int) -> bytes:
    if headers is not None and not isinstance(headers, dict):
        raise InvalidType(f"headers must be a dict or None, got {type(headers).__name__}")
    fields: list[Any] = [payload, key, headers]
    while len(fields) > 1 and fields[-1] is None:
        fields.pop()
    try:
        body: bytes = msgpack.packb(fields, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadTypeError(
            f"payload cannot be encoded ({exc}); use bytes, str, numbers, bools, None, "
            "and lists or dicts of those"
        ) from None
    if len(body) > limit:
        raise PayloadTooLarge(
            f"encoded message is {len(body)} bytes, over the limit of {limit}; store large "
            "data elsewhere and send a reference, or raise max_payload_bytes in connect()"
        )
    return body


@dataclass(frozen=True)
class Outgoing:
    """A validated message ready for the push script."""

    id: str
    delay_ms: int
    priority: int
    body: bytes
    routing: str  # what picks the shard: the key on ordered queues, else the id


def prepare(msg: Message, *, ordered: bool, limit: int) -> Outgoing:
    """Validate one message for a queue and encode it; raises typed errors."""
    msg_id = new_id() if msg.id is None else check_id(msg.id)
    delay = check_delay(msg.delay)
    priority = check_priority(msg.priority)
    key = check_key(msg.key)
    if ordered and (delay or priority):
        raise OrderedQueueError(
            "ordered queues deliver strictly in push order: push without delay or priority "
            "(use a concurrent queue for delayed or prioritised messages)"
        )
    body = encode_body(msg.payload, key, msg.headers, limit)
    routing = key if ordered and key is not None else msg_id
    return Outgoing(msg_id, to_ms(delay), priority, body, routing)


def decode(msg_id: str, record: bytes, *, shard: int | None = None, attempts: int = 0,
           token: str | None = None, lease: str | None = None) -> Message:
    """Turn a stored record back into a Message (a hot path: one call per delivery)."""
    enq, due_off, prio, body = record.split(b",", 3)
    fields = msgpack.unpackb(body, raw=False, strict_map_key=False)
    n = len(fields)
    enq_ms, delay_ms = int(enq), int(due_off)
    return Message(fields[0], msg_id, delay_ms / 1000, int(prio),
                   fields[1] if n > 1 else None, fields[2] if n > 2 else None,
                   shard, attempts, (enq_ms + delay_ms) / 1000, enq_ms / 1000, token, lease)
