"""Bad input gets a clear, typed error and changes nothing (DESIGN §2.8)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

import dynoq
import dynoq.asyncio
from dynoq import Message

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


def _untouched(q: dynoq.Queue) -> None:
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"delay": -1}, ValueError),
        ({"delay": math.nan}, ValueError),
        ({"delay": math.inf}, ValueError),
        ({"delay": "5"}, TypeError),
        ({"priority": -1}, ValueError),
        ({"priority": 100}, ValueError),
        ({"priority": 1.5}, TypeError),
        ({"priority": True}, TypeError),
        ({"id": ""}, ValueError),
        ({"id": 1.5}, TypeError),
        ({"key": 2.5}, TypeError),
        ({"headers": ["not", "a", "dict"]}, TypeError),
    ],
)
def test_bad_push_arguments(
    client: dynoq.Client, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    q = client.queue("bad", shards=2)
    with pytest.raises(error) as info:
        q.push("x", **kwargs)
    assert isinstance(info.value, dynoq.DynoqError)
    _untouched(q)


@pytest.mark.parametrize("payload", [{1, 2}, object(), 2**70, {"nested": [complex(1, 2)]}])
def test_unserializable_payload(client: dynoq.Client, payload: Any) -> None:
    q = client.queue("bad-payload", shards=1)
    with pytest.raises(dynoq.PayloadTypeError, match=r"msgpack|encoded") as info:
        q.push(payload)
    assert isinstance(info.value, TypeError)
    _untouched(q)


def test_oversized_payload_limit_is_configurable(make_client: Any) -> None:
    small = make_client(max_payload_bytes=1000)
    q = small.queue("big", shards=1)
    with pytest.raises(dynoq.PayloadTooLarge, match="max_payload_bytes") as info:
        q.push(b"x" * 2000)
    assert isinstance(info.value, ValueError)
    _untouched(q)
    q.push(b"x" * 900)
    assert q.size() == 1


def test_one_bad_item_in_push_many_writes_none(client: dynoq.Client) -> None:
    q = client.queue("bad-many", shards=4)
    items = [Message(i) for i in range(50)] + [Message("x", delay=-1)]
    with pytest.raises(ValueError):
        q.push_many(items)
    with pytest.raises(TypeError):
        q.push_many([*range(10), {1, 2}])
    with pytest.raises(ValueError, match="same id"):
        q.push_many([Message(1, id="a"), Message(2, id="a")])
    _untouched(q)


@pytest.mark.parametrize("name", ["", "has{brace", "has}brace", "with space", "x" * 201])
def test_bad_queue_names(client: dynoq.Client, name: str) -> None:
    with pytest.raises(dynoq.InvalidArgument, match="queue name"):
        client.queue(name)
    assert name not in client.queue_names()


def test_bad_queue_name_type_and_prefix(client: dynoq.Client) -> None:
    with pytest.raises(dynoq.InvalidType):
        client.queue(5)  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidArgument, match="prefix"):
        dynoq.connect("memory://", prefix="a{b}")


@pytest.mark.parametrize(
    "settings",
    [
        {"shards": 0},
        {"shards": -2},
        {"unack_timeout": 0},
        {"unack_timeout": math.nan},
        {"max_retries": -1},
        {"dedupe_window": -1},
    ],
)
def test_bad_settings_write_nothing(client: dynoq.Client, settings: dict[str, Any]) -> None:
    with pytest.raises(dynoq.QueueConfigError):
        client.queue("bad-settings", **settings)
    assert "bad-settings" not in client.queue_names()


def test_bad_settings_types(client: dynoq.Client) -> None:
    with pytest.raises(dynoq.InvalidType):
        client.queue("t", shards="4")  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidType):
        client.queue("t", ordered="yes")  # type: ignore[arg-type]


def test_bad_pop_and_ops_arguments(client: dynoq.Client) -> None:
    q = client.queue("bad-ops", shards=2)
    q.push("keep")
    for call in (
        lambda: q.pop(0),
        lambda: q.pop(-1),
        lambda: q.pop(wait=-1),
        lambda: q.pop(visibility=0),
        lambda: q.peek(0),
        lambda: q.nack("x", delay=-1),
        lambda: q.extend("x", math.inf),
        lambda: q.extend("x", -0.5),
        lambda: q.extend("x", math.nan),
        lambda: q.reschedule("x", delay=-5),
        lambda: q.planner.pop(shards=[7]),
    ):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        q.pop("3")  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidArgument, match="not popped"):
        q.ack(Message("never popped"))
    with pytest.raises(dynoq.InvalidArgument, match="needs an id"):
        q.ensure("x", id=None)  # type: ignore[arg-type]
    assert q.size() == 1


def test_bad_urls() -> None:
    with pytest.raises(dynoq.InvalidArgument, match="scheme"):
        dynoq.connect("http://localhost")
    with pytest.raises(dynoq.ConnectionFailed, match="unreachable"):
        dynoq.connect("redis://127.0.0.1:1/0", socket_connect_timeout=0.5, retry=None)


def test_min_replicas_refused_in_memory() -> None:
    with dynoq.connect("memory://no-replicas") as c:
        with pytest.raises(dynoq.QueueConfigError, match="replicas"):
            c.queue("durable", min_replicas=1)
        assert "durable" not in c.queue_names()


def test_list_arguments_that_are_no_lists(client: dynoq.Client) -> None:
    q = client.queue("bad-lists", shards=2)
    t = client.topic("bad-lists-topic", shards=2)
    for call in (
        lambda: q.push_many(None),
        lambda: q.push_many("abc"),
        lambda: q.push_many(5),
        lambda: q.ensure_many(None),
        lambda: q.ack_many(None),
        lambda: q.ack_many(b"x"),
        lambda: q.replay_dead(5),
        lambda: t.publish_many(None),
    ):
        with pytest.raises(dynoq.InvalidType, match="takes a list") as info:
            call()
        assert isinstance(info.value, TypeError)
    with pytest.raises(dynoq.InvalidArgument, match="at most 100000"):
        q.push_many(iter(range(10**9)))  # read no further than the bound
    _untouched(q)


def test_a_lone_surrogate_is_refused_wherever_text_goes_to_redis(client: dynoq.Client) -> None:
    q = client.queue("surrogates", shards=2)
    t = client.topic("surrogate-topic", shards=2)
    bad = "a\udc80b"  # what errors="surrogateescape" decoding makes of a stray byte
    for call in (
        lambda: q.push("x", id=bad),
        lambda: q.push("x", key=bad),
        lambda: q.get(bad),
        lambda: q.contains(bad),
        lambda: q.remove(bad),
        lambda: q.ack(bad),
        lambda: q.push_many([Message(1, id=bad)]),
        lambda: client.queue(bad),
        lambda: t.publish("x", tag=bad),
    ):
        with pytest.raises(dynoq.InvalidArgument, match="lone surrogate") as info:
            call()
        assert isinstance(info.value, ValueError)
    with pytest.raises(dynoq.PayloadTypeError):
        q.push(bad)
    _untouched(q)


def test_ack_of_a_message_from_a_queue_with_more_shards(client: dynoq.Client) -> None:
    big, small = client.queue("eight", shards=8), client.queue("two", shards=2)
    big.push_many(range(40))
    far = next(m for m in big.pop(40) if m.shard is not None and m.shard >= 2)
    for call in (
        lambda: small.ack(far),
        lambda: small.ack_many([far]),
        lambda: small.nack(far),
        lambda: small.extend(far, 5),
    ):
        with pytest.raises(dynoq.InvalidArgument, match="popped from shard"):
            call()
    assert big.ack(far)


def test_a_cluster_url_at_a_single_server_or_a_closed_port(embedded_server: Any) -> None:
    single = f"redis+cluster://{embedded_server.host}:{embedded_server.port}"
    closed = "redis+cluster://127.0.0.1:1"
    with pytest.raises(dynoq.ConnectionFailed, match="not a Redis Cluster"):
        dynoq.connect(single)
    with pytest.raises(dynoq.ConnectionFailed, match="unreachable"):
        dynoq.connect(closed)

    async def first_use(url: str) -> None:
        async with dynoq.asyncio.connect(url) as client:  # lazy: the first call connects
            await client.queue("x")

    with pytest.raises(dynoq.ConnectionFailed, match="not a Redis Cluster"):
        asyncio.run(first_use(single))
    with pytest.raises(dynoq.ConnectionFailed, match="unreachable"):
        asyncio.run(first_use(closed))
