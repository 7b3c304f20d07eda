"""Group commit: single pushes made at once on one client go out together, and each caller
still gets its own id, result or error (dynoq/_core/combine.py and its shells).

Concurrency comes from threads on both flavors: on the asyncio one, the view runs each
call as a task on the client's loop, so the threads' pushes are concurrent tasks there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from blackhole import Blackhole
from helpers import delete_prefix
from test_queue_gone import wipe

import dynoq
from dynoq._core import codec
from dynoq._core.bounds import PUSH_CHUNK
from dynoq._core.calls import Batch, Call
from dynoq._core.combine import Combiner, Pending, fail, plan, settle
from dynoq._core.queue import QueueOps
from dynoq.settings import QueueSettings

FLAVORS = ("sync", "async")

THREADS = 200


def at_once(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` for i in range(n), each in its own thread, started together; each
    result or the exception it raised."""
    out: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - the test looks at each caller's error
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a pusher never got its answer"
    return out


def drain(q: Any) -> dict[str, Any]:
    got: dict[str, Any] = {}
    while batch := q.pop(1000):
        for m in batch:
            assert m.id not in got, f"{m.id} delivered twice"
            got[m.id] = m.payload
        q.ack_many(batch)
    return got


def test_hundreds_of_concurrent_pushers_each_get_their_own_ids(client: Any) -> None:
    q = client.queue("many", shards=4)
    per = 5
    results = at_once(THREADS, lambda i: [q.push(f"{i}-{k}") for k in range(per)])
    pushed: dict[str, str] = {}
    for i, ids in enumerate(results):
        assert isinstance(ids, list), ids
        for k, msg_id in enumerate(ids):
            assert msg_id not in pushed
            pushed[msg_id] = f"{i}-{k}"
    assert len(pushed) == THREADS * per
    assert drain(q) == pushed  # nothing lost, nothing duplicated, each id its payload


@pytest.mark.sync_only
def test_pushes_waiting_together_go_out_as_one_call(client: Any, flavor: str) -> None:
    q = client.queue("one-call", shards=1)
    combining = client.backend._combining
    real, runs = combining._run, []

    def run(request: Any) -> Any:
        runs.append(request)
        if len(runs) == 1:  # the first send waits until every other pusher waits
            while len(combining._state.waiting) < 49:
                time.sleep(0.001)
        return real(request)

    combining._run = run
    ids = at_once(50, lambda i: q.push(i))
    assert len(runs) == 2  # a lone push, then the 49 that waited meanwhile, in one call
    assert isinstance(runs[1], Call) and len(runs[1].args[4:]) == 4 * 49
    assert len(set(ids)) == 50 and sorted(drain(q).values()) == list(range(50))


def test_a_callers_messages_keep_its_order(client: Any) -> None:
    q = client.queue("fifo", ordered=True, shards=2)
    at_once(50, lambda i: [q.push([i, k], key=f"k{i % 7}") for k in range(6)])
    seen: dict[int, list[int]] = {}
    while batch := q.pop(100):
        for m in batch:
            seen.setdefault(m.payload[0], []).append(m.payload[1])
        q.ack_many(batch)
    assert seen == {i: list(range(6)) for i in range(50)}


def test_concurrent_ensures_of_one_id_push_it_once(client: Any) -> None:
    q = client.queue("once")
    results = at_once(THREADS, lambda i: q.ensure(i, id="the-one"))
    assert sorted(results) == [False] * (THREADS - 1) + [True]
    [m] = q.pop(10)
    assert results[m.payload] is True  # the caller told True is the one whose copy won


def test_a_bad_item_fails_only_its_caller(client: Any) -> None:
    q = client.queue("bad")

    def push(i: int) -> str:
        return str(q.push(object() if i % 10 == 0 else i))

    results = at_once(100, push)
    bad = [r for i, r in enumerate(results) if i % 10 == 0]
    good = [r for i, r in enumerate(results) if i % 10]
    assert all(isinstance(r, dynoq.PayloadTypeError) for r in bad)
    assert all(isinstance(r, str) for r in good)
    assert sorted(drain(q).values()) == sorted(i for i in range(100) if i % 10)


