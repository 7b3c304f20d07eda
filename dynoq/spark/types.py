"""Spark SQL types -> payload values, and the column checks made on the driver (pure: no
I/O, no pyspark import).

Every writer knows the data's schema on the driver (``format("dynoq")`` gets it from
Spark; ``write``, ``batch_sink`` and ``QueueSink.write`` read ``df.schema``;
``partition_sink(schema=df.schema)`` is told). :func:`plan` checks it there, before any
task starts: the routing columns must have a type that can be an id, a key, a delay or a
priority, and every payload column a type with one faithful payload form. The plan it
returns (picklable: column names and Spark's JSON type descriptions) goes to the
executors, which turn each value into its payload form by its Spark type, not by the
Python type a writer happens to hand over (Arrow gives a map as a list of pairs and a
timestamp with a zone, ``Row`` a dict and a naive local time), so every writer stores
the same payload for the same row:

=========================================  ===========================================
Spark SQL type                             payload value
=========================================  ===========================================
string, char, varchar                      str
boolean; byte, short, int, long            bool; int
float, double                              float (NaN and infinities as they are)
decimal(p, s)                              str: plain digits with exactly s decimals
                                           (``"12.30"``, ``"0.000000"``)
binary                                     bytes
date                                       ``"YYYY-MM-DD"``
timestamp                                  ISO 8601 in UTC (``"2024-05-01T10:00:00+00:00"``)
timestamp_ntz                              ISO 8601 without zone (``"2024-05-01T12:00:00"``)
time                                       ISO 8601 time (``"08:30:00"``)
interval day to second (any fields)        float seconds
array                                      list
map (keys atomic)                          dict (keys converted as above)
struct                                     dict of its fields
void (null)                                None; every null is None
=========================================  ===========================================

Refused, with the column's name: a map keyed by a struct or an array (no payload form
keeps such a key), year-month and calendar intervals, variant, geometry/geography and
user-defined types (cast them to one of the types above).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidType

UTC = dt.timezone.utc
Convert = Callable[[Any], Any]

_STRING = re.compile(r"(string( collate \S+)?|char\(\d+\)|varchar\(\d+\))$")
_INTEGRAL = frozenset({"byte", "short", "integer", "long"})
_FRACTIONAL = frozenset({"float", "double"})
_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)$")
_DAY_TIME = re.compile(r"interval (day|hour|minute|second)( to (hour|minute|second))?$")
_TIME = re.compile(r"time(\(\d\))?$")
_CAST = "cast the column to a supported type first"


def _describe(t: Any) -> str:
    if isinstance(t, str):
        return t
    kind = t.get("type") if isinstance(t, Mapping) else None
    if kind == "udt":
        return f"a user-defined type ({t.get('pyClass') or t.get('class')})"
    return str(kind)


def _is_string(t: Any) -> bool:
    return isinstance(t, str) and _STRING.match(t) is not None


def _is_number(t: Any) -> bool:
    return isinstance(t, str) and (
        t in _INTEGRAL or t in _FRACTIONAL or _DECIMAL.match(t) is not None
    )


# -- the driver's checks ---------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What the executors need to convert rows: each payload column's Spark type (JSON
    text, as ``StructType.jsonValue()`` writes it)."""

    columns: tuple[tuple[str, str], ...]  # (name, Spark JSON type) of the payload columns


@functools.lru_cache(maxsize=64)
def converters(plan: Plan) -> dict[str, Convert | None]:
    """Column name -> converter (None: the value is stored as it is), made once per plan
    and process (kept out of the plan, which travels pickled)."""
    return {name: converter(json.loads(text)) for name, text in plan.columns}


