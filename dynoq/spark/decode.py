"""Payloads -> typed Spark rows: the inverse of :mod:`.types` (pure: no I/O, no pyspark
import).

A typed read (``spark.read.format("dynoq").schema(...)`` or ``option("schema", DDL)``;
the streaming source too) decodes each payload into the schema's columns by their Spark
type, undoing the form every writer stores (the table in :mod:`.types`; the decoders,
one per type, in :mod:`.inverse`), so a DataFrame written by any writer and read back
with its own schema is the same DataFrame.

A payload is a dict of columns: a column missing from it is null (as Spark's JSON reader
has it) and a key no column names is ignored. A value of another form (a string for an
int column, a null for a ``NOT NULL`` field, a payload that is not a dict, a record that
cannot be read) makes the message a *misfit*, handled by the read's mode:

- ``PERMISSIVE`` (default): the row's payload columns are null and the corrupt-record
  column (``_corrupt``, renamed by ``columnNameOfCorruptRecord``), when the schema has
  one (a nullable string), holds the payload's JSON text (as an untyped read shows it);
  ``_metadata`` is filled, so the message can be found. A schema with a ``NOT NULL``
  payload column cannot hold such a row: the read fails, saying so.
- ``FAILFAST``: the task fails with :class:`dynoq.errors.PayloadMismatch`, naming the
  message id, the column (and the field inside it) and what was wrong (never the value).
- ``DROPMALFORMED``: the row is left out.

Besides payload columns a schema may name ``_metadata``, a struct of the message's own
fields (:mod:`.metadata`).

Types are checked on the driver (:func:`rows_plan`): one no writer stores is refused
naming the column (:func:`.types.check_payload`, the writers' own check). Decoders are
built once per plan and process, and recurse only where the schema nests, so a deep
payload costs no more than the schema it is read with.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._core.scan import Found
from ..errors import InvalidArgument, InvalidType, PayloadMismatch
from ..message import Message
from .export import to_json
from .inverse import Decode, Misfit, decoder, kind_of
from .metadata import EXPORT_TYPES, GETTERS, METADATA, Meta, check
from .types import check_payload

MODES = ("PERMISSIVE", "FAILFAST", "DROPMALFORMED")
CORRUPT = "_corrupt"


# -- the plan ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A typed read's plan (picklable; made and checked on the driver by
    :func:`rows_plan`): the schema (``StructType.json()`` text), the mode, and the name
    of the corrupt-record column. :meth:`columns` decodes messages into the schema's
    columns; its decoders are built once per process (:func:`compiled`)."""

    schema: str
    mode: str = "PERMISSIVE"
    corrupt: str = CORRUPT

    @property
    def names(self) -> tuple[str, ...]:
        return compiled(self).names

    def columns(self, messages: Iterable[Found | Message]) -> dict[str, list[Any]]:
        """The rows of ``messages`` (a scan's :class:`~dynoq._core.scan.Found`, or popped
        :class:`dynoq.Message` objects: their ``_metadata.state`` is null) as the
        schema's columns, name -> list of values in schema order, each value what
        ``pyarrow.array(values, type=...)`` (and Spark's Row conversion) takes for the
        column's type. A misfit follows the mode (module docstring); FAILFAST raises
        :class:`dynoq.errors.PayloadMismatch`."""
        return compiled(self).columns(messages)


def rows_plan(
    schema: Mapping[str, Any] | str, *, mode: str = "PERMISSIVE", corrupt: str = CORRUPT
) -> Plan:
    """Check a typed read's ``schema`` (``StructType.jsonValue()``, or its JSON text) on the
    driver, and return its plan. Raises InvalidType naming a column (or field) whose type
    no writer stores, ``_metadata`` or the corrupt-record column ill-declared; and
    InvalidArgument for an unknown mode."""
    fields = _fields(schema)
    chosen = mode.upper()
    if chosen not in MODES:
        raise InvalidArgument(f'option "mode" is {mode!r}: choose from {", ".join(MODES)}')
    if not corrupt:
        raise InvalidArgument('option "columnNameOfCorruptRecord" must name a column')
    for f in fields:
        name, t = f["name"], f["type"]
        if name == corrupt:
            if t != "string" or not f.get("nullable", True):
                raise InvalidType(
                    f"column {name!r} holds the JSON text of payloads that do not fit the "
                    f"schema (null for the others): declare it a nullable string"
                )
        elif name == METADATA:
            check(f)
        else:
            check_payload(t, name)
            _no_char(t, name)
    text = json.dumps({"type": "struct", "fields": list(fields)}, sort_keys=True)
    return Plan(text, chosen, corrupt)


def read_plan(schema: Mapping[str, Any], options: Mapping[str, str]) -> Plan | None:
    """The plan of a read whose schema (``StructType.jsonValue()``) Spark hands the source,
    with the read's options (names lower-case: ``mode``, ``columnnameofcorruptrecord``);
    None when the schema is the export's (:data:`.export.SCHEMA`: no ``.schema()``
    given, or that one), whose reads show payloads as JSON text."""
    if _is_export(schema):
        given = sorted(k for k in ("mode", "columnnameofcorruptrecord") if k in options)
        if given:
            raise InvalidArgument(
                f"option(s) {given} apply to typed reads: give the read a schema of the "
                'payload\'s columns (.schema(...) or option("schema", DDL))'
            )
        return None
    return rows_plan(
        schema,
        mode=options.get("mode", "PERMISSIVE"),
        corrupt=options.get("columnnameofcorruptrecord", CORRUPT),
    )


_CHAR = re.compile(r'"((?:var)?char\(\d+\))"')


