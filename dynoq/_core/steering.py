"""A consumer's look at the deliveries it runs long (pure: no I/O): it keeps the progress
their handlers reported and hears which were cancelled (``lua/steer-3.lua``).

A batch is looked at once it has been in flight :data:`LOOK_EVERY` seconds, then again
every as long, in one call a shard: its messages not yet handled (the one whose handler
runs, and those after it). A consumer whose handlers are quick never looks, so a cancel
costs nothing on the hot path; one whose handler runs hears a cancel within about
``LOOK_EVERY`` + the upkeep's tick (0.25 s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..message import MAX_PROGRESS, Message, Steer
from .bounds import IDS_CHUNK
from .calls import Batch, Call, Flow
from .lua import script
from .queue import QueueOps

LOOK_EVERY = 0.4  # seconds a batch runs before each look at it

_STEER = script("steer")


def progress(raw: bytes | None) -> str | None:
    """A kept progress report (JSON text, lua/steer-3.lua), or None when there is none or
    it is not one (too long, not JSON: not written by dynoq)."""
    if not raw or len(raw) > MAX_PROGRESS:
        return None
    try:
        text = raw.decode()
        json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return text


def look(ops: QueueOps, msgs: Sequence[Message]) -> Flow[list[Message]]:
    """Send the progress ``msgs`` reported since the last look and ask which were
    cancelled, one call a shard (of at most IDS_CHUNK ids); returns the messages that
    heard a cancel now (their ``cancelled`` is then True)."""
    by_shard: dict[int, list[Message]] = {}
    for m in msgs:
        if m.id is not None and m.shard is not None and not m.cancelled:
            by_shard.setdefault(m.shard, []).append(m)
    calls: list[Call] = []
    asked: list[list[Message]] = []
    for shard, mine in by_shard.items():
        for i in range(0, len(mine), IDS_CHUNK):
            part = mine[i : i + IDS_CHUNK]
            writes: list[str] = []
            for m in part:
                if m.steer is not None and m.steer.pending is not None:
                    writes += (m.id or "", m.steer.pending)
                    m.steer.pending = None
            calls.append(
                _STEER.call(
                    ops.shard_keys[shard],
                    [ops.epoch, len(part), *(m.id or "" for m in part), *writes],
                    ops.parser("steer", shard, list),
                )
            )
            asked.append(part)
    if not calls:
        return []
    replies = yield Batch(calls)
    heard: list[Message] = []
    for part, flags in zip(asked, replies, strict=True):
        for m, flag in zip(part, flags, strict=True):
            if int(flag):
                if m.steer is None:
                    m.steer = Steer()
                m.steer.cancelled = True
                heard.append(m)
    return heard
