"""Commands packed by hiredis (C), as the sync client packs them.

redis.asyncio packs every command in Python (its connections take no hiredis packer),
which costs more than the round trip for dynoq's long argument lists (a push of 1,000
messages, an ack of 1,000 ids). The connections of a plain client's pool are given
hiredis's packer when hiredis is installed and the client encodes text as UTF-8 (what
hiredis does); otherwise nothing changes.
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import DataError

try:
    import hiredis
except ImportError:  # an optional speed-up (redis[hiredis])
    hiredis = None  # type: ignore[assignment]

_made: dict[type, type] = {}


class _HiredisPacking:
    def pack_command(self, *args: Any) -> list[bytes]:
        # As redis-py's sync HiredisRespSerializer.pack.
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError as exc:
            raise DataError(str(exc)) from None


def use_hiredis_packing(client: Any) -> None:
    """Give the connections of ``client``'s pool hiredis's packer (see module doc)."""
    pool = client.connection_pool
    encoding = str(pool.connection_kwargs.get("encoding", "utf-8")).lower()
    if hiredis is None or encoding.replace("-", "") != "utf8":
        return
    base = pool.connection_class
    if issubclass(base, _HiredisPacking):
        return
    made = _made.get(base)
    if made is None:
        made = _made[base] = type(f"Hiredis{base.__name__}", (_HiredisPacking, base), {})
    pool.connection_class = made
