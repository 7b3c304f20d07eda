"""Counted push-if-absent and exactly-once micro-batches (dynoq._core.batches, the engine
under the Spark writers), on every backend."""

from __future__ import annotations

import pytest

import dynoq
from dynoq._core.batches import Attempt, BatchKeys, BatchOps, Counts, Progress


def outs(q: dynoq.Queue, ids: range | list[int], key: str | None = None) -> list:  # type: ignore[type-arg]
    return [q.ops.prepare(dynoq.Message({"n": i}, id=f"m{i}", key=key)) for i in ids]


def run(q: dynoq.Queue, request):  # type: ignore[no-untyped-def]
    return q.backend.run(request)


def drain(q: dynoq.Queue) -> list[str]:
    """Pop and ack everything due (what a consumer does); the ids, in order."""
    got: list[str] = []
    while msgs := q.pop(1000):
        q.ack_many(msgs)
        got += [m.id or "" for m in msgs]
    return got


def test_plain_push_counts_pushed_skipped_and_refused(client: dynoq.Client) -> None:
    q = client.queue("plain", shards=3, dedupe_window=60)
    ops = BatchOps(q.ops)
    assert run(q, ops.push(outs(q, range(10)))) == Counts(10, 0, 0)
    assert len(drain(q)) == 10  # acked: inside the dedupe window from now on
    q.push("again", id="m3")  # a plain push by id is not refused
    assert run(q, ops.push(outs(q, range(12)))) == Counts(2, 1, 9)
    assert q.size() == 3
    assert run(q, ops.push([])) == Counts()


def test_a_replayed_batch_pushes_nothing_twice_even_after_acks(client: dynoq.Client) -> None:
    q = client.queue("stream", shards=4)  # no dedupe window: acked ids are gone
    ops = BatchOps(q.ops, "query-1")
    assert run(q, ops.push(outs(q, range(0, 50)), 0)) == Counts(50, 0, 0)
    assert len(drain(q)) == 50  # consumed while the batch is still uncommitted
    # The driver died half-way; the batch is replayed from the start, then completed.
    assert run(q, ops.push(outs(q, range(0, 120)), 0)) == Counts(70, 50, 0)
    assert run(q, ops.progress()) == Progress(None, 0, 120)
    assert run(q, ops.commit(0)) is True
    assert run(q, ops.commit(0)) is False  # idempotent
    assert run(q, ops.progress()) == Progress(0, None, 0)  # the batch's ids are forgotten
    assert len(drain(q)) == 70
    # Replayed again after its commit (the driver died before Spark logged it): refused.
    assert run(q, ops.push(outs(q, range(0, 120)), 0)) == Counts(0, 0, 120)
    assert q.size() == 0
    # The next batch goes in; another query is not affected by this one's commits.
    assert run(q, ops.push(outs(q, range(120, 130)), 1)) == Counts(10, 0, 0)
    other = BatchOps(q.ops, "query-2")
    assert run(q, other.push(outs(q, range(0, 5)), 0)) == Counts(5, 0, 0)
    assert q.size() == 15


def test_batch_keys_are_bounded_and_expire(real_client: dynoq.Client) -> None:
    q = real_client.queue("bounded", shards=2)
    ops = BatchOps(q.ops, "q1", retention=30)
    run(q, ops.push(outs(q, range(700)), 5))  # more than one chunk per shard
    keys = [BatchKeys.of(k, "q1") for k in q.ops.shard_keys]
    r = real_client.redis
    assert sum(r.scard(k.wrote) for k in keys) == 700
    assert all(0 < r.pttl(k.commit) <= 30_000 and 0 < r.pttl(k.wrote) <= 30_000 for k in keys)
    run(q, ops.commit(5))
    assert not any(r.exists(k.wrote) for k in keys)
    assert all(0 < r.pttl(k.commit) <= 30_000 for k in keys)
    assert q.size() == 700


def test_ordered_batches_keep_key_order_across_a_replay(client: dynoq.Client) -> None:
    q = client.queue("ordered", shards=2, ordered=True)
    ops = BatchOps(q.ops, "ordered-query")
    run(q, ops.push(outs(q, range(0, 30), key="k"), 0))
    first = drain(q)
    run(q, ops.push(outs(q, range(0, 60), key="k"), 0))  # the replay
    run(q, ops.commit(0))
    run(q, ops.push(outs(q, range(60, 90), key="k"), 1))
    assert first + drain(q) == [f"m{i}" for i in range(90)]


@pytest.mark.parametrize(
    ("query", "batch", "error"),
    [
        ("has:colon", 0, "query id"),
        ("has space", 0, "query id"),
        ("ok", -1, "batch id"),
        ("ok", True, "batch id"),
        ("ok", 2**53, "batch id"),
        ("", 0, "needs the query"),
    ],
)
def test_bad_query_or_batch_is_refused_and_changes_nothing(
    client: dynoq.Client, query: str, batch: object, error: str
) -> None:
    q = client.queue("bad", shards=1)
    with pytest.raises((dynoq.InvalidArgument, dynoq.InvalidType), match=error):
        run(q, BatchOps(q.ops, query).push(outs(q, range(3)), batch))  # type: ignore[arg-type]
    assert q.size() == 0


