"""Workflows (DESIGN §3.8): chains, groups and chords of tasks, on both clients.

The plan a flow is stored as (pure); every shape and nesting, results in order, on every
backend; the next step pushed exactly once whatever runs a call again: a call run twice
(a duplicate delivery), a worker that returned but never acked (killed: its delivery
expires and another worker runs the call again), two workers ending a group's last two
members at once; refusals that store nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import task_apps
from helpers import wait_for
from task_setup import Setup, Synced, setups

import dynoq
from dynoq._core import canvas
from dynoq._core import flows as core
from dynoq._core.keys import FlowKeys, running_flows_key
from dynoq.errors import InvalidArgument, InvalidType, OrderedQueueError

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded", "memory")


@pytest.fixture
def setup(flavor: str, url: str, prefix: str, request: pytest.FixtureRequest) -> Iterator[Setup]:
    yield from setups(flavor, url, prefix, request)


def _app() -> dynoq.Tasks:
    app = dynoq.Tasks(None)
    for name in ("a", "b", "c", "d"):
        app.task(name=name)(lambda x=None, *rest: x)
    return app


# -- the plan (pure) -------------------------------------------------------------------------


@pytest.mark.sync_only
def test_a_plan_gives_each_call_its_path_and_each_node_its_entries(flavor: str) -> None:
    app = _app()
    a, b, c, d = (app.get(n) for n in "abcd")
    assert a is not None and b is not None and c is not None and d is not None
    # 0 chain: 1 a, 2 group (3 chain: 4 b, 5 c; 6 d), 7 a
    tree = a.s(1) | app.group([b.s() | c.s(), d.s()]) | a.si(9)
    plan = canvas.plan(tree)
    assert sorted(plan.leaves) == [1, 4, 5, 6, 7]
    assert plan.paths == {
        1: "0,c,0,3,2",
        4: "3,c,0,2,5;2,g,0,2,-1;0,c,1,3,7",
        5: "3,c,1,2,-1;2,g,0,2,-1;0,c,1,3,7",
        6: "2,g,1,2,-1;0,c,1,3,7",
        7: "0,c,2,3,-1",
    }
    assert plan.roots == [1] and plan.entries[2] == [4, 6] and plan.entries[3] == [4]
    assert plan.leaves[1].args == [1] and plan.leaves[1].takes_input
    assert plan.leaves[7].args == [9] and not plan.leaves[7].takes_input
    # a group's members all start at once: a flow that is one group starts every member;
    # a group of task calls alone is an "l" ("m": on_failure="continue"), whose members'
    # values are their calls' (stored once)
    calls = canvas.plan(app.group([a.s(1), b.s(2)]))
    assert calls.roots == [1, 2] and calls.paths == {1: "0,l,0,2,-1", 2: "0,l,1,2,-1"}
    lenient = canvas.plan(app.chord([a.s(1), b.s(2)], c.s(), on_failure="continue"))
    assert lenient.paths[3] == "1,m,1,2,-1;0,c,0,2,4"
    # chains splice: (a | b) | c is one chain of three
    assert len(canvas.chain(a.s(1) | b.s(), c.s()).steps) == 3


@pytest.mark.sync_only
def test_bad_flows_are_refused_with_nothing_stored(flavor: str) -> None:
    app = _app()
    a = app.get("a")
    assert a is not None
    with pytest.raises(InvalidArgument, match="at least one member"):
        app.group([])
    with pytest.raises(InvalidArgument, match="at least one step"):
        app.chain()
    with pytest.raises(InvalidType, match="signature"):
        app.group([a.s(1), "not a step"])  # type: ignore[list-item]
    with pytest.raises(InvalidType, match="iterable of signatures"):
        app.group(a.s(1))  # type: ignore[arg-type]
    with pytest.raises(InvalidType, match="signature"):
        a.s(1) | 42  # type: ignore[operator]
    with pytest.raises(InvalidArgument, match="at most 10000 members"):
        app.group([a.s(i) for i in range(10_001)])
    assert len(canvas.plan(app.chord([a.s(i) for i in range(10_000)], a.s())).leaves) == 10_001
    with pytest.raises(InvalidArgument, match="at most 10100 steps"):
        canvas.plan(app.chain(*[app.group([a.s(i), a.s(i)]) for i in range(4000)]))
    # a step after the first starts at most MAX_STARTS calls (one walk marks them all)
    halves = [app.group([a.s(i) for i in range(5_000)]) for _ in range(2)]
    with pytest.raises(InvalidArgument, match="at most 10000 calls at once"):
        canvas.plan(a.s(1) | app.group([*halves, a.s(0)]))
    assert len(canvas.plan(a.s(1) | app.group(halves)).leaves) == 10_001
    deep: Any = a.s(0)
    for _ in range(40):
        deep = app.group([deep, a.s(1)])
    with pytest.raises(InvalidArgument, match="nests at most"):
        canvas.plan(deep)

    @app.task(name="two")
    def two(x: int, y: int) -> int:
        return x + y

    canvas.plan(two.s(1, 2))  # a first step gets no input: two arguments fit
    canvas.plan(a.s(1) | two.s(2))  # a later one gets the step before's value first
    with pytest.raises(InvalidType, match="two"):
        canvas.plan(a.s(1) | two.s(2, 3))  # three arguments: refused when planned
    with pytest.raises(InvalidType, match="two"):
        canvas.plan(two.s(1))
    canvas.plan(a.s(1) | two.si(2, 3))  # immutable: its own arguments only
    with pytest.raises(dynoq.TaskArgumentError, match="cannot be sent"):
        canvas.plan(two.s(object(), 1))


def tell(setup: Setup, msg: dynoq.Message, value: Any) -> core.Step | None:
    """What a worker does when a flow's call returned ``value`` (dynoq.flows.advance),
    done here, through a sync app on the test's own client."""
    app = task_apps.build("sync", setup.client)
    q = app.queue(task_apps.QUEUE)
    member = core.member_of(msg)
    assert member is not None
    return dynoq.flows.advance(app, q, member, value)


