"""Commands that change things: replay, purge, clear, push, create, migrate."""

from __future__ import annotations

import json
from typing import Any

import click

from .._core import deadletters, layout
from .._core.keys import QueueKeys, TopicKeys
from .base import (
    JSON_OPTION,
    YES_OPTION,
    CliError,
    Env,
    cli,
    confirm,
    emit,
    pass_env,
    per_shard,
)


@cli.command()
@click.argument("queue")
@click.option(
    "--id",
    "ids",
    multiple=True,
    metavar="ID",
    help="Replay only this id (repeatable) [default: every dead letter].",
)
@JSON_OPTION
@pass_env
def replay(env: Env, queue: str, ids: tuple[str, ...], as_json: bool) -> None:
    """Put dead-lettered messages back on the queue, attempts reset."""
    q = env.queue(queue)
    if ids:
        n = q.replay_dead(list(ids))
    else:
        n = per_shard(
            q,
            f"replaying {queue}",
            lambda s: q.backend.drive(deadletters.drain_dead(q.ops, s, replay=True)),
            as_json,
        )
    emit(as_json, {"queue": queue, "replayed": n}, f"replayed {n} message(s)")
    if ids and n < len(ids):
        raise CliError(f"{len(ids) - n} of the given ids were not dead letters of {queue!r}")


@cli.command("purge-dead")
@click.argument("queue")
@YES_OPTION
@JSON_OPTION
@pass_env
def purge_dead(env: Env, queue: str, yes: bool, as_json: bool) -> None:
    """Delete every dead-lettered message of QUEUE for good."""
    q = env.queue(queue)
    dead = q.stats().dead
    if not dead:  # nothing to confirm: a script (or cron) without --yes must not block
        emit(
            as_json,
            {"queue": queue, "purged": 0},
            f"no dead letters in {queue!r}: nothing to purge",
        )
        return
    confirm(yes, f"delete the {dead} dead letter(s) of {queue!r} for good?")
    n = per_shard(
        q,
        f"purging {queue}",
        lambda s: q.backend.drive(deadletters.drain_dead(q.ops, s, replay=False)),
        as_json,
    )
    emit(as_json, {"queue": queue, "purged": n}, f"purged {n} message(s)")


@cli.command()
@click.argument("queue")
@YES_OPTION
@JSON_OPTION
@pass_env
def clear(env: Env, queue: str, yes: bool, as_json: bool) -> None:
    """Delete every message of QUEUE (waiting, in flight, dead); its settings stay."""
    q = env.queue(queue)
    stats = q.stats()
    confirm(
        yes,
        f"delete every message of {queue!r} ({stats.size} waiting, "
        f"{stats.unacked} in flight, {stats.dead} dead)?",
    )
    q.clear()
    emit(as_json, {"queue": queue, "cleared": True}, f"cleared {queue!r}")


@cli.command()
@click.argument("queue")
@click.argument("payload")
@click.option("--delay", type=float, default=0.0, help="Seconds before it is due.")
@click.option("--priority", type=int, default=0, help="0..99, lower first.")
@click.option("--key", default=None, help="Ordering key (ordered queues).")
@click.option("--id", "msg_id", default=None, help="Message id [default: random].")
@JSON_OPTION
@pass_env
def push(
    env: Env,
    queue: str,
    payload: str,
    delay: float,
    priority: int,
    key: str | None,
    msg_id: str | None,
    as_json: bool,
) -> None:
    """Push PAYLOAD (JSON if it parses as JSON, else the string); prints the id."""
    try:
        value: Any = json.loads(payload)
    except ValueError:
        value = payload
    pushed = env.queue(queue).push(value, id=msg_id, delay=delay, priority=priority, key=key)
    emit(as_json, {"queue": queue, "id": pushed}, pushed)


@cli.command()
@click.argument("queue")
@click.argument("msg_id", metavar="ID")
@JSON_OPTION
@pass_env
def cancel(env: Env, queue: str, msg_id: str, as_json: bool) -> None:
    """Cancel message ID of QUEUE: taken off if it waits; if it runs, its handler is asked
    to stop (it ends cancelled, never retried)."""
    done = env.queue(queue).cancel(msg_id)
    if done or as_json:
        emit(as_json, {"queue": queue, "id": msg_id, "cancelled": done}, f"{msg_id!r} cancelled")
    if not done:  # exit 1
        raise CliError(f"{msg_id!r} neither waits nor runs in {queue!r}: nothing cancelled")


@cli.group("queue")
def queue_group() -> None:
    """Create, pause and resume queues; weigh their keys."""


@queue_group.command("pause")
@click.argument("name")
@JSON_OPTION
@pass_env
def queue_pause(env: Env, name: str, as_json: bool) -> None:
    """Stop deliveries of queue NAME until resumed (pushes are kept; in flight may end)."""
    _pause(env, name, as_json, on=True)


@queue_group.command("resume")
@click.argument("name")
@JSON_OPTION
@pass_env
def queue_resume(env: Env, name: str, as_json: bool) -> None:
    """Deliver queue NAME's messages again after a pause."""
    _pause(env, name, as_json, on=False)


