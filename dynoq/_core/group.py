"""Consumer groups and shard leases as pure requests (no I/O).

Group membership lives in Redis: a member heartbeats (a script that also drops members
whose heartbeat is older than their TTL and returns who is alive), every member computes
the same split of the shards from that list, and a join, leave or shard release is
PUBLISHed on the group's channel so everyone rebalances at once.

A shard lease is redis-py's Lock model: ``SET NX PX`` to take it, compare-the-value
scripts to renew and release it. The value (the holder's token and the tenure's fencing
number) also fences every pop, ack, nack and extend on the shard, so a holder whose lease
expired, even one that took it again since, can do no harm with what it held before.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import LeaseLost, raise_for
from . import rates, validate
from .bounds import CALL_SHARDS
from .calls import Batch, Call, Cmd, Flow, text
from .keys import GroupKeys, QueueKeys
from .lua import script
from .queue import QueueOps

_HEARTBEAT, _LEAVE, _REAP = script("group-heartbeat"), script("group-leave"), script("group-reap")
_ACQUIRE, _RENEW = script("lease-acquire"), script("lease-renew")
_RELEASE = script("lease-release")
_HISTORY = script("group-history")

HISTORY_CAP = 100  # rebalances kept per group
HISTORY_TTL_MS = 7 * 24 * 3600 * 1000  # a group's history outlives its last rebalance so long
HISTORY_MEMBERS = 50  # member names kept in one entry (the count is always kept)


class GroupOps:
    """One member of one consumer group of one queue."""

    def __init__(self, keys: QueueKeys, group: str, member: str, ttl: float) -> None:
        self.group = validate.check_name(group, "group")
        self.member = member
        self.ttl_ms = max(validate.to_ms(ttl), 1)
        self.keys: GroupKeys = keys.group(self.group)
        self.queue = keys.queue

    def heartbeat(self) -> Call:
        """Refresh this member; reply: (membership changed, live members sorted)."""
        k = self.keys

        context = f"group {self.group!r} on {self.queue!r}"

        def parse(reply: Any) -> tuple[bool, list[str]]:
            raise_for(reply, context)
            return bool(int(reply[0]) or int(reply[1])), sorted(text(m) for m in reply[2:])

        return _HEARTBEAT.call(k, [self.group, self.member, self.ttl_ms, k.channel], parse)

    def leave(self) -> Call:
        return _LEAVE.call(self.keys, [self.member, self.keys.channel, self.group])

    def take(self, count: int, period: float, want: int) -> Call:
        """Take up to ``want`` permits of the group's rate limit (``count`` per ``period``
        seconds, for all members together); reply: (granted, seconds until the next
        permit)."""
        return rates.take(self.keys, count, period, want)

    def notify(self) -> Cmd:
        """Ask every member to rebalance now (a shard's lease was released)."""
        return Cmd(("PUBLISH", self.keys.channel, "change"))

    def record(self, members: Sequence[str], shards: Sequence[int]) -> Call:
        """Add this member's new assignment, computed from ``members``, to the group's
        history (capped at HISTORY_CAP entries, time from the server)."""
        entry = json.dumps(
            {
                "member": self.member,
                "shards": sorted(shards),
                "members": list(members[:HISTORY_MEMBERS]),
                "count": len(members),
            },
            separators=(",", ":"),
        )
        return _HISTORY.call(self.keys, [entry, HISTORY_CAP, HISTORY_TTL_MS])


@dataclass(frozen=True)
class Rebalance:
    """One recorded rebalance of one member: when (seconds, server clock), the shards it
    was given, and the members it saw (at most HISTORY_MEMBERS names; ``count`` all)."""

    at: float
    member: str
    shards: tuple[int, ...]
    members: tuple[str, ...]
    count: int


def parse_history(raw: Sequence[bytes | str]) -> list[Rebalance]:
    """The entries of a group's history list, newest first (unreadable ones skipped)."""
    out = []
    for item in raw:
        try:
            ms, _, body = text(item).partition(" ")
            e = json.loads(body)
            out.append(
                Rebalance(
                    int(ms) / 1000,
                    str(e["member"]),
                    tuple(int(x) for x in e["shards"]),
                    tuple(str(m) for m in e["members"]),
                    int(e["count"]),
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out


def members(keys: QueueKeys, group: str) -> Cmd:
    """The members of a group as last recorded (stale ones included until reaped)."""
    return Cmd(
        ("ZRANGE", keys.group(validate.check_name(group, "group")).members, 0, -1),
        lambda raw: sorted(text(m) for m in raw),
    )


def reap(keys: QueueKeys) -> Flow[int]:
    """Drop members whose heartbeat is older than their TTL in every group of a queue
    (each group that lost one is told); returns how many were dropped."""
    groups = yield Cmd(("SMEMBERS", keys.groups))
    total = 0
    for raw in sorted(groups):
        group = text(raw)
        k = keys.group(group)
        total += int((yield _REAP.call(k, [group, k.channel])))
    return total


class LeaseOps:
    """The shard leases of one consumer (one token for all its shards; a lease's value is
    the token and the tenure's fencing number, so each tenure is fenced on its own)."""

    def __init__(self, queue: QueueOps, token: str, ttl: float) -> None:
        self.queue = queue
        self.token = token
        self.ttl_ms = max(validate.to_ms(ttl), 1)

    def value(self, fence: int | None) -> str:
        """The lease's value in the tenure ``fence`` (lease-acquire.lua); with no fence,
        one that no lease ever has (fencing numbers start at 1): refused everywhere."""
        return f"{self.token}.{fence or 0}"

    def values(self, fences: Mapping[int, int | None]) -> dict[int, str]:
        """Each shard's lease value in its tenure (shard -> fencing number): what a pop,
        ack, nack or renewal shows for it."""
        return {s: self.value(f) for s, f in fences.items()}

    def acquire(self, shard: int) -> Flow[tuple[float, int]]:
        """Try to take ``shard``: (0.0, its new fencing number) when taken, else (seconds
        until its lease may be free, 0). On taking it, the previous holder's in-flight
        messages go back to the head of the shard in order (its later acks are fenced off
        by the new value)."""
        q = self.queue
        taken, value = yield _ACQUIRE.call(
            q.shard_keys[shard],
            [q.epoch, self.token, self.ttl_ms],
            q.checked(f"lease of shard {shard} of {q.name!r}"),
        )
        if not int(taken):
            return int(value) / 1000, 0
        fence = int(value)
        try:
            yield from self.queue.kind.requeue(shard, force=True, lease=self.value(fence))
        except LeaseLost:  # expired at once (a very short ttl and a stall): try later
            return 0.001, 0
        return 0.0, fence

    def renew(self, fences: Mapping[int, int | None]) -> Batch:
        """Extend the leases on shards, each in its tenure (shard -> fencing number);
        reply: the set of those no longer held in that tenure."""
        values = self.values(fences)
        shards = list(values)
        if self.queue.cross_slot:  # one call renews CALL_SHARDS (a consumer idles cheaply)
            calls = [
                Call(
                    _RENEW,
                    [self.queue.shard_keys[s].lease for s in part],
                    [self.ttl_ms, *(values[s] for s in part)],
                )
                for part in (
                    shards[i : i + CALL_SHARDS] for i in range(0, len(shards), CALL_SHARDS)
                )
            ]
        else:
            calls = [
                _RENEW.call(self.queue.shard_keys[s], [self.ttl_ms, v]) for s, v in values.items()
            ]

        def parse(replies: list[Any]) -> set[int]:
            for r in replies:
                raise_for(r, f"lease renewal on {self.queue.name!r}")
            flags = [int(f) for r in replies for f in r]
            return {s for s, ok in zip(shards, flags, strict=True) if not ok}

        return Batch(calls, parse=parse)

    def release(self, shard: int, fence: int | None) -> Call:
        """Drop this consumer's lease on ``shard`` if it still holds it in the tenure
        ``fence``; reply: whether it did."""
        return _RELEASE.call(
            self.queue.shard_keys[shard], [self.value(fence)], lambda r: bool(int(r))
        )


class LeaseBook:
    """What a lease holder knows locally of its leases: each shard's fencing number (its
    tenure) and when its lease ends at the latest (the time a successful take or renewal
    was *sent*, plus the lifetime: the server started the lifetime later than that). Not
    thread-safe: the consumers guard it."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._ends: dict[int, float] = {}
        self._fences: dict[int, int] = {}

    def taken(self, shard: int, fence: int, sent_at: float) -> None:
        self._fences[shard] = fence
        self._ends[shard] = sent_at + self.ttl

    def tenures(self, shards: Iterable[int]) -> dict[int, int | None]:
        """The fencing number of each of ``shards`` (None: not held)."""
        return {s: self._fences.get(s) for s in shards}

    def renewed(self, fences: Mapping[int, int | None], lost: set[int], sent_at: float) -> set[int]:
        """A renewal of ``fences`` (its tenures) came back with ``lost``; returns the shards
        whose lease is gone now. A shard taken again or forgotten since the renewal was
        sent is left as it is: the reply speaks of a tenure that is over."""
        gone = set()
        for s, fence in fences.items():
            if self._fences.get(s) != fence:
                continue
            if s in lost or fence is None:
                self.forget(s)
                gone.add(s)
            else:
                self._ends[s] = sent_at + self.ttl
        return gone

    def ended(self, shard: int, tenure: int | None) -> bool:
        """Whether a loss of ``shard`` seen in ``tenure`` ends what is held of it now
        (that tenure, or nothing). Not when the shard was taken again since: a worker
        still on a batch of the earlier tenure must not drop the newer one."""
        return self._fences.get(shard) in (None, tenure)

    def forget(self, shard: int) -> None:
        self._ends.pop(shard, None)
        self._fences.pop(shard, None)

    def left(self, shard: int, now: float, fence: int | None = None) -> float:
        """Seconds the lease on ``shard`` surely has left (0 when not held). With the
        ``fence`` a batch was popped under, 0 also when the lease was lost and taken again
        since (another tenure: its batch is stale)."""
        if fence is not None and self._fences.get(shard) != fence:
            return 0.0
        return max(self._ends.get(shard, now) - now, 0.0)
