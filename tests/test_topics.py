"""Topics (RocketMQ publish/subscribe) on every backend: every group gets every matching
message, tag filters, clustering and broadcasting groups, and no silent split of a queue."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import FAST, wait_for

import dynoq
from dynoq import Message
from dynoq.consumer import Consumer

FLAVORS = ("sync", "async")  # every test on the asyncio client too


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by: dict[str, list[Any]] = defaultdict(list)

    def handler(self, name: str) -> Callable[[dynoq.Message], None]:
        def handle(msg: dynoq.Message) -> None:
            with self.lock:
                self.by[name].append(msg.payload)

        return handle

    def count(self, name: str) -> int:
        with self.lock:
            return len(self.by[name])


def test_every_group_gets_every_message(client: dynoq.Client, consumers: list[Consumer]) -> None:
    # Two groups on one *queue* once split its messages (9 and 11 of 20): on a topic each
    # group gets all 20.
    t = client.topic("orders", shards=4)
    seen = Seen()
    for group in ("billing", "analytics"):
        consumers.append(client.consumer(t, seen.handler(group), group=group, **FAST).start())
    ids = t.publish_many(range(20))
    wait_for(lambda: seen.count("billing") == 20 and seen.count("analytics") == 20)
    assert sorted(seen.by["billing"]) == sorted(seen.by["analytics"]) == list(range(20))
    assert [s.group for s in t.subscriptions()] == ["analytics", "billing"]
    assert len(set(ids)) == 20


def test_tag_filters_happen_at_publish(client: dynoq.Client) -> None:
    t = client.topic("tagged", shards=2)
    t.subscribe("money", tags="paid || refunded")
    t.subscribe("all")
    t.publish_many(
        [
            Message("p", tag="paid"),
            Message("s", tag="shipped"),
            Message("r", tag="refunded"),
            Message("untagged"),
        ]
    )
    assert sorted(m.payload for m in t.group_queue("money").pop(10)) == ["p", "r"]
    everything = t.group_queue("all").pop(10)
    assert sorted(m.payload for m in everything) == ["p", "r", "s", "untagged"]
    assert {m.tag for m in everything} == {"paid", "shipped", "refunded", None}
    assert [(s.group, s.tags) for s in t.subscriptions()] == [
        ("all", "*"),
        ("money", "paid || refunded"),
    ]


def test_a_later_group_gets_what_is_published_after_it_subscribed(client: dynoq.Client) -> None:
    t = client.topic("late", shards=2)
    t.subscribe("early")
    t.publish("before")
    # Another process subscribes while this topic object has the subscriptions cached.
    with dynoq.connect(client.url, prefix=client.prefix) as other:
        other.topic("late").subscribe("late-comer")
    t.publish("after")
    assert [m.payload for m in t.group_queue("late-comer").pop(10)] == ["after"]
    assert sorted(m.payload for m in t.group_queue("early").pop(10)) == ["after", "before"]


def test_a_retried_publish_duplicates_nothing(client: dynoq.Client) -> None:
    t = client.topic("retried", shards=3, dedupe_window=60)
    t.subscribe("g")
    for _ in range(3):
        t.publish_many([Message(i, id=f"e{i}") for i in range(10)])
    q = t.group_queue("g")
    got = q.pop(100)
    assert sorted(m.payload for m in got) == list(range(10))
    q.ack_many(got)
    t.publish_many([Message(i, id=f"e{i}") for i in range(10)])  # within the window
    assert q.size() == 0


def test_ordered_topics_keep_per_key_order_in_every_group(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    t = client.topic("ordered-events", shards=4, ordered=True)
    seen = Seen()
    for group in ("a", "b"):
        consumers.append(
            client.consumer(t, seen.handler(group), group=group, batch_size=5, **FAST).start()
        )
    t.publish_many([Message({"k": i % 5, "i": i}, key=f"k{i % 5}") for i in range(100)])
    wait_for(lambda: seen.count("a") == 100 and seen.count("b") == 100)
    for group in ("a", "b"):
        per_key: dict[int, list[int]] = defaultdict(list)
        for p in seen.by[group]:
            per_key[p["k"]].append(p["i"])
        assert all(v == sorted(v) for v in per_key.values())


# -- topics with ordered="key": every group's queue is a keyed queue (message groups) --------


def _drain(q: Any) -> dict[str, list[int]]:
    """Pop and ack a keyed group queue until it is empty: each key's payloads in order."""
    per_key: dict[str, list[int]] = defaultdict(list)
    while batch := q.pop(10):
        for m in batch:
            per_key[m.key].append(m.payload)
            assert q.ack(m)
    return dict(per_key)