def plan(
    schema: Mapping[str, Any],
    payload_cols: Sequence[str],
    *,
    id_col: str,
    key_col: str | None = None,
    delay_col: str | None = None,
    priority_col: str | None = None,
    queue_col: str | None = None,
    headers_col: str | None = None,
    expires_col: str | None = None,
) -> Plan:
    """Check a schema (``StructType.jsonValue()``) for a write, on the driver; the plan
    for the executors. Raises InvalidType naming the column whose type cannot be stored
    or cannot route a message."""
    fields = {f["name"]: f["type"] for f in schema.get("fields", ())}
    _check_queue_and_headers(fields, queue_col, headers_col)
    for col, what in ((id_col, "id"), (key_col, "key")):
        if col is not None and not (_is_string(fields[col]) or fields[col] in _INTEGRAL):
            raise InvalidType(
                f"{what} column {col!r} is {_describe(fields[col])}: {what}s "
                "are strings or integers; cast the column (e.g. to string)"
            )
    if priority_col is not None and fields[priority_col] not in _INTEGRAL:
        raise InvalidType(
            f"priority column {priority_col!r} is "
            f"{_describe(fields[priority_col])}: priorities are integers "
            "0..99; cast the column to int"
        )
    if delay_col is not None:
        t = fields[delay_col]
        if not (_is_number(t) or t == "timestamp" or (isinstance(t, str) and _DAY_TIME.match(t))):
            hint = (
                " (a timestamp without time zone is no instant: cast it to timestamp)"
                if t == "timestamp_ntz"
                else ""
            )
            raise InvalidType(
                f"delay column {delay_col!r} is {_describe(t)}{hint}: a delay "
                "is seconds (a number), a due timestamp or a day-time "
                "interval; cast the column"
            )
    if expires_col is not None:
        t = fields[expires_col]
        if not (_is_number(t) or (isinstance(t, str) and _DAY_TIME.match(t))):
            raise InvalidType(
                f"expires column {expires_col!r} is {_describe(t)}: an expiry is seconds "
                "(a number) or a day-time interval; cast the column"
            )
    for col in payload_cols:
        check_payload(fields[col], col, col)
    return Plan(tuple((c, json.dumps(fields[c], sort_keys=True)) for c in payload_cols))


def _check_queue_and_headers(
    fields: Mapping[str, Any], queue_col: str | None, headers_col: str | None
) -> None:
    """The queue column holds strings (queue names), the headers column string maps."""
    if queue_col is not None and not _is_string(fields[queue_col]):
        raise InvalidType(
            f"queue column {queue_col!r} is {_describe(fields[queue_col])}: it holds the "
            "name of each row's queue, a string; cast the column to string"
        )
    if headers_col is not None:
        t = fields[headers_col]
        if not (
            isinstance(t, Mapping)
            and t.get("type") == "map"
            and _is_string(t.get("keyType"))
            and _is_string(t.get("valueType"))
        ):
            shown = (
                f"map<{_describe(t.get('keyType'))},{_describe(t.get('valueType'))}>"
                if isinstance(t, Mapping) and t.get("type") == "map"
                else _describe(t)
            )
            raise InvalidType(
                f"headers column {headers_col!r} is {shown}: headers are a "
                "map<string,string>; build one (e.g. map('source', src)) or cast the column"
            )


def check_payload(t: Any, col: str, path: str | None = None) -> None:
    """Raise InvalidType when type ``t`` (at ``path`` of column ``col``; default: the
    column itself) has no payload form: what no writer stores, no typed read decodes."""
    path = col if path is None else path
    if isinstance(t, str):
        if _atomic(t)[0]:
            return
        raise InvalidType(
            f"column {col!r}{_at(col, path)} is {t}, which has no payload "
            f"form: {_CAST} (e.g. to string)"
        )
    kind = t.get("type")
    if kind == "array":
        check_payload(t["elementType"], col, f"{path}[]")
    elif kind == "struct":
        for f in t["fields"]:
            check_payload(f["type"], col, f"{path}.{f['name']}")
    elif kind == "map":
        key = t["keyType"]
        if not isinstance(key, str) or not _atomic(key)[0]:
            raise InvalidType(
                f"column {col!r}{_at(col, path)} is a map keyed by {_describe(key)}: a "
                "payload's dict keys are strings, numbers, bytes, or dates and times as "
                "text, so such a map has no faithful payload form; turn it into an array "
                "of key/value structs (map_entries) or cast its keys to string"
            )
        check_payload(t["valueType"], col, f"{path}{{}}")
    else:
        raise InvalidType(
            f"column {col!r}{_at(col, path)} is {_describe(t)}, which has no payload form: {_CAST}"
        )


def _at(col: str, path: str) -> str:
    return "" if path == col else f" (at {path})"


def atomic_kind(t: str) -> str | None:
    """The payload form of atomic Spark type ``t`` (its JSON name), one of :data:`KINDS`;
    None when it has none. The one place a type name is recognised, for writes
    (:func:`converter`) and for typed reads (:mod:`.decode`)."""
    if _is_string(t):
        return "string"
    if t in _INTEGRAL:
        return "integral"
    if t in _FRACTIONAL:
        return "fractional"
    if t in ("boolean", "void", "binary", "date", "timestamp", "timestamp_ntz"):
        return t
    if _DECIMAL.match(t):
        return "decimal"
    if _TIME.match(t):
        return "time"
    if _DAY_TIME.match(t):
        return "interval"
    return None


