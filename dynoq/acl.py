"""Least-privilege Redis ACL users for dynoq, by role (see docs/security.md).

Scripts run their commands under the caller's ACL, so a role is the commands its scripts
and its direct calls use, read from the scripts themselves (never a list that can drift):

    r.execute_command("ACL", "SETUSER", "billing", "on", ">SECRET",
                      *dynoq.acl.rules("shop", "consumer"))

Every role is limited to the prefix's keys (``~<prefix>:*``) and channels
(``&<prefix>:*``); the key scheme guarantees no other tenant's keys match.
"""

from __future__ import annotations

import re

from ._core import validate
from ._core.lua import SCRIPTS
from .errors import InvalidArgument

# What each role runs: scripts (whose inner commands it needs) and direct commands.
_QUEUE_READS = {"PING", "TIME", "SISMEMBER", "SMEMBERS", "HGETALL", "HGET", "HMGET",
                "HEXISTS", "ZRANGE"}
_DASHBOARD_READS = frozenset(_QUEUE_READS | {"ZSCORE", "ZCARD", "SCARD", "SSCAN", "GET",
                                              "PTTL", "LRANGE"})
ROLES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # push, ensure, open queues, read their state; send tasks and see, cancel or
    # reschedule them (dynoq.Tasks: task-push, task-state, task-cancel, reschedule)
    "producer": (frozenset({"open", "push", "publish", "peek", "stats", "push-batch",
                            "batch-commit", "task-push", "task-state", "task-cancel",
                            "reschedule"}),
                 frozenset(_QUEUE_READS | {"SADD", "WAIT"})),
    # pop, ack, nack, extend, leases, consumer groups; the queue operations by id; run
    # tasks (dynoq.Tasks: task-keep keeps their results with the ack)
    "consumer": (frozenset({"open", "push", "pop", "probe", "ack", "nack", "extend",
                            "requeue", "peek",
                            "stats", "remove", "reschedule", "replay", "purge-dead",
                            "lease-acquire", "lease-renew", "lease-release",
                            "group-heartbeat", "group-leave", "group-history", "publish",
                            "subscription", "rate-take", "schedule-fire",
                            "task-push", "task-state", "task-cancel", "task-keep"}),
                 frozenset(_QUEUE_READS | {"SADD", "WAIT", "PUBLISH", "SUBSCRIBE",
                                           "UNSUBSCRIBE", "DEL", "HSCAN", "ZMSCORE"})),
    # the web dashboard, read-only: counts, pages of sorted sets, leases, groups, topics
    "dashboard": (frozenset({"stats", "peek"}), _DASHBOARD_READS),
    # the dashboard with --allow-actions: also replay and purge dead letters
    "dashboard-actions": (frozenset({"stats", "peek", "replay", "purge-dead"}),
                          _DASHBOARD_READS),
    # requeue expired deliveries, promote, trim, reap group and broadcasting members
    "sweeper": (frozenset({"due", "requeue", "promote", "trim", "group-reap",
                           "subscription", "schedule-fire"}),
                frozenset({"PING", "TIME", "SMEMBERS", "SISMEMBER", "HGETALL", "ZRANGE",
                           "HVALS", "DEL"})),
}
_CALL_RE = re.compile(r"(?:redis\.call|bulk|bulk_read)\('([A-Z]+)'")  # and lua/lib/bulk.lua's


def commands(role: str) -> list[str]:
    """Every command ``role`` needs, sorted (as ACL spells them: ``script|load``)."""
    if role not in ROLES:
        raise InvalidArgument(f"unknown role {role!r}; use one of {sorted(ROLES)}")
    scripts, direct = ROLES[role]
    inner = {c for name in scripts for c in _CALL_RE.findall(SCRIPTS[name].source)}
    return sorted({c.lower() for c in inner | direct} | {"evalsha", "script|load"})


def rules(prefix: str, role: str) -> list[str]:
    """The ``ACL SETUSER`` rules of ``role`` under ``prefix`` (add ``on`` and a password)."""
    validate.check_name(prefix, "prefix")
    return ["resetkeys", f"~{prefix}:*", "resetchannels", f"&{prefix}:*", "-@all",
            *(f"+{c}" for c in commands(role))]
