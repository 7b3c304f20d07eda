"""Stored records and delivery states (pure: no I/O; JSON for humans: ``jsontext``).

A stored record is ``b"<enqueued ms>,<due offset ms>,<priority>," + msgpack body``: the Lua
scripts write the numeric header (they own the server clock; the enqueued time in base 36,
see ``lua/lib/record.lua``) and read the priority back, and the body is msgpack of
``[payload, key, headers, tag]`` with trailing Nones dropped.
Never pickle: a queue must not be a code-execution path.

Decoding is bounded: a record larger than the client's ``max_payload_bytes``, or holding
more lists and dicts than :data:`MAX_CONTAINERS`, is refused (a crafted 1 MB record of
empty lists would otherwise expand to tens of MB), and so is a payload that would not
decode back as it was pushed (a dict with tuple keys, say): it is refused on push.

A record is anybody's bytes (any role that writes records can write any): :func:`decode`
checks every field against what dynoq writes and raises RecordError for anything else,
never another error, so that a pop dead-letters it and every view shows it as unreadable
(:func:`readable`).
"""

from __future__ import annotations

import base64
import os
from collections import deque
from typing import Any, NamedTuple

import msgpack
import msgspec

from ..errors import (
    DynoqError,
    InvalidArgument,
    InvalidType,
    OrderedQueueError,
    PayloadTooLarge,
    PayloadTypeError,
    RecordError,
)
from ..message import Message
from . import validate

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_CONTAINERS = 65_536  # lists and dicts in one decoded record
# The latest time a record may say (9999-12-31T23:59:59.999Z, the last datetime can show)
# and the most attempts a delivery may have (exact in the scripts' doubles): beyond them a
# record is not dynoq's, and its times or count would break whoever reads them.
MAX_MS = 253_402_300_799_999
MAX_ATTEMPTS = 2**53


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


def _no_extension(code: int, data: object) -> Any:
    raise ValueError(f"a msgpack extension (type {code})")


# msgspec reads a body in half msgpack's time (benchmarks/bench_decode.py) and as msgpack
# does, but for extensions (a Timestamp becomes a datetime; its type, -1, is a 0xff byte;
# the hook refuses the others), which msgpack reads, as it does what msgspec refuses (it
# says why). An array as a map key msgspec reads as a tuple (msgpack refuses it).
_msgspec_read = msgspec.msgpack.Decoder(ext_hook=_no_extension).decode


def read_common(body: bytes) -> Any:
    """``body`` (at most MAX_CONTAINERS bytes: its containers are bounded) read by
    msgspec; None when msgpack must read it (see above)."""
    if 0xFF in body:  # a byte as an int: a memchr (a bytes needle costs 8 times more)
        return None
    try:
        return _msgspec_read(body)
    except Exception:  # noqa: BLE001 - msgpack reads it, or says why it cannot
        return None


def unpack(body: bytes, limit: int, *, extensions: bool = True) -> Any:
    """msgpack ``body`` within the bounds above; RecordError when it cannot be read, or
    (``extensions`` False) when it holds a msgpack extension (an ExtType, a Timestamp)."""
    size = len(body)
    if size > limit:
        raise RecordError(f"record body of {size} bytes is over the limit of {limit}")
    if size <= MAX_CONTAINERS and extensions:
        fields = read_common(body)
        if fields is not None:
            return fields
    try:
        if size <= MAX_CONTAINERS:  # every list or dict takes a byte: no count needed
            if extensions:  # a record read (a hot path: only what it needs)
                return msgpack.unpackb(body, raw=False, strict_map_key=False)
            # No extension: each has data but an empty ExtType, which calls the hook (a
            # Timestamp never calls it)
            return msgpack.unpackb(
                body, raw=False, strict_map_key=False, max_ext_len=0, ext_hook=_no_extension
            )
        ext_len, ext_hook = (limit, msgpack.ExtType) if extensions else (0, _no_extension)
        budget = _Budget()
        return msgpack.unpackb(
            body,
            raw=False,
            strict_map_key=False,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit,
            max_ext_len=ext_len,
            ext_hook=ext_hook,
            list_hook=budget.take,
            object_hook=budget.take,
        )
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
        _MADE.extend(raw[i : i + 16] for i in range(16, len(raw), 16))
        return raw[:16]


_SCALARS = frozenset({bytes, str, int, float, bool, type(None)})
_NUMBERS = (int, float)  # exact types: a bool is not a number of seconds


def encode_body(
    payload: Any,
    key: str | None,
    headers: dict[str, Any] | None,
    limit: int,
    tag: str | None = None,
) -> bytes:
    """The msgpack body of a record; typed errors for what cannot or may not be stored."""
    if headers is not None and not isinstance(headers, dict):
        raise InvalidType(f"headers must be a dict or None, got {type(headers).__name__}")
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
        unpack(body, limit, extensions=False)
    except RecordError as exc:
        _refuse_extensions(payload, headers)  # a msgpack extension, maybe: say where
        raise PayloadTypeError(
            f"payload would not decode as it was pushed ({exc}); use dict keys of str, int "
            f"or bytes, and at most {MAX_CONTAINERS} lists and dicts"
        ) from None
    return body


