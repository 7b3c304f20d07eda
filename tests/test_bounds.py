"""Every count has a bound, and no script fails half-way on a long list (Lua's unpack holds
about 8,000 values): large batches, many due messages and big acks keep every message."""

from __future__ import annotations

import math
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import delete_prefix, shard_keys

import dynoq
from dynoq import Message
from dynoq._core import lua, validate
from dynoq.errors import BOUNDS


def test_pop_refuses_more_than_its_maximum_and_changes_nothing(client: dynoq.Client) -> None:
    q = client.queue("big-pop", shards=1)
    q.push_many(range(10))
    for count in (validate.MAX_BATCH + 1, 4000, 10**9):
        with pytest.raises(dynoq.InvalidArgument, match=r"1\.\.1000"):
            q.pop(count)
    assert q.stats().unacked == 0 and q.size() == 10
    with pytest.raises(dynoq.InvalidArgument):
        client.consumer(q, lambda m: None, batch_size=4000)
    with pytest.raises(dynoq.InvalidArgument):
        q.peek(validate.MAX_BATCH + 1)
    with pytest.raises(dynoq.InvalidArgument):
        q.dead(validate.MAX_BATCH + 1)


def test_a_full_pop_of_the_maximum_keeps_every_message(client: dynoq.Client) -> None:
    q = client.queue("max-pop", shards=1)
    q.push_many(range(5000))
    got = q.pop(validate.MAX_BATCH)
    assert [m.payload for m in got] == list(range(1000))
    assert q.stats().unacked == 1000 and q.size() == 4000


def test_thousands_of_due_delayed_messages_are_promoted_whole(client: dynoq.Client) -> None:
    # More than 4,000 due at once: promotion once failed in `unpack` after removing them.
    q = client.queue("many-due", shards=1)
    q.push_many([Message(i, delay=0.001) for i in range(9000)])
    seen: list[int] = []
    while len(seen) < 9000:
        batch = q.pop(1000, wait=2)
        assert batch, f"only {len(seen)} of 9000 came back"
        seen += [m.payload for m in batch]
        q.ack_many(batch)
    assert sorted(seen) == list(range(9000)) and q.size() == 0


def test_acking_thousands_with_a_dedupe_window_keeps_the_window(client: dynoq.Client) -> None:
    q = client.queue("big-ack", shards=1, dedupe_window=60)
    q.push_many([Message(i, id=f"m{i}") for i in range(5000)])
    msgs = [m for _ in range(5) for m in q.pop(1000)]
    assert q.ack_many(msgs) == 5000
    assert client.redis.zcard(shard_keys(q, 0).done) == 5000  # every ack remembered
    assert q.ensure_many([Message("again", id=f"m{i}") for i in range(5000)]) == 0


def test_list_arguments_have_a_maximum(client: dynoq.Client) -> None:
    q = client.queue("big-lists", shards=1)
    too_many = validate.MAX_ITEMS + 1
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.push_many(range(too_many))
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.ack_many([f"id{i}" for i in range(too_many)])
    with pytest.raises(dynoq.InvalidArgument, match="at most"):
        q.replay_dead([f"id{i}" for i in range(too_many)])
    assert q.size() == 0


# -- what one call of a script may carry: lua/lib/bounds.lua ---------------------------------
#
# Every role may run dynoq's scripts by their SHA-1 with arguments of its own: each script
# refuses, before its first command, a call larger than one call of dynoq (a consumer's pop
# of 300,000 once held the server for 1.7 s, every other tenant waiting; DESIGN §2.14).

HOSTILE_ARGS = 300_000  # ARGV items of a hostile call
HOSTILE_KEYS = 20_000  # KEYS of one: more than any script takes (a publish: 2 + 9 x 1000)
NOT_NUMBERS = ("x", "nan", "1.5", "-1e300")  # where a count or a time goes
IN_RANGE = ("0", "-1", "", "1000", "1000000000", "1e300", str(2**53))  # refused, or bounded
SLOW_MS = 50  # the longest a call may hold the server (DESIGN §2.14)
BOUNDS_LUA = Path(dynoq.__file__).parent / "lua" / "lib" / "bounds.lua"


