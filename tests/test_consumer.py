"""Consumers in one process, on every backend: concurrent and ordered consumption,
retries, dead letters, hooks, stats, graceful stop, rebalance, fencing, bad input."""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from async_view import unwrap
from helpers import FAST, pop_leased, requeue_shard, shard_keys, wait_for
from redis.cluster import RedisCluster

import dynoq
import dynoq.asyncio
from dynoq._core.calls import Call
from dynoq.consumer import Consumer
from dynoq.consumer.group import Membership, members, reap
from dynoq.consumer.lease import Leases
from dynoq.consumer.middleware import Middleware
from dynoq.errors import InvalidArgument, InvalidType, LeaseLost
from dynoq.retry import DeadLetter, Retry

FLAVORS = ("sync", "async")


class Recorder:
    """A thread-safe handler that records payloads and checks shard exclusivity."""

    def __init__(
        self, fail: Callable[[dynoq.Message], Exception | None] | None = None, sleep: float = 0.0
    ) -> None:
        self.lock = threading.Lock()
        self.seen: list[Any] = []
        self.attempts: dict[Any, list[int]] = collections.defaultdict(list)
        self.on_shard: dict[int, int] = {}
        self.overlaps = 0
        self.fail = fail
        self.sleep = sleep

    def handler(self, tag: int = 0) -> Callable[[dynoq.Message], None]:
        def handle(msg: dynoq.Message) -> None:
            assert msg.shard is not None
            with self.lock:
                if self.on_shard.get(msg.shard, tag) != tag:
                    self.overlaps += 1  # two consumers on one shard at once
                self.on_shard[msg.shard] = tag
                self.attempts[_ident(msg.payload)].append(msg.attempts)
            if self.sleep:
                time.sleep(self.sleep)
            err = self.fail(msg) if self.fail else None
            with self.lock:
                self.on_shard.pop(msg.shard, None)
                if err is None:
                    self.seen.append(msg.payload)
            if err is not None:
                raise err

        return handle

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


def _ident(payload: Any) -> Any:
    if isinstance(payload, dict):
        return tuple(sorted(payload.items()))
    return tuple(payload) if isinstance(payload, list) else payload


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"strategy": "nope"}, InvalidArgument),
        ({"strategy": 42}, InvalidType),
        ({"concurrency": 0}, InvalidArgument),
        ({"concurrency": 1.5}, InvalidType),
        ({"batch_size": 0}, InvalidArgument),
        ({"batch_size": True}, InvalidType),
        ({"rebalance_interval": 0}, InvalidArgument),
        ({"lease_ttl": -1}, InvalidArgument),
        ({"lease_ttl": float("inf")}, InvalidArgument),
        ({"idle_wait": "1"}, InvalidType),
        ({"max_in_flight": 0}, InvalidArgument),
        ({"retry_delays": [1, -2]}, InvalidArgument),
        ({"retry_delays": []}, InvalidArgument),
        ({"retry_delays": "10s"}, InvalidType),
        ({"mode": "broadcasting"}, InvalidArgument),
        ({"group": "a{b}"}, InvalidArgument),
        ({"instance_id": ""}, InvalidArgument),
        ({"strategy": "consistent_hash", "strategy_options": {"bogus": 1}}, InvalidArgument),
        ({"before": "not callable"}, InvalidType),
        ({"middleware": [object()]}, InvalidType),
        ({"no_such_option": 1}, TypeError),  # Python's own error for an unknown keyword
    ],
)
def test_bad_options_raise_typed_errors(
    client: dynoq.Client, options: dict[str, Any], error: type[Exception]
) -> None:
    q = client.queue("bad", shards=2)
    with pytest.raises(error):
        client.consumer(q, lambda m: None, **options)
    assert members(q, "default") == []  # nothing was written


def test_bad_handler_and_queue(client: dynoq.Client) -> None:
    q = client.queue("bad", shards=2)
    with pytest.raises(InvalidType):
        client.consumer(q, "print")  # type: ignore[arg-type]
    with pytest.raises(InvalidType):
        Consumer("bad", print)  # type: ignore[arg-type]
    c = client.consumer("bad", lambda m: None, **FAST)  # a queue name is fine
    assert isinstance(unwrap(c), (Consumer, dynoq.asyncio.Consumer)) and not c.assignment
    with pytest.raises(ValueError):  # errors in arguments are also ValueError
        Retry(-1)