KINDS = frozenset(
    {
        "string",
        "integral",
        "fractional",
        "boolean",
        "void",
        "binary",
        "date",
        "timestamp",
        "timestamp_ntz",
        "decimal",
        "time",
        "interval",
    }
)


def decimal_digits(t: str) -> tuple[int, int]:
    """(precision, scale) of a ``decimal(p, s)`` type name."""
    found = _DECIMAL.match(t)
    if found is None:
        raise InvalidType(f"{t} is not a decimal type")
    return int(found.group(1)), int(found.group(2))


def _atomic(t: str) -> tuple[bool, Convert | None]:
    """(whether atomic type ``t`` has a payload form, its converter: None when values are
    stored as they are)."""
    kind = atomic_kind(t)
    if kind == "decimal":
        return True, functools.partial(decimal_text, scale=decimal_digits(t)[1])
    return kind is not None, None if kind is None else _STORED.get(kind)


# -- the executors' conversions ----------------------------------------------------------------

# Wide enough for any Spark decimal (38 digits, and a scale down to -38 with the legacy
# negative scales); a value that would lose a digit raises instead of being rounded.
EXACT = decimal.Context(prec=100, traps=[decimal.InvalidOperation, decimal.Inexact])


def decimal_text(value: decimal.Decimal, scale: int | None = None) -> str:
    """A decimal as its stored text: plain digits, never an exponent, with exactly
    ``scale`` decimals (a ``decimal(p, s)``'s s; none when s < 0), or with its own when
    ``scale`` is None (no schema). Writers hand the same number over with other
    exponents (Arrow: ``0E-18``; Rows: ``-1.00E-10`` for a scale of 10), and every one
    stores the same text: ``"0.000000000000000000"``, ``"-0.0000000001"``. Zero has no
    sign. ArithmeticError if the value has more decimals than ``scale``."""
    if scale is not None:
        value = value.quantize(decimal.Decimal(1).scaleb(-max(scale, 0)), context=EXACT)
    if value.is_zero():
        value = value.copy_abs()
    return format(value, "f")


def _instant(value: dt.datetime) -> str:
    """An instant as ISO 8601 in UTC. Naive datetimes are local time, as PySpark hands
    over ``timestamp`` values in Rows; Arrow's carry their zone."""
    if value.tzinfo is None:
        value = value.astimezone()
    return value.astimezone(UTC).isoformat()


def _wall_clock(value: dt.datetime) -> str:
    return value.replace(tzinfo=None).isoformat()


def _iso(value: dt.date | dt.time) -> str:
    return value.isoformat()


def _seconds(value: dt.timedelta) -> float:
    return value.total_seconds()


def _binary(value: bytes | bytearray | memoryview) -> bytes:
    return bytes(value)


# kind -> converter; kinds not named are stored as they are
_STORED: dict[str, Convert] = {
    "binary": _binary,
    "date": _iso,
    "time": _iso,
    "timestamp": _instant,
    "timestamp_ntz": _wall_clock,
    "interval": _seconds,
}


def _nullable(f: Convert) -> Convert:
    return lambda v: None if v is None else f(v)


def converter(t: Any) -> Convert | None:
    """The converter of a (checked) Spark JSON type; None when values are stored as they
    are. Nulls stay None at every level."""
    if isinstance(t, str):
        ok, atomic = _atomic(t)
        if not ok:
            raise InvalidType(f"{t} has no payload form")
        return None if atomic is None else _nullable(atomic)
    kind = t.get("type")
    if kind == "array":
        item = converter(t["elementType"])
        if item is None:
            return _nullable(list)
        return _nullable(lambda v: [item(x) for x in v])
    if kind == "map":
        key = converter(t["keyType"]) or _same
        val = converter(t["valueType"]) or _same
        # Row gives a dict; Arrow (to_pylist) a list of (key, value) pairs.
        return _nullable(
            lambda v: {key(k): val(x) for k, x in (v.items() if isinstance(v, Mapping) else v)}
        )
    if kind == "struct":
        names = tuple(f["name"] for f in t["fields"])
        convs = tuple(converter(f["type"]) or _same for f in t["fields"])
        return _nullable(lambda v: _struct(names, convs, v))
    raise InvalidType(f"{_describe(t)} has no payload form")


def _same(value: Any) -> Any:
    return value


def _struct(names: tuple[str, ...], convs: tuple[Convert, ...], value: Any) -> dict[str, Any]:
    # Row (a tuple in field order) or a dict (Arrow's to_pylist)
    values = (value[n] for n in names) if isinstance(value, Mapping) else iter(value)
    return {n: c(x) for n, c, x in zip(names, convs, values, strict=False)}