def test_key_topics_give_every_group_every_key_in_order(client: dynoq.Client) -> None:
    t = client.topic("kt", shards=2, ordered="key")  # type: ignore[arg-type]
    t.subscribe("a")
    t.subscribe("b")
    items = [Message(i, id=f"m{i}", key=f"k{i % 3}") for i in range(12)]
    t.publish_many(items)
    t.publish_many(items[:4])  # a retried publish adds nothing
    a, b = t.group_queue("a"), t.group_queue("b")
    assert a.size() == b.size() == 12 and a.stats().keys == 3
    # one head per key at a time in each group, whatever the other group does
    assert sorted(m.payload for m in a.pop(10)) == [0, 1, 2]
    assert a.pop(10) == []
    want = {f"k{k}": list(range(k, 12, 3)) for k in range(3)}
    assert _drain(b) == want
    assert a.key_state("k0").in_flight == 1 and a.size() == 9  # 3 in flight


def test_key_topics_with_consumers_in_clustering_and_broadcasting_groups(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    t = client.topic("kt-live", shards=2, ordered="key")  # type: ignore[arg-type]
    seen = Seen()
    for i in range(2):  # two members share the clustering group's queue
        consumers.append(
            client.consumer(t, seen.handler("shared"), group="shared", batch_size=5, **FAST).start()
        )
        consumers.append(
            client.consumer(
                t,
                seen.handler(f"m{i}"),
                group="caches",
                mode="broadcasting",
                instance_id=f"m{i}",
                batch_size=5,
                **FAST,
            ).start()
        )
    t.publish_many([Message({"k": i % 5, "i": i}, key=f"k{i % 5}") for i in range(60)])
    wait_for(lambda: all(seen.count(n) == 60 for n in ("shared", "m0", "m1")))
    for name in ("shared", "m0", "m1"):
        per_key: dict[int, list[int]] = defaultdict(list)
        for p in seen.by[name]:
            per_key[p["k"]].append(p["i"])
        assert per_key == {k: list(range(k, 60, 5)) for k in range(5)}


def test_a_failing_message_blocks_only_its_key_in_its_group(client: dynoq.Client) -> None:
    t = client.topic("kt-fail", shards=2, ordered="key")  # type: ignore[arg-type]
    t.subscribe("a")
    t.subscribe("b")
    t.publish_many(
        [Message(0, key="x"), Message(1, key="x"), Message(2, key="y"), Message(3, key="y")]
    )
    a, b = t.group_queue("a"), t.group_queue("b")
    heads = {m.payload: m for m in a.pop(10)}
    assert set(heads) == {0, 2}
    assert a.nack(heads[0], delay=60) and a.ack(heads[2])
    [m] = a.pop(10)  # x waits for its retry; y goes on
    assert m.payload == 3 and a.ack(m)
    assert a.pop(10) == [] and a.key_state("x").waiting == 1
    assert _drain(b) == {"x": [0, 1], "y": [2, 3]}  # the other group is not held up


def test_key_topics_filter_tags_and_keep_key_concurrency(client: dynoq.Client) -> None:
    t = client.topic("kt-tags", shards=2, ordered="key", key_concurrency=2)  # type: ignore[arg-type]
    t.subscribe("paid", tags="paid || refunded")
    t.subscribe("all")
    tags = ["paid", "other", "refunded", "paid", "other", "paid"]
    t.publish_many([Message(i, key="o1", tag=tag) for i, tag in enumerate(tags)])
    paid, every = t.group_queue("paid"), t.group_queue("all")
    assert paid.size() == 4 and every.size() == 6
    first = paid.pop(10)  # two of a key in flight at once, in order
    assert [m.payload for m in first] == [0, 2] and paid.pop(10) == []
    assert paid.ack_many(first) == 2
    assert _drain(paid) == {"o1": [3, 5]}
    assert _drain(every) == {"o1": [0, 1, 2, 3, 4, 5]}
    assert client.topic("kt-tags").ops.settings.key_concurrency == 2
    with pytest.raises(dynoq.OrderedQueueError):
        t.publish("no key")


def test_the_sweeper_gives_back_a_key_topics_expired_delivery(client: dynoq.Client) -> None:
    t = client.topic(
        "kt-sweep",
        shards=2,
        ordered="key",
        unack_timeout=0.1,  # type: ignore[arg-type]
        dedupe_window=60,
    )
    t.subscribe("g")
    t.publish_many([Message(i, id=f"s{i}", key="a") for i in range(2)])
    q = t.group_queue("g")
    [m] = q.pop()
    sweeper = client.sweeper()

    def requeued() -> bool:
        report = sweeper.run_once()
        return report is not None and sum(r.requeued for r in report.queues.values()) == 1

    wait_for(requeued, what="the expired delivery given back")
    [again] = q.pop()  # back at the head of its key, the key taken over
    assert (again.id, again.fence, again.attempts) == (m.id, 2, 2) and q.ack(again)
    t.publish(0, id="s0", key="a")  # acked within the dedupe window: not again
    assert [x.id for x in q.pop(10)] == ["s1"]


def test_broadcasting_members_each_get_every_message_and_are_reaped(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    t = client.topic("config", shards=2, member_grace=0.3)
    seen = Seen()
    members = [
        client.consumer(
            t,
            seen.handler(f"m{i}"),
            group="caches",
            mode="broadcasting",
            instance_id=f"m{i}",
            **{**FAST, "lease_ttl": 0.6},
        ).start()
        for i in range(2)
    ]
    consumers.extend(members)
    t.publish_many(range(10))
    wait_for(lambda: seen.count("m0") == 10 and seen.count("m1") == 10)
    assert [(s.group, s.mode) for s in t.subscriptions()] == [("caches", "broadcasting")]
    members[1].stop()
    t.publish_many(range(10, 15))
    wait_for(lambda: seen.count("m0") == 15)
    time.sleep(0.4)  # past member_grace since m1's last heartbeat
    report = client.sweeper().run_once()
    assert report.queues["config"].reaped == 1
    assert set(t.backend.drive(t.ops.targets())) == {"config:caches:m0"}
    assert client.redis.keys(f"{client.prefix}:*caches:m1*") == []  # its queue is gone


def test_a_consumer_without_mode_follows_the_groups_subscription(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    # The case: group "bc" is subscribed in broadcasting mode and its consumers
    # name no mode; each gets every message (before, they consumed a clustering queue
    # nothing was published to, and silently got nothing).
    t = client.topic("follow", shards=2)
    t.subscribe("bc", mode="broadcasting")
    seen = Seen()
    members = [
        client.consumer(t, seen.handler(f"m{i}"), group="bc", instance_id=f"m{i}", **FAST).start()
        for i in range(2)
    ]
    consumers.extend(members)
    assert [c.settings.mode for c in members] == ["broadcasting"] * 2
    t.publish_many(range(10))
    wait_for(lambda: seen.count("m0") == 10 and seen.count("m1") == 10)
    assert sorted(seen.by["m0"]) == sorted(seen.by["m1"]) == list(range(10))
    assert [(s.group, s.mode) for s in t.subscriptions()] == [("bc", "broadcasting")]
    # A group not subscribed yet: its first consumer subscribes it, clustering.
    shared = client.consumer(t, seen.handler("cl"), group="cl", **FAST).start()
    consumers.append(shared)
    assert shared.settings.mode == "clustering"
    t.publish_many(range(10, 15))
    wait_for(lambda: seen.count("cl") == 5 and seen.count("m0") == 15)


def test_an_explicit_mode_that_conflicts_with_the_subscription_is_refused(
    client: dynoq.Client,
) -> None:
    t = client.topic("conflict", shards=2)
    t.subscribe("bc", mode="broadcasting")
    t.subscribe("cl")
    for group, mode, stored in (
        ("bc", "clustering", "broadcasting"),
        ("cl", "broadcasting", "clustering"),
    ):
        c = client.consumer(t, lambda m: None, group=group, mode=mode, instance_id="x", **FAST)
        with pytest.raises(dynoq.GroupConflict, match=f"in {stored} mode, not {mode}"):
            c.start()
    with pytest.raises(dynoq.GroupConflict):
        t.subscribe("cl", mode="broadcasting")
    # Nothing changed: the same subscriptions, no member queue made for "x".
    assert [(s.group, s.mode) for s in t.subscriptions()] == [
        ("bc", "broadcasting"),
        ("cl", "clustering"),
    ]
    assert set(t.backend.drive(t.ops.targets())) == {"conflict:cl"}


def test_a_second_group_on_a_queue_is_refused(
    client: dynoq.Client, consumers: list[Consumer]
) -> None:
    q = client.queue("contested", shards=2)
    first = client.consumer(q, lambda m: None, group="billing", **FAST).start()
    consumers.append(first)
    with pytest.raises(dynoq.GroupConflict, match="topic"):
        client.consumer(q, lambda m: None, group="analytics", **FAST).start()
    client.consumer(q, lambda m: None, group="billing", **FAST).start().stop()  # same: fine
    first.stop()
    consumers.append(client.consumer(q, lambda m: None, group="analytics", **FAST).start())


def test_bad_topic_input(client: dynoq.Client) -> None:
    t = client.topic("bad-topic", shards=2)
    t.subscribe("g", mode="clustering")
    with pytest.raises(dynoq.GroupConflict, match="clustering mode"):
        t.subscribe("g", mode="broadcasting")  # a group keeps its mode
    for call in (
        lambda: t.subscribe("h", mode="fanout"),
        lambda: t.subscribe("h", tags="a ||"),
        lambda: t.subscribe("h", tags="a b"),
        lambda: t.publish("x", tag="with space"),
        lambda: t.publish("x", tag="a|b"),
        lambda: t.subscribe("bad:name"),
        lambda: client.topic("bad-topic", shards=3),
    ):
        with pytest.raises(dynoq.InvalidArgument):
            call()
    with pytest.raises(dynoq.InvalidType):
        t.publish("x", tag=5)  # type: ignore[arg-type]
    with pytest.raises(dynoq.InvalidArgument, match="topics"):
        client.consumer(client.queue("plain"), lambda m: None, mode="broadcasting")
    assert [s.group for s in t.subscriptions()] == ["g"] and t.group_queue("g").size() == 0
    assert t.unsubscribe("g") and not t.unsubscribe("g") and t.subscriptions() == []


def test_a_group_named_like_the_spark_sinks_bookkeeping_is_refused(client: dynoq.Client) -> None:
    """A group "commit" or "wrote" would share its queue's keys with the Spark sinks'
    bookkeeping of a queue of the topic's name, and fall under the spark role's UNLINK and
    PEXPIRE of it (docs/security.md): refused, with nothing subscribed."""
    from dynoq._core.grants import RESERVED_GROUPS

    assert {"commit", "wrote"} <= set(RESERVED_GROUPS)
    t = client.topic("news", shards=2)
    for group in RESERVED_GROUPS:
        with pytest.raises(dynoq.InvalidArgument, match="Spark"):
            t.subscribe(group)
        with pytest.raises(dynoq.InvalidArgument, match="Spark"):
            t.subscribe(group, mode="broadcasting")
        with pytest.raises(dynoq.InvalidArgument, match="Spark"):
            t.group_queue(group)
    assert t.subscriptions() == []


# -- real processes ---------------------------------------------------------------------------

MEMBER = str(Path(__file__).with_name("topic_member.py"))


@pytest.mark.slow
def test_groups_of_processes_on_an_ordered_topic(real_client: dynoq.Client, real_url: str) -> None:
    client = real_client
    t = client.topic("events", shards=4, ordered=True, member_grace=0.3)
    t.subscribe("paid-only", tags="paid")
    members = [
        ("all", "clustering", "all-1"),
        ("all", "clustering", "all-2"),
        ("paid-only", "clustering", "paid-1"),
        ("paid-only", "clustering", "paid-2"),
        ("cache", "broadcasting", "cache-1"),
        ("cache", "broadcasting", "cache-2"),
    ]
    procs = {
        inst: subprocess.Popen(
            [sys.executable, MEMBER, real_url, client.prefix, "events", group, mode, inst],
            stdout=subprocess.PIPE,
            text=True,
        )
        for group, mode, inst in members
    }
    try:
        for p in procs.values():
            assert p.stdout is not None and p.stdout.readline().strip() == "started"

        def publish(start: int, n: int) -> list[str]:
            return t.publish_many(
                [
                    Message(
                        {"seq": i // 10},
                        id=f"e{i}",
                        key=f"k{i % 10}",
                        tag="paid" if i % 2 else "shipped",
                    )
                    for i in range(start, start + n)
                ]
            )

        publish(0, 200)
        log_key = f"{client.prefix}:log"

        def handled() -> dict[str, list[tuple[str, ...]]]:
            out: dict[str, list[tuple[str, ...]]] = defaultdict(list)
            for raw in client.redis.lrange(log_key, 0, -1):
                inst, group, msg_id, key, seq, tag = raw.decode().split("|")
                out[group if group != "cache" else inst].append((msg_id, key, seq, tag))
            return out

        def done(expect: dict[str, int]) -> bool:
            h = handled()
            return all(len({r[0] for r in h[g]}) == n for g, n in expect.items())

        wait_for(
            lambda: done({"all": 200, "paid-only": 100, "cache-1": 200, "cache-2": 200}),
            timeout=60,
            what="every group and member to handle its messages",
        )
        h = handled()
        assert {r[3] for r in h["paid-only"]} == {"paid"}
        for records in h.values():  # per-key order, by first handling, in every group
            first: dict[str, list[int]] = defaultdict(list)
            seen: set[str] = set()
            for msg_id, key, seq, _ in records:
                if msg_id not in seen:
                    seen.add(msg_id)
                    first[key].append(int(seq))
            assert all(v == sorted(v) for v in first.values())
        procs["cache-2"].kill()
        procs["cache-2"].wait()
        publish(0, 200)  # a retried publish: nothing new anywhere
        publish(200, 20)
        wait_for(
            lambda: done({"all": 220, "paid-only": 110, "cache-1": 220}),
            timeout=30,
            what="the survivors to handle the new messages",
        )
        time.sleep(1.0 + 0.3 + 0.2)  # the killed member's heartbeat lifetime, then its grace
        report = client.sweeper().run_once()
        assert report.queues["events"].reaped == 1
        assert not client.redis.keys(f"{client.prefix}:*cache-2*")
        assert len({r[0] for r in handled()["cache-2"]}) == 200  # what it had before
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
            if p.stdout:
                p.stdout.close()


def test_stats_and_metrics_show_topics_and_their_groups(client: dynoq.Client) -> None:
    from click.testing import CliRunner
    from prometheus_client import CollectorRegistry

    from dynoq.cli import cli
    from dynoq.metrics import QueueCollector

    t = client.topic("shown", shards=2)
    t.subscribe("billing", tags="paid")
    t.subscribe("audit")
    t.publish_many([Message(1, tag="paid"), Message(2, tag="other")])
    result = CliRunner().invoke(
        cli, ["--url", client.url, "--prefix", client.prefix, "stats", "--json"]
    )
    assert result.exit_code == 0, result.output
    [topic] = json.loads(result.output)["topics"]
    assert [(g["group"], g["tags"], g["ready"]) for g in topic["groups"]] == [
        ("audit", "*", 2),
        ("billing", "paid", 1),
    ]
    reg = CollectorRegistry()
    reg.register(QueueCollector(client))
    assert (
        reg.get_sample_value(
            "dynoq_topic_group_messages",
            {"topic": "shown", "group": "billing", "queue": "shown:billing", "state": "ready"},
        )
        == 1
    )