# -- on every backend ------------------------------------------------------------------------


def test_chains_groups_chords_and_nesting(setup: Setup) -> None:
    add, mul, total = setup.task("add"), setup.task("mul"), setup.task("total")
    app = setup.app
    chain = setup.start(add.s(1, 2) | add.s(10) | mul.s(3))
    group = setup.start(app.group([add.s(i, i) for i in range(6)]))
    chord = setup.start(app.chord([add.s(i, 1) for i in range(5)], total.s()))
    # add(1, 1) = 2, then [mul(add(2, 1), 2) = 6, mul(2, 10) = 20], total 26, add 100
    nested = setup.start(
        add.s(1, 1) | app.group([add.s(1) | mul.s(2), mul.s(10)]) | total.s() | add.s(100)
    )
    single = setup.start(add.si(4, 5))
    assert chain.status() == "running"
    setup.worker(concurrency=4)
    assert chain.result(timeout=20) == 39
    assert group.result(timeout=20) == [0, 2, 4, 6, 8, 10]  # in order, whoever ended first
    assert chord.result(timeout=20) == 15
    assert nested.result(timeout=20) == 126
    assert single.result(timeout=20) == 9
    info = nested.info()
    assert (info.status, info.calls, info.ended, info.result) == ("succeeded", 6, 6, 126)
    assert app.flow(chord.id).result(timeout=1) == 15  # a handle from the id alone
    assert sorted(setup.logged("total")) == [[[1, 2, 3, 4, 5]], [[6, 20]]]  # each once
    assert len(setup.logged("add")) == 2 + 6 + 5 + 3 + 1


def test_a_flow_unknown_or_not_ended_in_time_says_so(setup: Setup) -> None:
    add = setup.task("add")
    unknown = setup.app.flow("no-such-flow")
    assert unknown.status() == "unknown"
    with pytest.raises(dynoq.ResultNotKept, match="no-such-flow"):
        unknown.result(timeout=1)
    h = setup.start(add.s(1, 2) | add.s(3))  # no worker: it never ends
    with pytest.raises(dynoq.ResultTimeout, match=r"0 of its 2 calls ended"):
        h.result(timeout=0.3)


