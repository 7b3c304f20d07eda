"""What the command line prints: tables (rich when installed), JSON, ages."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from .._core.jsontext import message_json, to_json
from ..message import Message, QueueStats
from ..queue import Queue

NUMERIC = ("shard", "shards", "ready", "delayed", "in flight", "dead", "priority", "attempts")


def age(seconds: float | None) -> str:
    """A short human age: 4.2s, 3m07s, 2h05m; "-" for none."""
    if seconds is None:
        return "-"
    s = max(0.0, seconds)
    if s < 60:
        return f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def stats_json(queue: Queue, stats: QueueStats, now: float) -> dict[str, Any]:
    """A queue's counts as a JSON-ready dict (ages against ``now``, the server clock)."""

    def age_of(at: float | None) -> float | None:
        return None if at is None else round(max(0.0, now - at), 3)

    shards = [
        {
            "shard": s.shard,
            "ready": s.ready,
            "delayed": s.delayed,
            "in_flight": s.unacked,
            "dead": s.dead,
            "oldest_waiting_age": age_of(s.oldest_ready_at),
        }
        for s in stats.shards
    ]
    ages = [a for a in (r["oldest_waiting_age"] for r in shards) if a is not None]
    return {
        "queue": queue.name,
        "ordered": queue.settings.ordered,
        "paused": stats.paused,
        "ready": stats.ready,
        "delayed": stats.delayed,
        "in_flight": stats.unacked,
        "dead": stats.dead,
        "prepared": stats.prepared,
        "cancelled": stats.total("cancelled"),  # since each shard was created, as are:
        "expired": stats.total("lapsed"),  # not delivered before the expiry of their push
        "oldest_waiting_age": max(ages) if ages else None,
        "shards": shards,
    }


def show_messages(title: str, msgs: list[Message], as_json: bool) -> None:
    if as_json:
        click.echo(to_json([message_json(m) for m in msgs], indent=2))
        return
    header = ["id", "shard", "priority", "key", "attempts", "payload"]
    rows = [
        [
            m.id or "",
            str(m.shard),
            str(m.priority),
            m.key or "",
            str(m.attempts),
            to_json(m.payload) if m.unreadable is None else f"(unreadable: {m.unreadable})",
        ]
        for m in msgs
    ]
    if any(m.reported is not None for m in msgs):  # running: how far each got
        header.append("progress")
        for row, m in zip(rows, msgs, strict=True):
            row.append(m.reported or "-")
    if any(m.failure for m in msgs):  # dead letters: why each one failed
        header += ["failed with", "by"]
        for row, m in zip(rows, msgs, strict=True):
            f = m.failure
            row += [f"{f.error_type}: {f.error}"[:200], f.consumer or "-"] if f else ["-", "-"]
    print_table(title, header, rows)


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # rich is the optional `cli` extra: plain columns without it
        plain_table(header, rows, click.echo)
        return
    # Text, not str: rich reads "[/b]" in a str as markup (and fails on it), and what is
    # shown here (payloads, ids, names, errors) is anybody's text
    table = Table(title=Text(title))
    for i, name in enumerate(header):
        table.add_column(
            name, justify="right" if name in NUMERIC else "left", overflow="fold", no_wrap=i == 0
        )
    for row in rows:
        table.add_row(*map(Text, row))
    Console(file=sys.stdout).print(table)


def plain_table(header: list[str], rows: list[list[str]], echo: Callable[[str], Any]) -> None:
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
