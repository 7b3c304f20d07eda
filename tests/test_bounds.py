"""Every count has a bound, and no script fails half-way on a long list (Lua's unpack holds
about 8,000 values): large batches, many due messages and big acks keep every message."""

from __future__ import annotations

import pytest
from helpers import shard_keys

import dynoq
from dynoq import Message
from dynoq._core import validate


def test_pop_refuses_more_than_its_maximum_and_changes_nothing(client: dynoq.Client) -> None:
    q = client.queue("big-pop", shards=1)
    q.push_many(range(10))
    for count in (validate.MAX_BATCH + 1, 4000, 10**9):
        with pytest.raises(dynoq.InvalidArgument, match=r"1\.\.1000"):
            q.pop(count)
    assert q.stats().unacked == 0 and q.size() == 10
    with pytest.raises(dynoq.InvalidArgument):
        client.consumer(q, lambda m: None, batch_size=4000)
    with pytest.raises(dynoq.InvalidArgument):
        q.peek(validate.MAX_BATCH + 1)
    with pytest.raises(dynoq.InvalidArgument):
        q.dead(validate.MAX_BATCH + 1)


def test_a_full_pop_of_the_maximum_keeps_every_message(client: dynoq.Client) -> None:
    q = client.queue("max-pop", shards=1)
    q.push_many(range(5000))
    got = q.pop(validate.MAX_BATCH)
    assert [m.payload for m in got] == list(range(1000))
    assert q.stats().unacked == 1000 and q.size() == 4000


def test_thousands_of_due_delayed_messages_are_promoted_whole(client: dynoq.Client) -> None:
    # More than 4,000 due at once: promotion once failed in `unpack` after removing them.
    q = client.queue("many-due", shards=1)
    q.push_many([Message(i, delay=0.001) for i in range(9000)])
    seen: list[int] = []
    while len(seen) < 9000:
        batch = q.pop(1000, wait=2)
        assert batch, f"only {len(seen)} of 9000 came back"
        seen += [m.payload for m in batch]
        q.ack_many(batch)
    assert sorted(seen) == list(range(9000)) and q.size() == 0


def test_acking_thousands_with_a_dedupe_window_keeps_the_window(client: dynoq.Client) -> None:
    q = client.queue("big-ack", shards=1, dedupe_window=60)
    q.push_many([Message(i, id=f"m{i}") for i in range(5000)])
    msgs = [m for _ in range(5) for m in q.pop(1000)]
    assert q.ack_many(msgs) == 5000
    assert client.redis.zcard(shard_keys(q, 0).done) == 5000  # every ack remembered
    assert q.ensure_many([Message("again", id=f"m{i}") for i in range(5000)]) == 0


def test_list_arguments_have_a_maximum(client: dynoq.Client) -> None:
    q = client.queue("big-lists", shards=1)
    too_many = validate.MAX_ITEMS + 1
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.push_many(range(too_many))
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.ack_many([f"id{i}" for i in range(too_many)])
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.replay_dead([f"id{i}" for i in range(too_many)])
    assert q.size() == 0