def test_a_call_run_again_pushes_the_next_step_once(setup: Setup) -> None:
    # A worker that ran a chord's last member and died before its ack (or a duplicate
    # delivery): the member runs again. The callback is pushed once, with the first
    # run's values, and runs once.
    add, total = setup.task("add"), setup.task("total")
    h = setup.start(setup.app.chord([add.s(1, 1), add.s(2, 2)], total.s()))
    q = setup.client.queue(task_apps.QUEUE)
    popped = q.pop(2, wait=0.2)  # both members, delivered, never acked here
    assert sorted(m.id for m in popped) == sorted(f"{h.id}.{n}" for n in (2, 3))
    for again in range(3):  # each member's end told three times
        for m in popped:
            value = m.payload["args"][0] + m.payload["args"][1] + again  # later runs differ
            step = tell(setup, m, value)
            if m is popped[-1]:
                assert step is not None
                assert step.kind == "start" and step.value == [2, 4]  # the first runs' values
    callback = q.peek(10)
    assert [m.payload["task"] for m in callback] == ["total"]
    assert callback[0].payload["args"] == [[2, 4]]
    q.ack_many(popped)
    setup.worker()
    assert h.result(timeout=20) == 6
    assert setup.logged("total") == [[[2, 4]]]


def test_a_worker_that_returned_but_never_acked_is_redone_once(setup: Setup) -> None:
    # The member's delivery expires (its worker was killed after the call returned and
    # before the ack): a worker runs it again; the step after it is pushed once.
    add, mul = setup.task("add"), setup.task("mul")
    h = setup.start(add.s(3, 4) | mul.s(2) | mul.s(5))
    q = setup.client.queue(task_apps.QUEUE)
    [first] = q.pop(1, wait=0.2, visibility=0.5)
    tell(setup, first, 7)
    assert [m.payload["task"] for m in q.peek(10)] == ["mul"]  # the next step, pushed
    setup.worker()  # runs mul, then add again once its delivery expired
    assert h.result(timeout=20) == 70
    wait_for(lambda: len(setup.logged("add")) == 1, what="add run again")
    assert setup.logged("mul") == [[7, 2], [14, 5]]  # each step once
    wait_for(lambda: q.stats().total("acked") >= 3, what="acks")
    assert q.peek(10) == []


def test_two_workers_ending_the_last_two_members_at_once_push_the_callback_once(
    setup: Setup,
) -> None:
    add, total = setup.task("add"), setup.task("total")
    q = setup.client.queue(task_apps.QUEUE)
    handles = [
        setup.start(setup.app.chord([add.s(i, 0), add.s(i, 1)], total.s())) for i in range(20)
    ]
    members: list[dynoq.Message] = []
    while len(members) < 40:
        members += q.pop(40 - len(members), wait=0.5)
    barrier = threading.Barrier(2)
    steps: list[core.Step | None] = []

    def end(msg: dynoq.Message) -> None:
        barrier.wait()
        steps.append(tell(setup, msg, sum(msg.payload["args"])))

    by_flow: dict[str, list[dynoq.Message]] = {}
    for m in members:
        by_flow.setdefault(str(m.id).split(".")[0], []).append(m)
    for pair in by_flow.values():
        threads = [threading.Thread(target=end, args=(m,)) for m in pair]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(s.kind for s in steps if s) == ["start"] * 20 + ["wait"] * 20
    q.ack_many(members)
    setup.worker()
    for i, h in enumerate(handles):
        assert h.result(timeout=20) == 2 * i + 1
    assert len(setup.logged("total")) == 20


