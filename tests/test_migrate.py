"""The storage layout's version (docs/compatibility.md) on every backend: a new queue or
topic is stored in this version's layout; one written before the field existed (layout 1)
is read as it is; one of a layout this version does not read is refused with
LayoutError, naming `dynoq migrate`, with nothing written; `dynoq migrate` upgrades it in
place, its messages kept, and is safe to run again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from helpers import wait_for

import dynoq
import dynoq.sweeper
from dynoq._core import layout
from dynoq._core.keys import QueueKeys, TopicKeys
from dynoq.cli import cli

FLAVORS = ("sync", "async")
ASYNC_BACKENDS = "all"  # the I/O itself: the async client on every backend


@pytest.fixture
def raw(url: str, prefix: str) -> Iterator[Any]:
    """A redis-py client on the test's server, for what an older dynoq left there."""
    with dynoq.connect(url, prefix=prefix) as c:
        yield c.redis


@pytest.fixture
def migrate(url: str, prefix: str) -> Callable[..., Result]:
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, ["--url", url, "--prefix", prefix, "migrate", *args])

    return invoke


def written_by_0_2(raw: Any, meta: str) -> None:
    """Make a stored queue what dynoq 0.2 wrote: layout 2 differs from 1 only by its
    "layout" field (lua/migrate-1.lua), so a layout-2 queue without it is byte for byte
    a queue 0.2 created."""
    assert raw.hget(meta, "layout") == b"2"
    raw.hdel(meta, "layout")


def test_a_new_queue_or_topic_is_stored_in_this_layout(
    client: dynoq.Client, prefix: str, raw: Any
) -> None:
    client.queue("orders", shards=2)
    client.topic("news", shards=2)
    assert raw.hget(QueueKeys(prefix, "orders").meta, "layout") == b"%d" % layout.LAYOUT
    assert raw.hget(TopicKeys(prefix, "news").meta, "layout") == b"%d" % layout.LAYOUT
    assert layout.LAYOUT == 2 and layout.READS == (1, 2)


def test_a_queue_of_layout_1_is_read_as_it_is(
    make_client: Callable[..., dynoq.Client], prefix: str, raw: Any
) -> None:
    old = make_client()
    q = old.queue("orders", shards=2, ordered=True)
    q.push({"n": 1}, key="a")
    q.push({"n": 2}, key="a")
    meta = QueueKeys(prefix, "orders").meta
    written_by_0_2(raw, meta)
    stored = raw.hgetall(meta)

    new = make_client()
    for opened in (new.queue("orders"), new.open_existing("orders")):
        assert opened is not None and opened.settings.ordered and opened.settings.shards == 2
    assert [m.payload["n"] for m in new.queue("orders").pop(count=2)] == [1, 2]  # in order
    assert raw.hgetall(meta) == stored  # read as it is: no field written by opening it


@pytest.fixture
def reads_from_2(monkeypatch: pytest.MonkeyPatch) -> None:
    """This version, as a later one that no longer reads layout 1 would be."""
    monkeypatch.setattr(layout, "READS", (2, layout.LAYOUT))


def test_a_layout_this_version_does_not_read_is_refused_naming_migrate(
    make_client: Callable[..., dynoq.Client], prefix: str, raw: Any, reads_from_2: None
) -> None:
    old = make_client()
    old.queue("orders", shards=2).push({"n": 1}, id="m1")
    old.topic("news")
    meta = QueueKeys(prefix, "orders").meta
    written_by_0_2(raw, meta)
    written_by_0_2(raw, TopicKeys(prefix, "news").meta)
    raw.hdel(meta, "epoch")  # (a queue of before epochs: opening it would write one)
    stored = raw.hgetall(meta)

    new = make_client()
    for open_it in (lambda: new.queue("orders"), lambda: new.open_existing("orders")):
        with pytest.raises(dynoq.LayoutError, match="dynoq migrate") as caught:
            open_it()
        assert "layout 1" in str(caught.value) and "reads layouts 2 to 2" in str(caught.value)
        assert (caught.value.found, caught.value.reads) == (1, (2, 2))
        assert isinstance(caught.value, dynoq.DynoqError)
    with pytest.raises(dynoq.LayoutError, match=r"topic 'news'.*dynoq migrate"):
        new.topic("news")
    assert raw.hgetall(meta) == stored  # nothing written


