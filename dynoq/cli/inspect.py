"""Commands that look: stats, peek, dead letters, queues, recurring messages."""

from __future__ import annotations

import json
from typing import Any

import click

from .._core.jsontext import to_json
from .._core.topics import GroupBacklog
from ..topic import Topic
from .base import (
    JSON_OPTION,
    CliError,
    Env,
    cli,
    pass_env,
)
from .output import age as _age
from .output import print_table, show_messages, stats_json


@cli.command()
@click.argument("queue", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option(
    "--per-shard/--totals",
    default=None,
    help="One row per shard [default: per shard when QUEUE is given].",
)
@pass_env
def stats(env: Env, queue: str | None, as_json: bool, per_shard: bool | None) -> None:
    """Ready, delayed, in-flight and dead messages, and the oldest waiting age."""
    client = env.client()
    queues = (
        [env.queue(queue)]
        if queue
        else [q for q in (client.open_existing(n) for n in client.queue_names()) if q is not None]
    )
    now = client.server_time()  # ages on the server clock, as the records are
    rows = [stats_json(q, q.stats(), now) for q in queues]
    topics = (
        []
        if queue
        else [t for t in map(client.open_existing_topic, client.topic_names()) if t is not None]
    )
    groups = [(t, b) for t in topics for b in t.backlog()]
    if as_json:
        report = {
            "prefix": client.prefix,
            "queues": rows,
            "topics": [_topic_json(t, [b for tt, b in groups if tt is t], now) for t in topics],
        }
        click.echo(json.dumps(report, indent=2))
        return
    per_shard = bool(queue) if per_shard is None else per_shard
    header, table = _queue_table(rows, per_shard)
    print_table(f"dynoq queues (prefix {client.prefix!r})", header, table)
    if groups:
        _print_groups(client.prefix, groups)


def _topic_json(topic: Topic, groups: list[GroupBacklog], now: float) -> dict[str, Any]:
    """A topic's subscriptions and each group queue's counts, as ``stats --json`` shows
    them (the counts as a queue's: :func:`stats_json`)."""
    return {
        "topic": topic.name,
        "ordered": topic.settings.ordered,
        "subscriptions": [vars(s) for s in topic.subscriptions()],
        "groups": [
            {
                "group": b.group,
                "mode": b.mode,
                "tags": b.tags,
                **stats_json(topic.group_queue(b.group), b.stats, now),
                "queue": b.queue,
            }
            for b in groups
        ],
    }


def _queue_table(rows: list[dict[str, Any]], per_shard: bool) -> tuple[list[str], list[list[str]]]:
    """The header and rows of the queues' table, from :func:`stats_json`'s dicts: a row a
    queue, after a row a shard when ``per_shard`` (then the queue's row is "all")."""
    header = ["queue", "shard", "ready", "delayed", "in flight", "dead", "oldest waiting"]
    table: list[list[str]] = []
    for r in rows:
        name = r["queue"] + (" (paused)" if r["paused"] else "")
        for s in r["shards"] if per_shard else []:
            table.append(
                [
                    name,
                    str(s["shard"]),
                    str(s["ready"]),
                    str(s["delayed"]),
                    str(s["in_flight"]),
                    str(s["dead"]),
                    _age(s["oldest_waiting_age"]),
                ]
            )
        table.append(
            [
                name,
                "all" if per_shard else str(len(r["shards"])),
                str(r["ready"]),
                str(r["delayed"]),
                str(r["in_flight"]),
                str(r["dead"]),
                _age(r["oldest_waiting_age"]),
            ]
        )
    if not per_shard:
        header[1] = "shards"
    return header, table


def _print_groups(prefix: str, groups: list[tuple[Topic, GroupBacklog]]) -> None:
    """The topics' table: a row a group queue, with its counts."""
    print_table(
        f"dynoq topics (prefix {prefix!r})",
        ["topic", "group", "mode", "tags", "queue", "ready", "delayed", "in flight", "dead"],
        [
            [
                t.name,
                b.group,
                b.mode,
                b.tags,
                b.queue,
                str(b.stats.ready),
                str(b.stats.delayed),
                str(b.stats.unacked),
                str(b.stats.dead),
            ]
            for t, b in groups
        ],
    )


@cli.command()
@click.argument("queue")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="How many messages.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_env
def peek(env: Env, queue: str, count: int, as_json: bool) -> None:
    """The next deliverable messages, in delivery order (nothing is claimed)."""
    q = env.queue(queue)
    show_messages(f"next in {queue!r}", q.peek(count), as_json)


@cli.command("get")
@click.argument("queue")
@click.argument("msg_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_env
def get_message(env: Env, queue: str, msg_id: str, as_json: bool) -> None:
    """One message of QUEUE by id: its attempts, why it failed, and while it runs the
    progress its handler reported."""
    found = env.queue(queue).get(msg_id)
    if found is None:
        raise CliError(f"no message {msg_id!r} in {queue!r}")
    show_messages(f"{msg_id!r} in {queue!r}", [found], as_json)


@cli.command()
@click.argument("queue")
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=1000),
    default=20,
    show_default=True,
    help="How many keys of each list.",
)
@JSON_OPTION
@pass_env
def keys(env: Env, queue: str, limit: int, as_json: bool) -> None:
    """A queue with ordered="key": its busiest keys (messages waiting, in flight) and the
    keys blocked by a failing message (its attempts and reason)."""
    report = env.queue(queue).keys(limit)
    if as_json:
        click.echo(to_json(report, indent=2))
        return
    print_table(
        f"busiest keys of {queue!r}",
        ["key", "waiting", "in flight"],
        [[str(k["key"]), str(k["waiting"]), str(k["in_flight"])] for k in report["busiest"]],
    )
    print_table(
        f"keys of {queue!r} blocked by a failing message",
        ["key", "message", "attempts", "reason"],
        [
            [str(k["key"]), str(k["id"]), str(k["attempts"]), str(k["reason"] or "-")]
            for k in report["blocked"]
        ],
    )


