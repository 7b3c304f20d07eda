"""Rows to messages for the Spark sinks (pure: no I/O, no pyspark import).

A row is any mapping of column name to value (``Row.asDict()``, or a dict from Arrow's
``RecordBatch.to_pylist()``). Its payload is the dict of ``payload_cols`` (default: every
column). When the writer knows the schema (every writer does, ``partition_sink`` when
given ``schema=``), values are converted by their Spark type (:mod:`.types`, whose table
says what each type is stored as), so every writer stores the same payload. Without a
schema, :func:`plain` converts them by their Python type, to the same forms, except that
a naive datetime is taken as local time (a ``timestamp_ntz`` would then be shifted) and a
decimal keeps the exponent it came with (PySpark's Rows write a number below 0.000001 in
engineering notation: up to two decimals more than its scale).

Every row is counted once: pushed, skipped (its id is in the queue, or came earlier in
the same write) or refused. A row that makes no valid message is refused with the column
and why (:class:`Rejection`), and the others are written: a null or empty id, a null key
on an ordered queue, a null, negative or non-finite delay, a priority outside 0..99, a
payload over the size limit; with a queue column, a null or invalid queue name or one
that is not among the write's queues; with a headers column, headers that are not a map
of strings to strings. The headers column is not part of the payload: a row's map in it
(null or empty: none) becomes the message's headers, which count toward the size limit
with the payload. The delay column holds seconds, a due timestamp or a
day-time interval, turned into a delay against the Redis server's clock, so executors'
clocks do not matter; a due time in the past means "due now".
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .._core.validate import MAX_PRIORITY, check_name
from ..errors import InvalidArgument, InvalidType, PayloadTypeError
from ..message import Message
from .types import Plan, converters, decimal_text

_PASS = frozenset({str, int, float, bool, bytes, type(None)})
MAX_ID_LENGTH = 512
SHOWN = 60  # characters of a bad value a refusal quotes (its reason stays short)


def plain(value: Any) -> Any:
    """``value`` as something msgpack stores (see the table in the module docstring)."""
    kind = type(value)
    if kind in _PASS:
        return value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # naive = local time, as PySpark converts timestamps
        return value.astimezone(dt.timezone.utc).isoformat()
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return decimal_text(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if hasattr(value, "asDict"):  # a pyspark Row (struct column)
        return plain(value.asDict())
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            key = plain(k)
            if isinstance(key, (dict, list)):
                raise PayloadTypeError(
                    "a map keyed by structs or arrays has no payload form (a payload's "
                    "dict keys are strings, numbers or bytes): cast its keys to strings, "
                    "or make it an array of entries (map_entries)"
                )
            out[key] = plain(v)
        return out
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value  # anything else: the codec raises a clear PayloadTypeError


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidType(f"{what} must be a non-empty column name (str), got {value!r}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."


_OPTIONAL = ("key_col", "delay_col", "priority_col", "queue_col", "headers_col", "expires_col")


@dataclass(frozen=True)
class RowSpec:
    """Which columns make a message: id, optional key/delay/priority, the queue it goes
    to (``queue_col``: one of the write's queues), its headers (``headers_col``: a map of
    strings, not part of the payload), its expiry (``expires_col``: seconds or a day-time
    interval to be delivered in, else dead-lettered; null: none), and the payload."""

    id_col: str
    key_col: str | None = None
    delay_col: str | None = None
    priority_col: str | None = None
    payload_cols: tuple[str, ...] | None = None
    queue_col: str | None = None
    headers_col: str | None = None
    expires_col: str | None = None

    def __post_init__(self) -> None:
        _name(self.id_col, "id_col")
        for what in _OPTIONAL:
            if getattr(self, what) is not None:
                _name(getattr(self, what), what)
        if self.payload_cols is not None:
            if isinstance(self.payload_cols, str) or not isinstance(self.payload_cols, tuple):
                raise InvalidType("payload_cols must be a list of column names or None")
            for col in self.payload_cols:
                _name(col, "each of payload_cols")

    @classmethod
    def of(
        cls,
        id_col: str,
        key_col: str | None = None,
        delay_col: str | None = None,
        priority_col: str | None = None,
        payload_cols: Iterable[str] | None = None,
        *,
        queue_col: str | None = None,
        headers_col: str | None = None,
        expires_col: str | None = None,
    ) -> RowSpec:
        if isinstance(payload_cols, str):
            raise InvalidType("payload_cols must be a list of column names, not one string")
        cols = None if payload_cols is None else tuple(payload_cols)
        return cls(
            id_col, key_col, delay_col, priority_col, cols, queue_col, headers_col, expires_col
        )

    @property
    def routing_cols(self) -> list[str]:
        return [
            c
            for c in (
                self.id_col,
                self.key_col,
                self.delay_col,
                self.priority_col,
                self.queue_col,
                self.headers_col,
                self.expires_col,
            )
            if c is not None
        ]

    def payload_columns(self, columns: Iterable[str]) -> list[str]:
        """The payload's columns: ``payload_cols``, else every column of ``columns`` but
        the headers column (headers are not payload)."""
        if self.payload_cols is not None:
            return list(self.payload_cols)
        return [c for c in columns if c != self.headers_col]

    def needed(self, columns: Sequence[str]) -> list[str]:
        """The columns of ``columns`` a sink reads, in their order (to prune the rest)."""
        want = set(self.routing_cols) | set(self.payload_columns(columns))
        return [c for c in columns if c in want]

    def check_columns(self, columns: Collection[str]) -> None:
        """Raise a clear error when a column the spec names is not in the data."""
        named = [(c, "id_col") for c in [self.id_col]]
        named += [(getattr(self, w), w) for w in _OPTIONAL if getattr(self, w) is not None]
        named += [(c, "payload_cols") for c in self.payload_cols or ()]
        for col, what in named:
            if col not in columns:
                raise InvalidArgument(
                    f"{what} names column {col!r}, which is not in the data (columns: "
                    f"{', '.join(sorted(columns)) or 'none'}); fix the column mapping"
                )


@dataclass(frozen=True)
class Rejection:
    """A row that makes no message, and why: its position in its partition (0-based),
    the column at fault (None: the row as a whole, e.g. a payload over the size limit)."""

    row: int
    column: str | None
    reason: str

    def __str__(self) -> str:
        where = f"row {self.row}" + ("" if self.column is None else f", column {self.column!r}")
        return f"{where}: {self.reason}"


@dataclass
class Made:
    """What :func:`to_messages` made of a chunk of rows: each message with its row's
    position, the rows refused, how many rows repeated an id of an earlier row of the
    chunk to the same queue (skipped: push-if-absent keeps the first), and with a queue
    column the queue of each message (``queues[i]`` is ``messages[i]``'s)."""

    messages: list[tuple[int, Message]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    repeated: int = 0
    queues: list[str] = field(default_factory=list)

    def by_queue(self, default: str) -> dict[str, list[tuple[int, Message]]]:
        """The messages per queue (all in ``default`` without a queue column)."""
        if not self.queues:
            return {default: self.messages} if self.messages else {}
        out: dict[str, list[tuple[int, Message]]] = {}
        for name, m in zip(self.queues, self.messages, strict=True):
            out.setdefault(name, []).append(m)
        return out


class _Refused(Exception):
    def __init__(self, column: str | None, reason: str) -> None:
        super().__init__(reason)
        self.column = column
        self.reason = reason


def _row_id(value: object, col: str) -> str:
    if value is None:
        raise _Refused(
            col,
            "the id is null (every row needs an id: ids make retried "
            "Spark tasks push nothing twice)",
        )
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Refused(
            col,
            f"the id is a {type(value).__name__} ({value!r}): ids are "
            "strings or integers (cast the column)",
        )
    text = str(value)
    if not text.strip():
        raise _Refused(col, "the id is empty")
    if len(text) > MAX_ID_LENGTH:
        raise _Refused(
            col, f"the id has {len(text)} characters; ids may have at most {MAX_ID_LENGTH}"
        )
    return text


def _key(value: object, col: str, ordered: bool) -> str | None:
    if value is None:
        if ordered:
            raise _Refused(
                col, "the key is null: an ordered queue routes and orders every message by its key"
            )
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Refused(
            col, f"the key is a {type(value).__name__} ({value!r}): keys are strings or integers"
        )
    return str(value)


def _delay(value: object, col: str, server_now: Callable[[], float]) -> float:
    if value is None:
        raise _Refused(
            col, "the delay is null: give every row a delay (0 for none, e.g. coalesce(col, 0))"
        )
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.astimezone()
        return max(0.0, when.timestamp() - server_now())
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise _Refused(col, f"the delay is {value}: delays are finite seconds >= 0")
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(
            col,
            f"the delay is a {type(value).__name__} ({value!r}): use "
            "seconds, a due timestamp or a day-time interval",
        )
    if not math.isfinite(value) or value < 0:
        raise _Refused(col, f"the delay is {value!r}: delays are finite seconds >= 0")
    return float(value)


def _expires(value: object, col: str) -> float | None:
    """A row's expiry: seconds (or a day-time interval) > 0; null: none."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    elif isinstance(value, Decimal):
        value = float(value) if value.is_finite() else math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Refused(
            col, f"the expiry is a {type(value).__name__} ({value!r}): use seconds or an interval"
        )
    if not math.isfinite(value) or value <= 0:
        raise _Refused(
            col, f"the expiry is {value!r}: expiries are finite seconds > 0 (null: none)"
        )
    return float(value)


def _queue(value: object, col: str, queues: Mapping[str, bool]) -> str:
    """The row's queue: one of the write's ``queues`` (opened and checked on the driver:
    a writer creates no queue, and writes to none it did not check)."""
    if value is None:
        raise _Refused(col, "the queue is null: every row names the queue it goes to")
    if not isinstance(value, str):
        raise _Refused(
            col, f"the queue is a {type(value).__name__} ({_short(value)}): queue names are strings"
        )
    if value not in queues:
        try:
            check_name(value, "queue name")
        except (InvalidArgument, InvalidType):
            raise _Refused(
                col,
                f"the queue name {_short(value)} is invalid: queue names have 1-200 "
                "characters without whitespace, ':' or braces",
            ) from None
        raise _Refused(
            col,
            f"the queue {_short(value)} is not one of this write's queues (queues=, "
            "option queues): list it there, once it exists",
        )
    return value


def _headers(value: object, col: str) -> dict[str, Any] | None:
    """A row's headers: a map of strings to strings (or nulls); a null or empty map is
    none. Rows hand maps over as dicts, Arrow as lists of (key, value) pairs."""
    if value is None:
        return None
    items: Any = value.items() if isinstance(value, Mapping) else value
    try:
        pairs = [(k, v) for k, v in items]
    except (TypeError, ValueError):
        raise _Refused(
            col,
            f"the headers are a {type(value).__name__}: headers are a map of strings to strings",
        ) from None
    for k, v in pairs:
        if not isinstance(k, str) or not (v is None or isinstance(v, str)):
            raise _Refused(
                col,
                f"the headers hold {_short(k)}: {_short(v)}: headers are a map of strings "
                "to strings",
            )
    return dict(pairs) or None


def named_queues(spec: RowSpec, rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """The queue names the rows' queue column holds (strings only: others are refused
    row by row)."""
    col = spec.queue_col
    if col is None:
        return set()
    return {v for v in (row.get(col) for row in rows) if isinstance(v, str)}


def _plain_payload(row: Mapping[str, Any], cols: Iterable[str]) -> dict[str, Any]:
    """A row's payload by Python type; a column with no payload form is refused by name."""
    payload = {}
    for c in cols:
        try:
            payload[c] = plain(row[c])
        except PayloadTypeError as exc:
            raise _Refused(c, str(exc)) from None
    return payload


def _priority(value: object, col: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Refused(
            col,
            f"the priority is a {type(value).__name__} ({value!r}): priorities are integers 0..99",
        )
    if not 0 <= value <= MAX_PRIORITY:
        raise _Refused(col, f"the priority is {value}: priorities are 0..99 (lower first)")
    return value


def to_messages(
    spec: RowSpec,
    rows: Iterable[Mapping[str, Any]],
    server_now: Callable[[], float],
    *,
    plan: Plan | None = None,
    ordered: bool = False,
    start: int = 0,
    queues: Mapping[str, bool] | None = None,
) -> Made:
    """Messages for a chunk of rows (``start``: the position of its first row in the
    partition). A row that makes no valid message is refused with the column and why; a
    row repeating an id of an earlier row of the chunk (to the same queue) is counted as
    repeated (push-if-absent keeps the first, as it does across chunks). With a ``plan``
    (the schema's, checked on the driver) payload values are converted by their Spark
    type; without, by their Python type (:func:`plain`). ``server_now`` (Redis time, in
    seconds) is called at most once, and only when a delay column holds timestamps.
    ``ordered``: whether the queue is ordered; with a queue column, ``queues`` maps each
    queue a row may name (at least those the chunk names, of the write's) to that."""
    cached_now = functools.cache(server_now)  # one round trip a chunk, at most
    made = Made()
    seen: set[tuple[str, str]] = set()
    id_col, queue_col = spec.id_col, spec.queue_col
    if queue_col is not None and queues is None:
        raise InvalidArgument("a queue column needs the queues its rows may name")
    routes: Mapping[str, bool] = queues or {}
    convs = None if plan is None else converters(plan)
    for index, row in enumerate(rows, start):
        if index == start:
            spec.check_columns(row.keys())
        try:
            msg_id = _row_id(row[id_col], id_col)
            queue = "" if queue_col is None else _queue(row[queue_col], queue_col, routes)
            if (queue, msg_id) in seen:
                made.repeated += 1
                continue
            in_order = routes[queue] if queue_col is not None else ordered
            msg = _message(spec, row, msg_id, convs, in_order, cached_now)
        except _Refused as bad:
            made.rejected.append(Rejection(index, bad.column, bad.reason))
            continue
        except (TypeError, ValueError, ArithmeticError) as exc:  # a value no converter takes
            made.rejected.append(
                Rejection(index, None, f"a value cannot be stored ({type(exc).__name__}: {exc})")
            )
            continue
        seen.add((queue, msg_id))
        made.messages.append((index, msg))
        if queue_col is not None:
            made.queues.append(queue)
    return made


def _message(
    spec: RowSpec,
    row: Mapping[str, Any],
    msg_id: str,
    convs: Mapping[str, Any] | None,
    ordered: bool,
    now: Callable[[], float],
) -> Message:
    """The message of a row whose id (and queue) is known; _Refused names the column at
    fault."""
    if convs is not None:
        payload = {c: row[c] if f is None else f(row[c]) for c, f in convs.items()}
    else:
        payload = _plain_payload(row, spec.payload_columns(row.keys()))
    key_col, delay_col, prio_col, headers_col = (
        spec.key_col,
        spec.delay_col,
        spec.priority_col,
        spec.headers_col,
    )
    return Message(
        payload,
        id=msg_id,
        delay=0.0 if delay_col is None else _delay(row[delay_col], delay_col, now),
        priority=0 if prio_col is None else _priority(row[prio_col], prio_col),
        key=None if key_col is None else _key(row[key_col], key_col, ordered),
        headers=None if headers_col is None else _headers(row[headers_col], headers_col),
        expires=None
        if spec.expires_col is None
        else _expires(row[spec.expires_col], spec.expires_col),
    )
