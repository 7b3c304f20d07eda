"""dynoq's ACL roles: what each runs (pure: no I/O). ``dynoq.acl`` makes a role's Redis
ACL rules from these and from the scripts' own commands (``dynoq._core.grants``); the
backends name the roles that may run a script the server refused to a user."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Role:
    """What a role runs: dynoq's scripts, and direct write commands with the kinds of key
    each writes (``dynoq._core.grants.KINDS``), and direct channel commands. Every role
    may send every read of ``grants.READS`` to any key of its prefix."""

    does: str
    scripts: frozenset[str]
    writes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    channels: frozenset[str] = frozenset()  # PUBLISH, SUBSCRIBE on its prefix's channels


# open a queue or topic (its settings, its epoch in every shard), read its state
_OPEN = frozenset({"open", "epoch-set", "peek", "stats", "koldest"})
_REGISTER = {"SADD": frozenset({"registries"})}  # a first open registers the name

ROLES: dict[str, Role] = {
    "producer": Role(
        "open queues and topics, push, ensure, publish, peek, stats; send "
        "tasks, read and reschedule them (dynoq.Tasks; cancelling one deletes "
        "its message: the consumer's); start and read flows (cancelling one: the "
        "consumer's); "
        "transactional messages: prepare, "
        "commit, roll back, and run their checker (RocketMQ's check-back "
        "asks the producer group)",
        _OPEN
        | {
            "push",
            "kpush",
            "hold",
            "khold",
            "publish",
            "task-push",
            "task-state",
            "flow-create",
            "flow-push",
            "flow-state",
            "flow-members",
            "flow-count",
            "flow-track",
            "reschedule",
            "transaction-prepare",
            "transaction-settle",
            "transaction-publish",
            "transaction-claim",
        },
        _REGISTER,
    ),
    "spark": Role(
        "the producer's, and the Spark sinks' micro-batch bookkeeping and row rates "
        "(maxRowsPerSecond)",
        _OPEN
        | {"push", "kpush", "publish", "push-batch", "batch-commit", "tried-clear", "rate-take"},
        _REGISTER,
    ),
    "consumer": Role(
        "consume: pop, ack, nack, extend, leases, consumer groups, rate limits, a "
        "queue's max_running slots, topic "
        "subscriptions, progress and cancels of running messages; and a queue's "
        "operations by id: remove, cancel, reschedule, replay, "
        "purge dead letters, schedules, pause and resume, keys' weights; run task "
        "workers, with kept results and the flows they advance; cancel tasks and flows; prepare, "
        "commit and roll back transactional messages from a handler",
        _OPEN
        | {
            "push",
            "hold",
            "publish",
            "pop",
            "probe",
            "ack",
            "nack",
            "extend",
            "requeue",
            "steer",
            "transaction-prepare",
            "transaction-settle",
            "transaction-publish",
            "task-push",
            "task-state",
            "task-cancel",
            "task-keep",
            "flow-create",
            "flow-advance",
            "flow-push",
            "flow-state",
            "flow-members",
            "flow-cancel",
            "flow-count",
            "flow-track",
            "remove",
            "cancel",
            "reschedule",
            "replay",
            "purge-dead",
            "pause",
            "weight",
            "lease-acquire",
            "lease-renew",
            "lease-release",
            "group-heartbeat",
            "group-leave",
            "group-history",
            "subscription",
            "rate-take",
            "slots",
            "schedule-fire",
            "schedule-start",
            # message groups (ordered="key"): lua/lib/keyed.lua
            "kpush",
            "khold",
            "kpop",
            "kack",
            "knack",
            "krequeue",
            "kremove",
            "kcancel",
            "kreplay",
        },
        {
            **_REGISTER,
            "HSET": frozenset({"sched"}),
            "HDEL": frozenset({"sched", "control"}),
            "ZREM": frozenset({"marks"}),
        },
        frozenset({"PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE"}),
    ),
    # No UNLINK of a queue's keys: a gone broadcasting member's queue is deleted by a
    # sweeper whose user may delete keys (an admin), docs/security.md.
    "sweeper": Role(
        "requeue expired deliveries, promote due messages, trim acked ids, fire schedules, "
        "reap consumer-group members (a gone broadcasting member's queue: an admin's "
        "sweeper), reconcile running flows (end a call lost where no worker saw it, push "
        "one whose pusher died)",
        frozenset(
            {
                "due",
                "requeue",
                "promote",
                "trim",
                "group-reap",
                "subscription",
                "schedule-fire",
                "krequeue",
                "task-state",
                "flow-state",
                "flow-members",
                "flow-advance",
                "flow-push",
                "flow-count",
                "flow-track",
            }
        ),
    ),
    "dashboard": Role(
        "read what the web dashboard shows (docs/dashboard.md)",
        frozenset({"stats", "koldest", "peek"}),
    ),
    "dashboard-actions": Role(
        "the dashboard's, and replay or purge dead letters, pause and resume queues, "
        "cancel messages (--allow-actions)",
        frozenset(
            {
                "stats",
                "koldest",
                "peek",
                "replay",
                "purge-dead",
                "kreplay",
                "pause",
                "cancel",
                "kcancel",
            }
        ),
    ),
}


def may_run(script: str) -> list[str]:
    """The roles that may run dynoq's script ``script``, in ROLES order."""
    return [name for name, role in ROLES.items() if script in role.scripts]


def refused_script(script: str) -> str:
    """Why the server refused dynoq's script ``script`` to a user, and what to do. The
    client cannot see its user's rules: either the user has another role, or its rules
    are of another dynoq version (each version's scripts have their own SHA-1s)."""
    roles = may_run(script)
    if not roles:
        return (
            f"this user may not run dynoq's {script!r} script: only an admin may (a "
            "user allowed every command on the prefix's keys, docs/security.md)"
        )
    who = roles[0] if len(roles) == 1 else f"{', '.join(roles[:-1])} or {roles[-1]}"
    return (
        f"this user may not run dynoq's {script!r} script: only a {who} user may "
        f"(docs/security.md, least-privilege ACL users); connect as one. If this user "
        f"has that role, its rules are another dynoq version's: apply this version's "
        f"`dynoq acl ROLE` rules (docs/security.md, upgrading)"
    )