def test_a_later_dynoqs_layout_is_refused_naming_an_upgrade(
    make_client: Callable[..., dynoq.Client], prefix: str, raw: Any
) -> None:
    make_client().queue("orders")
    raw.hset(QueueKeys(prefix, "orders").meta, "layout", layout.LAYOUT + 1)
    new = make_client()
    for open_it in (lambda: new.queue("orders"), lambda: new.open_existing("orders")):
        with pytest.raises(dynoq.LayoutError, match="later dynoq: upgrade dynoq") as caught:
            open_it()
        assert "dynoq migrate" not in str(caught.value) and caught.value.found == 3


@pytest.mark.sync_only
def test_migrate_upgrades_in_place(
    make_client: Callable[..., dynoq.Client],
    prefix: str,
    raw: Any,
    migrate: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old = make_client()
    q = old.queue("orders", shards=2, ordered=True)
    for n in range(3):
        q.push({"n": n}, key="k")
    [inflight] = q.pop()
    old.queue("fresh")
    old.topic("news")
    for meta in (QueueKeys(prefix, "orders").meta, TopicKeys(prefix, "news").meta):
        written_by_0_2(raw, meta)
    monkeypatch.setattr(layout, "READS", (2, layout.LAYOUT))  # a version that needs it

    checked = migrate("--check", "--json")
    assert checked.exit_code == 1, checked.output
    report = json.loads(checked.output.splitlines()[0])
    assert report["checked"] and report["layout"] == 2
    assert {(i["kind"], i["name"], i["after"]) for i in report["items"]} == {
        ("queue", "orders", 1),
        ("queue", "fresh", 2),
        ("topic", "news", 1),
    }
    assert "1 to migrate" not in checked.output and "2 to migrate" in checked.output
    assert raw.hget(QueueKeys(prefix, "orders").meta, "layout") is None  # --check: nothing

    done = migrate()
    assert done.exit_code == 0, done.output
    assert "queue orders: layout 1 -> 2 (upgraded)" in done.output
    assert "topic news: layout 1 -> 2 (upgraded)" in done.output
    assert "queue fresh: layout 2 (up to date)" in done.output
    assert raw.hget(QueueKeys(prefix, "orders").meta, "layout") == b"2"

    new = make_client()
    orders = new.queue("orders")  # opens now, its messages and in-flight delivery kept
    assert orders.stats().unacked == 1 and orders.size() == 2
    assert old.queue("orders").ack(inflight)  # the delivery made before still acks
    assert [m.payload["n"] for m in orders.pop(count=3)] == [1, 2]
    new.topic("news")

    again = migrate("--json", "orders")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output)["items"] == [
        {"kind": "queue", "name": "orders", "before": 2, "after": 2}
    ]
    assert migrate("--check").exit_code == 0


@pytest.mark.sync_only
def test_migrate_leaves_a_later_layout_and_refuses_unknown_names(
    client: dynoq.Client, prefix: str, raw: Any, migrate: Callable[..., Result]
) -> None:
    client.queue("orders")
    raw.hset(QueueKeys(prefix, "orders").meta, "layout", 3)
    result = migrate()
    assert result.exit_code == 1
    assert "queue orders: layout 3 (a later dynoq's: upgrade dynoq)" in result.output
    assert raw.hget(QueueKeys(prefix, "orders").meta, "layout") == b"3"
    unknown = migrate("nope")
    assert unknown.exit_code == 1 and "no queue or topic 'nope'" in unknown.output


@pytest.mark.sync_only
def test_the_sweeper_skips_a_layout_it_does_not_read_and_sweeps_the_rest(
    make_client: Callable[..., dynoq.Client],
    prefix: str,
    raw: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = make_client()
    old.queue("later").push("x")
    old.topic("news")
    raw.hset(QueueKeys(prefix, "later").meta, "layout", layout.LAYOUT + 1)
    raw.hset(TopicKeys(prefix, "news").meta, "layout", layout.LAYOUT + 1)
    q = old.queue("orders")
    q.push("a", id="a")
    assert len(q.pop(visibility=0.05)) == 1

    sweeper = make_client().sweeper(interval=0.05)
    totals = dynoq.sweeper.SweepReport()

    def requeued() -> bool:
        totals.add(sweeper.run_once())
        return totals.total().requeued == 1

    wait_for(requeued, what="the expired delivery of 'orders' requeued")
    assert totals.errors == 0
    assert "queue 'later' has no readable settings, not swept" in caplog.text
    assert q.stats().ready == 1 and old.open_existing("orders") is not None
