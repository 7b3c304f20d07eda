"""Rows to messages for the Spark sinks (pure: no I/O, no pyspark import).

A row is any mapping of column name to value (``Row.asDict()``, or a dict from Arrow's
``RecordBatch.to_pylist()``). Its payload is the dict of ``payload_cols`` (default: every
column), with values made msgpack-safe by :func:`plain`:

=====================  =========================================================
Spark / Python value   payload value
=====================  =========================================================
timestamp (datetime)   ISO 8601 string in UTC, e.g. ``"2024-05-01T12:00:00+00:00"``
                       (naive datetimes, as PySpark gives them, are local time)
date                   ``"YYYY-MM-DD"``
decimal (Decimal)      string, exact (``"12.30"``): a float would lose digits
time                   ISO string; day-time interval (timedelta): float seconds
struct (Row)           dict;  array: list;  map: dict;  binary: bytes
=====================  =========================================================

A map keyed by structs (or arrays) is refused, naming its column: a payload's dict keys
are strings, numbers or bytes, and no faithful form exists for such a map.

The delay column holds seconds (int, float or Decimal, >= 0, null = none) or a timestamp,
turned into a delay against the Redis server's clock, so executors' clocks do not matter;
a due time in the past means "due now".
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import InvalidArgument, InvalidType, PayloadTypeError
from ..message import Message

_PASS = frozenset({str, int, float, bool, bytes, type(None)})
MAX_ID_LENGTH = 512


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
        return str(value)
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
                    "or make it an array of entries (map_entries)")
            out[key] = plain(v)
        return out
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value  # anything else: the codec raises a clear PayloadTypeError


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidType(f"{what} must be a non-empty column name (str), got {value!r}")
    return value


@dataclass(frozen=True)
class RowSpec:
    """Which columns make a message: id, optional key/delay/priority, and the payload."""

    id_col: str
    key_col: str | None = None
    delay_col: str | None = None
    priority_col: str | None = None
    payload_cols: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        _name(self.id_col, "id_col")
        for what in ("key_col", "delay_col", "priority_col"):
            if getattr(self, what) is not None:
                _name(getattr(self, what), what)
        if self.payload_cols is not None:
            if isinstance(self.payload_cols, str) or not isinstance(self.payload_cols, tuple):
                raise InvalidType("payload_cols must be a list of column names or None")
            for col in self.payload_cols:
                _name(col, "each of payload_cols")

    @classmethod
    def of(cls, id_col: str, key_col: str | None = None, delay_col: str | None = None,
           priority_col: str | None = None,
           payload_cols: Iterable[str] | None = None) -> RowSpec:
        if isinstance(payload_cols, str):
            raise InvalidType("payload_cols must be a list of column names, not one string")
        cols = None if payload_cols is None else tuple(payload_cols)
        return cls(id_col, key_col, delay_col, priority_col, cols)

    @property
    def routing_cols(self) -> list[str]:
        return [c for c in (self.id_col, self.key_col, self.delay_col, self.priority_col)
                if c is not None]

    def needed(self, columns: Sequence[str]) -> list[str]:
        """The columns of ``columns`` a sink reads, in their order (to prune the rest)."""
        want = set(self.routing_cols) | set(columns if self.payload_cols is None
                                            else self.payload_cols)
        return [c for c in columns if c in want]

    def check_columns(self, columns: Collection[str]) -> None:
        """Raise a clear error when a column the spec names is not in the data."""
        named = [(c, "id_col") for c in [self.id_col]]
        named += [(getattr(self, w), w) for w in ("key_col", "delay_col", "priority_col")
                  if getattr(self, w) is not None]
        named += [(c, "payload_cols") for c in self.payload_cols or ()]
        for col, what in named:
            if col not in columns:
                raise InvalidArgument(
                    f"{what} names column {col!r}, which is not in the data (columns: "
                    f"{', '.join(sorted(columns)) or 'none'}); fix the column mapping")


def _row_id(value: object, col: str, index: int) -> str:
    where = f"row {index} of this batch"
    if value is None:
        raise InvalidArgument(f"id column {col!r} is null in {where}: every row needs an "
                              "id (ids make retried Spark tasks push nothing twice)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidType(f"id column {col!r} holds a {type(value).__name__} ({value!r}) in "
                          f"{where}: ids must be strings or integers (cast the column)")
    text = str(value)
    if not text.strip():
        raise InvalidArgument(f"id column {col!r} is empty in {where}: every row needs an id")
    if len(text) > MAX_ID_LENGTH:
        raise InvalidArgument(f"id column {col!r} holds an id of {len(text)} characters in "
                              f"{where}; ids may be at most {MAX_ID_LENGTH}")
    return text


def _delay(value: object, col: str, index: int, server_now: Callable[[], float]) -> float:
    if value is None:
        return 0.0
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.astimezone()
        return max(0.0, when.timestamp() - server_now())
    if isinstance(value, Decimal):
        if not value.is_finite():  # NaN, sNaN (float() refuses it), infinities
            raise InvalidArgument(f"delay column {col!r} holds {value!r} in row {index} of "
                                  "this batch: delays must be finite seconds >= 0")
        value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"delay column {col!r} holds a {type(value).__name__} ({value!r}) in "
                          f"row {index} of this batch: use seconds or a timestamp")
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"delay column {col!r} holds {value!r} in row {index} of this "
                              "batch: delays must be finite seconds >= 0")
    return float(value)


def _payload_naming_the_column(row: Mapping[str, Any], cols: Iterable[str],
                               index: int) -> dict[str, Any]:
    """The payload of a row where some column has no payload form: raise naming it."""
    payload = {}
    for c in cols:
        try:
            payload[c] = plain(row[c])
        except PayloadTypeError as exc:
            raise PayloadTypeError(f"column {c!r} in row {index} of this batch: {exc}") from None
    return payload


def to_messages(spec: RowSpec, rows: Iterable[Mapping[str, Any]],
                server_now: Callable[[], float]) -> list[Message]:
    """Messages for a batch of rows, validating every row first (so a bad row fails the
    batch before anything of it is written). A repeated id keeps its first row, as
    push-if-absent does across batches. ``server_now`` (Redis time, in seconds) is called
    at most once, and only when a delay column holds timestamps."""
    now: list[float] = []

    def cached_now() -> float:
        if not now:
            now.append(server_now())
        return now[0]

    out: list[Message] = []
    seen: set[str] = set()
    id_col, key_col, delay_col, prio_col = (spec.id_col, spec.key_col, spec.delay_col,
                                            spec.priority_col)
    payload_cols = spec.payload_cols
    for index, row in enumerate(rows):
        if index == 0:
            spec.check_columns(row.keys())
        msg_id = _row_id(row[id_col], id_col, index)
        if msg_id in seen:
            continue
        seen.add(msg_id)
        cols = row.keys() if payload_cols is None else payload_cols
        try:
            payload = {c: plain(row[c]) for c in cols}
        except PayloadTypeError:
            payload = _payload_naming_the_column(row, cols, index)
        key = None if key_col is None else row[key_col]
        delay = 0.0 if delay_col is None else _delay(row[delay_col], delay_col, index,
                                                     cached_now)
        priority = 0 if prio_col is None or row[prio_col] is None else row[prio_col]
        out.append(Message(payload, id=msg_id, delay=delay, priority=priority, key=key))
    return out
