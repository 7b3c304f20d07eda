"""The storage layout's version (docs/compatibility.md): which layouts this version of
dynoq reads, writes and migrates to, and the one refusal of the others.

A queue's (or topic's) metadata hash holds it in the field ``layout``; a queue stored
before that field existed has none and is layout 1, read as it is. A queue is created
with :data:`LAYOUT` (lua/open-1.lua) and keeps its layout until ``dynoq migrate``
(lua/migrate-1.lua) upgrades it; open-1.lua refuses, before writing anything, a layout
outside :data:`READS`.

Layouts: 1, everything before the field; 2, the field itself (nothing else changed).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import LayoutError
from .calls import Call, Cmd
from .lua import script

LAYOUT = 2  # what this version writes, and what `dynoq migrate` upgrades to
READS = (1, LAYOUT)  # the oldest and newest layouts this version reads as they are
FIELD = "layout"


def stored(fields: Mapping[str, str]) -> int:
    """The layout of a stored metadata hash (absent: 1; unreadable: 0, read by none)."""
    raw = fields.get(FIELD)
    if raw is None:
        return 1
    try:
        return int(raw)
    except ValueError:
        return 0


def refusal(what: str, name: str, found: int) -> LayoutError:
    """The error for a queue or topic stored in layout ``found``, outside :data:`READS`."""
    oldest, newest = READS
    if found > newest:
        todo = "it was written by a later dynoq: upgrade dynoq to open it"
    else:
        todo = (
            "run `dynoq migrate` (with this version, as an admin: "
            "dynoq --url URL --prefix PREFIX migrate) to upgrade it in place"
        )
    return LayoutError(
        f"{what} {name!r} is stored in layout {found}; this version of "
        f"dynoq reads layouts {oldest} to {newest}: {todo}",
        found,
        READS,
    )


def check(fields: Mapping[str, str], what: str, name: str) -> None:
    """Refuse a stored metadata hash of a layout this version does not read."""
    found = stored(fields)
    if not READS[0] <= found <= READS[1]:
        raise refusal(what, name, found)


_MIGRATE = script("migrate")


def held(meta: str) -> Cmd:
    """The layout a queue's or topic's metadata hash ``meta`` is stored in (0: none)."""
    return Cmd(("HMGET", meta, FIELD, "shards"), _held)


def upgrade(meta: str) -> Call:
    """Upgrade one queue's or topic's metadata to :data:`LAYOUT` in place, in one script
    (lua/migrate-1.lua); its reply is (layout before, layout after), (0, 0) when gone."""
    return Call(_MIGRATE, [meta], [LAYOUT], lambda r: (int(r[0]), int(r[1])))


def _held(reply: list[bytes | None]) -> int:
    field, shards = reply
    if shards is None:  # every stored queue or topic has shards: this one is gone
        return 0
    return stored({} if field is None else {FIELD: field.decode()})