class _AsyncCall:
    async def __call__(self, msg: dynoq.Message) -> None: ...


class _AsyncBefore(Middleware):
    async def before(self, msg: dynoq.Message) -> None:  # type: ignore[override]
        ...


async def _async_handle(msg: dynoq.Message) -> None: ...


@pytest.mark.sync_only
@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({}, "_async_handle"),
        ({"handler": functools.partial(_async_handle)}, "_async_handle"),
        ({"handler": _AsyncCall()}, "_AsyncCall"),
        ({"before": _async_handle}, "hook _async_handle"),
        ({"after": _async_handle}, "hook _async_handle"),
        ({"middleware": [_AsyncBefore()]}, "hook _AsyncBefore.before"),
    ],
    ids=["async-def", "partial", "async-call", "before", "after", "middleware"],
)
def test_the_thread_consumer_refuses_an_async_def_handler_or_hook(
    client: dynoq.Client, options: dict[str, Any], named: str
) -> None:
    # Before, an async def handler was called, never awaited, and its message acked:
    # the worker logged "handled 1, failed 0" and the body never ran.
    q = client.queue("refused", shards=2)
    options = dict(options)  # (shared by every backend's run)
    handler = options.pop("handler", _async_handle if not options else lambda m: None)
    with pytest.raises(InvalidType, match=f"{named} is async def.*dynoq.asyncio"):
        client.consumer(q, handler, **options)
    assert members(q, "default") == []  # nothing was written


@pytest.mark.parametrize("via", ["handler", "before"])
def test_a_call_that_returns_an_awaitable_fails_on_threads_and_runs_on_asyncio(
    client: dynoq.Client, consumers: list[Consumer], flavor: str, via: str
) -> None:
    # A plain def that returns a coroutine. On threads (the thread consumer, and a sync
    # handler the asyncio consumer runs in a thread) nothing awaits it: it did not run,
    # so its message is dead-lettered (max_retries=0) with why, never acked, and the
    # coroutine is not left unawaited. The asyncio consumer awaits a hook's awaitable
    # (before, a before= callable's coroutine was dropped there, unawaited).
    q = client.queue("awaitables", shards=1, max_retries=0)
    ran: list[Any] = []

    async def body(msg: dynoq.Message) -> None:
        ran.append(msg.payload)

    def returns_a_coroutine(msg: dynoq.Message) -> Any:
        return body(msg)

    handler = returns_a_coroutine if via == "handler" else lambda m: None
    hooks = {"before": returns_a_coroutine} if via == "before" else {}
    q.push("x", id="m1")
    c = client.consumer(q, handler, **hooks, **FAST)
    consumers.append(c.start())
    if flavor == "async" and via == "before":
        wait_for(lambda: c.stats().handled == 1, what="the handled message")
        assert ran == ["x"] and q.stats().dead == 0
        return
    wait_for(lambda: q.stats().dead == 1, what="the dead letter")
    [dead] = q.dead()
    assert dead.failure is not None and dead.failure.error_type == "AwaitableReturned"
    assert "returned coroutine, an awaitable" in dead.failure.error
    assert ran == [] and q.stats().total("acked") == 0
    wait_for(lambda: c.stats().failed == 1)
    assert c.stats().handled == 0


# -- concurrent queues -----------------------------------------------------------------------


