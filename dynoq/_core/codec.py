"""Stored records, delivery states and JSON for humans (pure: no I/O).

A stored record is ``b"<enqueued ms>,<due offset ms>,<priority>," + msgpack body``: the Lua
scripts write the numeric header (they own the server clock; the enqueued time in base 36,
see ``lua/lib/record.lua``) and read the priority back, and the body is msgpack of
``[payload, key, headers, tag]`` with trailing Nones dropped.
Never pickle: a queue must not be a code-execution path.

A delivery state (the shard's ``dlv`` hash) is ``b"<attempts>|<saved ready score>|<token>"``.

Decoding is bounded: a record larger than the client's ``max_payload_bytes``, or holding
more lists and dicts than :data:`MAX_CONTAINERS`, is refused (a crafted 1 MB record of
empty lists would otherwise expand to tens of MB), and so is a payload that would not
decode back as it was pushed (a dict with tuple keys, say): it is refused on push.
"""

from __future__ import annotations

import base64
import json
import os
import traceback
from collections import deque
from typing import Any, NamedTuple

import msgpack

from ..errors import (
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    PayloadTooLarge,
    PayloadTypeError,
    RecordError,
)
from ..message import Failure, Message
from . import validate

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_CONTAINERS = 65_536  # lists and dicts in one decoded record
MAX_ERROR_TEXT, MAX_TRACEBACK = 1000, 4000  # characters kept of a failure