def _pause(env: Env, name: str, as_json: bool, *, on: bool) -> None:
    q = env.queue(name)
    changed = q.pause() if on else q.resume()
    done, already = ("paused", "was paused already") if on else ("resumed", "was not paused")
    emit(
        as_json,
        {"queue": name, "paused": on, "changed": changed},
        f"{name!r} {done if changed else already}",
    )


@queue_group.command("weight")
@click.argument("name")
@click.argument("key")
@click.argument("weight", type=int, required=False)
@JSON_OPTION
@pass_env
def queue_weight(env: Env, name: str, key: str, weight: int | None, as_json: bool) -> None:
    """Show KEY's fairness weight on queue NAME (ordered="key"), or set it to WEIGHT
    (1..100: WEIGHT turns for each turn of a weight-1 key while both wait)."""
    q = env.queue(name)
    if weight is None:
        now = q.weight(key)
        emit(as_json, {"queue": name, "key": key, "weight": now}, f"{key!r}: weight {now}")
        return
    before = q.set_weight(key, weight)
    emit(
        as_json,
        {"queue": name, "key": key, "weight": weight, "before": before},
        f"{key!r}: weight {weight} (was {before})",
    )


@queue_group.command("create")
@click.argument("name")
@click.option("--shards", type=int, default=None, help="Shards [default 4].")
@click.option("--ordered", is_flag=True, default=None, help="Strict per-shard order.")
@click.option("--unack-timeout", type=float, default=None, help="Seconds [default 60].")
@click.option("--max-retries", type=int, default=None, help="[default 16]")
@click.option("--dedupe-window", type=float, default=None, help="Seconds [default 0].")
@click.option("--topic", "is_topic", is_flag=True, help="Create a topic instead.")
@JSON_OPTION
@pass_env
def queue_create(
    env: Env,
    name: str,
    shards: int | None,
    ordered: bool | None,
    unack_timeout: float | None,
    max_retries: int | None,
    dedupe_window: float | None,
    is_topic: bool,
    as_json: bool,
) -> None:
    """Create queue NAME (or check an existing one has these settings)."""
    client = env.client()
    options: dict[str, Any] = {
        "shards": shards,
        "ordered": ordered,
        "unack_timeout": unack_timeout,
        "max_retries": max_retries,
        "dedupe_window": dedupe_window,
    }
    made = client.topic(name, **options) if is_topic else client.queue(name, **options)
    kind = "topic" if is_topic else "queue"
    emit(
        as_json,
        {"name": name, "kind": kind, **vars(made.settings)},
        f"{kind} {name!r}: {made.settings}",
    )


@cli.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option(
    "--check",
    "only_check",
    is_flag=True,
    help="Change nothing: say which need it, and exit 1 if any does.",
)
@JSON_OPTION
@pass_env
def migrate(env: Env, names: tuple[str, ...], only_check: bool, as_json: bool) -> None:
    """Upgrade the storage layout of every queue and topic (or those NAMEd) to this
    version's, in place; safe while producers and consumers run, and to run again
    (docs/compatibility.md). Exits 1 when one is of a later dynoq's layout."""
    client = env.client()
    found = [("queue", n, QueueKeys(client.prefix, n).meta) for n in client.queue_names()]
    found += [("topic", n, TopicKeys(client.prefix, n).meta) for n in client.topic_names()]
    unknown = set(names) - {name for _, name, _ in found}
    if unknown:
        raise CliError(
            f"no queue or topic {', '.join(map(repr, sorted(unknown)))} under "
            f"prefix {client.prefix!r}"
        )
    rows, newer, needed = [], 0, 0
    for kind, name, meta in found:
        if names and name not in names:
            continue
        if only_check:
            before = after = client.backend.run(layout.held(meta))
        else:
            before, after = client.backend.run(layout.upgrade(meta))
        if not before:
            continue  # gone since it was listed
        newer += after > layout.LAYOUT
        needed += after < layout.LAYOUT
        rows.append({"kind": kind, "name": name, "before": before, "after": after})
    if as_json:
        click.echo(json.dumps({"layout": layout.LAYOUT, "checked": only_check, "items": rows}))
    else:
        for r in rows:
            now = (
                "a later dynoq's: upgrade dynoq"
                if r["after"] > layout.LAYOUT
                else f"needs {layout.LAYOUT}"
                if r["after"] < layout.LAYOUT
                else "upgraded"
                if r["before"] != r["after"]
                else "up to date"
            )
            click.echo(
                f"{r['kind']} {r['name']}: layout {r['before']}"
                f"{'' if r['before'] == r['after'] else ' -> ' + str(r['after'])}"
                f" ({now})"
            )
        click.echo(f"{len(rows)} queue(s) and topic(s); this version's layout is {layout.LAYOUT}")
    if newer or needed:
        raise CliError(
            f"{newer} of a later dynoq's layout (upgrade dynoq), {needed} to migrate"
            if only_check
            else f"{newer} of a later dynoq's layout: upgrade dynoq to read them"
        )
