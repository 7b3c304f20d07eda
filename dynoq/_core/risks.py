"""What in a server's configuration puts messages at risk (pure: no I/O).

Read from ``INFO`` (and ``CONFIG GET save`` where the user may run it) of every master:
an eviction policy that deletes keys when memory is full, no persistence, a server older
than dynoq needs, a cluster master without replicas. ``dynoq check`` prints every
finding; connecting warns once when the server evicts (as BullMQ does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

OK, NOTE, RISK, UNKNOWN = "ok", "note", "risk", "unknown"
NEEDS_REDIS, NEEDS_VALKEY = (7, 0), (8, 0)


@dataclass(frozen=True)
class NodeFacts:
    """What one server answered: its INFO fields (empty when INFO was refused: an ACL
    role without it) and its ``save`` setting (None when CONFIG GET was refused)."""

    name: str
    info: Mapping[str, Any]
    save: str | None = None


@dataclass(frozen=True)
class Finding:
    """One check of one server: level "ok", "note" (worth knowing, no risk), "risk"
    (messages may be lost) or "unknown" (the server did not say)."""

    check: str  # eviction, persistence, version, replicas, server
    level: str
    node: str
    detail: str

    def as_json(self) -> dict[str, str]:
        return asdict(self)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("b", "kb", "mb"):
        if value < 1024:
            return f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.0f}gb"


def eviction(node: NodeFacts) -> Finding:
    """The eviction policy: anything but noeviction deletes keys when memory is full."""
    policy = node.info.get("maxmemory_policy")
    if policy is None:
        return Finding(
            "eviction",
            UNKNOWN,
            node.name,
            "the server did not say its maxmemory-policy (INFO refused?)",
        )
    policy = str(policy)
    limit = int(node.info.get("maxmemory") or 0)
    if policy == "noeviction":
        return Finding(
            "eviction",
            OK,
            node.name,
            "noeviction: a full server refuses new messages (ServerFull) and deletes nothing",
        )
    if limit == 0:
        return Finding(
            "eviction",
            NOTE,
            node.name,
            f"maxmemory-policy {policy}, but no maxmemory: nothing is evicted "
            "until a limit is set; then keys would be. Use noeviction",
        )
    if policy.startswith("volatile-"):
        return Finding(
            "eviction",
            RISK,
            node.name,
            f"maxmemory-policy {policy} (maxmemory {_size(limit)}): when full, "
            "the server deletes keys that have a TTL, which dynoq's shard "
            "leases, consumer-group claims, rate limits and Spark micro-batch "
            "records have (messages and settings have none): an ordered shard "
            "can be consumed twice at once, a replayed micro-batch pushed "
            "again. Set maxmemory-policy noeviction",
        )
    return Finding(
        "eviction",
        RISK,
        node.name,
        f"maxmemory-policy {policy} (maxmemory {_size(limit)}): when full, the "
        "server deletes any key: messages and queue settings vanish without "
        "an error. Set maxmemory-policy noeviction",
    )


def persistence(node: NodeFacts) -> Finding:
    """RDB snapshots or an append-only file: without either a restart loses everything."""
    if not node.info:
        return Finding("persistence", UNKNOWN, node.name, "the server did not answer INFO")
    if int(node.info.get("aof_enabled") or 0):
        return Finding("persistence", OK, node.name, "append-only file on (appendonly yes)")
    if node.save is None:
        return Finding(
            "persistence",
            UNKNOWN,
            node.name,
            "append-only file off; RDB snapshots unknown (CONFIG GET save "
            "refused): if `save` is empty, a restart loses every message",
        )
    if node.save.strip():
        return Finding(
            "persistence",
            OK,
            node.name,
            f"RDB snapshots (save {node.save}): a crash loses what was written "
            "since the last one (appendonly yes keeps more)",
        )
    return Finding(
        "persistence",
        RISK,
        node.name,
        'no persistence (save "", appendonly no): a restart loses every '
        "message and every queue's settings",
    )


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def version(node: NodeFacts) -> Finding:
    """Redis 7 or later, or Valkey 8 or later."""
    info = node.info
    valkey = info.get("valkey_version") or (
        info.get("redis_version") if info.get("server_name") == "valkey" else None
    )
    if valkey is not None:
        name, text, needs = "Valkey", str(valkey), NEEDS_VALKEY
    elif info.get("redis_version") is not None:
        name, text, needs = "Redis", str(info["redis_version"]), NEEDS_REDIS
    else:
        return Finding("version", UNKNOWN, node.name, "the server did not say its version")
    if _version(text) >= needs:
        return Finding("version", OK, node.name, f"{name} {text}")
    return Finding(
        "version",
        RISK,
        node.name,
        f"{name} {text}: dynoq needs {name} {needs[0]} or later (its scripts "
        "use #!lua flags and commands older servers refuse)",
    )


def replicas(node: NodeFacts) -> Finding:
    """A cluster master without replicas loses its slots' messages when it fails."""
    info = node.info
    if not info:
        return Finding("replicas", UNKNOWN, node.name, "the server did not answer INFO")
    count = int(info.get("connected_slaves") or 0)
    cluster = bool(int(info.get("cluster_enabled") or 0))
    if count:
        return Finding("replicas", OK, node.name, f"{count} replica(s)")
    if cluster:
        return Finding(
            "replicas",
            RISK,
            node.name,
            "a cluster master without replicas: if it fails, the messages of "
            "its slots are lost (give every master a replica)",
        )
    return Finding(
        "replicas",
        NOTE,
        node.name,
        "no replicas: persistence is what keeps messages across a restart; a "
        "lost machine loses them",
    )


def assess(nodes: Sequence[NodeFacts]) -> list[Finding]:
    """Every finding for every master, by check."""
    out: list[Finding] = []
    for check in (eviction, persistence, version, replicas):
        out += [check(n) for n in nodes]
    return out


def in_memory(where: str) -> list[Finding]:
    """The one finding for memory:// (an in-process server for tests)."""
    return [
        Finding(
            "server",
            RISK,
            where,
            "memory:// is an in-process server for tests: nothing outlives the process",
        )
    ]


def eviction_warning(where: str, nodes: Sequence[NodeFacts]) -> str | None:
    """The warning to log once at connect when a server evicts keys (None: it does not,
    or it did not say)."""
    policies = sorted(
        {str(n.info.get("maxmemory_policy")) for n in nodes if eviction(n).level == RISK}
    )
    if not policies:
        return None
    if all(p.startswith("volatile-") for p in policies):
        what = (
            "it deletes keys with a TTL: dynoq's shard leases, consumer-group claims, "
            "rate limits and Spark micro-batch records"
        )
    else:
        what = "it deletes any key: messages and queue settings vanish without an error"
    return (
        f"dynoq: the server at {where} evicts keys when its memory is full "
        f"(maxmemory-policy {', '.join(policies)}): {what}. Set maxmemory-policy "
        "noeviction; `dynoq check` lists what puts messages at risk."
    )