def test_keyed_batches_count_refuse_and_keep_key_order_across_a_replay(
    client: dynoq.Client,
) -> None:
    """A message-group queue (ordered="key") takes Spark's writes into its keys: counted,
    the dedupe window refuses, a replayed batch pushes nothing twice, and each key's
    messages come in push order."""
    q = client.queue("keyed", shards=2, ordered="key", dedupe_window=60)  # type: ignore[arg-type]
    plain = BatchOps(q.ops)
    assert run(q, plain.push(outs(q, range(0, 10), key="a"))) == Counts(10, 0, 0)
    assert q.stats().keys == 1 and q.key_state("a").waiting == 10
    first = drain(q)
    assert first == [f"m{i}" for i in range(10)]
    assert run(q, plain.push(outs(q, range(0, 12), key="a"))) == Counts(2, 0, 10)
    assert drain(q) == ["m10", "m11"]
    ops = BatchOps(q.ops, "keyed-query")
    run(q, ops.push(outs(q, range(20, 50), key="b"), 0))
    got = drain(q)
    assert run(q, ops.push(outs(q, range(20, 80), key="b"), 0)) == Counts(30, 30, 0)
    run(q, ops.commit(0))
    assert run(q, ops.push(outs(q, range(20, 80), key="b"), 0)) == Counts(0, 0, 60)
    run(q, ops.push(outs(q, range(80, 90), key="b"), 1))
    assert got + drain(q) == [f"m{i}" for i in range(20, 90)]
    assert q.stats().keys == 0 and q.size() == 0


@pytest.mark.parametrize("ordered", [False, True, "key"])
@pytest.mark.parametrize("query", ["", "query-1"])
def test_a_retried_task_counts_what_an_earlier_attempt_pushed_as_pushed(
    client: dynoq.Client, ordered: bool | str, query: str
) -> None:
    """Attempt 0 of a Spark task pushes 30 of its 50 rows and dies; attempt 1 writes the
    whole partition: the 30 count as pushed (not as duplicates) and none is pushed again,
    even though consumers acked them since. A row of the same attempt repeating an id is
    still a duplicate, and so is an id somebody else pushed."""
    q = client.queue("retried", shards=2, ordered=ordered)  # type: ignore[arg-type]
    key = None if ordered is False else "k"
    batch = 0 if query else None
    first = BatchOps(q.ops, query, attempt=Attempt("w.3.0", 0))
    assert run(q, first.push(outs(q, range(0, 30), key=key), batch)) == Counts(30, 0, 0)
    assert len(drain(q)) == 30  # consumed (no dedupe window: acked ids are gone)
    run(q, BatchOps(q.ops).push(outs(q, [99], key=key)))  # pushed by somebody else
    retry = BatchOps(q.ops, query, attempt=Attempt("w.3.0", 1))
    rows = [*range(0, 40), 3]  # 3 twice: the second is a duplicate
    assert run(q, retry.push(outs(q, rows, key=key), batch)) == Counts(40, 1, 0)
    assert run(q, retry.push(outs(q, [*range(40, 50), 5, 35], key=key), batch)) == Counts(
        10, 2, 0
    )  # 5 and 35: this attempt pushed them already
    assert run(q, retry.push(outs(q, [99], key=key), batch)) == Counts(0, 1, 0)
    assert sorted(drain(q), key=lambda i: int(i[1:])) == [f"m{i}" for i in (*range(30, 50), 99)]
    # Another task (another partition) of the same write counts them as duplicates.
    other = BatchOps(q.ops, query, attempt=Attempt("w.3.1", 0))
    q.push("x", id="m7", key=key)
    assert run(q, other.push(outs(q, [7], key=key), batch)) == Counts(0, 1, 0)
    # Spark counted the task: its record goes.
    run(q, retry.forget([("w.3.0", [0, 1])]))
    again = BatchOps(q.ops, query, attempt=Attempt("w.3.0", 2))
    assert run(q, again.push(outs(q, [7], key=key), batch)) == Counts(0, 1, 0)


def test_a_task_record_is_bounded_and_expires(real_client: dynoq.Client) -> None:
    q = real_client.queue("tasks", shards=2)
    ops = BatchOps(q.ops, attempt=Attempt("w.1.4", 0), retention=30)
    run(q, ops.push(outs(q, range(700))))
    keys = [BatchKeys.of(k, "-", task="w.1.4") for k in q.ops.shard_keys]
    r = real_client.redis
    assert sum(r.hlen(k.tried) for k in keys) == 700
    assert all(0 < r.pttl(k.tried) <= 30_000 for k in keys)
    run(q, ops.forget([("w.1.4", [0, 1, 2])]))  # shard 2: not there, left alone
    assert not any(r.exists(k.tried) for k in keys)
    assert q.size() == 700
