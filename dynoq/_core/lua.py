"""The Lua scripts: one file per transition under ``dynoq/lua/``, loaded once (pure).

A script file is named ``<verb>-<numkeys>.lua`` and opens with a ``--[[ ... ]]`` header that
is its contract: ``KEYS[i] <name>`` for every key (the names are attributes of
``keys.ShardKeys``, ``keys.GroupKeys`` and friends, so the KEYS order is written in one
place, the header), ``ARGV[i]``, what it returns, and ``uses: lib/<piece>.lua`` for the
shared pieces put in front of it here. A header whose KEYS line says ``(repeated ...)``
takes its KEYS in groups (one group per shard of a batch).

Every header also says how the script behaves when Redis is full (``maxmemory`` reached,
no eviction), as a ``flags:`` line that becomes the script's ``#!lua flags=...`` line:
``none`` for the scripts that bring messages in (push, push-batch, publish: Redis refuses
them before they run, and the caller gets ``ServerFull``), ``allow-oom`` for everything
that drains a queue or keeps consumers going (pop, ack, heartbeats, leases...: a full
Redis can still be emptied; a schedule's next occurrence fires too, one waiting per
schedule, or a pop that delivers an occurrence would fail), ``no-writes`` for the
read-only ones (the server then refuses any write they would make). Without a ``#!lua``
line Redis refuses a script at its first write that may grow memory, half-way through
its reads, and a consumer could not even join its group while full.

The SHA of each script is computed here; backends send ``EVALSHA`` and load the source on
``NOSCRIPT``. ``Script.plain`` is the source without its ``#!lua`` line, for servers that
do not read one (fakeredis, behind ``memory://``, where memory is never full).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from .calls import Script

_KEY_RE = re.compile(r"KEYS\[(\d+)\]\s+([A-Za-z_]\w*)")
_USES_RE = re.compile(r"uses:((?:\s+lib/[\w-]+\.lua)+)")
_FILE_RE = re.compile(r"([a-z][a-z-]*)-(\d+)\.lua")
_FLAGS_RE = re.compile(r"^\s*flags:[ \t]*(.*?)[ \t]*$", re.M)
FLAGS = frozenset({"allow-oom", "no-writes"})  # the #!lua flags a header may name


def _read(path: str) -> str:
    return (resources.files("dynoq") / "lua" / path).read_text("utf-8")


def _libs(header: str, seen: list[str]) -> list[str]:
    """The shared pieces a header uses, each once, every piece after the ones it uses."""
    for lib in (name for line in _USES_RE.findall(header) for name in line.split()):
        if lib not in seen:
            _libs(_read(lib).split("]]", 1)[0], seen)
            seen.append(lib)
    return seen


def parse(filename: str, text: str) -> Script:
    """A Script from a file's name and text; raises ValueError on a malformed header."""
    m = _FILE_RE.fullmatch(filename)
    if m is None:
        raise ValueError(f"{filename}: a script file is named <verb>-<numkeys>.lua")
    name, numkeys = m.group(1), int(m.group(2))
    if not text.startswith("--[["):
        raise ValueError(f"{filename}: a script opens with its --[[ header ]]")
    header = text.split("]]", 1)[0]
    found = [(int(i), k) for i, k in _KEY_RE.findall(header)]
    if [i for i, _ in found] != list(range(1, numkeys + 1)):
        raise ValueError(f"{filename}: the header must name KEYS[1]..KEYS[{numkeys}] once "
                         f"each, in order (found {[i for i, _ in found]})")
    flags = _FLAGS_RE.findall(header)
    words = flags[0].split() if len(flags) == 1 else []
    if len(flags) != 1 or not words or not (words == ["none"] or set(words) <= FLAGS):
        raise ValueError(f"{filename}: the header must say 'flags: none' or name flags of "
                         f"{sorted(FLAGS)} on one 'flags:' line")
    shebang = "#!lua" if words == ["none"] else "#!lua flags=" + ",".join(words)
    plain = "\n".join([*(_read(lib) for lib in _libs(header, [])), text])
    source = shebang + "\n" + plain
    return Script(name, tuple(k for _, k in found), source, _sha(source),
                  "(repeated" in header, plain, _sha(plain))


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def load() -> dict[str, Script]:
    files = sorted(p.name for p in (resources.files("dynoq") / "lua").iterdir()
                   if p.name.endswith(".lua"))
    scripts = [parse(f, _read(f)) for f in files]
    return {s.name: s for s in scripts}


SCRIPTS: dict[str, Script] = load()
SOURCES: dict[str, str] = {s.sha: s.source for s in SCRIPTS.values()}  # for NOSCRIPT


def script(name: str) -> Script:
    return SCRIPTS[name]
