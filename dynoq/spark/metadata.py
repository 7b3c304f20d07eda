"""The ``_metadata`` column of a typed read: a message's own fields beside its payload's
(pure: no I/O, no pyspark import).

A typed read's schema (:mod:`.decode`) may name ``_metadata``, a nullable struct of any
of the export's columns (:data:`.export.SCHEMA`), nullable, with their types: ``id``,
``state``, ``shard``, ``key``, ``priority``, ``attempts``, ``enqueued_at``,
``deliver_at``, ``dead_at``, ``visibility_deadline``, ``error_type``, ``error``, and
``headers`` (a string: their JSON text, as the export shows them; or any type a payload
column may have, decoded as one). They are filled from the message, as Spark fills a
file's ``_metadata``. One reserved name rather than the export's column names: writers
store every column in the payload by default, the id column too, so a schema's ``id``
is the payload's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InvalidArgument, InvalidType
from ..message import Message
from .export import SCHEMA, to_json
from .types import check_payload

METADATA = "_metadata"
UTC = dt.timezone.utc
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
_DDL_TYPES = {"int": "integer"}  # export.SCHEMA's DDL names -> Spark JSON names
# The export's columns: (name, Spark JSON type)
EXPORT_TYPES = tuple(
    (name, _DDL_TYPES.get(kind, kind)) for name, kind in (c.split() for c in SCHEMA.split(", "))
)
META_TYPES = {name: kind for name, kind in EXPORT_TYPES if name != "payload"}

Meta = Callable[[Message, "str | None", "float | None"], Any]  # (message, state, state's time)


def _when(seconds: float | None) -> dt.datetime | None:
    # exactly the export's microseconds (export._us)
    return None if seconds is None else EPOCH + dt.timedelta(microseconds=round(seconds * 1e6))


# field -> its value of a message in a state (None: a popped message) since a time
GETTERS: dict[str, Meta] = {
    "id": lambda m, s, at: m.id,
    "state": lambda m, s, at: s,
    "shard": lambda m, s, at: m.shard,
    "key": lambda m, s, at: m.key,
    "priority": lambda m, s, at: m.priority,
    "attempts": lambda m, s, at: m.attempts,
    "enqueued_at": lambda m, s, at: _when(m.enqueued_at),
    "deliver_at": lambda m, s, at: _when(m.deliver_at),
    "dead_at": lambda m, s, at: _when(at) if s == "dead" else None,
    "visibility_deadline": lambda m, s, at: _when(at) if s == "unacked" else None,
    "error_type": lambda m, s, at: None if m.failure is None else m.failure.error_type,
    "error": lambda m, s, at: None if m.failure is None else m.failure.error,
    "headers": lambda m, s, at: None if m.headers is None else to_json(m.headers),
}


def check(field: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The (name, Spark JSON type) of the fields a schema's ``_metadata`` column names,
    checked (on the driver): InvalidType or InvalidArgument naming the field."""
    t = field["type"]
    if not isinstance(t, Mapping) or t.get("type") != "struct" or not field.get("nullable", True):
        raise InvalidType(
            f"column {METADATA!r} is the message's metadata: a nullable struct of "
            f'any of {", ".join(META_TYPES)} (e.g. "{METADATA} struct<id: string, '
            'enqueued_at: timestamp>")'
        )
    for f in t["fields"]:
        name, kind = f["name"], f["type"]
        if name not in META_TYPES:
            raise InvalidArgument(
                f"{METADATA}.{name} is no metadata field: choose from {', '.join(META_TYPES)}"
            )
        if not f.get("nullable", True):
            # a null in a NOT NULL field would crash Spark's JVM, not fail clearly
            raise InvalidType(f"{METADATA}.{name} is NOT NULL: declare it nullable")
        if name == "headers":
            check_payload(kind, METADATA, f"{METADATA}.headers")
        elif kind != META_TYPES[name]:
            raise InvalidType(
                f"{METADATA}.{name} is {kind if isinstance(kind, str) else kind.get('type')}: "
                f"declare it {META_TYPES[name]}"
            )
    return tuple((f["name"], f["type"]) for f in t["fields"])
