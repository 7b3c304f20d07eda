"""Bad input gets a clear, typed error and changes nothing (DESIGN §2.8)."""

from __future__ import annotations

import math
from typing import Any

import pytest

import dynoq
from dynoq import Message


def _untouched(q: dynoq.Queue) -> None:
    s = q.stats()
    assert (s.ready, s.delayed, s.unacked, s.dead) == (0, 0, 0, 0)


@pytest.mark.parametrize(("kwargs", "error"), [
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
])
def test_bad_push_arguments(client: dynoq.Client, kwargs: dict[str, Any],
                            error: type[Exception]) -> None:
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


@pytest.mark.parametrize("settings", [
    {"shards": 0}, {"shards": -2}, {"unack_timeout": 0}, {"unack_timeout": math.nan},
    {"max_retries": -1}, {"dedupe_window": -1},
])
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
    for call in (lambda: q.pop(0), lambda: q.pop(-1), lambda: q.pop(wait=-1),
                 lambda: q.pop(visibility=0), lambda: q.peek(0),
                 lambda: q.nack("x", delay=-1), lambda: q.extend("x", math.inf),
                 lambda: q.reschedule("x", delay=-5), lambda: q.ops.pop(shards=[7])):
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
        dynoq.connect("redis://127.0.0.1:1/0", socket_connect_timeout=0.5,
                      retry=None)


def test_min_replicas_refused_in_memory() -> None:
    with dynoq.connect("memory://no-replicas") as c:
        with pytest.raises(dynoq.QueueConfigError, match="replicas"):
            c.queue("durable", min_replicas=1)
        assert "durable" not in c.queue_names()