@cli.command()
@click.argument("queue")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="How many messages.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@pass_env
def dead(env: Env, queue: str, count: int, as_json: bool) -> None:
    """Dead-lettered messages, oldest first, with why each failed (--json adds the
    traceback)."""
    q = env.queue(queue)
    show_messages(f"dead letters of {queue!r}", q.dead(count), as_json)


@cli.command()
@click.argument("queue")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1, max=1000),
    default=100,
    show_default=True,
    help="How many prepared messages.",
)
@JSON_OPTION
@pass_env
def prepared(env: Env, queue: str, count: int, as_json: bool) -> None:
    """Prepared (transactional) messages of QUEUE, not committed nor rolled back yet: the
    next to be checked first, with their age and the checks they had."""
    q = env.queue(queue)
    now = env.client().server_time()
    rows: list[dict[str, Any]] = [
        {
            "id": p.id,
            "shard": p.shard,
            "age": round(p.age(now), 3),
            "checks": p.checks,
            "next_check_in": round(max(0.0, p.next_check_at - now), 3),
        }
        for p in q.prepared(count)
    ]
    if as_json:
        click.echo(
            json.dumps({"queue": queue, "prepared": q.stats().prepared, "messages": rows}, indent=2)
        )
        return
    print_table(
        f"prepared messages of {queue!r}",
        ["id", "shard", "age", "checks", "next check in"],
        [
            [r["id"], str(r["shard"]), _age(r["age"]), str(r["checks"]), _age(r["next_check_in"])]
            for r in rows
        ],
    )


@cli.command()
@JSON_OPTION
@pass_env
def queues(env: Env, as_json: bool) -> None:
    """Every queue and topic under the prefix, with its settings."""
    client = env.client()
    rows = [
        {"name": q.name, "kind": "queue", **vars(q.settings)}
        for q in map(client.open_existing, client.queue_names())
        if q is not None
    ]
    rows += [
        {"name": t.name, "kind": "topic", **vars(t.settings)}
        for t in map(client.open_existing_topic, client.topic_names())
        if t is not None
    ]
    if as_json:
        click.echo(json.dumps({"prefix": client.prefix, "queues": rows}, indent=2))
        return
    print_table(
        f"dynoq queues and topics (prefix {client.prefix!r})",
        ["name", "kind", "shards", "ordered", "unack timeout", "max retries", "dedupe window"],
        [
            [
                r["name"],
                r["kind"],
                str(r["shards"]),
                str(r["ordered"]),
                f"{r['unack_timeout']:g}s",
                str(r["max_retries"]),
                f"{r['dedupe_window']:g}s",
            ]
            for r in rows
        ],
    )


@cli.command()
@click.argument("queue")
@JSON_OPTION
@pass_env
def schedules(env: Env, queue: str, as_json: bool) -> None:
    """The recurring messages of QUEUE."""
    found = env.queue(queue).schedules()
    rows = [
        {
            "id": s.id,
            "every": s.every,
            "cron": s.cron,
            "tz": s.tz,
            "overlap": s.overlap,
            "payload": s.payload,
            "priority": s.priority,
            "key": s.key,
            "last_tick": s.last_tick,
        }
        for s in found
    ]
    if as_json:
        click.echo(to_json(rows, indent=2))
        return
    print_table(
        f"recurring messages of {queue!r}",
        ["id", "every / cron", "overlap", "last tick", "payload"],
        [
            [
                r["id"],
                f"{r['every']:g}s" if r["every"] else f"{r['cron']} ({r['tz'] or 'UTC'})",
                r["overlap"],
                "-" if r["last_tick"] is None else f"{r['last_tick']:.3f}",
                to_json(r["payload"]),
            ]
            for r in rows
        ],
    )
