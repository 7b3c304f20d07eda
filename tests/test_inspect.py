"""The core's read-only views (dynoq._core.inspect) and the rebalance history, on every
backend: pages of in-flight, delayed and dead messages, a message's state by id, shard
leases and fencing numbers, registry pages, consumer groups."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from helpers import dead_letter, pop_leased, wait_for

import dynoq
from dynoq._core import inspect
from dynoq._core.calls import Cmd
from dynoq._core.group import GroupOps, LeaseOps
from dynoq._core.keys import registry_key
from dynoq.consumer import Consumer
from dynoq.errors import InvalidArgument

FAST = {"lease_ttl": 2.0, "rebalance_interval": 5.0, "idle_wait": 0.2}


@pytest.fixture
def consumers() -> Iterator[list[Consumer]]:
    made: list[Consumer] = []
    yield made
    for c in made:
        c.stop(timeout=10)


def _page(
    q: dynoq.Queue, kind: str, shards: list[int], offset: int = 0, count: int = 50
) -> tuple[list[inspect.Entry], bool]:
    return q.backend.drive(inspect.page(q.ops, kind, shards=shards, offset=offset, count=count))


def test_pages_are_sorted_bounded_and_walk_a_shard(client: dynoq.Client) -> None:
    q = client.queue("pages", shards=3)
    now = client.server_time()
    ids = q.push_many([dynoq.Message(i, id=f"d{i}", delay=100 + i) for i in range(30)])
    entries, more = _page(q, "delayed", [0, 1, 2], count=10)
    assert [e.message.id for e in entries] == ids[:10] and more  # by due time, all shards
    assert all(now + 99 < e.at < now + 140 for e in entries)
    assert [e.message.payload for e in entries] == list(range(10))
    # one shard, page by page: the pages together are the shard, in order
    shard0 = [i for i in ids if q.shard_for(i) == 0]
    walked, offset = [], 0
    while True:
        page, more = _page(q, "delayed", [0], offset=offset, count=4)
        walked += [e.message.id for e in page]
        assert all(e.shard == 0 for e in page)
        offset += 4
        if not more:
            break
    assert walked == shard0
    everything, more = _page(q, "delayed", [0, 1, 2], count=500)
    assert len(everything) == 30 and not more


def test_in_flight_page_shows_deadlines_and_dead_page_shows_why(client: dynoq.Client) -> None:
    q = client.queue("flight", shards=2)
    q.push_many([dynoq.Message(i, id=f"m{i}") for i in range(6)])
    now = client.server_time()
    short = q.pop(2, visibility=30)
    long = q.pop(2, visibility=300)
    entries, more = _page(q, "in_flight", [0, 1])
    assert not more
    assert [e.message.id for e in entries][:2] == sorted(
        (m.id for m in short), key=lambda i: next(e.at for e in entries if e.message.id == i)
    )
    got = {e.message.id: e.at for e in entries}
    assert set(got) == {m.id for m in short + long}
    for m in short:
        assert now + 29 < got[m.id] < now + 40
    for m in long:
        assert now + 299 < got[m.id] < now + 310
    [gone] = q.pop(1)
    assert dead_letter(q, gone)
    dead, _ = _page(q, "dead", [0, 1])
    assert [e.message.id for e in dead] == [gone.id] and dead[0].message.attempts == 1


def test_find_says_where_a_message_is(client: dynoq.Client) -> None:
    q = client.queue("find", shards=1)
    q.push("f", id="flying")
    assert [m.id for m in q.pop(1, visibility=60)] == ["flying"]
    q.push("r", id="ready", priority=5)
    q.push("d", id="later", delay=60)
    q.push("x", id="doomed", priority=0)
    [m] = q.pop(1)
    assert m.id == "doomed" and dead_letter(q, m)

    def find(msg_id: str) -> inspect.Located:
        return q.backend.drive(inspect.find(q.ops, msg_id))  # type: ignore[no-any-return]

    states = {i: find(i).state for i in ("ready", "later", "flying", "doomed")}
    assert states == {"ready": "ready", "later": "delayed", "flying": "in_flight", "doomed": "dead"}
    assert find("later").at > client.server_time() + 50  # type: ignore[operator]
    assert find("ready").at is None and find("ready").message.payload == "r"
    assert q.backend.drive(inspect.find(q.ops, "nothing")) is None


def test_bad_page_arguments_are_refused(client: dynoq.Client) -> None:
    q = client.queue("bad", shards=2)
    for kind, shards, offset, count in [
        ("ready", [0], 0, 5),
        ("dead", [2], 0, 5),
        ("dead", [], 0, 5),
        ("dead", [0, 1], 5, 5),
        ("dead", [0], -1, 5),
        ("dead", [0], 0, 501),
        ("dead", list(range(65)), 0, 5),
    ]:
        with pytest.raises(InvalidArgument):
            q.backend.drive(inspect.page(q.ops, kind, shards=shards, offset=offset, count=count))


def test_leases_show_holder_expiry_and_fence_never_the_token(client: dynoq.Client) -> None:
    q = client.queue("leased", shards=3, ordered=True)
    q.push("a", key="k")
    shard = q.shard_for("k")
    token = "worker-7:host:deadbeefcafe"
    lease = LeaseOps(q.ops, token, 30)
    assert q.backend.drive(lease.acquire(shard))[0] == 0.0
    pop_leased(q, lease=lease.value(1), shards=[shard])
    views = q.backend.run(inspect.leases(q.ops, [0, 1, 2]))
    held = views[shard]
    assert held.holder == "worker-7:host" and 25 < held.expires_in <= 30 and held.fence == 1
    assert all(
        v.holder is None and v.expires_in is None and v.fence == 0
        for v in views
        if v.shard != shard
    )
    assert "deadbeefcafe" not in repr(views)
    assert q.backend.run(lease.release(shard, 1))
    assert q.backend.drive(LeaseOps(q.ops, "other:1", 30).acquire(shard))[0] == 0.0
    assert q.backend.run(inspect.leases(q.ops, [shard]))[0].fence == 2


def test_registry_pages(client: dynoq.Client) -> None:
    for i in range(12):
        client.queue(f"reg{i:02d}", shards=1)
    names, total = client.backend.drive(inspect.names(registry_key(client.prefix), 5))
    assert total == 12 and len(names) == 5 and names == sorted(names)
    names, total = client.backend.drive(inspect.names(registry_key(client.prefix), 100))
    assert names == [f"reg{i:02d}" for i in range(12)]


def test_group_view_members_and_history(client: dynoq.Client) -> None:
    q = client.queue("grouped", shards=4)
    a = GroupOps(q.ops.keys, "billing", "host-a:1", ttl=30)
    # b's TTL must outlast the step to a's heartbeat (which drops members past their TTL)
    # on a loaded machine, and end before the view: 0.05 s failed once in CI.
    b = GroupOps(q.ops.keys, "billing", "host-b:2", ttl=0.5)
    q.backend.run(a.heartbeat())  # the script loaded before b's clock starts
    q.backend.run(b.heartbeat())
    q.backend.run(a.heartbeat())  # the claim lives as long as the last heartbeat's TTL
    q.backend.run(a.record(["host-a:1", "host-b:2"], [2, 0]))
    q.backend.run(b.record(["host-a:1", "host-b:2"], [1, 3]))
    time.sleep(0.6)
    now = client.server_time()
    view = q.backend.drive(inspect.group(q.ops.keys, "billing"))
    assert view.consuming and view.member_count == 2
    live = {m.name: m.alive(now) for m in view.members}
    assert live == {"host-a:1": True, "host-b:2": False}
    assert [(r.member, r.shards) for r in view.history] == [
        ("host-b:2", (1, 3)),
        ("host-a:1", (0, 2)),
    ]
    assert view.history[0].count == 2 and now - 5 < view.history[0].at <= now
    other = q.backend.drive(inspect.group(q.ops.keys, "nobody"))
    assert not other.consuming and other.members == [] and other.history == []


def test_history_is_capped(client: dynoq.Client) -> None:
    from dynoq._core.group import HISTORY_CAP

    q = client.queue("capped", shards=1)
    g = GroupOps(q.ops.keys, "g", "m", ttl=30)
    for i in range(HISTORY_CAP + 5):
        q.backend.run(g.record([f"m{i}"], [0]))
    assert q.backend.run(Cmd(("LLEN", g.keys.history))) == HISTORY_CAP
    view = q.backend.drive(inspect.group(q.ops.keys, "g", history=500))
    assert len(view.history) == HISTORY_CAP
    assert view.history[0].members == (f"m{HISTORY_CAP + 4}",)  # newest first
    assert q.backend.run(Cmd(("PTTL", g.keys.history))) > 0


def test_consumers_record_their_rebalances(client: dynoq.Client, consumers: list[Consumer]) -> None:
    q = client.queue("rebalanced", shards=4)
    for name in ("c1", "c2"):
        consumers.append(
            client.consumer(q, lambda m: None, group="g", instance_id=name, **FAST).start()
        )

    def history() -> list[tuple[str, tuple[int, ...], int]]:
        view = q.backend.drive(inspect.group(q.ops.keys, "g"))
        return [(r.member, r.shards, r.count) for r in view.history]

    wait_for(
        lambda: {("c1", (0, 1), 2), ("c2", (2, 3), 2)} <= set(history()),
        what="both members' two-member assignment in the history",
    )
    assert history()[-1][2] == 1  # the first member started alone
    before = len(history())
    consumers[0]._upkeep.tick(rebalance=True)  # type: ignore[union-attr]
    assert len(history()) == before  # a rebalance that changes nothing records nothing


def test_together_joins_batches(client: dynoq.Client) -> None:
    a, b = client.queue("ta", shards=2), client.queue("tb", shards=3)
    a.push("x")
    sa, sb = client.backend.run(inspect.together([a.ops.stats(), b.ops.stats()]))
    assert (sa.ready, len(sa.shards), sb.ready, len(sb.shards)) == (1, 2, 0, 3)
