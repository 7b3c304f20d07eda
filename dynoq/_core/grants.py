"""What dynoq's scripts do to which keys, read from the scripts themselves, and the Redis
ACL patterns that match each kind of key (pure: no I/O). ``dynoq.acl`` builds its roles
from these.

Scripts run their commands under the caller's ACL, so a role needs every command its
scripts send, on the keys they send it to. Reads are granted on every key of the prefix;
writes only on the kinds of key a script writes with that command (a producer may ZADD to
``ready`` but not to ``lease``). A script names the key of each call by its header name:
a field of a table of keys by name (``K.ready``: the table ``lua.py`` builds from the
header, ``group_keys(g).ready``, or a shared piece's argument ``k.ready``), a variable
named after the key (``ready``, as the shared pieces in ``lua/lib`` do), a local alias of
one of those (``local log = K.rate``), or ``KEYS[2]`` (read with the header's names): the
kind is the name. :func:`script_uses` refuses a write it cannot place, so a new script
cannot widen a role by accident.

Key patterns are Redis globs (``*``, ``?``, ``[...]``, ``\\``): :func:`glob_escape` makes
a prefix literal, so ``~sh\\*:*`` matches tenant ``sh*``'s keys and not ``shop``'s.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from .calls import Script
from .keys import ShardKeys
from .lua import COMMENT_RE, FUNC_RE, called, local_functions

# Commands by what they do to their keys (tests/test_acl.py checks each against the
# server's own key specs). A script sending any other command is refused here.
READS = frozenset(
    {
        "EXISTS",
        "GET",
        "HEXISTS",
        "HGET",
        "HGETALL",
        "HLEN",
        "HMGET",
        "HSCAN",
        "HVALS",
        "LRANGE",
        "PTTL",
        "SCARD",
        "SISMEMBER",
        "SMEMBERS",
        "SMISMEMBER",
        "SSCAN",
        "ZCARD",
        "ZCOUNT",
        "ZMSCORE",
        "ZRANGE",
        "ZRANGEBYLEX",
        "ZRANGEBYSCORE",
        "ZSCORE",
    }
)
# No DEL: it frees a key in the server's main thread, UNLINK in the background (DESIGN
# §2.14; tests/test_architecture.py), so a script sending DEL is refused here too.
WRITES = frozenset(
    {
        "HDEL",
        "HINCRBY",
        "HSET",
        "HSETNX",
        "INCR",
        "INCRBY",
        "LPUSH",
        "LTRIM",
        "PEXPIRE",
        "SADD",
        "SET",
        "SREM",
        "UNLINK",
        "ZADD",
        "ZPOPMIN",
        "ZREM",
        "ZREMRANGEBYSCORE",
    }
)
CHANNEL = frozenset({"PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE"})  # on <prefix>:* channels
KEYLESS = frozenset({"PING", "TIME", "WAIT"})

_SHARD = tuple(f.name for f in dataclasses.fields(ShardKeys))
# Each kind of key, as glob patterns after "<prefix>:" (see keys.py for the scheme). Only
# shard keys, a topic's subscriptions and Spark's bookkeeping start with "<prefix>:{";
# a shard key ends with its field, after one part (a queue), two (a topic's group queue)
# or three (a broadcasting member's queue) following its hash tag.
KINDS: dict[str, tuple[str, ...]] = {
    **{f: ("{*:" + f,) for f in _SHARD},
    # a queue shard's epoch, and a topic shard's (its group queues check it): keys.py
    "epoch": ("{*:epoch", "{*}:topic-epoch"),
    "subs": ("{*}:subs",),
    "commit": ("{*}:commit:*",),  # Spark: a query's committed batch, per shard
    "wrote": ("{*}:wrote:*",),  # Spark: the ids its uncommitted batch handled
    "tried": ("{*}:tried:*",),  # Spark: the ids a write task's attempts pushed
    "meta": ("queue:*", "topic:*"),
    "registries": ("queues", "topics"),
    "members": ("group:{*}:*",),  # (the pattern also covers ttls and history: other types)
    "ttls": ("group:{*}:*:ttl",),
    "history": ("group:{*}:*:history",),
    "registry": ("groups:{*}",),  # the queue's set of consumer groups
    "claim": ("claim:{*}",),
    "result": ("result:{*}:*",),  # a task's kept state and result (dynoq.Tasks)
    "once": ("once:{*}:*",),  # a flow's task call was pushed (keys.once_key)
    "plan": ("flow:{*}:plan",),  # a flow's plan, and its state (keys.FlowKeys)
    "flow": ("flow:{*}:state",),
    "flows": ("flows",),  # flows started and ended, by outcome (keys.flows_key)
    "running": ("flows:running",),  # the flows running, for the sweeper (keys.running_flows_key)
    "slots": ("slots:{*}",),  # a queue's max_running slots, and their holders' leases
    "slot_leases": ("slots:{*}:leases",),
    "rate": ("rate:{*}:*",),
    "rate_state": ("rate:{*}:*:state",),
}

# The Spark sinks' bookkeeping keys are "<prefix>:{<queue>:<shard>}:<part>:<query or task>",
# as a topic group's queue keys are "<prefix>:{<topic>:<shard>}:<group>:<field>": a group
# named like a part would share keys with them, under their patterns (dynoq._core.topics
# refuses such a group).
RESERVED_GROUPS = tuple(
    sorted(
        p.split(":")[1]
        for patterns in KINDS.values()
        for p in patterns
        if re.fullmatch(r"\{\*\}:[a-z]+:\*", p)
    )
)

_CALL_RE = re.compile(r"(?:redis\.call|bulk_read|bulk)\('([A-Z]+)'(?:,\s*([^,)]+))?")
# A local naming keys, a statement of its own: local log, state = K.rate, K.rate_state
_KEY = r"(?:KEYS\[\d+\]|\w+\.\w+)"
_ALIAS_RE = re.compile(
    rf"^\s*local\s+(\w+(?:\s*,\s*\w+)*)\s*=\s*({_KEY}(?:\s*,\s*{_KEY})*)\s*$", re.M
)


@dataclasses.dataclass(frozen=True)
class Uses:
    """What one script sends: read commands, write commands with the kinds of key each
    writes, and channel commands."""

    reads: frozenset[str]
    writes: dict[str, frozenset[str]]
    channels: frozenset[str]


def script_uses(script: Script) -> Uses:
    """What ``script`` sends (its shared pieces included); ValueError for a command that
    is not classified above, or a write whose key cannot be told."""
    code = reachable(script.source)
    aliases: dict[str, str] = {}
    for names, values in _ALIAS_RE.findall(code):
        for name, value in zip(names.split(","), values.split(","), strict=False):
            kind = _name(script, value.strip())
            if kind in KINDS and aliases.setdefault(name.strip(), kind) != kind:
                raise ValueError(
                    f"{script.name}: local {name.strip()} names two kinds of "
                    "key: name it after the key it holds"
                )
    reads: set[str] = set()
    channels: set[str] = set()
    writes: dict[str, set[str]] = {}
    for cmd, arg in _CALL_RE.findall(code):
        if cmd in READS or cmd in KEYLESS:
            reads.add(cmd)
        elif cmd in CHANNEL:
            channels.add(cmd)
        elif cmd in WRITES:
            writes.setdefault(cmd, set()).add(_kind(script, arg.strip(), aliases, cmd))
        else:
            raise ValueError(
                f"{script.name}: {cmd} is neither a read nor a write in "
                "dynoq._core.grants: classify it"
            )
    return Uses(frozenset(reads), {c: frozenset(k) for c, k in writes.items()}, frozenset(channels))


def reachable(source: str) -> str:
    """The code of ``source`` that can run, comments left out: its top-level code and the
    local functions that code calls, transitively: a role is granted only what its scripts
    can send. (The loader, ``lua.py``, already leaves out the shared pieces' functions a
    script cannot call; a script's own are left out here.)"""
    code = COMMENT_RE.sub("", source)
    functions = local_functions(code)
    top = FUNC_RE.sub("", code)
    if "function" in top:
        raise ValueError(
            "a function outside 'local function name(...) ... end' at the "
            "start of a line: dynoq._core.grants cannot tell when it runs"
        )
    runs = called([top], functions)
    return "\n".join([top, *(body for name, body in functions.items() if name in runs)])


def _name(script: Script, key: str) -> str:
    """The header name of a key as a call names it: KEYS[2], K.ready or ready."""
    m = re.fullmatch(r"KEYS\[(\d+)\]", key)
    if m:
        n = int(m.group(1))
        return script.keys[n - 1] if 1 <= n <= len(script.keys) else key
    return key.rsplit(".", 1)[-1]


def _kind(script: Script, arg: str, aliases: dict[str, str], cmd: str) -> str:
    kind = aliases.get(arg) or _name(script, arg)
    if kind not in KINDS:
        raise ValueError(
            f"{script.name}: cannot tell which key {cmd} {arg} writes: name "
            "it after its KEYS header name (see dynoq._core.grants)"
        )
    return kind


def glob_escape(text: str) -> str:
    r"""``text`` as a Redis glob that matches only itself (``sh*`` -> ``sh\*``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def key_patterns(prefix: str, kinds: Iterable[str]) -> list[str]:
    """The glob patterns of ``kinds`` under ``prefix`` (literal), sorted."""
    p = glob_escape(prefix)
    return sorted({f"{p}:{pattern}" for kind in kinds for pattern in KINDS[kind]})
