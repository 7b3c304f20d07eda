"""The raw baselines the benchmarks compare dynoq with must do the work they stand for:
a raw message-group queue (benchmarks/raw_groups.py) keeps order per key, holds a key
while its head is in flight, and does not hold the other keys."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from benchmarks.raw_groups import RawGroups


@pytest.fixture(params=["embedded"] + (["redis"] if os.environ.get("REDIS_URL") else []))
def raw(request: pytest.FixtureRequest) -> Iterator[RawGroups]:
    if request.param == "redis":
        url = os.environ["REDIS_URL"]
    else:  # the session's private server (conftest.py)
        server = request.getfixturevalue("embedded_server")
        url = f"redis://{server.host}:{server.port}/0"
    r = redis.Redis.from_url(url)
    q = RawGroups(r, f"rawtest-{uuid.uuid4().hex[:8]}")
    yield q
    q.drop()
    r.close()


def test_a_raw_group_queue_delivers_each_keys_messages_in_order_one_at_a_time(
    raw: RawGroups,
) -> None:
    items = [(f"k{i % 3}", f"m{i}", f"p{i}".encode()) for i in range(9)]
    assert raw.push(items) == 9
    first = raw.pop(100)
    assert [i for i, _ in first] == ["m0", "m1", "m2"]  # one head per key
    assert raw.pop(100) == []  # every key's head is in flight
    assert raw.ack(["m1"]) == 1
    assert raw.pop(100) == [("m4", b"p4")]  # only k1 moved on, in its order
    assert raw.ack(["m1"]) == 0  # acked already
    assert raw.ack(["m0", "m2", "m4"]) == 3
    assert sorted(i for i, _ in raw.pop(100)) == ["m3", "m5", "m7"]  # each key's next


def test_a_raw_group_queue_drains_every_message_once(raw: RawGroups) -> None:
    raw.push([(f"k{i % 50}", f"m{i}", b"x") for i in range(1000)])
    assert raw.drain() == 1000
    assert raw.pop(100) == []
    assert raw.r.hlen(raw.keys[0]) == 0 and raw.r.zcard(raw.keys[3]) == 0