def _lua_maxima() -> dict[str, int]:
    found: dict[str, int] = {}
    for names, values in re.findall(
        r"^local ([A-Z_, ]+?) = ([\d, ]+)$", BOUNDS_LUA.read_text(), re.M
    ):
        found.update(
            zip(
                (n.strip() for n in names.split(",")),
                (int(v) for v in values.split(",")),
                strict=True,
            )
        )
    return found


def test_the_scripts_maxima_are_the_clients_constants() -> None:
    # One number per decision: a client that sends more per call than its scripts take
    # would be refused at its first long push.
    from dynoq._core import bounds, canvas, group, keyed, settings, topics, transactions

    clients = {
        "MAX_BATCH": validate.MAX_BATCH,
        "PUSH_CHUNK": bounds.PUSH_CHUNK,
        "IDS_CHUNK": bounds.IDS_CHUNK,
        "SWEEP_LIMIT": bounds.SWEEP_LIMIT,
        "EXPIRE_LIMIT": keyed.EXPIRE_LIMIT,
        "MAX_CLAIM": transactions.MAX_CLAIM,
        "MAX_TARGETS": topics.MAX_TARGETS,
        "MAX_COPIES": topics.MAX_COPIES,
        "CALL_SHARDS": bounds.CALL_SHARDS,
        "HISTORY_CAP": group.HISTORY_CAP,
        "MAX_TAGS": validate.MAX_TAGS,
        "MAX_TAG_BYTES": 4 * validate.MAX_TAG_LENGTH,
        "MAX_PRIORITY": validate.MAX_PRIORITY,
        "MAX_KEY_CONCURRENCY": settings.MAX_KEY_CONCURRENCY,
        "MAX_RETRIES": settings.MAX_RETRIES,
        "MAX_RATE": settings.MAX_RATE,
        "MAX_FLOW": canvas.MAX_NODES,
        "MAX_GROUP": canvas.MAX_MEMBERS,
        "MAX_PROGRESS": dynoq.message.MAX_PROGRESS,
        "MAX_WEIGHT": keyed.MAX_WEIGHT,
        "MAX_WEIGHTED": keyed.MAX_WEIGHTED,
        "MAX_RUNNING": settings.MAX_RUNNING,
        "MAX_MS": validate.to_ms(validate.MAX_SECONDS),
        "EXACT": 2**53,
    }
    scripts = _lua_maxima()
    assert {name: scripts.get(name) for name in clients} == clients
    assert set(scripts) - set(clients) == {"MAX_MEMBERS", "MAX_FIELDS"}  # the server's own
    stored = max(len(settings.QueueSettings().to_hash()), len(settings.TopicSettings().to_hash()))
    assert stored <= scripts["MAX_FIELDS"]


