"""Allocation strategies: pure functions, checked against RocketMQ's algorithms by hand."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from dynoq import allocation
from dynoq.allocation import (
    STRATEGIES,
    averagely,
    averagely_by_circle,
    by_config,
    consistent_hash,
    machine_room,
    machine_room_nearby,
    md5_hash,
    resolve,
)
from dynoq.errors import DynoqError, InvalidArgument, InvalidType

ABC = ["a", "b", "c"]

# shards 0-3 in hz, 4-5 in sh, 6-7 in bj; consumers a, b in hz, c in sh, d in bj
ROOMS: dict[int | str, str] = {
    0: "hz",
    1: "hz",
    2: "hz",
    3: "hz",
    4: "sh",
    5: "sh",
    6: "bj",
    7: "bj",
    "a": "hz",
    "b": "hz",
    "c": "sh",
    "d": "bj",
}


def room_of(item: int | str) -> str | None:
    return ROOMS.get(item)


# Options that make every strategy usable with shards 0-7 and consumers a-d.
OPTIONS: dict[str, dict[str, Any]] = {
    "averagely": {},
    "averagely_by_circle": {},
    "consistent_hash": {},
    "by_config": {"shard_list": [1, 2]},
    "machine_room": {"consumer_idcs": {"hz", "sh", "bj"}, "resolver": room_of},
    "machine_room_nearby": {"resolver": room_of},
}


def split(
    fn: Callable[..., list[int]], shards: Sequence[int], consumers: Sequence[str], **options: Any
) -> dict[str, list[int]]:
    return {me: fn(shards, consumers, me, **options) for me in consumers}


def test_strategy_names() -> None:
    assert set(STRATEGIES) == {
        "averagely",
        "averagely_by_circle",
        "consistent_hash",
        "by_config",
        "machine_room",
        "machine_room_nearby",
    }
    for name, fn in STRATEGIES.items():
        assert getattr(allocation, name) is fn


# --- AllocateMessageQueueAveragely -------------------------------------------------


@pytest.mark.parametrize(
    ("shards", "consumers", "expected"),
    [
        # 8 % 3 = 2: the first two take 3, the last 2 (start = index * 2 + mod = 6)
        (range(8), ABC, {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}),
        (
            range(10),
            ["a", "b", "c", "d"],
            {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7], "d": [8, 9]},
        ),
        (range(9), ABC, {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7, 8]}),
        # more consumers than shards: one each, the rest nothing
        (range(3), ["a", "b", "c", "d", "e"], {"a": [0], "b": [1], "c": [2], "d": [], "e": []}),
        (range(4), ["solo"], {"solo": [0, 1, 2, 3]}),
        # shard numbers need not be contiguous; inputs are sorted first
        ([50, 10, 40, 20, 30], ["y", "x"], {"x": [10, 20, 30], "y": [40, 50]}),
    ],
)
def test_averagely(
    shards: Sequence[int], consumers: list[str], expected: dict[str, list[int]]
) -> None:
    assert split(averagely, shards, consumers) == expected


# --- AllocateMessageQueueAveragelyByCircle -----------------------------------------


@pytest.mark.parametrize(
    ("shards", "consumers", "expected"),
    [
        (range(8), ABC, {"a": [0, 3, 6], "b": [1, 4, 7], "c": [2, 5]}),
        (
            range(10),
            ["a", "b", "c", "d"],
            {"a": [0, 4, 8], "b": [1, 5, 9], "c": [2, 6], "d": [3, 7]},
        ),
        (range(3), ["a", "b", "c", "d", "e"], {"a": [0], "b": [1], "c": [2], "d": [], "e": []}),
        (range(4), ["solo"], {"solo": [0, 1, 2, 3]}),
        ([7, 3, 5, 1], ["b", "a"], {"a": [1, 5], "b": [3, 7]}),
    ],
)
def test_averagely_by_circle(
    shards: Sequence[int], consumers: list[str], expected: dict[str, list[int]]
) -> None:
    assert split(averagely_by_circle, shards, consumers) == expected


# --- AllocateMessageQueueConsistentHash --------------------------------------------


def test_md5_hash_is_rocketmq_long() -> None:
    # first four bytes of MD5, big-endian: md5("") = d41d8cd9..., md5("a") = 0cc175b9...
    assert md5_hash("") == 0xD41D8CD9
    assert md5_hash("a") == 0x0CC175B9
    assert 0 <= md5_hash("consumer-7") < 2**32


def table_hash(table: dict[str, int]) -> Callable[[str], int]:
    return table.__getitem__


def test_consistent_hash_ring_by_hand() -> None:
    ring = {"a-0": 10, "b-0": 20, "c-0": 30}
    keys = {"0": 5, "1": 10, "2": 15, "3": 25, "4": 35}
    # 5 -> a(10); 10 -> a (the point itself); 15 -> b(20); 25 -> c(30); 35 wraps -> a(10)
    got = split(
        consistent_hash, range(5), ABC, virtual_nodes=1, hash_function=table_hash(ring | keys)
    )
    assert got == {"a": [0, 1, 4], "b": [2], "c": [3]}


def test_consistent_hash_collision_later_point_wins() -> None:
    # TreeMap.put semantics: c-0 lands on b-0's position and replaces it
    table = {"a-0": 10, "b-0": 20, "c-0": 20, "0": 5, "1": 15, "2": 25}
    got = split(consistent_hash, range(3), ABC, virtual_nodes=1, hash_function=table_hash(table))
    assert got == {"a": [0, 2], "b": [], "c": [1]}


def test_consistent_hash_virtual_node_keys() -> None:
    seen: list[str] = []

    def spy(key: str) -> int:
        seen.append(key)
        return len(seen)

    consistent_hash(
        [0], ["b", "a"], "a", virtual_nodes=3, hash_function=spy, shard_key=lambda s: f"q:{s}"
    )
    assert seen == ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2", "q:0"]


def test_consistent_hash_md5_matches_rocketmq() -> None:
    # computed with RocketMQ's ConsistentHashRouter/MD5Hash (10 virtual nodes, key str(shard))
    assert split(consistent_hash, range(12), ABC) == {
        "a": [7],
        "b": [5, 9, 10],
        "c": [0, 1, 2, 3, 4, 6, 8, 11],
    }
    assert split(consistent_hash, range(12), ["a", "b", "c", "d"]) == {
        "a": [7],
        "b": [5, 9, 10],
        "c": [0, 1, 2, 3, 4, 8],
        "d": [6, 11],
    }


def owners(
    fn: Callable[..., list[int]], shards: Sequence[int], consumers: Sequence[str], **options: Any
) -> dict[int, str]:
    return {s: me for me, mine in split(fn, shards, consumers, **options).items() for s in mine}


Group = tuple[list[int], list[str], dict[int | str, str]]


def random_groups(seed: int, count: int = 300) -> Iterator[Group]:
    """Seeded random groups (hypothesis is not in the dev venv): shards, members, rooms."""
    rnd = random.Random(seed)
    for _ in range(count):
        shards = sorted(rnd.sample(range(200), rnd.randint(0, 40)))
        names = {
            "".join(rnd.choices("abcdef0123", k=rnd.randint(1, 4)))
            for _ in range(rnd.randint(1, 10))
        }
        consumers = sorted(names)
        rooms: dict[int | str, str] = {x: rnd.choice(["hz", "sh", "bj"]) for x in shards}
        rooms.update({c: rnd.choice(["hz", "sh", "bj"]) for c in consumers})
        yield shards, consumers, rooms


def test_consistent_hash_moves_only_the_changing_members_shards() -> None:
    rnd = random.Random(7)
    for shards, consumers, _ in random_groups(seed=1):
        vnodes = rnd.randint(1, 12)
        newcomer = "".join(rnd.choices("xyz", k=rnd.randint(1, 3)))
        before = owners(consistent_hash, shards, consumers, virtual_nodes=vnodes)
        after = owners(consistent_hash, shards, [*consumers, newcomer], virtual_nodes=vnodes)
        # join: every shard that moved went to the newcomer; read backwards (after ->
        # before) it says a leaving member's shards are the only ones that move
        assert all(after[s] == newcomer for s in shards if after[s] != before[s])


def test_consistent_hash_bad_virtual_nodes() -> None:
    with pytest.raises(InvalidArgument):
        consistent_hash([0], ["a"], "a", virtual_nodes=0)
    with pytest.raises(InvalidType):
        consistent_hash([0], ["a"], "a", virtual_nodes=2.5)  # type: ignore[arg-type]


# --- AllocateMessageQueueByConfig --------------------------------------------------


def test_by_config() -> None:
    assert by_config(range(8), ABC, "b", shard_list=[6, 2, 2, 99]) == [2, 6]
    assert by_config(range(8), ABC, "zz", shard_list=[1]) == []
    assert by_config(range(8), ABC, "a", shard_list=[]) == []
    with pytest.raises(InvalidArgument):
        by_config(range(8), ABC, "a")


# --- AllocateMessageQueueByMachineRoom ---------------------------------------------


def test_machine_room_by_hand() -> None:
    opts: dict[str, Any] = {"consumer_idcs": {"hz", "sh"}, "resolver": room_of}
    # eligible shards 0-5; 3 consumers: 6 // 3 = 2 each, no remainder
    assert split(machine_room, range(8), ABC, **opts) == {"a": [0, 1], "b": [2, 3], "c": [4, 5]}
    # 4 consumers: 6 // 4 = 1 each, remainder 2 -> a, b also take shard i + 1 * 4
    assert split(machine_room, range(8), ["a", "b", "c", "d"], **opts) == {
        "a": [0, 4],
        "b": [1, 5],
        "c": [2],
        "d": [3],
    }
    # shards without a room are never eligible (RocketMQ: broker name without '@')
    assert machine_room(range(12), ["a"], "a", **opts) == [0, 1, 2, 3, 4, 5]
    assert machine_room(range(8), ["a"], "a", consumer_idcs=set(), resolver=room_of) == []


def test_machine_room_needs_options() -> None:
    with pytest.raises(InvalidArgument):
        machine_room(range(8), ABC, "a", resolver=room_of)
    with pytest.raises(InvalidType):
        machine_room(range(8), ABC, "a", consumer_idcs="hz", resolver=room_of)


# --- AllocateMachineRoomNearby -----------------------------------------------------


def test_machine_room_nearby_by_hand() -> None:
    # hz shards 0-3 go to hz consumers a, b; sh shards 4-5 to c; bj has no consumer,
    # so 6-7 are shared by all three averagely (mod 2: a -> 6, b -> 7, c -> nothing)
    assert split(machine_room_nearby, range(8), ABC, resolver=room_of) == {
        "a": [0, 1, 6],
        "b": [2, 3, 7],
        "c": [4, 5],
    }
    # with a bj consumer, every room is served locally
    assert split(machine_room_nearby, range(8), ["a", "b", "c", "d"], resolver=room_of) == {
        "a": [0, 1],
        "b": [2, 3],
        "c": [4, 5],
        "d": [6, 7],
    }


def test_machine_room_nearby_inner_strategy() -> None:
    got = split(
        machine_room_nearby, range(8), ABC, resolver=room_of, strategy="averagely_by_circle"
    )
    assert got == {"a": [0, 2, 6], "b": [1, 3, 7], "c": [4, 5]}
    got = split(
        machine_room_nearby,
        range(8),
        ABC,
        resolver=room_of,
        strategy="by_config",
        strategy_options={"shard_list": [0, 4, 6]},
    )
    assert got == {"a": [0, 6], "b": [0, 6], "c": [4, 6]}

    def first_only(shards: Sequence[int], consumers: Sequence[str], me: str) -> list[int]:
        return [min(shards)] if me == min(consumers) else []

    got = split(machine_room_nearby, range(8), ABC, resolver=room_of, strategy=first_only)
    assert got == {"a": [0, 6], "b": [], "c": [4]}


def test_machine_room_nearby_missing_room() -> None:
    with pytest.raises(InvalidArgument, match="shard 8"):
        machine_room_nearby(range(10), ABC, "a", resolver=room_of)
    with pytest.raises(InvalidArgument, match="consumer 'zz'"):
        machine_room_nearby(range(8), ["a", "zz"], "a", resolver=room_of)
    with pytest.raises(InvalidArgument):
        machine_room_nearby(range(8), ABC, "a")


# --- rules common to every strategy ------------------------------------------------


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_common_rules(name: str) -> None:
    fn, opts = STRATEGIES[name], OPTIONS[name]
    assert fn(range(8), ABC, "stranger", **opts) == []
    assert fn([], ABC, "a", **opts) == []
    assert fn(range(8), [], "a", **opts) == []
    with pytest.raises(InvalidArgument):
        fn(range(8), ABC, "", **opts)
    with pytest.raises(InvalidType):
        fn([0, "1"], ABC, "a", **opts)  # type: ignore[list-item]
    with pytest.raises(InvalidType):
        fn(range(8), "abc", "a", **opts)
    with pytest.raises(InvalidType):
        fn(range(8), ["a", 2], "a", **opts)  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="unknown option"):
        fn(range(8), ABC, "a", **opts, bogus=1)
    # order of the inputs does not matter; results are ascending
    shuffled = fn([7, 3, 0, 5, 1, 6, 2, 4], ["c", "a", "b"], "b", **opts)
    assert shuffled == fn(range(8), ABC, "b", **opts) == sorted(shuffled)


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_union_is_complete_and_disjoint(name: str) -> None:
    for shards, consumers, rooms in random_groups(seed=len(name)):
        check_complete_and_disjoint(name, shards, consumers, rooms)


def check_complete_and_disjoint(
    name: str, shards: list[int], consumers: list[str], rooms: dict[int | str, str]
) -> None:
    expected = set(shards)
    opts: dict[str, Any] = {}
    if name == "by_config":
        # a disjoint configuration: each member configured with its circle share
        got = [
            by_config(shards, consumers, me, shard_list=averagely_by_circle(shards, consumers, me))
            for me in consumers
        ]
    else:
        if name == "machine_room":
            opts = {"consumer_idcs": {"hz", "bj"}, "resolver": rooms.get}
            expected = {s for s in shards if rooms[s] in {"hz", "bj"}}
        elif name == "machine_room_nearby":
            opts = {"resolver": rooms.get}
        got = [STRATEGIES[name](shards, consumers, me, **opts) for me in consumers]
    flat = [s for mine in got for s in mine]
    assert len(flat) == len(set(flat))
    assert set(flat) == expected


# --- resolve -----------------------------------------------------------------------


def test_resolve_names_and_callables() -> None:
    for name, fn in STRATEGIES.items():
        assert resolve(name) is fn

    def everything(shards: Sequence[int], consumers: Sequence[str], me: str) -> list[int]:
        return sorted(shards)

    resolved: object = resolve(everything)
    assert resolved is everything
    assert resolve(everything)([2, 1], ["a"], "a") == [1, 2]


def test_resolve_errors() -> None:
    with pytest.raises(InvalidArgument, match="averagely_by_circle") as info:
        resolve("round_robin")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, DynoqError)
    with pytest.raises(InvalidType) as type_info:
        resolve(42)  # type: ignore[arg-type]
    assert isinstance(type_info.value, TypeError)
    with pytest.raises(InvalidArgument):
        machine_room_nearby(range(8), ABC, "a", resolver=room_of, strategy="nope")