def _no_char(t: Any, col: str) -> None:
    # Writers store char/varchar as strings, but Spark hands a Python source's reads to
    # Arrow with its schema, and PySpark has no Arrow type for them: refused here, before
    # every task would fail with UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION.
    found = _CHAR.search(json.dumps(t))
    if found:
        raise InvalidType(
            f"column {col!r} is (or holds) {found.group(1)}, which PySpark cannot read from "
            "a Python data source: declare it string"
        )


def _fields(schema: Mapping[str, Any] | str) -> list[dict[str, Any]]:
    t = json.loads(schema) if isinstance(schema, str) else schema
    if not isinstance(t, Mapping) or t.get("type") != "struct":
        raise InvalidType("a read's schema is a struct of columns (a StructType or DDL)")
    return [dict(f) for f in t["fields"]]


def _is_export(schema: Mapping[str, Any]) -> bool:
    return tuple((f["name"], f["type"]) for f in schema.get("fields", ())) == EXPORT_TYPES


# -- decoding ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    """A plan's decoders (built once per plan and process): each column's role and
    decoder."""

    plan: Plan
    names: tuple[str, ...]
    payload: tuple[tuple[int, str, Decode], ...]  # (position, name, decoder)
    required: tuple[str, ...]  # NOT NULL payload columns: no PERMISSIVE null row fits
    metadata: int | None  # position of _metadata
    meta: tuple[tuple[str, Meta], ...]
    corrupt: int | None  # position of the corrupt-record column

    def columns(self, messages: Iterable[Found | Message]) -> dict[str, list[Any]]:
        out: list[list[Any]] = [[] for _ in self.names]
        mode = self.plan.mode
        for item in messages:
            if isinstance(item, Found):
                m, state, at = item.message, item.state, item.at
            else:
                m, state, at = item, None, None
            try:
                row = self._row(m, state, at)
            except Misfit as bad:
                if mode == "DROPMALFORMED":
                    continue
                if mode == "FAILFAST" or self.required:
                    raise self._mismatch(m, bad) from None
                row = self._null_row(m, state, at)
            for values, value in zip(out, row, strict=True):
                values.append(value)
        return dict(zip(self.names, out, strict=True))

    def _row(self, m: Message, state: str | None, at: float | None) -> list[Any]:
        row: list[Any] = [None] * len(self.names)
        payload = m.payload
        if m.unreadable is not None:
            raise Misfit("", "cannot be read")  # "": the payload as a whole
        if not isinstance(payload, Mapping):
            raise Misfit("", f"is {kind_of(payload)}, not a dict of columns")
        for pos, name, dec in self.payload:
            try:
                row[pos] = dec(payload.get(name))
            except Misfit as bad:
                bad.column = name
                raise
        if self.metadata is not None:
            row[self.metadata] = self._meta(m, state, at, strict=True)
        return row

    def _null_row(self, m: Message, state: str | None, at: float | None) -> list[Any]:
        row: list[Any] = [None] * len(self.names)
        if self.metadata is not None:
            row[self.metadata] = self._meta(m, state, at, strict=False)
        if self.corrupt is not None:
            # as an untyped read shows the payload; "null" for none (an unreadable record)
            row[self.corrupt] = to_json(m.payload) or "null"
        return row

    def _meta(self, m: Message, state: str | None, at: float | None, strict: bool) -> Any:
        fields = {}
        for name, get in self.meta:
            try:
                fields[name] = get(m, state, at)
            except Misfit as bad:
                if strict:
                    bad.column = METADATA
                    raise
                fields[name] = None  # the headers of a row already read as a misfit
        return fields

    def _mismatch(self, m: Message, bad: Misfit) -> PayloadMismatch:
        at = "" if bad.path == bad.column else f" (at {bad.path})"
        where = f"column {bad.column!r}{at}" if bad.column else "its payload"
        if self.plan.mode == "FAILFAST":
            how = (
                "fix the schema, or read with mode PERMISSIVE (a row of nulls, the payload's "
                f"JSON text in a {self.plan.corrupt!r} column) or DROPMALFORMED to read past it"
            )
        else:
            how = (
                "mode PERMISSIVE cannot make it a row of nulls, as column(s) "
                f"{', '.join(map(repr, self.required))} are NOT NULL in the schema: fix the "
                "schema, make them nullable, or read with mode DROPMALFORMED"
            )
        return PayloadMismatch(
            f"message {m.id!r} does not fit the read's schema: {where} {bad.reason}; {how}"
        )


def _meta(name: str, t: Any) -> Meta:
    if name != "headers" or t == "string":
        return GETTERS[name]
    dec = decoder(t, f"{METADATA}.headers")  # headers read as a payload column's type
    return lambda m, s, at: dec(m.headers)


@functools.lru_cache(maxsize=64)
def compiled(plan: Plan) -> Compiled:
    """A plan's decoders, built once per plan and process (kept out of the plan, which
    travels pickled)."""
    fields = _fields(plan.schema)
    payload, required = [], []
    meta: tuple[tuple[str, Meta], ...] = ()
    metadata = corrupt = None
    for pos, f in enumerate(fields):
        name = f["name"]
        if name == plan.corrupt:
            corrupt = pos
        elif name == METADATA:
            metadata, meta = pos, tuple((n, _meta(n, t)) for n, t in check(f))
        else:
            nullable = f.get("nullable", True)
            payload.append((pos, name, decoder(f["type"], name, nullable)))
            if not nullable:
                required.append(name)
    return Compiled(
        plan,
        tuple(f["name"] for f in fields),
        tuple(payload),
        tuple(required),
        metadata,
        meta,
        corrupt,
    )


__all__ = [
    "CORRUPT",
    "METADATA",
    "MODES",
    "Compiled",
    "Plan",
    "compiled",
    "read_plan",
    "rows_plan",
]