def _exercise(client: dynoq.Client) -> None:
    """Every script, called once as dynoq calls it."""
    from dynoq._core import flows as core_flows
    from dynoq._core import layout
    from dynoq._core import tasks as core_tasks
    from dynoq._core.batches import Attempt, BatchOps
    from dynoq._core.group import GroupOps, LeaseOps, reap
    from dynoq._core.running import SlotOps
    from dynoq._core.schedules import ScheduleOps
    from dynoq._core.streams import StreamOps
    from dynoq._core.sweeper import sweep_queue

    q = client.queue("hostile", shards=2, dedupe_window=0.05)  # open, epoch-set
    run, drive = q.backend.run, q.backend.drive
    q.push_many(range(2000))  # push
    got = q.pop(10)  # pop
    q.ack_many(got[:3])  # ack
    q.nack(got[3])  # nack
    q.extend(got[4], 30)  # extend
    from dynoq._core.steering import look

    got[4].progress(1)
    q.backend.drive(look(q.ops, [got[4]]))  # steer
    run(q.ops.nack_call(got[5], delay=0.0, mode="dead"))
    q.replay_dead([got[5].id or ""])  # replay
    q.purge_dead()  # purge-dead
    q.remove(q.push("gone"))  # remove
    q.cancel(q.push("cancelled"))  # cancel
    q.reschedule(q.push("later"), delay=5)  # reschedule
    q.peek(5)  # peek
    q.stats()  # stats
    q.requeue_expired()  # requeue
    q.pause()  # pause
    q.resume()
    client.queue("hostile-idle", shards=2).pop(1)  # pop, then a probe of the other shard
    q.schedule("tick", "tick", every=60)  # schedule-fire
    q.schedule("tock", "tock", every=60, overlap="skip")
    tocks = ScheduleOps(q.ops)
    drive(tocks.delivered(Message("tock", id="tock@1"), "tock", tocks.home("tock", None)))
    #                                                                     schedule-start
    member = GroupOps(q.ops.keys, "g", "m1", 10.0)
    run(member.heartbeat())  # group-heartbeat
    run(member.take(10, 1.0, 1))  # rate-take
    run(SlotOps(q.ops.keys, 5, "holder", 1.0).change(2))  # slots
    run(member.record(["m1"], [0, 1]))  # group-history
    drive(reap(q.ops.keys))  # group-reap
    run(member.leave())  # group-leave
    leases = LeaseOps(q.ops, "holder", 10.0)
    _, fence = drive(leases.acquire(0))  # lease-acquire
    run(leases.renew({0: fence}))  # lease-renew
    run(leases.release(0, fence))  # lease-release
    task = q.ops.prepare(Message({"task": "t"}, id="task-1"))
    run(core_tasks.push_if_absent(q.ops, task))  # task-push
    run(core_tasks.state(q.ops, q.ops.shard_for("task-1"), "task-1"))  # task-state
    run(core_tasks.cancel(q.ops, q.ops.shard_for("task-1"), "task-1", "t", 1000))  # task-cancel
    run(core_tasks.load_keep(q.ops))  # task-keep
    q.prepare("half").commit()  # transaction-prepare, transaction-settle
    run(
        q.transactions.claim(0, count=10, claim_s=5.0, max_checks=3, token="checker")
    )  # transaction-claim
    run(layout.upgrade(q.ops.keys.meta))  # migrate
    batches = BatchOps(q.ops, "query", attempt=Attempt("task", 1))
    run(batches.push([q.ops.prepare(Message("row", id="row-1"))], batch=0))  # push-batch
    run(batches.commit(0))  # batch-commit
    run(batches.forget([("task", [0, 1])]))  # tried-clear
    stream = StreamOps(client.prefix, q.name, "g")
    run(stream.record(q.ops.shard_keys[0], "ab12", 1, drive(q.planner.pop(5, shards=[0]))))
    #                                                                      stream-record
    q.push_many([Message(i, delay=0.001) for i in range(20)])
    time.sleep(0.1)  # delayed messages fall due, acked ids age past the dedupe window
    drive(sweep_queue(q.ops, reap_members=True, cross_slot=q.backend.cross_slot))  # due,
    #                                                                 promote, trim
    keyed = client.queue("hostile-keyed", shards=1, ordered="key")
    keyed.push_many([Message(i, key=f"k{i % 5}") for i in range(50)])  # kpush
    kgot = keyed.pop(5)  # kpop
    keyed.ack(kgot[0])  # kack
    keyed.nack(kgot[1])  # knack
    keyed.remove(kgot[2].id or "")  # kremove
    keyed.cancel(keyed.push("cancelled", key="kc"))  # kcancel
    keyed.set_weight("k1", 3)  # weight
    keyed.push("held", id="held", key="kh", debounce=30)  # khold
    client.queue("hostile-ordered", ordered=True).push("held", id="held", debounce=30)  # hold
    keyed.requeue_expired()  # krequeue
    run(keyed.ops.nack_call(kgot[3], delay=0.0, mode="dead"))
    keyed.replay_dead()  # kreplay
    keyed.stats()  # koldest
    keyed.clear()  # clear, kclear
    topic = client.topic("hostile-topic", shards=1)
    topic.subscribe("readers")  # subscription
    topic.publish("news")  # publish
    topic.prepare("news?").commit()  # transaction-publish
    app = dynoq.Tasks(client, queue="hostile-flows")
    step = app.task(name="step")(lambda x: x)
    flow = (step.s(1) | step.s()).delay()  # flow-create, flow-push
    flow.status()  # flow-state
    fq = app.queue("hostile-flows")
    member = core_flows.member_of(fq.pop(1)[0])
    assert member is not None
    dynoq.flows.advance(app, fq, member, 1)  # flow-advance
    flow.members()  # flow-members
    flow.cancel()  # flow-cancel