def test_a_gone_queue_fails_its_pushers_only(client: Any, prefix: str) -> None:
    gone, kept = client.queue("gone", shards=2), client.queue("kept", shards=2)
    gone.push("first")
    wipe(client, prefix, only=lambda k: "{gone:" in k or k.endswith(":queue:gone"))
    results = at_once(THREADS, lambda i: (kept if i % 2 else gone).push(i))
    for i, r in enumerate(results):
        if i % 2:
            assert isinstance(r, str), r
        else:
            assert isinstance(r, dynoq.QueueGone), r
    assert len({id(r) for r in results[::2]}) == THREADS // 2  # each caller its own error
    assert sorted(drain(kept).values()) == list(range(1, THREADS, 2))


@pytest.fixture
def hole(embedded_server: Any, prefix: str) -> Iterator[Blackhole]:
    with Blackhole(embedded_server.host, int(embedded_server.port)) as h:
        yield h
    delete_prefix(f"redis://{embedded_server.host}:{embedded_server.port}/0", prefix)


def test_dropped_connections_are_sent_again_for_every_caller(
    hole: Blackhole, connect_any: Callable[..., Any], prefix: str, embedded_server: Any
) -> None:
    direct = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    client = connect_any(hole.url, prefix=prefix, retry_window=10)
    try:
        q = client.queue("drops")
        q.push("warm")
        stop = threading.Event()

        def dropper() -> None:
            # Every 20 ms for the first 3 s: on a loaded machine an attempt can take longer
            # than 20 ms, and drops without end could spend a caller's whole retry window.
            end = time.monotonic() + 3.0
            while not stop.wait(0.02) and time.monotonic() < end:
                hole.reset()

        t = threading.Thread(target=dropper)
        t.start()
        try:
            results = at_once(THREADS, lambda i: [q.push(f"{i}-{k}") for k in range(5)])
        finally:
            stop.set()
            t.join()
        assert all(isinstance(r, list) for r in results), [
            r for r in results if not isinstance(r, list)
        ][:3]
        pushed = {
            msg_id: f"{i}-{k}" for i, ids in enumerate(results) for k, msg_id in enumerate(ids)
        }
        # Read back around the proxy: a reset still pending would lose a pop's reply (its
        # messages then come back only after their visibility timeout).
        with dynoq.connect(direct, prefix=prefix) as reader:
            got = drain(reader.queue("drops"))
        got.pop(next(k for k, v in got.items() if v == "warm"))
        assert got == pushed  # each once: a resent push of a made id cannot add a copy
    finally:
        client.close()


def test_a_server_out_of_reach_fails_every_caller(
    hole: Blackhole, connect_any: Callable[..., Any], prefix: str
) -> None:
    client = connect_any(
        hole.url, prefix=prefix, socket_timeout=0.5, socket_connect_timeout=0.5, retry_window=0.5
    )
    try:
        q = client.queue("cut")
        q.push("warm")
        hole.cut()
        results = at_once(100, lambda i: q.push(i))
        assert all(isinstance(r, dynoq.ConnectionFailed) for r in results), results[:3]
    finally:
        hole.restore()
        client.close()


# -- the pure decisions -------------------------------------------------------------------


def ops_of(name: str, shards: int = 2) -> QueueOps:
    return QueueOps("p", name, QueueSettings(shards=shards))


def pending(ops: QueueOps, n: int, mode: str = "ensure") -> list[Pending]:
    return [Pending(ops, ops.prepare(dynoq.Message(i)), mode) for i in range(n)]


def test_one_sender_at_a_time_takes_all_that_waits() -> None:
    c = Combiner()
    a, b, d = pending(ops_of("q"), 3)
    assert c.claim() is True  # idle: sends at once, alone
    assert c.claim() is False  # busy: waits
    c.wait(b)
    assert c.claim() is False
    c.wait(d)
    assert c.done() == [b, d]  # the next send takes both; the place stays taken
    assert c.done() == []  # nothing waits: the place is free again
    assert c.claim() is True
    assert a.result == 0


