"""Least-privilege Redis ACL users for dynoq, by role, and the admin step that installs
dynoq's scripts (see docs/security.md).

    admin.execute_command("ACL", "SETUSER", "billing", "on", ">SECRET",
                          *dynoq.acl.rules("shop", "consumer"))
    dynoq.acl.install(admin)  # as a user allowed SCRIPT LOAD: once, and after a restart

A role reads every key of its prefix (``%R~<prefix>:*``), calls dynoq's own scripts and no
other code (``EVALSHA`` of their SHA-1s only: no EVAL, SCRIPT LOAD or FUNCTION), and
writes with each command only the kinds of key its scripts and its direct calls write
with it (``dynoq._core.grants`` reads that from the scripts), each in a selector of its
own. The prefix is a literal in every pattern, glob characters included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._core import grants as _grants
from ._core import validate
from ._core.lua import SCRIPTS
from ._core.roles import ROLES, Role
from .backend.install import Installed
from .backend.install import install as _install
from .errors import InvalidArgument


@dataclass(frozen=True)
class Grants:
    """Everything one role may send: ``reads`` (any key of the prefix), ``writes``
    (command -> kinds of key), ``channels`` (on the prefix's channels) and ``scripts``
    (names of dynoq's scripts it may call by SHA-1)."""

    reads: frozenset[str]
    writes: dict[str, frozenset[str]]
    channels: frozenset[str]
    scripts: frozenset[str]


def _role(role: str) -> Role:
    if role not in ROLES:
        raise InvalidArgument(f"unknown role {role!r}; use one of {sorted(ROLES)}")
    return ROLES[role]


def grants(role: str) -> Grants:
    """What ``role`` may send: its scripts' commands (read from the scripts) and its
    direct calls'."""
    r = _role(role)
    writes: dict[str, set[str]] = {c: set(k) for c, k in r.writes.items()}
    channels = set(r.channels)
    for name in r.scripts:
        uses = _grants.script_uses(SCRIPTS[name])
        for cmd, kinds in uses.writes.items():
            writes.setdefault(cmd, set()).update(kinds)
        channels |= uses.channels
    # WAIT: a write may wait for replicas (a queue's min_replicas)
    reads = _grants.READS | {"PING", "TIME"} | ({"WAIT"} if writes else set())
    return Grants(
        reads, {c: frozenset(k) for c, k in writes.items()}, frozenset(channels), r.scripts
    )


def commands(role: str) -> list[str]:
    """Every command ``role`` may send, sorted, lower case (``evalsha`` of dynoq's
    scripts only)."""
    g = grants(role)
    return sorted(c.lower() for c in {*g.reads, *g.writes, *g.channels, "EVALSHA"})


# What a connection may send first: SELECT, for a URL's database number (a user allowed
# it may select any: a database number is no boundary between users, docs/security.md).
# No CLIENT SETINFO (Redis 7.2's, which 7.0 refuses in a rule): dynoq's clients do not
# send it (dynoq.backend.bounds).
CONNECTION = ("select",)
# What a Redis Cluster client needs besides: the topology, the command table (redis-py's
# key finder), and ASKING (a slot that is migrating).
CLUSTER = ("asking", "cluster|shards", "cluster|slots", "command")


def rules(prefix: str, role: str, *, cluster: bool = False, upgrade: bool = False) -> list[str]:
    """The ``ACL SETUSER`` rules of ``role`` under ``prefix`` (add ``on`` and a
    password); ``cluster=True`` for a Redis Cluster's users (set them on every node).
    ``upgrade=True`` keeps the user's selectors, so the scripts of the version it was
    set up for stay callable while clients are upgraded one by one; apply the rules
    without it once every client runs this version (docs/security.md)."""
    validate.check_name(prefix, "prefix")
    g = grants(role)
    p = _grants.glob_escape(prefix)
    extra = [*CONNECTION, *(CLUSTER if cluster else ())]
    out = [
        "resetkeys",
        f"%R~{p}:*",
        "resetchannels",
        *([f"&{p}:*"] if g.channels else []),
        "-@all",
        *(f"+{c.lower()}" for c in sorted(g.reads | g.channels)),
        *(f"+{c}" for c in extra),
    ]
    if not upgrade:
        out.append("clearselectors")
    shas = sorted(SCRIPTS[s].sha for s in g.scripts)
    out.append(_selector([f"~{p}:*"], [f"evalsha|{sha}" for sha in shas]))
    by_kinds: dict[frozenset[str], list[str]] = {}
    for cmd, kinds in sorted(g.writes.items()):
        by_kinds.setdefault(kinds, []).append(cmd.lower())
    for kinds, cmds in sorted(by_kinds.items(), key=lambda kv: kv[1]):
        out.append(_selector([f"~{k}" for k in _grants.key_patterns(prefix, kinds)], cmds))
    return out


def _selector(keys: list[str], cmds: list[str]) -> str:
    return "(" + " ".join([*keys, *(f"+{c}" for c in cmds)]) + ")"


def as_text(found: list[str]) -> str:
    """Rules as one line for ``redis-cli`` or an ACL file (both split it as sdssplitargs
    does): a rule holding a space, a quote or a backslash is double-quoted."""

    def quote(rule: str) -> str:
        if not any(c in rule for c in " \"'\\"):
            return rule
        return '"' + rule.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return " ".join(quote(r) for r in found)


def install(admin: Any, **redis_options: Any) -> Installed:
    """Load every script of this dynoq version into the server's script cache, as a user
    allowed ``SCRIPT LOAD`` (``admin``: a URL, whose client gets ``redis_options``; a
    :class:`dynoq.Client`; or a redis-py ``Redis`` / ``RedisCluster``). On a cluster every
    node, replicas included; through Sentinel the master and its replicas. Idempotent:
    loads only what is missing, and returns what it found and did (:class:`Installed`).
    A script cache does not survive a restart, and a promoted replica has its own: run it
    again then, or keep ``dynoq acl install --keep`` running, which does."""
    return _install(admin, **redis_options)


__all__ = [
    "CLUSTER",
    "CONNECTION",
    "ROLES",
    "Grants",
    "Installed",
    "Role",
    "as_text",
    "commands",
    "grants",
    "install",
    "rules",
]