def _dynoqs_calls(
    client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[Any, ...]]:
    """The EVALSHA command of the first call dynoq made of each script in _exercise."""
    from dynoq.backend import runner

    made: dict[str, tuple[Any, ...]] = {}
    eval_args = runner.eval_args

    def record(call: Any, plain: bool = False) -> tuple[Any, ...]:
        command = eval_args(call, plain)
        made.setdefault(call.script.name, command)
        return command

    with monkeypatch.context() as patch:
        patch.setattr(runner, "eval_args", record)
        _exercise(client)
    return made


def _parts(command: tuple[Any, ...]) -> tuple[str, list[Any], list[Any]]:
    """(sha, keys, args) of an EVALSHA command."""
    _, sha, numkeys, *rest = command
    return sha, list(rest[:numkeys]), list(rest[numkeys:])


def _numbers(name: str, args: list[Any]) -> list[int]:
    """Where ``args`` holds a number among the fixed arguments of the script's header
    (``ARGV[i]``; a list's items, ``ARGV[5..]``, are each message's own)."""
    header = lua.SCRIPTS[name].source.split(f"--[[ {name}:", 1)[1].split("]]", 1)[0]
    fixed = max((int(i) for i in re.findall(r"ARGV\[(\d+)\]", header)), default=0)
    return [i for i, a in enumerate(args[:fixed]) if type(a) is int]


def _send(r: Any, sha: str, keys: list[Any], args: list[Any]) -> Any:
    try:
        return r.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        return exc


def _dump(r: Any, keys: list[Any]) -> list[Any]:
    return [r.dump(k) for k in dict.fromkeys(keys)]


