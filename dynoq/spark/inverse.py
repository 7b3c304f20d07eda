"""Payload values -> Spark SQL values: the inverse of :mod:`.types`, one decoder per type
(pure: no I/O, no pyspark import).

:func:`decoder` builds, once per Spark type description (``StructType.jsonValue()``'s
types), the function that turns a payload value back into the Python value Arrow (and
Spark's Row conversion) takes for that type, undoing the form every writer stores:

=========================================  ===========================================
payload value                              Spark SQL type (the Python value Arrow takes)
=========================================  ===========================================
str                                        string, char, varchar
bool; int (in the type's range)            boolean; byte, short, int, long
float (or int)                             float, double (NaN, infinities, -0.0 kept)
str of digits (or int)                     decimal(p, s): a Decimal with exactly s
                                           decimals (more decimals, or more than p - s
                                           digits before the point: a misfit, never
                                           rounded)
bytes                                      binary
``"YYYY-MM-DD"``                           date
ISO 8601 with an offset                    timestamp (the instant; no offset: a misfit)
ISO 8601 without an offset                 timestamp_ntz (an offset: a misfit)
ISO 8601 time                              time
float (or int) seconds                     interval day to second (any fields)
list                                       array
dict (keys decoded by the key type)        map
dict of the fields                         struct (a missing field is null, an extra
                                           key is ignored)
None                                       void, and a null of any nullable type
=========================================  ===========================================

Any other form is a :class:`Misfit`, naming where (a path into the column, as the
writers' checks name it: ``st.due{}[].x``) and why, never the value. A decoder recurses
only where the type nests, so a deep payload costs no more than the type it is read as.
Typed reads (:mod:`.decode`) build their rows with these.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidType
from .types import EXACT, atomic_kind, decimal_digits

Decode = Callable[[Any], Any]
UTC = dt.timezone.utc
_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_FLOAT32_MAX = 3.4028234663852886e38


class Misfit(Exception):
    """A value that does not fit its Spark type: where (a path into the column, as the
    writers' checks name it: ``st.due{}[].x``), and why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path} {reason}")
        self.path = path
        self.reason = reason
        self.column = path


def kind_of(value: object) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


# -- one decoder per Spark type ----------------------------------------------------------------


def decoder(t: Any, path: str, nullable: bool = True) -> Decode:
    """The decoder of a (checked) Spark JSON type at ``path``: payload value -> the Python
    value Arrow takes for the type; raises :class:`Misfit`. Nulls stay None where the
    type is ``nullable``."""
    inner = _decoder(t, path)
    if nullable:
        return lambda v: None if v is None else inner(v)

    def required(v: Any) -> Any:
        if v is None:
            raise Misfit(path, "is null, and the schema says NOT NULL")
        return inner(v)

    return required


def _decoder(t: Any, path: str) -> Decode:
    if isinstance(t, str):
        return _atomic(t, path)
    kind = t.get("type")
    if kind == "array":
        item = decoder(t["elementType"], f"{path}[]", t.get("containsNull", True))

        def array(v: Any) -> list[Any]:
            if not isinstance(v, (list, tuple)):
                raise Misfit(path, f"is {kind_of(v)}, not a list (array)")
            return [item(x) for x in v]

        return array
    if kind == "map":
        key = decoder(t["keyType"], f"{path} (a key)", False)
        val = decoder(t["valueType"], f"{path}{{}}", t.get("valueContainsNull", True))

        def mapping(v: Any) -> dict[Any, Any]:
            if not isinstance(v, Mapping):
                raise Misfit(path, f"is {kind_of(v)}, not a dict (map)")
            return {key(k): val(x) for k, x in v.items()}

        return mapping
    if kind == "struct":
        fields = tuple(
            (f["name"], decoder(f["type"], f"{path}.{f['name']}", f.get("nullable", True)))
            for f in t["fields"]
        )

        def struct(v: Any) -> dict[str, Any]:
            if not isinstance(v, Mapping):
                raise Misfit(path, f"is {kind_of(v)}, not a dict (struct)")
            return {name: dec(v.get(name)) for name, dec in fields}

        return struct
    raise InvalidType(f"{path}: {kind} has no payload form")  # checked types never get here


def _atomic(t: str, path: str) -> Decode:
    kind = atomic_kind(t)
    if kind == "decimal":
        return _decimal(*decimal_digits(t), path)
    if kind == "integral":
        return _integral(t, path)
    if kind == "fractional":
        return _fractional(t == "float", path)
    made = _SIMPLE.get(kind or "")
    if made is None:
        raise InvalidType(f"{path}: {t} has no payload form")  # checked types never get here
    return made(path)


def _typed(kind: type, what: str, path: str) -> Decode:
    def same(v: Any) -> Any:
        if not isinstance(v, kind):
            raise Misfit(path, f"is {kind_of(v)}, not {what}")
        return v

    return same


def _integral(t: str, path: str) -> Decode:
    low, high = _RANGES[t]

    def integral(v: Any) -> int:
        if type(v) is not int:
            raise Misfit(path, f"is {kind_of(v)}, not an integer ({t})")
        if not low <= v <= high:
            raise Misfit(path, f"is an integer out of the range of {t}")
        return v

    return integral


def _fractional(single: bool, path: str) -> Decode:
    what = "float" if single else "double"

    def fractional(v: Any) -> Any:
        if type(v) is not float:
            if type(v) is not int:
                raise Misfit(path, f"is {kind_of(v)}, not a number ({what})")
            try:
                v = float(v)
            except OverflowError:
                raise Misfit(path, f"is an integer out of the range of {what}") from None
        if single and math.isfinite(v) and abs(v) > _FLOAT32_MAX:
            raise Misfit(path, "is a number out of the range of float")
        return v

    return fractional


def _decimal(precision: int, scale: int, path: str) -> Decode:
    # A value with more decimals than the scale raises Inexact, never rounds (as writes).
    quantum = decimal.Decimal(1).scaleb(-max(scale, 0))
    limit = decimal.Decimal(10) ** (precision - max(scale, 0))
    what = f"decimal({precision},{scale})"

    def dec(v: Any) -> decimal.Decimal:
        if type(v) is str:
            try:
                d = decimal.Decimal(v)
            except decimal.InvalidOperation:
                raise Misfit(path, f"is a str that is no number, not a {what}") from None
        elif type(v) is int:
            d = decimal.Decimal(v)
        else:
            raise Misfit(path, f"is {kind_of(v)}, not a {what} (digits as a str)")
        if not d.is_finite():
            raise Misfit(path, f"is {d}, which a {what} cannot hold")
        try:
            d = d.quantize(quantum, context=EXACT)
        except decimal.DecimalException:
            raise Misfit(path, f"has more decimals than a {what} holds") from None
        if d.copy_abs() >= limit:  # copy_abs: abs() would round to 28 digits
            raise Misfit(path, f"has more digits than a {what} holds")
        return d

    return dec


def _text(parse: Callable[[str], Any], what: str, path: str, zoned: bool | None = None) -> Decode:
    """A decoder of ISO 8601 text; ``zoned``: whether the value must (True) or must not
    (False) carry a UTC offset."""

    def from_text(v: Any) -> Any:
        if type(v) is not str:
            raise Misfit(path, f"is {kind_of(v)}, not {what}")
        try:
            value = parse(v)
            if zoned is not None and (value.tzinfo is not None) != zoned:
                has = "has no UTC offset" if zoned else "has a UTC offset"
                raise Misfit(path, f"{has}: it is not {what}")
            return value.astimezone(UTC) if zoned else value
        except (ValueError, OverflowError):  # no such date; out of range once in UTC
            raise Misfit(path, f"is a str that is not {what}") from None

    return from_text


def _interval(path: str) -> Decode:
    def seconds(v: Any) -> dt.timedelta:
        if type(v) not in (float, int):
            raise Misfit(path, f"is {kind_of(v)}, not seconds (a day-time interval)")
        try:
            return dt.timedelta(seconds=v)
        except (OverflowError, ValueError):  # inf, NaN, or past a timedelta's range
            raise Misfit(path, f"is {v!r} seconds, which no day-time interval holds") from None

    return seconds


def _void(path: str) -> Decode:
    def null(v: Any) -> None:
        raise Misfit(path, f"is {kind_of(v)}, and a void column holds only nulls")

    return null


# kind (types.atomic_kind) -> the decoder of that kind at a path
_SIMPLE: dict[str, Callable[[str], Decode]] = {
    "string": lambda p: _typed(str, "a str (string)", p),
    "boolean": lambda p: _typed(bool, "a bool (boolean)", p),
    "binary": lambda p: _typed(bytes, "bytes (binary)", p),
    "date": lambda p: _text(dt.date.fromisoformat, "a date (YYYY-MM-DD)", p),
    "time": lambda p: _text(dt.time.fromisoformat, "a time (ISO 8601)", p, False),
    "timestamp": lambda p: _text(
        dt.datetime.fromisoformat, "a timestamp (ISO 8601 with an offset)", p, True
    ),
    "timestamp_ntz": lambda p: _text(
        dt.datetime.fromisoformat, "a timestamp_ntz (ISO 8601, no offset)", p, False
    ),
    "interval": _interval,
    "void": _void,
}


__all__ = ["Decode", "Misfit", "decoder", "kind_of"]