def test_a_failed_call_fails_its_chain_and_its_chord_unless_it_continues(setup: Setup) -> None:
    add, fussy, total = setup.task("add"), setup.task("fussy"), setup.task("total")
    describe, app = setup.task("describe"), setup.app
    chain = setup.start(add.s(1, 2) | fussy.s() | add.s(5))  # fussy: max_retries=0
    chord = setup.start(app.chord([add.s(1, 1), fussy.si(2)], total.s()))
    going = setup.start(app.chord([add.s(1, 1), fussy.si(4)], describe.s(), on_failure="continue"))
    setup.worker()
    with pytest.raises(dynoq.TaskFailed, match="fussy") as failed:
        chain.result(timeout=20)
    assert (failed.value.error_type, failed.value.error) == ("ValueError", "fussy 3 refused")
    with pytest.raises(dynoq.TaskFailed, match="fussy 2 refused"):
        chord.result(timeout=20)
    assert going.result(timeout=20) == [2, "failed: ValueError"]
    assert chain.status() == "failed" and chord.status() == "failed"
    assert [m.state for m in chain.members()] == ["succeeded", "failed", "pending"]
    # a failed flow stays failed: its dead member replayed runs again, and nothing follows
    q = setup.client.queue(task_apps.QUEUE)
    assert q.replay_dead() == 3  # the three fussy calls
    wait_for(lambda: q.stats().dead == 3, what="dead again")
    assert chain.status() == "failed" and chord.status() == "failed"
    assert setup.logged("total") == [] and [5] not in [a[1:] for a in setup.logged("add")]


def test_cancel_stops_a_flow_and_takes_its_waiting_calls_back(setup: Setup) -> None:
    add, total = setup.task("add"), setup.task("total")
    h = setup.start(setup.app.chord([add.s(1, 1), add.s(2, 2)], total.s()))
    assert [m.state for m in h.members()] == ["started", "started", "pending"]
    assert h.cancel() is True and h.cancel() is False
    assert h.status() == "cancelled"
    q = setup.client.queue(task_apps.QUEUE)
    assert q.peek(10) == []  # its waiting calls are off the queue
    with pytest.raises(dynoq.TaskCancelled, match="cancelled"):
        h.result(timeout=1)
    setup.worker()
    late = setup.start(add.s(1, 2) | add.s(3))
    assert late.result(timeout=20) == 6  # the worker runs: the cancelled flow ran nothing
    assert setup.logged("add") == [[1, 2], [3, 3]] and setup.logged("total") == []


@pytest.mark.sync_only  # each case waits a reconcile's second: the sync flavor's are enough
def test_a_waiting_handle_ends_what_nobody_will_end(setup: Setup, flavor: str) -> None:
    add, total = setup.task("add"), setup.task("total")
    q = setup.client.queue(task_apps.QUEUE)
    # a call whose message is gone (removed): the flow fails, saying so
    gone = setup.start(add.s(1, 2) | add.s(3))
    assert q.remove(f"{gone.id}.1")
    with pytest.raises(dynoq.TaskFailed, match="its message is gone"):
        gone.result(timeout=20)
    # a call dead-lettered where no worker saw it (its delivery expired past its retries)
    dead = setup.start(setup.app.chord([add.s(1, 1), add.s(2, 2)], total.s()))
    popped = q.pop(2, wait=0.2)
    for m in popped:
        setup.client.backend.run(q.ops.nack_call(m, delay=0.0, mode="dead"))
    with pytest.raises(dynoq.TaskFailed, match="DeadLetter"):
        dead.result(timeout=20)
    # a step due to start but never pushed (its pusher died between the two): pushed
    late = setup.start(add.s(1, 2) | add.s(3))
    [first] = q.pop(1, wait=0.2)
    member = core.member_of(first)
    assert member is not None
    step = setup.client.backend.run(
        core.advance(setup.client.prefix, member, core.encode_value(3, q.ops.limit), q.ops.limit)
    )
    assert step.kind == "start" and q.peek(10) == []  # told, never pushed
    q.ack(first)
    setup.worker()
    assert late.result(timeout=20) == 6
    assert setup.logged("add") == [[3, 3]] and setup.logged("total") == []


@pytest.mark.sync_only
def test_the_largest_group_runs_with_every_result_in_order(setup: Setup, flavor: str) -> None:
    # 10,000 members (1,200 on memory://, fakeredis being slow): written in parts,
    # started in pipelines of PUSHES_PAGE, gathered by one walk into one msgpack array.
    n = 1_200 if setup.url.startswith("memory://") else 10_000
    brief, total = setup.task("brief"), setup.task("describe")
    h = setup.start(setup.app.chord([brief.s(i) for i in range(n)], total.s()))
    assert setup.client.queue(task_apps.QUEUE).size() == n
    setup.worker(concurrency=4)
    assert h.result(timeout=120) == list(range(n))
    info = h.info()
    assert (info.calls, info.ended) == (n + 1, n + 1)