def test_every_script_refuses_a_call_larger_than_dynoqs_and_changes_nothing(
    real_client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _dynoqs_calls(real_client, monkeypatch)
    assert sorted(calls) == sorted(lua.SCRIPTS), "call every script in _exercise"
    r = real_client.redis
    for name, command in sorted(calls.items()):
        sha, keys, args = _parts(command)
        before = _dump(r, keys)
        hostile = {
            "many args": (keys, [*args, *["1"] * HOSTILE_ARGS]),
            "many keys": ([*keys, *[keys[0]] * HOSTILE_KEYS], args),
        }
        for i in _numbers(name, args):
            for value in NOT_NUMBERS:
                hostile[f"ARGV[{i + 1}] = {value!r}"] = (keys, [*args[:i], value, *args[i + 1 :]])
        for what, (k, a) in hostile.items():
            reply = _send(r, sha, k, a)
            assert type(reply) is int and reply == BOUNDS, (name, what, reply)
        assert _dump(r, keys) == before, name


class _SlowLog:
    """The server's own time of this test's slow calls (SLOWLOG: what every other client
    of the server waited), where the server logs every call slower than SLOW_MS."""

    def __init__(self, r: Any, key: Any) -> None:
        self.r, self.key = r, key.encode() if isinstance(key, str) else key
        self.node = (
            {"target_nodes": r.get_node_from_key(key)} if isinstance(r, redis.RedisCluster) else {}
        )
        try:
            found = r.config_get("slowlog-log-slower-than", **self.node)
            threshold = int(found["slowlog-log-slower-than"])
        except (redis.ResponseError, KeyError, ValueError):  # a server that will not say
            threshold = -1
        self.usable = 0 <= threshold <= SLOW_MS * 1000

    def last(self) -> int:
        return max((int(e["id"]) for e in self.r.slowlog_get(1, **self.node)), default=-1)

    def slowest_since(self, last: int) -> float:
        """The longest of this test's calls logged after entry ``last``, in ms."""
        return max(
            (
                e["duration"] / 1000
                for e in self.r.slowlog_get(64, **self.node)
                if int(e["id"]) > last and self.key in e["command"]
            ),
            default=0.0,
        )


def test_no_call_of_a_script_with_counts_in_range_holds_the_server(
    real_client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A count at its most (or a time, a limit, a number of shards) is work one call may
    # do: each such call is refused or done within SLOW_MS, by the server's own clock. A
    # loaded machine may stop the server for a moment at any call: only a call slow
    # three times over in a row is one that does too much.
    calls = _dynoqs_calls(real_client, monkeypatch)
    r = real_client.redis
    for name, command in sorted(calls.items()):
        sha, keys, args = _parts(command)
        log = _SlowLog(r, keys[0])
        for i in _numbers(name, args):
            for value in IN_RANGE:
                call = [*args[:i], value, *args[i + 1 :]]
                slowest = math.inf
                for _ in range(3):
                    last = log.last() if log.usable else -1
                    reply = _send(r, sha, keys, call)
                    if type(reply) is int and reply == BOUNDS:
                        slowest = 0.0
                        break
                    slowest = min(slowest, log.slowest_since(last) if log.usable else 0.0)
                    if slowest <= SLOW_MS:
                        break
                assert slowest <= SLOW_MS, (name, f"ARGV[{i + 1}] = {value!r}", slowest)


# -- walks over what keys hold are bounded, and dynoq splits its own work to fit ----------


def test_a_heartbeat_reads_at_most_max_members_of_its_group(client: dynoq.Client) -> None:
    # Members are read oldest heartbeat first, so stale ones go first, a call at a time;
    # more than any group has were not written by dynoq.
    from dynoq._core.group import GroupOps

    q = client.queue("crowd", shards=1)
    member = GroupOps(q.ops.keys, "g", "m1", 10.0)
    most = _lua_maxima()["MAX_MEMBERS"]
    client.redis.zadd(member.keys.members, {f"ghost{i}": 0 for i in range(most + 50)})
    beat = member.heartbeat()
    beat.parse = None  # the raw reply: {joined, dropped, member, ...}
    assert q.backend.run(beat)[1] == most
    assert client.redis.zcard(member.keys.members) == 51
    _, dropped, *alive = q.backend.run(beat)
    assert (int(dropped), alive) == (50, [b"m1"])


def test_a_rate_limit_frees_at_most_a_sweeps_worth_of_old_grants_and_never_grants_more(
    client: dynoq.Client,
) -> None:
    # Grants left in the log past their period still count: fewer permits, never more.
    from dynoq._core.bounds import SWEEP_LIMIT
    from dynoq._core.group import GroupOps

    q = client.queue("bursty", shards=1)
    member = GroupOps(q.ops.keys, "g", "m1", 10.0)
    old = SWEEP_LIMIT + 500
    client.redis.zadd(member.keys.rate, {f"{i}:1": 0 for i in range(old)})
    client.redis.hset(member.keys.rate_state, mapping={"total": old, "seq": old})
    granted, _ = q.backend.run(member.take(10, 1.0, 5))
    assert granted == 0 and client.redis.zcard(member.keys.rate) == 500
    granted, _ = q.backend.run(member.take(10, 1.0, 5))
    assert granted == 5 and client.redis.zcard(member.keys.rate) == 1


def test_a_settings_hash_larger_than_dynoq_writes_is_refused_not_read_whole(
    make_client: Any,
) -> None:
    first, second = make_client(), make_client()
    first.queue("padded", shards=1)
    meta = first.queue("padded").ops.keys.meta
    first.redis.hset(meta, mapping={f"pad{i}": "x" for i in range(100)})
    with pytest.raises(dynoq.InvalidArgument, match="Bounds"):
        second.queue("padded")


def test_a_pop_across_more_shards_than_one_call_reads_takes_the_lowest_priority_first(
    client: dynoq.Client,
) -> None:
    from dynoq._core.bounds import CALL_SHARDS

    q = client.queue("wide", shards=CALL_SHARDS + 44)
    q.push_many([Message(i, priority=5, id=f"m{i}") for i in range(40)])
    q.push(-1, priority=1)
    assert [m.payload for m in q.pop(1)] == [-1]  # a probe of the others, in two calls
    got = q.pop(40)  # ranked now: every shard probed first, in two calls
    assert sorted(m.payload for m in got) == list(range(40))


def test_leases_on_more_shards_than_one_call_renews_are_renewed_together(
    client: dynoq.Client,
) -> None:
    from dynoq._core.bounds import CALL_SHARDS
    from dynoq._core.group import LeaseOps

    q = client.queue("held", shards=CALL_SHARDS + 44, ordered=True)
    leases = LeaseOps(q.ops, "holder", 30.0)
    fences = {s: q.backend.drive(leases.acquire(s))[1] for s in range(CALL_SHARDS + 44)}
    assert q.backend.run(leases.renew(fences)) == set()


def test_a_publish_to_many_groups_places_at_most_max_copies_a_call_and_every_copy(
    client: dynoq.Client,
) -> None:
    from dynoq._core.bounds import PUSH_CHUNK
    from dynoq._core.topics import MAX_COPIES

    assert MAX_COPIES < 5 * PUSH_CHUNK  # a push's chunk to 5 groups would be refused
    t = client.topic("fan-out", shards=1)
    for g in range(5):
        t.subscribe(f"g{g}")
    t.publish_many(range(1000))  # 5,000 copies: 400 messages a call
    assert [t.group_queue(f"g{g}").size() for g in range(5)] == [1000] * 5


def test_a_push_of_large_messages_goes_in_calls_of_at_most_push_bytes(client: dynoq.Client) -> None:
    # The server reads and copies every byte of a call before and while its script runs
    # (about 2 ms a megabyte): 500 messages of 100 KB in one call held it for 110 ms.
    from dynoq._core.bounds import PUSH_BYTES
    from dynoq._core.calls import Batch

    q = client.queue("heavy", shards=1)
    outs = [q.ops.prepare(Message(b"x" * 900_000, id=f"h{i}")) for i in range(12)]
    request = q.ops.push(outs)
    calls = request.calls if isinstance(request, Batch) else [request]
    carried = [sum(len(body) for body in call.args[7::4]) for call in calls]
    assert len(calls) > 1 and max(carried) <= PUSH_BYTES
    assert sum(len(call.args[4::4]) for call in calls) == 12
    q.push_many(Message(b"x" * 900_000, id=f"h{i}") for i in range(12))
    assert q.size() == 12


def test_a_keys_expired_deliveries_go_back_in_a_step_each(embedded_server: Any) -> None:
    # A given-back message goes before the first waiting one of its key with a higher
    # seq (lib/klinks.lua kback): given back in ascending seq order, each walked past the
    # ones before it, and 1,000 expired deliveries of one key took 500,000 steps (1.5 s of
    # the server's time). Counted by the server itself (a private server: its stats).
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    client = dynoq.connect(url, prefix=f"dqt-walk-{uuid.uuid4().hex[:8]}")
    try:
        q = client.queue("one-key", shards=1, ordered="key", key_concurrency=1000)
        q.push_many([Message(i, key="k") for i in range(400)])
        assert len(q.pop(400, visibility=0.001)) == 400
        time.sleep(0.05)
        client.redis.config_resetstat()
        assert q.requeue_expired() == 400
        stats = client.redis.info("commandstats")
        reads = sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("hget", "hmget"))
        assert reads <= 10 * 400, reads
        assert [m.payload for m in q.pop(5)] == [0, 1, 2, 3, 4]  # back in their order
    finally:
        client.close()
        delete_prefix(url, client.prefix)


def test_a_publish_refuses_a_filter_or_a_tag_longer_than_dynoq_writes(
    real_client: dynoq.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A publish searches each group's filter once per message: a filter or a tag of
    # megabytes would make a short call a long one.
    from dynoq.backend import runner

    topic = real_client.topic("tagged", shards=1)
    topic.subscribe("paid", tags="paid || refunded")
    made: list[tuple[Any, ...]] = []
    eval_args = runner.eval_args

    def record(call: Any, plain: bool = False) -> tuple[Any, ...]:
        made.append(eval_args(call, plain))
        return made[-1]

    with monkeypatch.context() as patch:
        patch.setattr(runner, "eval_args", record)
        topic.publish("one", tag="paid")
    sha, keys, args = _parts(made[-1])
    assert args[5] == "|paid|refunded|" and args[-2] == "paid"  # the filter, the tag
    long_filter = [*args[:5], "|" + "x" * 40_000 + "|", *args[6:]]
    long_tag = [*args[:-2], "x" * 1_000, args[-1]]
    for call in (long_filter, long_tag):
        assert _send(real_client.redis, sha, keys, call) == BOUNDS
    assert topic.group_queue("paid").size() == 1