class _Budget:
    """Counts the lists and dicts a decode makes; raises past MAX_CONTAINERS."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_CONTAINERS

    def take(self, value: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ValueError(f"more than {MAX_CONTAINERS} lists and dicts")
        return value


def unpack(body: bytes, limit: int) -> Any:
    """msgpack ``body`` within the bounds above; RecordError when it cannot be read."""
    size = len(body)
    if size > limit:
        raise RecordError(f"record body of {size} bytes is over the limit of {limit}")
    try:
        if size <= MAX_CONTAINERS:  # every list or dict takes a byte: no count needed
            return msgpack.unpackb(body, raw=False, strict_map_key=False)
        budget = _Budget()
        return msgpack.unpackb(body, raw=False, strict_map_key=False,
                               max_str_len=limit, max_bin_len=limit, max_array_len=limit,
                               max_map_len=limit, max_ext_len=limit, list_hook=budget.take,
                               object_hook=budget.take)
    except Exception as exc:  # noqa: BLE001 - any failure to decode is a bad record
        raise RecordError(f"record cannot be decoded: {type(exc).__name__}: {exc}") from None


# Ids made ahead, from one read of the system's random source: os.urandom is a system
# call that hands the GIL to another thread, and with many threads pushing at once each
# push then waited its turn again (benchmarks/bench_producers.py). A deque: popleft and
# extend are atomic, so threads share it without a lock (two refilling at once only make
# more); a forked child drops what it inherited, or parent and child would hand out the
# same ids.
_MADE: deque[str] = deque()
_AHEAD = 256  # ids a read makes
os.register_at_fork(after_in_child=_MADE.clear)


def new_id() -> str:
    """A random 16-character URL-safe id (96 bits from os.urandom, as
    ``secrets.token_urlsafe(12)``): short ids keep Redis memory low."""
    try:
        return _MADE.popleft()
    except IndexError:
        raw = base64.urlsafe_b64encode(os.urandom(12 * _AHEAD)).decode()
        _MADE.extend(raw[i:i + 16] for i in range(16, len(raw), 16))
        return raw[:16]


_SCALARS = frozenset({bytes, str, int, float, bool, type(None)})
_NUMBERS = (int, float)  # exact types: a bool is not a number of seconds


def encode_body(payload: Any, key: str | None, headers: dict[str, Any] | None,
                limit: int, tag: str | None = None) -> bytes:
    """The msgpack body of a record; typed errors for what cannot or may not be stored."""
    if headers is not None and not isinstance(headers, dict):
        raise InvalidType(
            f"headers must be a dict or None, got {type(headers).__name__}")
    fields: list[Any] = [payload, key, headers, tag]
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
    if type(payload) in _SCALARS and headers is None:
        return body  # a scalar (key and tag are checked strings) always reads back
    try:  # what cannot be read back must not be stored: it would fail every consumer
        unpack(body, limit)
    except RecordError as exc:
        raise PayloadTypeError(
            f"payload would not decode as it was pushed ({exc}); use dict keys of str, int "
            f"or bytes, and at most {MAX_CONTAINERS} lists and dicts") from None
    return body


class Outgoing(NamedTuple):  # a tuple: made once per pushed message, a hot path
    """A validated message ready for the push script."""

    id: str
    delay_ms: int
    priority: int
    body: bytes
    routing: str  # what picks the shard: the key on ordered queues, else the id
    generated: bool = False  # the id was made here, so it cannot exist in Redis yet
    tag: str = ""  # a topic message's tag ("" = none)


def prepare(msg: Message, *, ordered: bool | str, limit: int) -> Outgoing:
    """Validate one message for a queue and encode it; raises typed errors. On a keyed
    queue (ordered="key") the key is required and kept out of the body: the script
    writes it into the record's header (lua/lib/keyed.lua), and :func:`decode` reads it
    from there."""
    if not isinstance(msg, Message):
        raise InvalidType(f"expected a dynoq.Message, got {type(msg).__name__}")
    if ordered == "key":
        return _keyed(msg, limit)
    if (msg.id is None and msg.key is None and msg.headers is None and msg.tag is None
            and type(msg.priority) is int and msg.priority == 0
            and type(msg.delay) in _NUMBERS and msg.delay == 0):
        # The common message (a payload alone): nothing to check but the payload.
        made = new_id()
        return Outgoing(made, 0, 0, encode_body(msg.payload, None, None, limit), made, True)
    msg_id = new_id() if msg.id is None else validate.check_id(msg.id)
    delay = validate.check_seconds(msg.delay, "delay")
    priority = validate.check_priority(msg.priority)
    key = validate.check_key(msg.key)
    if ordered and (delay or priority):
        raise OrderedQueueError(
            "ordered queues deliver strictly in push order: push without delay or priority "
            "(use a concurrent queue for delayed or prioritised messages)"
        )
    tag = None if msg.tag is None else validate.check_tag(msg.tag)
    body = encode_body(msg.payload, key, msg.headers, limit, tag)
    routing = key if ordered and key is not None else msg_id
    return Outgoing(msg_id, validate.to_ms(delay), priority, body, routing, msg.id is None,
                    tag or "")


def _keyed(msg: Message, limit: int) -> Outgoing:
    if msg.key is None:
        raise OrderedQueueError("a queue with ordered=\"key\" delivers in order per key: "
                                "every message needs a key (push(..., key=...))")
    key = validate.check_key(msg.key)
    assert key is not None
    if len(key.encode()) > validate.MAX_ID_LENGTH:
        raise InvalidArgument(f"key must be at most {validate.MAX_ID_LENGTH} bytes long")
    if msg.delay or msg.priority:
        validate.check_seconds(msg.delay, "delay")
        validate.check_priority(msg.priority)
        raise OrderedQueueError(
            "a queue with ordered=\"key\" delivers each key in push order: push without "
            "delay or priority (use a concurrent queue for delayed or prioritised messages)")
    msg_id = new_id() if msg.id is None else validate.check_id(msg.id)
    tag = None if msg.tag is None else validate.check_tag(msg.tag)
    body = encode_body(msg.payload, None, msg.headers, limit, tag)
    return Outgoing(msg_id, 0, 0, body, key, msg.id is None, tag or "")


def _key_header(body: bytes) -> tuple[str, bytes]:
    """A keyed record's key and the msgpack body after it ("K<len>:<key><seq>" first:
    lua/lib/keyed.lua)."""
    head, _, rest = body[1:].partition(b":")
    n = int(head)
    return rest[:n].decode(), rest[n + 1 + rest[n] - 96:]


def decode(msg_id: str, record: bytes, shard: int | None = None, attempts: int = 0,
           token: str | None = None, lease: str | None = None,
           limit: int = DEFAULT_MAX_PAYLOAD_BYTES) -> Message:
    """Turn a stored record back into a Message (a hot path: one call per delivery, so
    a pop's loop passes the arguments by position); RecordError when it cannot be read."""
    try:
        enq, due_off, prio, body = record.split(b",", 3)
        # lua/lib/record.lua: base 36, or decimal when written before (12+ digits)
        enq_ms = int(enq, 36) if len(enq) < 12 else int(enq)
        # most messages have no delay and priority 0: a compare is cheaper than int()
        delay_ms = 0 if due_off == b"0" else int(due_off)
        priority = 0 if prio == b"0" else int(prio)
    except ValueError:
        raise RecordError("record has no dynoq header (it was not written by dynoq)") from None
    key = None
    if body[:1] == b"K":  # a message group's record (msgpack bodies start with an array)
        try:
            key, body = _key_header(body)
        except (ValueError, IndexError, UnicodeDecodeError):
            raise RecordError("record has an unreadable key header") from None
    fields = unpack(body, limit)
    if type(fields) is not list or not fields:
        raise RecordError("record body is not a dynoq message")
    n = len(fields)
    return Message(fields[0], msg_id, delay_ms / 1000, priority,
                   key if key is not None else fields[1] if n > 1 else None,
                   fields[2] if n > 2 else None,
                   fields[3] if n > 3 else None, shard, attempts,
                   (enq_ms + delay_ms) / 1000, enq_ms / 1000, token, lease)


def attempts_of(state: bytes | None, in_flight: bool = False) -> int:
    """The attempts recorded in a delivery state (0 when there is none); of a delivery
    ``in_flight`` with none, 1: a concurrent queue's first delivery writes no state
    (lua/lib/delivery.lua in_flight)."""
    if not state:
        return 1 if in_flight else 0
    return int(state.split(b"|", 1)[0] or 0)


# -- why a message failed (lua/lib/why.lua) -------------------------------------------------

def why(error: BaseException, consumer: str) -> bytes:
    """The reason a consumer records with a failed message: msgpack [error type, message,
    traceback, consumer], each bounded."""
    text = str(error)[:MAX_ERROR_TEXT]
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    packed: bytes = msgpack.packb([type(error).__name__, text, trace[-MAX_TRACEBACK:],
                                   consumer], use_bin_type=True)
    return packed


def failure(raw: bytes | None) -> Failure | None:
    """A stored reason (``"<first ms>,<last ms>,<kind>,<detail>"``) as a Failure."""
    if not raw:
        return None
    try:
        first, last, kind, detail = raw.split(b",", 3)
        times = int(first) / 1000, int(last) / 1000
        if kind == b"x":
            return Failure("VisibilityTimeout", "its deliveries were not acked within the "
                           "visibility timeout (a consumer crashed or hung) until its "
                           "retries were spent", "", "", *times)
        if kind == b"t":  # lua/lib/tx.lua bury_half(): detail is the checks made
            return Failure("TransactionUnresolved",
                           f"transaction unresolved: still undecided after {int(detail)} "
                           "checks, so it was rolled back (replaying it delivers it)",
                           "", "", *times)
        error_type, error, trace, consumer = unpack(detail, 64 * 1024)
        return Failure(str(error_type), str(error), str(trace), str(consumer), *times)
    except (ValueError, TypeError, RecordError):
        return Failure("Unknown", "the stored reason is unreadable", "", "", 0.0, 0.0)


# -- JSON for humans (CLI, exports) --------------------------------------------------------

def json_default(value: object) -> Any:
    """``json.dumps`` default: bytes become ``{"$base64": "..."}`` (JSON has no bytes)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    raise TypeError(f"cannot show {type(value).__name__} as JSON")


def to_json(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """JSON text of a payload (or anything made of what payloads hold): every valid
    payload shows. Bytes become ``{"$base64": "..."}``; a dict key JSON has no form for
    (bytes) becomes ``"$base64:..."``, and with ``sort_keys`` keys of mixed types are
    sorted as the text JSON writes for them."""
    try:
        return json.dumps(value, default=json_default, ensure_ascii=False, indent=indent,
                          sort_keys=sort_keys)
    except TypeError:  # rare: a bytes key, or keys of mixed types to sort (a second pass)
        return json.dumps(_text_keys(value), default=json_default, ensure_ascii=False,
                          indent=indent, sort_keys=sort_keys)


def _text_keys(value: Any) -> Any:
    """``value`` with every dict key as the text JSON writes for it (a bytes key as
    ``"$base64:..."``)."""
    if isinstance(value, dict):
        return {_key_text(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text_keys(v) for v in value]
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
    return {"id": m.id, "payload": m.payload, "priority": m.priority, "key": m.key,
            "headers": m.headers, "tag": m.tag, "shard": m.shard, "attempts": m.attempts,
            "deliver_at": m.deliver_at, "enqueued_at": m.enqueued_at,
            "failure": None if f is None else {
                "error_type": f.error_type, "error": f.error, "traceback": f.traceback,
                "consumer": f.consumer, "first_failed_at": f.first_failed_at,
                "last_failed_at": f.last_failed_at}}