def test_concurrent_group_handles_everything_once(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("conc", shards=4)
    rec = Recorder()
    for i in range(2):
        consumers.append(
            client.consumer(
                q, rec.handler(i), concurrency=3, batch_size=10, instance_id=f"m{i}", **FAST
            ).start()
        )
    q.push_many(list(range(600)))
    wait_for(lambda: rec.count() >= 600, what="600 handled")
    wait_for(lambda: all(len(c.assignment) == 2 for c in consumers), what="split")
    assert consumers[0].assignment | consumers[1].assignment == {0, 1, 2, 3}
    assert consumers[0].assignment.isdisjoint(consumers[1].assignment)
    for c in consumers:
        assert c.stop(10)
    assert sorted(rec.seen) == list(range(600))
    st = [c.stats() for c in consumers]
    assert sum(s.handled for s in st) == 600
    assert all(s.failed == s.retried == s.dead_lettered == 0 for s in st)
    assert q.stats().unacked == 0 and q.size() == 0
    assert members(q, "default") == []  # both left


def test_concurrent_consumer_pops_every_shard(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    """A member pops from shards allocated to others too: nothing starves while one runs."""
    q = client.queue("starve", shards=4)
    Membership(q, "default", "aaa-ghost", ttl=60).heartbeat()
    rec = Recorder()
    consumers.append(client.consumer(q, rec.handler(), instance_id="zzz", **FAST).start())
    assert consumers[0].assignment == {2, 3}  # the ghost's shards are 0 and 1
    q.push_many(list(range(100)))
    wait_for(lambda: rec.count() >= 100, what="every shard drained")


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_consumer_takes_lower_priority_values_first_across_shards(
    client: dynoq.Client, consumers: list[Consumer], concurrency: int
) -> None:
    # Everything waits before the consumer starts: 20 at priority 50 pushed first, then
    # 20 at priority 0, over 4 shards. No priority 50 is taken while a 0 waits.
    q = client.queue("prio-consumer", shards=4)
    q.push_many([dynoq.Message(i, id=f"late-{i}", priority=50) for i in range(20)])
    q.push_many([dynoq.Message(i, id=f"soon-{i}", priority=0) for i in range(20)])
    lock = threading.Lock()
    seen: list[int] = []
    zeros_waiting: list[int] = []  # when the first priority 50 was handled

    def handle(msg: dynoq.Message) -> None:
        with lock:
            first_fifty = msg.priority == 50 and 50 not in seen
            seen.append(msg.priority)
        if first_fifty:
            zeros_waiting.append(sum(m.priority == 0 for m in q.peek(100)))

    consumers.append(
        client.consumer(q, handle, concurrency=concurrency, batch_size=5, **FAST).start()
    )
    wait_for(lambda: len(seen) >= 40, what="40 handled")
    assert zeros_waiting == [0]
    if concurrency == 1:  # one batch at a time: strictly by priority
        assert seen == [0] * 20 + [50] * 20


def test_batch_handler_gets_lists(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("batch", shards=2)
    sizes: list[int] = []
    got: list[int] = []
    lock = threading.Lock()

    def handle(batch: list[dynoq.Message]) -> None:
        with lock:
            sizes.append(len(batch))
            got.extend(m.payload for m in batch)

    q.push_many(list(range(200)))
    consumers.append(
        client.consumer(q, handle, batch_size=50, batch_handler=True, concurrency=2, **FAST).start()
    )
    wait_for(lambda: len(got) >= 200)
    assert sorted(got) == list(range(200)) and max(sizes) > 1 and max(sizes) <= 50


def test_flow_control_bounds_messages_in_memory(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("flow", shards=2)
    held, peak, lock = [0], [0], threading.Lock()

    def handle(msg: dynoq.Message) -> None:
        with lock:
            held[0] += 1
            peak[0] = max(peak[0], held[0])
        time.sleep(0.002)
        with lock:
            held[0] -= 1

    q.push_many(list(range(60)))
    c = client.consumer(q, handle, concurrency=4, batch_size=3, max_in_flight=3, **FAST)
    consumers.append(c.start())
    wait_for(lambda: c.stats().handled >= 60)
    assert peak[0] == 1  # 3 permits: one batch at a time, handled one by one


# -- retries, dead letters, hooks --------------------------------------------------------------


def test_retries_then_success(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("retry", shards=2)
    rec = Recorder(fail=lambda m: RuntimeError("boom") if m.attempts < 3 else None)
    q.push("x")
    c = client.consumer(q, rec.handler(), retry_delays=[0.05, 0.1], **FAST)
    consumers.append(c.start())
    wait_for(lambda: rec.count() == 1)
    assert rec.attempts["x"] == [1, 2, 3]
    wait_for(lambda: c.stats().handled == 1)
    s = c.stats()
    assert (s.handled, s.failed, s.retried, s.dead_lettered) == (1, 2, 2, 0)
    assert s.handler_seconds >= 0


def test_dead_letter_after_max_retries(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("dlq", shards=2, max_retries=2)
    rec = Recorder(fail=lambda m: ValueError("always"))
    q.push("bad", id="m1")
    q.push("good", id="m2")
    c = client.consumer(
        q, lambda m: rec.handler()(m) if m.payload == "bad" else None, retry_delays=[0.02], **FAST
    )
    consumers.append(c.start())
    wait_for(lambda: q.stats().dead == 1, what="dead-lettered")
    assert rec.attempts["bad"] == [1, 2, 3]  # max_retries=2: three deliveries in all
    assert [m.id for m in q.dead()] == ["m1"]
    wait_for(lambda: c.stats().handled == 1)
    # The consumer counts a dead letter once the script that buried it has replied.
    wait_for(lambda: c.stats().dead_lettered == 1)
    s = c.stats()
    assert (s.failed, s.retried, s.dead_lettered) == (3, 2, 1)


def test_consumer_max_retries_dead_letters_sooner(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    """RocketMQ's maxReconsumeTimes: the consumer's own limit, under the queue's (16)."""
    q = client.queue("consumer-limit", shards=2)
    rec = Recorder(fail=lambda m: ValueError("always"))
    q.push("bad", id="m1")
    c = client.consumer(q, rec.handler(), retry_delays=[0.02], max_retries=1, **FAST)
    consumers.append(c.start())
    wait_for(lambda: q.stats().dead == 1, what="dead-lettered")
    assert rec.attempts["bad"] == [1, 2]  # max_retries=1: two deliveries in all
    [dead] = q.dead()
    assert dead.id == "m1" and dead.failure is not None and "always" in dead.failure.error
    wait_for(lambda: c.stats().dead_lettered == 1)
    assert (c.stats().failed, c.stats().retried) == (2, 1)


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, dynoq.InvalidArgument), (True, dynoq.InvalidType), (1.5, dynoq.InvalidType)],
)
def test_consumer_max_retries_is_checked(
    client: dynoq.Client, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="max_retries"):
        client.consumer(client.queue("checked"), lambda m: None, max_retries=value)


def test_explicit_retry_and_dead_letter(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("explicit", shards=1)
    calls: list[tuple[str, int, float]] = []

    def handle(msg: dynoq.Message) -> None:
        calls.append((msg.payload, msg.attempts, time.monotonic()))
        if msg.payload == "later" and msg.attempts == 1:
            raise Retry(0.3)
        if msg.payload == "now":
            raise DeadLetter("poison")

    # the default schedule would wait 10 s: only Retry(0.3) makes this test pass in time
    c = client.consumer(q, handle, **FAST)
    consumers.append(c.start())
    q.push("later")
    q.push("now", id="poison")
    wait_for(lambda: len([x for x in calls if x[0] == "later"]) == 2 and q.stats().dead == 1)
    later = [t for p, _, t in calls if p == "later"]
    assert later[1] - later[0] >= 0.25
    assert [m.id for m in q.dead()] == ["poison"]
    wait_for(lambda: c.stats().handled == 1)
    s = c.stats()
    assert (s.retried, s.dead_lettered, s.failed) == (1, 1, 2)


@pytest.mark.parametrize("ordered", [False, "key"])
def test_a_retry_raised_while_handling_an_error_keeps_the_error_in_its_dead_letter(
    client: dynoq.Client, consumers: list[Consumer], ordered: Any
) -> None:
    # Before, the dead letter said only "retry requested (delay=0.0)": the error that
    # made the handler retry was lost from `failure.error`.
    q = client.queue("caused", shards=1, max_retries=0, ordered=ordered)

    def handle(msg: dynoq.Message) -> None:
        try:
            {}[msg.payload]
        except KeyError as exc:
            if msg.payload == "explicit":
                raise DeadLetter("no such order") from exc
            if msg.payload == "hidden":
                raise Retry(0) from None  # said to hide it: it stays hidden
            raise Retry(0)  # noqa: B904 - the implicit context is what is tested

    for name in ("implicit", "explicit", "hidden"):
        q.push(name, id=name, key=name)
    consumers.append(client.consumer(q, handle, **FAST).start())
    wait_for(lambda: q.stats().dead == 3, what="three dead letters")
    failures = {m.id: m.failure for m in q.dead()}
    implicit, explicit, hidden = (failures[n] for n in ("implicit", "explicit", "hidden"))
    assert implicit is not None and explicit is not None and hidden is not None
    assert (implicit.error_type, implicit.error) == (
        "Retry",
        "retry requested (delay=0.0); cause: KeyError: 'implicit'",
    )
    assert "KeyError: 'implicit'" in implicit.traceback
    assert (explicit.error_type, explicit.error) == (
        "DeadLetter",
        "no such order; cause: KeyError: 'explicit'",
    )
    assert (hidden.error_type, hidden.error) == ("Retry", "retry requested (delay=0.0)")


def test_hooks_and_middleware(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("hooks", shards=1)
    events: list[tuple[str, Any]] = []
    lock = threading.Lock()

    class Timing(Middleware):
        def before(self, msg: dynoq.Message) -> None:
            with lock:
                events.append(("mw-before", msg.payload))
            if msg.payload == "veto":
                raise PermissionError("vetoed")

        def after(self, msg: dynoq.Message, error: BaseException | None, seconds: float) -> None:
            with lock:
                events.append(("mw-after", (msg.payload, type(error).__name__, seconds >= 0)))
            raise RuntimeError("after hooks' errors are ignored")

    def before(msg: dynoq.Message) -> None:
        with lock:
            events.append(("before", msg.payload))

    def after(msg: dynoq.Message, error: BaseException | None) -> None:
        with lock:
            events.append(("after", (msg.payload, error is None)))

    handled: list[Any] = []
    q.push("ok")
    q.push("veto")
    c = client.consumer(
        q,
        lambda m: handled.append(m.payload),
        before=before,
        after=after,
        middleware=[Timing()],
        retry_delays=[30],
        concurrency=1,
        **FAST,
    )
    consumers.append(c.start())
    wait_for(lambda: len([e for e in events if e[0] == "after"]) == 2)
    assert handled == ["ok"]  # the vetoed message never reached the handler
    assert events[:4] == [
        ("before", "ok"),
        ("mw-before", "ok"),
        ("mw-after", ("ok", "NoneType", True)),
        ("after", ("ok", True)),
    ]
    assert ("mw-after", ("veto", "PermissionError", True)) in events
    wait_for(lambda: c.stats().retried == 1)
    assert c.stats().failed == 1


def test_graceful_stop_loses_nothing(client: dynoq.Client) -> None:
    q = client.queue("graceful", shards=4)
    rec = Recorder(sleep=0.003)
    q.push_many(list(range(400)))
    c = client.consumer(q, rec.handler(), concurrency=4, batch_size=5, **FAST).start()
    wait_for(lambda: rec.count() >= 40)
    assert c.stop(timeout=20)
    st = q.stats()
    assert st.unacked == 0  # everything popped was finished and acked
    assert rec.count() + st.size == 400
    assert len(set(rec.seen)) == rec.count() == c.stats().handled
    rest = client.consumer(q, rec.handler(), **FAST).start()  # another one finishes the job
    wait_for(lambda: rec.count() >= 400)
    assert rest.stop(10)
    assert sorted(rec.seen) == list(range(400))
    # stopped workers closed their wake-up subscriptions
    assert client.backend.open_subscriptions == 0


# -- ordered queues --------------------------------------------------------------------------


def _push_keyed(q: dynoq.Queue, keys: int, per_key: int) -> None:
    q.push_many(
        [
            dynoq.Message({"k": k, "i": i}, key=f"key-{k}")
            for i in range(per_key)
            for k in range(keys)
        ]
    )


def _check_order(seen: list[Any], keys: int, per_key: int) -> None:
    by_key: dict[int, list[int]] = collections.defaultdict(list)
    for p in seen:
        by_key[p["k"]].append(p["i"])
    for k in range(keys):
        assert by_key[k] == list(range(per_key)), f"key {k} out of order: {by_key[k]}"


def test_ordered_threads_keep_key_order_and_exclusive_shards(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("ord", shards=8, ordered=True)
    rec = Recorder()
    _push_keyed(q, 24, 25)
    for i in range(3):
        consumers.append(
            client.consumer(
                q, rec.handler(i), concurrency=2, batch_size=4, instance_id=f"t{i}", **FAST
            ).start()
        )
    wait_for(lambda: rec.count() >= 600, timeout=30, what="600 ordered")
    _check_order(rec.seen, 24, 25)
    assert rec.overlaps == 0
    held = [c.assignment for c in consumers]
    assert sum(len(h) for h in held) == 8 and set().union(*held) == set(range(8))


def test_ordered_failure_blocks_key_and_retries_in_place(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("ordretry", shards=1, ordered=True, max_retries=2)
    fails = {("a", 1): 2, ("a", 3): 99}  # a1 fails twice then works; a3 always fails

    def fail(msg: dynoq.Message) -> Exception | None:
        key = (msg.payload["k"], msg.payload["i"])
        return RuntimeError("no") if msg.attempts <= fails.get(key, 0) else None

    rec = Recorder(fail=fail)
    q.push_many([dynoq.Message({"k": "a", "i": i}, key="a") for i in range(5)])
    c = client.consumer(q, rec.handler(), batch_size=3, retry_delays=[0.05], **FAST)
    consumers.append(c.start())
    # The handler sees the last message before its ack is counted: wait for both.
    wait_for(lambda: rec.count() >= 4 and q.stats().dead == 1 and c.stats().handled == 4)
    assert [p["i"] for p in rec.seen] == [0, 1, 2, 4]  # a3 dead-lettered, then moved on
    assert rec.attempts[_ident({"k": "a", "i": 1})] == [1, 2, 3]
    order = [(p["i"]) for p in rec.seen]
    assert order == sorted(order)
    assert q.dead()[0].payload == {"k": "a", "i": 3}
    s = c.stats()
    assert s.dead_lettered == 1 and s.retried == 4 and s.handled == 4


def test_ordered_worker_leaves_a_busy_shard_for_waiting_ones(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("fair", shards=2, ordered=True)
    order: list[int] = []
    a_key, b_key = (
        "k0",
        next(f"k{i}" for i in range(1, 99) if q.shard_for(f"k{i}") != q.shard_for("k0")),
    )
    q.push_many([dynoq.Message(i, key=a_key) for i in range(300)])

    def handle(msg: dynoq.Message) -> None:
        order.append(msg.payload)
        time.sleep(0.0005)

    c = client.consumer(q, handle, concurrency=1, max_continuous_time=0.02, **FAST)
    consumers.append(c.start())
    wait_for(lambda: len(order) >= 5)  # the worker is on shard A; B was found empty
    q.push_many([dynoq.Message(1000 + i, key=b_key) for i in range(300)])
    wait_for(lambda: len(order) >= 600, timeout=30)
    assert order.index(1000) < order.index(299)  # B did not wait for A to drain
    switches = sum(1 for x, y in itertools.pairwise(order) if (x < 1000) != (y < 1000))
    assert switches >= 3  # it alternated between the shards while both had messages
    assert [x for x in order if x < 1000] == list(range(300))


@pytest.mark.parametrize("ordered", [False, True], ids=["concurrent", "ordered"])
def test_an_idle_consumer_looks_once_per_idle_wait(
    client: dynoq.Client, consumers: list[Consumer], monkeypatch: pytest.MonkeyPatch, ordered: bool
) -> None:
    # One worker waits on the server for all four, and a wait that nothing interrupted
    # ends without looking again: one look (pop, then one probe of the other shards) per
    # idle_wait, however many workers.
    q = client.queue("idle", shards=16, ordered=ordered)
    consumers.append(
        client.consumer(q, lambda m: None, concurrency=4, idle_wait=0.5, lease_ttl=30.0).start()
    )
    time.sleep(1.5)  # start-up: a first look at every shard, subscriptions
    calls: list[str] = []
    backend = unwrap(client).backend  # the seam every request goes through
    real = backend.run

    def note(request: Any) -> None:
        if isinstance(request, Call) and request.script.name in ("pop", "probe"):
            calls.append(request.script.name)

    if inspect.iscoroutinefunction(real):

        async def counting(request: Any) -> Any:
            note(request)
            return await real(request)
    else:

        def counting(request: Any) -> Any:
            note(request)
            return real(request)

    monkeypatch.setattr(backend, "run", counting)
    time.sleep(3.0)
    monkeypatch.undo()
    # On Redis Cluster a script's keys share a slot: a look is one pop per shard there.
    per_look = 16 if isinstance(client.redis, RedisCluster) else 2
    assert len(calls) <= (3.0 / 0.5 + 1) * per_look, len(calls)


def test_workers_look_one_at_a_time(
    client: dynoq.Client, consumers: list[Consumer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Four workers on a stream of messages: a look (a probe and the pops it leads to)
    # never overlaps another worker's. Overlapping looks raced for the same messages and,
    # in threads, passed the GIL back and forth at every reply (a look of two round trips
    # took 6-7 ms at 10,000 messages/s with four workers, benchmarks/bench_delay.py).
    # Fewer messages than a batch in all: no look finds a full batch (a backlog's looks
    # may overlap).
    q = client.queue("turns", shards=8)
    total = 900
    backend = unwrap(client).backend
    real = backend.run
    lock = threading.Lock()
    inside = [0, 0]  # looks under way, most at once

    def looks(request: Any) -> bool:
        calls = request.calls if hasattr(request, "calls") else [request]
        return any(isinstance(c, Call) and c.script.name in ("pop", "probe") for c in calls)

    def enter(request: Any) -> bool:
        if not looks(request):
            return False
        with lock:
            inside[0] += 1
            inside[1] = max(inside[1], inside[0])
        return True

    def leave(counted: bool) -> None:
        if counted:
            with lock:
                inside[0] -= 1

    if inspect.iscoroutinefunction(real):

        async def counting(request: Any) -> Any:
            counted = enter(request)
            try:
                return await real(request)
            finally:
                leave(counted)
    else:

        def counting(request: Any) -> Any:
            counted = enter(request)
            try:
                return real(request)
            finally:
                leave(counted)

    monkeypatch.setattr(backend, "run", counting)
    seen: list[Any] = []
    consumers.append(
        client.consumer(
            q, lambda m: seen.append(m.payload), concurrency=4, batch_size=total + 1, lease_ttl=30.0
        ).start()
    )
    for i in range(0, total, 3):
        q.push_many([dynoq.Message(j) for j in range(i, i + 3)])
    wait_for(lambda: len(seen) >= total, timeout=60, what="every message handled")
    assert sorted(seen) == list(range(total))
    # On Redis Cluster (no probe across slots) the worker that waits for all the others
    # does so in a pop, which looks too: at most one other look beside it.
    assert inside[1] <= (2 if isinstance(client.redis, RedisCluster) else 1), inside


def test_an_idle_consumer_wakes_when_a_delayed_message_falls_due(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    # Nothing is published when a delayed message falls due: the worker waiting for all
    # the others must wake at the due time its look reported, not at the end of
    # idle_wait (30 s here; the bound below is generous for a loaded machine).
    q = client.queue("due", shards=16)
    q.push("later", delay=1.0)
    pushed = time.monotonic()
    handled: list[float] = []
    consumers.append(
        client.consumer(
            q,
            lambda m: handled.append(time.monotonic()),
            concurrency=4,
            batch_size=10,
            idle_wait=30.0,
            lease_ttl=30.0,
        ).start()
    )
    wait_for(lambda: handled, timeout=25, what="the delayed message handled")
    assert handled[0] - pushed < 15


@pytest.mark.parametrize("shards", [1, 4])
def test_a_stop_wakes_the_worker_waiting_on_the_server(client: dynoq.Client, shards: int) -> None:
    # An idle consumer's watcher blocks in pop(wait=idle_wait) for all the workers; the
    # stop's wake-up must end that wait, not the end of idle_wait (60 s here: before the
    # fix a stop of a one-shard consumer, or any on Redis Cluster, waited it out).
    q = client.queue("idle-stop", shards=shards)
    c = client.consumer(q, lambda m: None, concurrency=4, idle_wait=60.0, lease_ttl=30.0).start()
    try:
        time.sleep(1.0)  # the first look found nothing: the watcher waits on the server
        began = time.monotonic()
        assert c.stop(timeout=30)
        assert time.monotonic() - began < 10
    finally:
        c.stop(timeout=1)


# -- rebalance, leases, fencing ------------------------------------------------------------------


def test_rebalance_on_join_and_leave(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("rebal", shards=8, ordered=True)
    opts = {**FAST, "rebalance_interval": 60.0}  # only notifications can make this pass
    a = client.consumer(q, lambda m: None, instance_id="a", **opts).start()
    consumers.append(a)
    assert a.assignment == set(range(8))
    b = client.consumer(q, lambda m: None, instance_id="b", **opts).start()
    consumers.append(b)
    wait_for(
        lambda: a.assignment == set(range(4)) and b.assignment == set(range(4, 8)),
        what="split between a and b",
    )
    c = client.consumer(q, lambda m: None, instance_id="c", strategy="averagely", **opts).start()
    consumers.append(c)
    wait_for(
        lambda: (a.assignment, b.assignment, c.assignment) == ({0, 1, 2}, {3, 4, 5}, {6, 7}),
        what="split in three",
    )
    assert b.stop(10)
    wait_for(
        lambda: (a.assignment, c.assignment) == ({0, 1, 2, 3}, {4, 5, 6, 7}),
        what="b's shards taken over",
    )
    for s in range(8):  # every shard leased exactly by the member holding it
        holder = client.redis.get(shard_keys(q, s).lease).decode()
        assert holder.startswith("a:" if s < 4 else "c:")
    assert members(q, "default") == ["a", "c"]


def test_lease_fencing_refuses_a_paused_holder(client: dynoq.Client) -> None:
    q = client.queue("fence", shards=1, ordered=True)
    q.push_many([dynoq.Message(i, key="k") for i in range(3)])
    old = Leases(q, "old", ttl=0.3)
    assert old.acquire(0) == 0.0
    [msg] = pop_leased(q, 1, lease="old.1")  # the token and the tenure's fence
    assert msg.payload == 0 and msg.lease == "old.1"
    new = Leases(q, "new", ttl=5)
    assert new.acquire(0) > 0  # still held by "old"
    wait_for(lambda: client.redis.get(shard_keys(q, 0).lease) is None, what="lease expiry")
    assert new.acquire(0) == 0.0  # takes over; old's in-flight message back at the head
    with pytest.raises(LeaseLost):
        q.ack(msg)
    with pytest.raises(LeaseLost):
        pop_leased(q, 1, lease="old.1")
    assert old.renew([0]) == {0}
    again = pop_leased(q, 3, lease="new.2")
    assert [m.payload for m in again] == [0, 1, 2]
    assert again[0].attempts == 2


def test_consumer_survives_losing_a_lease(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("lost", shards=1, ordered=True)
    gate, entered = threading.Event(), threading.Event()
    seen: list[int] = []

    def handle(msg: dynoq.Message) -> None:
        seen.append(msg.payload)
        entered.set()
        gate.wait(10)

    c = client.consumer(q, handle, **{**FAST, "lease_ttl": 30.0})
    consumers.append(c.start())
    q.push(1, key="k")
    assert entered.wait(10)
    # Simulate a pause: the lease expired and another holder took the shard over (in one
    # step: the consumer's own upkeep would otherwise take the free lease back first).
    client.redis.set(shard_keys(q, 0).lease, "thief", px=30_000)
    assert requeue_shard(q, 0, force=True, lease="thief") == 1
    gate.set()
    wait_for(lambda: c.stats().lease_lost >= 1, what="LeaseLost seen")
    assert c.assignment == set() and c.stats().handled == 0  # its ack was refused
    assert [m.payload for m in pop_leased(q, 1, lease="thief")] == [1]  # redelivered to the thief


def test_reap_stale_members(client: dynoq.Client) -> None:
    q = client.queue("reap", shards=2)
    Membership(q, "g1", "dead-1", ttl=0.05).heartbeat()
    time.sleep(0.1)  # g1's claim on the queue lapsed with its only member
    # dead-2 must outlive the step to alive's heartbeat (which drops members past their
    # TTL) on a loaded machine, so that reap finds it
    Membership(q, "g2", "dead-2", ttl=0.5).heartbeat()
    Membership(q, "g2", "alive", ttl=60).heartbeat()
    time.sleep(0.6)
    assert reap(q) == 2
    assert members(q, "g1") == [] and members(q, "g2") == ["alive"]
    assert reap(q) == 0
    assert client.redis.smembers(f"{client.prefix}:groups:{{reap}}") == {b"g2"}
