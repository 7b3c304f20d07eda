"""What dynoq's scripts do to which keys, read from the scripts themselves, and the Redis
ACL patterns that match each kind of key (pure: no I/O). ``dynoq.acl`` builds its roles
from these.

Scripts run their commands under the caller's ACL, so a role needs every command its
scripts send, on the keys they send it to. Reads are granted on every key of the prefix;
writes only on the kinds of key a script writes with that command (a producer may ZADD to
``ready`` but not to ``lease``). A script names the key of each call by its KEYS header
name (``KEYS[2]``), a local alias of it (``local log = KEYS[1]``), or a variable named
after the key (``ready``, as the shared pieces in ``lua/lib`` do): :func:`script_writes`
refuses a write it cannot place, so a new script cannot widen a role by accident.

Key patterns are Redis globs (``*``, ``?``, ``[...]``, ``\\``): :func:`glob_escape` makes
a prefix literal, so ``~sh\\*:*`` matches tenant ``sh*``'s keys and not ``shop``'s.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from .calls import Script
from .keys import ShardKeys

# Commands by what they do to their keys (tests/test_acl.py checks each against the
# server's own key specs). A script sending any other command is refused here.
READS = frozenset({
    "EXISTS", "GET", "HEXISTS", "HGET", "HGETALL", "HLEN", "HMGET", "HSCAN", "HVALS",
    "LRANGE", "PTTL", "SCARD", "SISMEMBER", "SMEMBERS", "SMISMEMBER", "SSCAN", "ZCARD",
    "ZCOUNT", "ZMSCORE", "ZRANGE", "ZRANGEBYLEX", "ZRANGEBYSCORE", "ZSCORE"})
# No DEL: it frees a key in the server's main thread, UNLINK in the background (DESIGN
# §2.14; tests/test_architecture.py), so a script sending DEL is refused here too.
WRITES = frozenset({
    "HDEL", "HINCRBY", "HSET", "HSETNX", "INCR", "INCRBY", "LPUSH", "LTRIM",
    "PEXPIRE", "SADD", "SET", "SREM", "UNLINK", "ZADD", "ZPOPMIN", "ZREM",
    "ZREMRANGEBYSCORE"})
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
    "rate": ("rate:{*}:*",),
    "rate_state": ("rate:{*}:*:state",),
}

# The Spark sinks' bookkeeping keys are "<prefix>:{<queue>:<shard>}:<part>:<query or task>",
# as a topic group's queue keys are "<prefix>:{<topic>:<shard>}:<group>:<field>": a group
# named like a part would share keys with them, under their patterns (dynoq._core.topics
# refuses such a group).
RESERVED_GROUPS = tuple(sorted(
    p.split(":")[1] for patterns in KINDS.values() for p in patterns
    if re.fullmatch(r"\{\*\}:[a-z]+:\*", p)))

_CALL_RE = re.compile(r"(?:redis\.call|bulk_read|bulk)\('([A-Z]+)'(?:,\s*([^,)]+))?")
_COMMENT_RE = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
# A local function of a script or shared piece: from its line to the first "end" at the
# start of a line (bodies are indented).
_FUNC_RE = re.compile(r"^local function (\w+)\(.*?^end\b", re.M | re.S)
_ALIAS_RE = re.compile(r"local\s+([\w\s,]+?)\s*=\s*((?:KEYS\[\d+\]\s*,\s*)*KEYS\[\d+\])")
_KEYS_RE = re.compile(r"KEYS\[(\d+)\]")


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
    text = script.source
    aliases: dict[str, str] = {}
    for names, values in _ALIAS_RE.findall(text):
        for name, n in zip(names.replace(" ", "").split(","), _KEYS_RE.findall(values),
                           strict=False):
            aliases[name.strip()] = script.keys[int(n) - 1]
    reads: set[str] = set()
    channels: set[str] = set()
    writes: dict[str, set[str]] = {}
    for cmd, arg in _CALL_RE.findall(reachable(text)):
        if cmd in READS or cmd in KEYLESS:
            reads.add(cmd)
        elif cmd in CHANNEL:
            channels.add(cmd)
        elif cmd in WRITES:
            writes.setdefault(cmd, set()).add(_kind(script, arg.strip(), aliases, cmd))
        else:
            raise ValueError(f"{script.name}: {cmd} is neither a read nor a write in "
                             "dynoq._core.grants: classify it")
    return Uses(frozenset(reads), {c: frozenset(k) for c, k in writes.items()},
                frozenset(channels))


def reachable(source: str) -> str:
    """The code of ``source`` that can run, comments left out: its top-level code and the
    local functions that code calls, transitively. A shared piece brings every function it
    holds, and a role is granted only what its scripts can send (a producer's push does
    not get what lib/keyed.lua's pop half sends)."""
    code = _COMMENT_RE.sub("", source)
    functions: dict[str, str] = {}
    for m in _FUNC_RE.finditer(code):
        name, body = m.group(1), m.group(0)
        # a line at the start of a line inside it: its "end" is not where it ends
        if name in functions or re.search(r"\n[^\s]", body.rsplit("\n", 1)[0]):
            raise ValueError(f"local function {name}: defined twice, or a line of its "
                             "body is not indented (dynoq._core.grants cannot tell where "
                             "it ends)")
        functions[name] = body
    top = _FUNC_RE.sub("", code)
    if "function" in top:
        raise ValueError("a function outside 'local function name(...) ... end' at the "
                         "start of a line: dynoq._core.grants cannot tell when it runs")
    called: list[str] = []
    todo = [top]
    while todo:
        text = todo.pop()
        for name, body in functions.items():
            if name not in called and re.search(rf"\b{name}\b", text):
                called.append(name)
                todo.append(body)
    return "\n".join([top, *(functions[name] for name in called)])


def _kind(script: Script, arg: str, aliases: dict[str, str], cmd: str) -> str:
    m = re.fullmatch(r"KEYS\[(\d+)\]", arg)
    kind = script.keys[int(m.group(1)) - 1] if m else aliases.get(arg, arg)
    if kind not in KINDS:
        raise ValueError(f"{script.name}: cannot tell which key {cmd} {arg} writes: name "
                         "it after its KEYS header name (see dynoq._core.grants)")
    return kind


def glob_escape(text: str) -> str:
    r"""``text`` as a Redis glob that matches only itself (``sh*`` -> ``sh\*``)."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def key_patterns(prefix: str, kinds: Iterable[str]) -> list[str]:
    """The glob patterns of ``kinds`` under ``prefix`` (literal), sorted."""
    p = glob_escape(prefix)
    return sorted({f"{p}:{pattern}" for kind in kinds for pattern in KINDS[kind]})