def test_a_plan_makes_one_call_per_queue_shard_and_mode() -> None:
    one, two = ops_of("one"), ops_of("two", shards=1)
    items = pending(one, 40) + pending(two, 5) + pending(two, 3, mode="push")
    request, owners = plan(items)
    assert isinstance(request, Batch) and request.each
    calls = request.calls
    shards = {(o[0].ops.name, o[0].ops.shard_for(o[0].out.routing), o[0].mode) for o in owners}
    assert len(calls) == len(owners) == len(shards)
    assert sorted(p for o in owners for p in map(id, o)) == sorted(map(id, items))
    for call, part in zip(calls, owners, strict=True):
        assert isinstance(call, Call)
        assert call.args[4::4] == [p.out.id for p in part]  # each its own message, in order
    single, [part] = plan(pending(two, 2))
    assert isinstance(single, Call) and len(part) == 2
    big, parts = plan(pending(two, PUSH_CHUNK + 1))
    assert [len(p) for p in parts] == [PUSH_CHUNK, 1]
    assert isinstance(big, Batch)


def test_settle_gives_each_caller_its_own_answer() -> None:
    ok, refused, broken = pending(ops_of("a"), 2), pending(ops_of("b"), 2), pending(ops_of("c"), 2)
    error = dynoq.ConnectionFailed("gone")
    settle([ok, refused, broken], [[1, 0], -5, error])
    assert [p.result for p in ok] == [1, 0] and all(p.error is None for p in ok)
    assert all(isinstance(p.error, dynoq.QueueGone) for p in refused)
    assert refused[0].error is not refused[1].error
    assert broken[0].error is error and isinstance(broken[1].error, dynoq.ConnectionFailed)
    assert broken[1].error is not error
    lost = pending(ops_of("d"), 3)
    fail(lost, error)
    assert all(isinstance(p.error, dynoq.ConnectionFailed) for p in lost)


def test_made_ids_are_unique_and_urlsafe() -> None:
    ids = {codec.new_id() for _ in range(5000)}
    assert len(ids) == 5000
    assert all(len(i) == 16 and i.replace("-", "").replace("_", "").isalnum() for i in ids)


def test_an_interrupted_waiter_never_leaves_the_others_waiting() -> None:
    from dynoq.backend.combine import Combining

    sent: list[Any] = []

    def run(request: Any) -> Any:
        sent.append(request)
        return [1] * (len(request.args[4:]) // 4)

    c = Combining(run)
    ops = ops_of("q", shards=1)
    first, second, third = pending(ops, 3)
    assert c._state.claim()  # a send is on its way
    for p in (first, second, third):
        p.signal = threading.Lock()
        p.signal.acquire()
        c._state.wait(p)
    c._abandon(third)  # interrupted while waiting: its push is dropped, not sent
    assert c._state.waiting == [first, second]
    c._next()  # the send is back: first is handed the batch...
    assert first.batch == [first, second]
    c._abandon(first)  # ...and interrupted: the batch goes out all the same
    assert second.signal.acquire(timeout=10)
    assert len(sent) == 1 and second.result == 1 and second.error is None
    assert c._state.sending == 0 and c._state.waiting == []


def test_a_forked_child_pushes_though_the_parent_was_sending() -> None:
    import os

    from dynoq.backend.combine import Combining

    c = Combining(lambda request: 1)
    out = ops_of("q").prepare(dynoq.Message(1))
    assert c._state.claim()  # the parent's send is on its way at the fork
    pid = os.fork()
    if pid == 0:  # the child: a push must not wait for the parent's send
        done = threading.Event()
        threading.Thread(
            target=lambda: (c.push(ops_of("q"), out, "ensure"), done.set()), daemon=True
        ).start()
        os._exit(0 if done.wait(10) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
