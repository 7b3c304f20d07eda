"""Consumer rebalance: which shards each member of a consumer group takes.

Each strategy mirrors one of Apache RocketMQ's ``AllocateMessageQueueStrategy``
classes and is a pure function (no I/O)::

    fn(shards, consumers, me, /, **options) -> list[int]

It returns the shards ``me`` gets. Inputs are de-duplicated and sorted inside
(shards numerically, consumer ids lexicographically), so every member of a group
computes the same split on its own from the same membership list. Common rules:

* ``me`` not in ``consumers`` -> ``[]`` (RocketMQ logs "[BUG] ..." and returns empty);
* no shards -> ``[]`` (RocketMQ raises instead);
* an empty ``me`` or wrongly typed inputs raise :class:`~dynoq.errors.InvalidArgument`
  / :class:`~dynoq.errors.InvalidType`, as do unknown options;
* the result is in ascending shard order.

The three positional arguments are positional-only.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

from dynoq.errors import InvalidArgument, InvalidType

__all__ = [
    "STRATEGIES",
    "HashFunction",
    "RoomResolver",
    "Strategy",
    "averagely",
    "averagely_by_circle",
    "by_config",
    "consistent_hash",
    "machine_room",
    "machine_room_nearby",
    "md5_hash",
    "resolve",
]


class Strategy(Protocol):
    """An allocation strategy: the shards ``me`` gets out of ``shards``."""

    def __call__(
        self,
        shards: Sequence[int],
        consumers: Sequence[str],
        me: str,
        /,
        **options: Any,
    ) -> list[int]: ...


HashFunction = Callable[[str], int]
"""Maps a key to a ring position (RocketMQ's ``HashFunction``)."""

RoomResolver = Callable[[int | str], str | None]
"""Called with a shard (``int``) or a consumer id (``str``); returns its machine room."""


def _prepare(
    shards: Iterable[int], consumers: Iterable[str], me: str
) -> tuple[list[int], list[str]] | None:
    """Validate and sort the inputs; ``None`` when ``me`` gets nothing by the common rules."""
    if not isinstance(me, str):
        raise InvalidType(f"me must be a str, not {type(me).__name__}")
    if not me:
        raise InvalidArgument("me (the current consumer id) is empty")
    for what, value in (("shards", shards), ("consumers", consumers)):
        if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
            raise InvalidType(f"{what} must be a sequence, not {type(value).__name__}")
    shard_set = set(shards)
    consumer_set = set(consumers)
    for shard in shard_set:
        if isinstance(shard, bool) or not isinstance(shard, int):
            raise InvalidType(f"shards must be ints, got {shard!r}")
    for cid in consumer_set:
        if not isinstance(cid, str):
            raise InvalidType(f"consumer ids must be str, got {cid!r}")
    if not shard_set or me not in consumer_set:
        return None
    return sorted(shard_set), sorted(consumer_set)


def _reject_unknown(strategy: str, unknown: Mapping[str, Any], accepted: str) -> None:
    if unknown:
        raise InvalidArgument(
            f"{strategy}() got unknown option(s) {', '.join(sorted(unknown))}; accepted: {accepted}"
        )


def averagely(
    shards: Sequence[int], consumers: Sequence[str], me: str, /, **unknown: Any
) -> list[int]:
    """Contiguous blocks, the first ``len(shards) % len(consumers)`` members one larger.

    Mirrors ``AllocateMessageQueueAveragely``. 8 shards over a, b, c: a=[0,1,2], b=[3,4,5], c=[6,7].
    """
    _reject_unknown("averagely", unknown, "none")
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    mq, cids = prepared
    index, n_mq, n_cid = cids.index(me), len(mq), len(cids)
    mod = n_mq % n_cid
    size = 1 if n_mq <= n_cid else n_mq // n_cid + (1 if index < mod else 0)
    start = index * size if index < mod else index * size + mod
    return mq[start : start + size]  # the slice clamps RocketMQ's min(size, n - start)


def averagely_by_circle(
    shards: Sequence[int], consumers: Sequence[str], me: str, /, **unknown: Any
) -> list[int]:
    """Round robin: member ``i`` takes shards ``i``, ``i + n``, ``i + 2n``...

    Mirrors ``AllocateMessageQueueAveragelyByCircle``. 8 shards over a, b, c:
    a=[0,3,6], b=[1,4,7], c=[2,5].
    """
    _reject_unknown("averagely_by_circle", unknown, "none")
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    mq, cids = prepared
    return mq[cids.index(me) :: len(cids)]


def md5_hash(key: str) -> int:
    """RocketMQ's default ring hash (``ConsistentHashRouter.MD5Hash``).

    The first four bytes of MD5 of the UTF-8 key, big-endian, as a non-negative int
    (0 .. 2**32 - 1), exactly the ``long`` the Java code builds.
    """
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


def consistent_hash(
    shards: Sequence[int],
    consumers: Sequence[str],
    me: str,
    /,
    *,
    virtual_nodes: int = 10,
    hash_function: HashFunction | None = None,
    shard_key: Callable[[int], str] = str,
    **unknown: Any,
) -> list[int]:
    """A hash ring of ``virtual_nodes`` points per member; a shard goes to the next point.

    Mirrors ``AllocateMessageQueueConsistentHash`` + ``ConsistentHashRouter``: point keys
    are ``f"{consumer}-{i}"``, the ring is ordered by hash (a colliding later point replaces
    an earlier one, as a ``TreeMap.put`` does), and a shard routes to the first point at or
    after its hash, wrapping around. ``hash_function`` defaults to :func:`md5_hash`.
    A joining or leaving member moves only the shards it gains or loses.

    Differences: RocketMQ hashes ``MessageQueue.toString()``; here a shard's key is
    ``shard_key(shard)`` (default ``str(shard)``). ``virtual_nodes`` must be >= 1
    (RocketMQ accepts 0 and then assigns nothing to anyone).
    """
    _reject_unknown("consistent_hash", unknown, "virtual_nodes, hash_function, shard_key")
    if isinstance(virtual_nodes, bool) or not isinstance(virtual_nodes, int):
        raise InvalidType(f"virtual_nodes must be an int, not {type(virtual_nodes).__name__}")
    if virtual_nodes < 1:
        raise InvalidArgument(f"virtual_nodes must be >= 1, got {virtual_nodes}")
    hash_fn = md5_hash if hash_function is None else hash_function
    if not callable(hash_fn) or not callable(shard_key):
        raise InvalidType("hash_function and shard_key must be callables")
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    mq, cids = prepared
    ring: dict[int, str] = {}
    for cid in cids:
        for replica in range(virtual_nodes):
            ring[hash_fn(f"{cid}-{replica}")] = cid
    points = sorted(ring)
    owners = [ring[point] for point in points]
    mine = []
    for shard in mq:
        slot = bisect_left(points, hash_fn(shard_key(shard)))
        if owners[slot % len(points)] == me:
            mine.append(shard)
    return mine


def by_config(
    shards: Sequence[int],
    consumers: Sequence[str],
    me: str,
    /,
    *,
    shard_list: Iterable[int] | None = None,
    **unknown: Any,
) -> list[int]:
    """The configured ``shard_list``, whatever the group looks like.

    Mirrors ``AllocateMessageQueueByConfig``. Differences: RocketMQ returns the configured
    list as is; here shards that do not exist are dropped, the result is sorted and
    de-duplicated, and the common rules apply (``me`` not a member -> ``[]``).
    """
    _reject_unknown("by_config", unknown, "shard_list")
    if shard_list is None:
        raise InvalidArgument("by_config needs the shard_list option")
    if isinstance(shard_list, (str, bytes)) or not isinstance(shard_list, Iterable):
        raise InvalidType("shard_list must be an iterable of shard numbers")
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    wanted = set(shard_list)
    return [shard for shard in prepared[0] if shard in wanted]


def machine_room(
    shards: Sequence[int],
    consumers: Sequence[str],
    me: str,
    /,
    *,
    consumer_idcs: Collection[str] | None = None,
    resolver: RoomResolver | None = None,
    **unknown: Any,
) -> list[int]:
    """Only shards in the rooms ``consumer_idcs``, split over all members.

    Mirrors ``AllocateMessageQueueByMachineRoom``: with ``m`` such shards and ``n``
    members, member ``i`` takes the block ``[i*(m//n), (i+1)*(m//n))`` and, if
    ``i < m % n``, also the shard at ``i + (m//n)*n``. RocketMQ reads the room from a
    ``"room@broker"`` broker name; here ``resolver(shard)`` returns it (``None`` or
    ``""``: no room, the shard is skipped, like a broker name without ``@``).
    """
    _reject_unknown("machine_room", unknown, "consumer_idcs, resolver")
    if consumer_idcs is None or resolver is None:
        raise InvalidArgument("machine_room needs the consumer_idcs and resolver options")
    if isinstance(consumer_idcs, (str, bytes)):
        raise InvalidType("consumer_idcs must be a collection of room names, not a string")
    if not callable(resolver):
        raise InvalidType("resolver must be callable")
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    mq, cids = prepared
    idcs = set(consumer_idcs)
    chosen = [shard for shard in mq if resolver(shard) in idcs]
    index, n_cid = cids.index(me), len(cids)
    block, rem = divmod(len(chosen), n_cid)
    result = chosen[index * block : (index + 1) * block]
    if index < rem:
        result.append(chosen[index + block * n_cid])
    return result


def machine_room_nearby(
    shards: Sequence[int],
    consumers: Sequence[str],
    me: str,
    /,
    *,
    resolver: RoomResolver | None = None,
    strategy: str | Callable[..., list[int]] = "averagely",
    strategy_options: Mapping[str, Any] | None = None,
    **unknown: Any,
) -> list[int]:
    """Shards of a room go to the members in that room; rooms with none are shared by all.

    Mirrors ``AllocateMachineRoomNearby``: ``me`` takes its share (by the inner
    ``strategy``) of its own room's shards among its room's members, plus its share of
    each room that has shards but no member, among all members. ``resolver`` maps a
    shard or a consumer id to its room (RocketMQ's ``MachineRoomResolver``); a missing
    room raises :class:`~dynoq.errors.InvalidArgument`. Differences: the inner strategy
    defaults to ``averagely`` (RocketMQ requires one) and the result is sorted.
    """
    _reject_unknown("machine_room_nearby", unknown, "resolver, strategy, strategy_options")
    if resolver is None:
        raise InvalidArgument("machine_room_nearby needs the resolver option")
    if not callable(resolver):
        raise InvalidType("resolver must be callable")
    inner = resolve(strategy)
    inner_options = dict(strategy_options or {})
    prepared = _prepare(shards, consumers, me)
    if prepared is None:
        return []
    mq, cids = prepared

    def room_of(item: int | str, what: str) -> str:
        room = resolver(item)
        if not room:
            raise InvalidArgument(f"machine room is empty for {what} {item!r}")
        return room

    shards_by_room: dict[str, list[int]] = {}
    for shard in mq:
        shards_by_room.setdefault(room_of(shard, "shard"), []).append(shard)
    consumers_by_room: dict[str, list[str]] = {}
    for cid in cids:
        consumers_by_room.setdefault(room_of(cid, "consumer"), []).append(cid)

    my_room = room_of(me, "consumer")
    result: list[int] = []
    local = shards_by_room.pop(my_room, [])
    if local:
        result += inner(local, consumers_by_room[my_room], me, **inner_options)
    for room in sorted(shards_by_room):
        if room not in consumers_by_room:
            result += inner(shards_by_room[room], cids, me, **inner_options)
    return sorted(result)


STRATEGIES: dict[str, Strategy] = {
    "averagely": averagely,
    "averagely_by_circle": averagely_by_circle,
    "consistent_hash": consistent_hash,
    "by_config": by_config,
    "machine_room": machine_room,
    "machine_room_nearby": machine_room_nearby,
}


def resolve(strategy: str | Callable[..., list[int]]) -> Strategy:
    """The strategy named ``strategy`` (a key of :data:`STRATEGIES`), or a user callable as is.

    A user callable must follow the same contract: ``fn(shards, consumers, me, **options)``.
    """
    if isinstance(strategy, str):
        try:
            return STRATEGIES[strategy]
        except KeyError:
            valid = ", ".join(sorted(STRATEGIES))
            raise InvalidArgument(
                f"unknown allocation strategy {strategy!r}; valid names: {valid}"
            ) from None
    if callable(strategy):
        return cast(Strategy, strategy)
    raise InvalidType(
        f"strategy must be a strategy name or a callable, not {type(strategy).__name__}"
    )