_EXTENSIONS = (msgpack.ExtType, msgpack.Timestamp)


def _refuse_extensions(payload: Any, headers: dict[str, Any] | None) -> None:
    """PayloadTypeError naming where ``payload`` or ``headers`` holds a msgpack extension
    (``msgpack.ExtType``, ``msgpack.Timestamp``): msgpack encodes them, but they are not
    payloads (no view can show them, a consumer in another language cannot read them).
    Packing bounded the walk: every value took at least a byte of the record."""
    todo: list[tuple[Any, str]] = [(payload, "payload"), (headers, "headers")]
    while todo:
        value, where = todo.pop()
        if isinstance(value, _EXTENSIONS):
            raise PayloadTypeError(
                f"{where} is a msgpack.{type(value).__name__}, a msgpack "
                "extension: payloads hold bytes, str, numbers, bools, None, and lists or "
                "dicts of those (send a Timestamp as a number or a str)"
            )
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, _EXTENSIONS):
                    todo.append((k, f"a key of {where}"))
                todo.append((v, f"{where}[{k!r:.40}]"))
        elif isinstance(value, (list, tuple)):
            todo += ((v, f"{where}[{i}]") for i, v in enumerate(value))


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
    if (
        msg.id is None
        and msg.key is None
        and msg.headers is None
        and msg.tag is None
        and type(msg.priority) is int
        and msg.priority == 0
        and type(msg.delay) in _NUMBERS
        and msg.delay == 0
        and msg.expires is None
    ):
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
    body = expiring(msg.expires) + encode_body(msg.payload, key, msg.headers, limit, tag)
    routing = key if ordered and key is not None else msg_id
    return Outgoing(
        msg_id, validate.to_ms(delay), priority, body, routing, msg.id is None, tag or ""
    )


def _keyed(msg: Message, limit: int) -> Outgoing:
    if msg.key is None:
        raise OrderedQueueError(
            'a queue with ordered="key" delivers in order per key: '
            "every message needs a key (push(..., key=...))"
        )
    key = validate.check_key(msg.key)
    assert key is not None
    if len(key.encode()) > validate.MAX_ID_LENGTH:
        raise InvalidArgument(f"key must be at most {validate.MAX_ID_LENGTH} bytes long")
    if msg.delay or msg.priority:
        validate.check_seconds(msg.delay, "delay")
        validate.check_priority(msg.priority)
        raise OrderedQueueError(
            'a queue with ordered="key" delivers each key in push order: push without '
            "delay or priority (use a concurrent queue for delayed or prioritised messages)"
        )
    msg_id = new_id() if msg.id is None else validate.check_id(msg.id)
    tag = None if msg.tag is None else validate.check_tag(msg.tag)
    body = expiring(msg.expires) + encode_body(msg.payload, None, msg.headers, limit, tag)
    return Outgoing(msg_id, 0, 0, body, key, msg.id is None, tag or "")


def expiring(expires: Any) -> bytes:
    """What goes in front of a body pushed with an expiry: ``e<ms>,`` (lua/lib/lapse.lua
    notes its deadline from it; :func:`decode` reads it back); b"" for none."""
    if expires is None:
        return b""
    ms = validate.to_ms(validate.check_seconds(expires, "expires", minimum=0.001))
    return b"e%d," % ms


def key_header(body: bytes) -> tuple[str, bytes]:
    """A keyed record's key and the msgpack body after it ("K<len>:<key><seq>" first:
    lua/lib/keyed.lua); RecordError when it is not that."""
    head, colon, rest = body[1:].partition(b":")
    if not (colon and head.isdigit() and len(head) <= 4):
        raise RecordError("record has an unreadable key header")
    n = int(head)
    seq = rest[n] - 96 if n < len(rest) else 0  # its seq: a letter for its length, base 36
    if not (n <= validate.MAX_ID_LENGTH and 0 < seq <= 12 and n + seq < len(rest)):
        raise RecordError("record has an unreadable key header")
    try:
        return rest[:n].decode(), rest[n + 1 + seq :]
    except UnicodeDecodeError:
        raise RecordError("record has a key that is not UTF-8") from None