@pytest.mark.sync_only  # (start_flow's keep_result is one line of the shared shell)
def test_a_flow_is_kept_for_its_keep_result_once_it_ended(setup: Setup, flavor: str) -> None:
    add = setup.task("add")
    for bad, error in ((0, InvalidArgument), (-1, InvalidArgument), ("1", InvalidType)):
        with pytest.raises(error, match="keep_result"):
            (add.s(1, 2) | add.s(3)).delay(keep_result=bad)
    assert setup.client.redis.keys(f"{setup.prefix}:flow:*") == []  # nothing stored
    setup.worker()
    brief = (add.s(1, 2) | add.s(3)).delay(keep_result=0.5)
    kept = (add.s(1, 2) | add.s(3)).delay()
    assert brief.result(timeout=20) == 6 and kept.result(timeout=20) == 6
    state = FlowKeys.of(setup.prefix, kept.id).flow
    assert setup.client.redis.pttl(state) > (core.FLOW_KEEP - 60) * 1000  # a day
    wait_for(lambda: brief.status() == "unknown", timeout=5, what="the brief flow's expiry")
    with pytest.raises(dynoq.ResultNotKept):
        brief.result(timeout=1)


def test_the_sweeper_ends_what_nobody_will_end(
    setup: Setup, flavor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same three losses as above, with no handle waiting: a sweeper's looks end them.
    monkeypatch.setattr(core, "FIRST_LOOK", 0.0)  # looked at from its start (default 2 s)
    add, total = setup.task("add"), setup.task("total")
    q = setup.client.queue(task_apps.QUEUE)
    running = running_flows_key(setup.client.prefix)
    gone = setup.start(add.s(1, 2) | add.s(3))
    assert q.remove(f"{gone.id}.1")
    dead = setup.start(setup.app.chord([add.s(1, 1), add.s(2, 2)], total.s()))
    for m in q.pop(2, wait=0.2):
        setup.client.backend.run(q.ops.nack_call(m, delay=0.0, mode="dead"))
    late = setup.start(add.s(5, 5) | add.s(3))
    [first] = q.pop(1, wait=0.2)
    member = core.member_of(first)
    assert member is not None
    setup.client.backend.run(
        core.advance(setup.client.prefix, member, core.encode_value(10, q.ops.limit), q.ops.limit)
    )
    q.ack(first)  # its next step was told, never pushed
    ids = {gone.id, dead.id, late.id}
    assert {x.decode() for x in setup.client.redis.zrange(running, 0, -1)} == ids
    sweeper = (
        setup.client.sweeper(refresh_interval=0.05)
        if flavor == "sync"
        else Synced(setup._own.sweeper(refresh_interval=0.05), setup.loop)
    )
    # a look records each flow's progress; the next, finding none, reconciles
    settled = 0
    for _ in range(3):
        time.sleep(0.06)
        settled += sweeper.run_once().flow_calls
    assert settled == 4  # the removed call, both dead ones, the one never pushed
    assert gone.status() == "failed" and dead.status() == "failed"
    with pytest.raises(dynoq.TaskFailed, match="its message is gone"):
        gone.result(timeout=1)
    with pytest.raises(dynoq.TaskFailed, match="DeadLetter"):
        dead.result(timeout=1)
    assert [m.id for m in q.peek(10)] == [f"{late.id}.2"]  # pushed by the sweeper
    setup.worker()
    assert late.result(timeout=20) == 13
    time.sleep(0.06)
    sweeper.run_once()  # ended flows leave the set (their enders took them off already)
    assert setup.client.redis.zcard(running) == 0
    assert setup.logged("total") == []


@pytest.mark.sync_only
def test_the_running_flows_set_holds_only_running_flows(setup: Setup, flavor: str) -> None:
    add = setup.task("add")
    running = running_flows_key(setup.client.prefix)
    r = setup.client.redis
    # an entry older than a flow's lifetime (its ender died, no sweeper ran) is dropped
    # by the next start; one of a flow that is gone, by a sweeper's look
    r.zadd(running, {"ancient": 1, "vanished": time.time() * 1000})
    done = setup.start(add.s(1, 2) | add.s(3))
    cancelled = setup.start(add.s(1, 2) | add.s(3))
    assert r.zscore(running, "ancient") is None
    assert {x.decode() for x in r.zrange(running, 0, -1)} == {done.id, cancelled.id, "vanished"}
    assert cancelled.cancel()
    assert r.zscore(running, cancelled.id) is None
    setup.worker()
    assert done.result(timeout=20) == 6
    wait_for(lambda: r.zscore(running, done.id) is None, timeout=5, what="its end")
    assert r.zrange(running, 0, -1) == [b"vanished"]
    # entries no flow has, planted by a raw ZADD (a producer may write the set): dropped,
    # and the look goes on
    planted = [b"x" * 100, b"a}b", b"\xff\xfe", b"-" * 5000]
    r.zadd(running, {p: 0 for p in planted})
    sweeper = setup.client.sweeper(refresh_interval=0.05)
    assert sweeper.run_once().errors == 0
    assert r.zcard(running) == 0


@pytest.mark.sync_only
def test_a_sweeper_hammering_a_healthy_flow_changes_nothing(setup: Setup, flavor: str) -> None:
    # Reconciling races each call's own worker: a call's first end counts and a call is
    # pushed once, so a flow that runs well ends as it would have, every call run once.
    add, total, slow = setup.task("add"), setup.task("total"), setup.task("slow")
    h = setup.start(
        setup.app.chord([slow.si(0.3), *[add.s(i, i) for i in range(20)]], total.si([1]))
    )
    chain = setup.start(add.s(0, 1) | add.s(1) | add.s(1) | add.s(1))
    stop = threading.Event()

    def sweep() -> None:
        sweeper = setup.client.sweeper(refresh_interval=0.001)
        while not stop.is_set():
            sweeper.run_once()

    sweepers = [threading.Thread(target=sweep) for _ in range(2)]
    for t in sweepers:
        t.start()
    try:
        setup.worker()
        assert h.result(timeout=30) == 1 and chain.result(timeout=30) == 4
    finally:
        stop.set()
        for t in sweepers:
            t.join()
    assert len(setup.logged("add")) == 24 and setup.logged("total") == [[[1]]]


def test_a_hostile_plan_is_not_walked(setup: Setup) -> None:
    # Any role that writes a flow's keys could plant a path of thousands of levels, or a
    # group of a billion members: the walk refuses both (every call's work is bounded).
    add = setup.task("add")
    h = setup.start(add.s(1, 2) | add.s(3))
    keys, r = FlowKeys.of(setup.client.prefix, h.id), setup.client.redis
    q = setup.client.queue(task_apps.QUEUE)
    limit = q.ops.limit
    r.hset(keys.plan, "p:1", ";".join(f"{i},g,0,1,-1" for i in range(5000)))
    step = setup.client.backend.run(
        core.advance(setup.client.prefix, core.Member(h.id, 1), b"\x01", limit)
    )
    assert step.kind == "gone"
    r.hset(keys.plan, "p:1", "9,g,0,1000000000,-1")
    r.hset(keys.flow, "c:9", 2_000_000_000)
    step = setup.client.backend.run(
        core.advance(setup.client.prefix, core.Member(h.id, 1), b"\x01", limit)
    )
    assert step.kind == "gone"
    # a group of calls whose entries name more members than its size, or that is not
    # the call's own group (its first level)
    for path, entries in (("9,l,0,1,-1", "1,1,1"), ("8,c,0,2,-1;9,l,0,1,-1", "1")):
        r.hset(keys.plan, mapping={"p:1": path, "e:9": entries})
        step = setup.client.backend.run(
            core.advance(setup.client.prefix, core.Member(h.id, 1), b"\x01", limit)
        )
        assert step.kind == "gone"


def test_flow_keys_are_the_flows_own(setup: Setup) -> None:
    add = setup.task("add")
    h = setup.start(add.s(1, 2) | add.s(3))
    keys = FlowKeys.of(setup.client.prefix, h.id)
    r = setup.client.redis
    assert r.exists(keys.plan, keys.flow) == 2
    for key in (keys.plan, keys.flow):  # kept for the flow's lifetime, not for ever
        assert 0 < r.pttl(key) <= core.FLOW_TTL * 1000
    setup.worker()
    assert h.result(timeout=20) == 6
    assert 0 < r.pttl(keys.flow) <= core.FLOW_KEEP * 1000  # then for FLOW_KEEP
    assert all(k.startswith(f"{setup.client.prefix}:") for k in (keys.plan, keys.flow))


@pytest.mark.sync_only
def test_a_malformed_flow_mark_is_dead_lettered_and_a_keyed_queue_refused(
    setup: Setup, flavor: str
) -> None:
    q = setup.client.queue(task_apps.QUEUE)
    for mark in (["x"], ["a}b", 1], ["f", -1], ["f", "1"], "f.1"):
        q.push({"task": "add", "args": [1, 2], "kwargs": {}, "flow": mark})
    setup.worker()
    wait_for(lambda: q.stats().dead == 5, what="five dead letters")
    assert all("malformed flow mark" in (m.failure.error if m.failure else "") for m in q.dead())
    assert setup.logged("add") == []  # not run: the mark is read before the call

    app = dynoq.Tasks(setup.client)

    @app.task(name="keyed", queue="kq", ordered="key")
    def keyed(x: int) -> int:
        return x

    with pytest.raises(OrderedQueueError, match="message-group"):
        keyed.s(1).delay()


@pytest.mark.sync_only
def test_a_batch_s_endings_go_one_call_per_flow_and_a_failed_one_is_not_acked(
    flavor: str,
) -> None:
    from dynoq._core.calls import Batch, Call
    from dynoq._core.endings import Ending, endings
    from dynoq._core.lua import script

    made: list[list[Any]] = []

    def make(parts: list[Any]) -> Call:
        made.append(parts)
        return Call(script("flow-state"), ["k1", "k2"], [])

    def ending(flow: str, part: int) -> Ending:
        return Ending(
            flow, part, make, lambda answer: [Call(script("flow-count"), ["f"], [answer])]
        )

    msgs = [dynoq.Message(i, id=str(i)) for i in range(5)]
    for m, name in zip(msgs, ["a", "b", "a", None, "b"], strict=True):
        m.ending = None if name is None else ending(name, int(str(m.id)))
    flow = endings(msgs)
    first = flow.send(None)
    assert isinstance(first, Batch) and made == [[0, 2], [1, 4]]  # one call per flow
    second = flow.send([["x0", "x2"], dynoq.ConnectionFailed("gone")])  # flow b's failed
    assert isinstance(second, Batch) and [c.args for c in second.calls] == [["x0"], ["x2"]]
    with pytest.raises(StopIteration) as done:
        flow.send([1, dynoq.ServerError("no")])  # the push after message 2's failed
    assert [m.id for m in done.value.value] == ["0", "3"]  # the others run again


@pytest.mark.sync_only
def test_a_step_to_a_queue_the_worker_does_not_know_is_pushed_by_the_reconcile(
    setup: Setup, flavor: str, caplog: pytest.LogCaptureFixture
) -> None:
    full, partial = dynoq.Tasks(setup.client), dynoq.Tasks(setup.client)
    for app in (full, partial):
        app.task(name="one", queue="q1")(lambda x: x)
    full.task(name="cb", queue="q2")(lambda xs: sum(xs))
    one, cb = full.get("one"), full.get("cb")
    assert one is not None and cb is not None
    h = full.chord([one.s(1), one.s(2)], cb.s()).delay()
    with partial.worker(idle_wait=0.05), full.worker(queues=["q2"], idle_wait=0.05):
        assert h.result(timeout=20) == 3  # pushed by the wait's reconcile
    assert "did not open" in caplog.text and "'q2'" in caplog.text


@pytest.mark.sync_only
def test_a_flow_id_never_starts_with_a_dash_nor_breaks_its_keys_tag(flavor: str) -> None:
    ids = [core.new_flow_id() for _ in range(20_000)]
    assert not any(i.startswith("-") or "}" in i or "{" in i for i in ids)
    assert len(set(ids)) == len(ids)