def _header(enq: bytes, due_off: bytes, prio: bytes) -> tuple[int, int, int]:
    """The enqueued time and due offset (ms) and the priority of a record's header
    (lua/lib/record.lua), or RecordError: the enqueued time in base 36, or decimal when
    written before (12+ digits); the due offset in digits (negative after a reschedule
    when the server's clock went back)."""
    if len(enq) < 12 and enq.isalnum():  # ASCII letters, digits: int() takes "+1_0 " too
        enq_ms = int(enq, 36)
    elif 12 <= len(enq) <= 16 and enq.isdigit():
        enq_ms = int(enq)
    else:
        raise RecordError(f"record has no dynoq header: enqueued time {enq[:20]!r}")
    digits = due_off[1:] if due_off[:1] == b"-" else due_off
    if not (digits.isdigit() and len(digits) <= 16):
        raise RecordError(f"record has no dynoq header: due offset {due_off[:20]!r}")
    delay_ms = int(due_off)
    if not (prio.isdigit() and len(prio) <= 3 and int(prio) <= validate.MAX_PRIORITY):
        raise RecordError(f"record has a priority out of 0..{validate.MAX_PRIORITY}: {prio[:20]!r}")
    if not (enq_ms <= MAX_MS and 0 <= enq_ms + delay_ms <= MAX_MS):
        raise RecordError(
            f"record has times out of range: enqueued at {enq_ms} ms, due {delay_ms} ms later"
        )
    return enq_ms, delay_ms, int(prio)


def _fields(
    fields: list[Any], key: str | None
) -> tuple[str | None, dict[Any, Any] | None, str | None]:
    """The key, headers and tag of a record body's fields (after the payload): what push
    stores, or RecordError."""
    n = len(fields)
    if n > 4:
        raise RecordError(f"record body has {n} fields, not a dynoq message's 1 to 4")
    stored, headers = fields[1], fields[2] if n > 2 else None
    tag = fields[3] if n > 3 else None
    if stored is not None and type(stored) is not str:
        raise RecordError(f"record's key is a {type(stored).__name__}, not a str")
    if headers is not None and type(headers) is not dict:
        raise RecordError(f"record's headers are a {type(headers).__name__}, not a dict")
    if tag is not None:
        try:
            validate.check_tag(tag)
        except DynoqError as exc:
            raise RecordError(f"record's tag is invalid: {str(exc)[:200]}") from None
    return (stored if key is None else key), headers, tag


def decode(
    msg_id: str,
    record: bytes,
    shard: int | None = None,
    attempts: int = 0,
    token: str | None = None,
    lease: str | None = None,
    limit: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Message:
    """Turn a stored record back into a Message (a hot path: one call per delivery, so
    a pop's loop passes the arguments by position); RecordError, and no other error,
    when it is not a record as dynoq writes it (see the module's doc)."""
    try:
        enq, due_off, prio, body = record.split(b",", 3)
    except ValueError:
        raise RecordError("record has no dynoq header (it was not written by dynoq)") from None
    if due_off == b"0" and prio == b"0" and len(enq) < 10 and enq.isalnum():
        # most messages: no delay, priority 0, enqueued in base 36 before 36^9 ms (5138)
        enq_ms, delay_ms, priority = int(enq, 36), 0, 0
    else:
        enq_ms, delay_ms, priority = _header(enq, due_off, prio)
    if type(attempts) is not int or not 0 <= attempts <= MAX_ATTEMPTS:
        raise RecordError(f"delivery state has attempts out of range: {attempts!r:.40}")
    key = expires = None
    if body[:1] == b"K":  # a message group's record (msgpack bodies start with an array)
        key, body = key_header(body)
    if body[:1] == b"e":  # pushed with an expiry: "e<ms>," first (expiring)
        expires, body = _expiry(body)
    fields = unpack(body, limit)
    if type(fields) is not list or not fields:
        raise RecordError("record body is not a dynoq message")
    headers = tag = None
    if len(fields) > 1:
        key, headers, tag = _fields(fields, key)
    msg = Message(
        fields[0],
        msg_id,
        delay_ms / 1000,
        priority,
        key,
        headers,
        tag,
        shard,
        attempts,
        (enq_ms + delay_ms) / 1000,
        enq_ms / 1000,
        token,
        lease,
    )
    if expires is not None:
        msg.expires = expires
    return msg


def _expiry(body: bytes) -> tuple[float, bytes]:
    """The expiry (seconds) in front of a body, and the msgpack after it; RecordError."""
    ms, comma, rest = body[1:].partition(b",")
    if not (comma and ms.isdigit() and len(ms) <= 16 and int(ms) <= MAX_MS):
        raise RecordError(f"record has an unreadable expiry: {body[:20]!r}")
    return int(ms) / 1000, rest


def readable(
    msg_id: str,
    record: bytes,
    shard: int | None = None,
    attempts: int = 0,
    token: str | None = None,
    lease: str | None = None,
    limit: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> Message:
    """:func:`decode`, or for a record that cannot be read a Message that says why
    (``unreadable``; payload, key, headers and tag None): what a view shows, and what a
    pop dead-letters (``QueueOps.quarantine``)."""
    try:
        return decode(msg_id, record, shard, attempts, token, lease, limit)
    except RecordError as exc:
        return Message(
            None,
            msg_id,
            shard=shard,
            attempts=attempts,
            token=token,
            lease=lease,
            unreadable=str(exc),
        )
