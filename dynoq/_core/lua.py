"""The Lua scripts: one file per transition under ``dynoq/lua/``, loaded once (pure).

A script file is named ``<verb>-<numkeys>.lua`` and opens with a ``--[[ ... ]]`` header that
is its contract: ``KEYS[i] <name>`` for every key (the names are attributes of
``keys.ShardKeys``, ``keys.GroupKeys`` and friends), ``ARGV[i]``, what it returns, and
``uses: lib/<piece>.lua`` for the shared pieces put in front of it here: of their local
functions, only those the script can call (each is made anew at every call).

The header is the only statement of the KEYS order: a body names its keys (``K.unack``),
never counts them (``KEYS[3]``: tests/test_architecture.py), and this loader gives it them.
It writes each ``K.<name>`` as the ``KEYS[i]`` the header gives that name (what the server
runs), refuses a name the header does not give, and, for a body that hands ``K`` on to a
shared piece, puts a table ``K`` of the keys by name right after the header. Besides
``KEYS[i] <name>``, a header may say:

- ``KEYS[i] <name>|<other>``: the key goes by both names, for a script that takes one kind
  or the other there (a keyed queue's ``kwait`` where any other passes ``delayed``); the
  callers' attribute is the first (``Script.keys``). Such a key is read from the table.
- ``KEYS[a..] repeated: ...``: the keys from ``KEYS[a]`` to the last named one form a
  group, repeated to the end of KEYS (one group per shard, or per target queue of a
  publish); ``K`` holds the keys before ``KEYS[a]``, ``group_keys(g)`` group g's by name,
  and ``GROUPS`` how many whole groups the call carries. When ``a`` is past the named keys
  the group's names follow: ``KEYS[12..] repeated ready delayed unack: ...`` (optional
  groups after a call's own keys).
- ``KEYS[#KEYS] <name>``: an optional key after everything else, ``K.<name>`` (the script
  tells from ``#KEYS`` whether the call carries it).

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

_NAME = r"[A-Za-z_]\w*(?:\|[A-Za-z_]\w*)*"  # a key's name, or its names: delayed|kwait
_KEY_RE = re.compile(rf"KEYS\[(\d+)\]\s+({_NAME})")
_GROUP_RE = re.compile(rf"KEYS\[(\d+)\.\.\]\s+repeated((?:\s+{_NAME})*):")
_LAST_RE = re.compile(rf"KEYS\[#KEYS\]\s+({_NAME})")
_K_RE = re.compile(r"(?<![\w.])K\.(\w+)")  # a key of the header's, by name, in a body
_USES_RE = re.compile(r"uses:((?:\s+lib/[\w-]+\.lua)+)")
_FILE_RE = re.compile(r"([a-z][a-z-]*)-(\d+)\.lua")
_FLAGS_RE = re.compile(r"^\s*flags:[ \t]*(.*?)[ \t]*$", re.M)
COMMENT_RE = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
# A local function: from its line to the first "end" at the start of a line (bodies are
# indented, and every function of a script or piece is written so).
FUNC_RE = re.compile(r"^local function (\w+)\(.*?^end\b", re.M | re.S)
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


def local_functions(code: str) -> dict[str, str]:
    """The local functions of Lua ``code`` (its comments left out) by name, each its
    text; ValueError for one defined twice, or whose end cannot be told."""
    functions: dict[str, str] = {}
    for m in FUNC_RE.finditer(code):
        name, body = m.group(1), m.group(0)
        # a line at the start of a line inside it: its "end" is not where it ends
        if name in functions or re.search(r"\n[^\s]", body.rsplit("\n", 1)[0]):
            raise ValueError(
                f"local function {name}: defined twice, or a line of its "
                "body is not indented (dynoq cannot tell where it ends)"
            )
        functions[name] = body
    return functions


def called(roots: list[str], functions: dict[str, str]) -> set[str]:
    """The names of ``functions`` that the code of ``roots`` calls, transitively."""
    out: set[str] = set()
    todo = list(roots)
    while todo:
        code = todo.pop()
        for name in [n for n in functions if n not in out and re.search(rf"\b{n}\b", code)]:
            out.add(name)
            todo.append(functions[name])
    return out


def _reached(pieces: list[str], text: str) -> list[str]:
    """The shared pieces with only the local functions the script can call, from its text
    and the pieces' top-level code: every function put in front of a script is made anew
    at every call of it (50 ns each), and a script calls few of a piece's."""
    code = [COMMENT_RE.sub("", piece) for piece in pieces]
    functions = local_functions("\n".join(code))
    if list(functions) != [m.group(1) for p in pieces for m in FUNC_RE.finditer(p)]:
        raise ValueError(
            "a shared piece's comment holds a line that starts with 'local "
            "function' or 'end': indent it"
        )
    keep = called([COMMENT_RE.sub("", text), *(FUNC_RE.sub("", c) for c in code)], functions)
    return [
        FUNC_RE.sub(lambda m: m.group(0) if m.group(1) in keep else "", piece) for piece in pieces
    ]


def _fields(named: list[tuple[str, str]]) -> str:
    """``a = KEYS[1], b = KEYS[1], ...``: each name of each (names, KEYS index) pair."""
    return ", ".join(f"{n} = KEYS[{at}]" for names, at in named for n in names.split("|"))


def _group(
    filename: str, header: str, found: list[tuple[int, str]], numkeys: int
) -> tuple[int, list[str]]:
    """Where a header's repeated keys begin (numkeys + 1 when none repeat) and their
    names; ValueError when it says them otherwise than on one line of either form."""
    groups = _GROUP_RE.findall(header)
    if (
        len(groups) > 1
        or len(re.findall(r"KEYS\[\d+\.\.\]", header)) != len(groups)
        or "(repeated" in header
    ):
        raise ValueError(
            f"{filename}: repeated keys are said on one line, 'KEYS[a..] "
            "repeated:' or 'KEYS[n+1..] repeated <names>:'"
        )
    if not groups:
        return numkeys + 1, []
    first, names = int(groups[0][0]), groups[0][1].split()
    if not (1 <= first <= numkeys + 1) or bool(names) != (first == numkeys + 1):
        raise ValueError(
            f"{filename}: 'KEYS[a..] repeated' repeats KEYS[a] to the last "
            "named key, or names its group after the last one "
            "('KEYS[n+1..] repeated a b:')"
        )
    return first, [k for _, k in found[first - 1 :]] or names


def _named(filename: str, header: str, body: str, numkeys: int) -> tuple[str, str]:
    """The Lua put in front of a script's body, its header's keys by name, and the body:
    each ``K.<name>`` of a key with one name is written as the ``KEYS[i]`` it is (a table
    costs 0.3 µs a call), and the table ``K`` is built only for a body that still needs
    it (it hands K on, or names a key of two names). ValueError on a malformed header, or
    a body naming a key its header does not."""
    found = [(int(i), k) for i, k in _KEY_RE.findall(header)]
    if [i for i, _ in found] != list(range(1, numkeys + 1)):
        raise ValueError(
            f"{filename}: the header must name KEYS[1]..KEYS[{numkeys}] once "
            f"each, in order (found {[i for i, _ in found]})"
        )
    first, group = _group(filename, header, found, numkeys)
    last = _LAST_RE.findall(header)
    if len(last) > 1:
        raise ValueError(f"{filename}: at most one optional last key (KEYS[#KEYS])")
    fixed = [(k, str(i)) for i, k in found[: first - 1]] + [(k, "#KEYS") for k in last]
    in_group = [(k, f"at + {j}") for j, k in enumerate(group, 1)]
    for table in (fixed, in_group):
        names = [n for k, _ in table for n in k.split("|")]
        if len(set(names)) != len(names):
            raise ValueError(f"{filename}: a name given to two keys of one table: {names}")
    code = COMMENT_RE.sub("", body)
    named = {n for k, _ in fixed for n in k.split("|")}
    if unknown := sorted(set(_K_RE.findall(code)) - named):
        raise ValueError(f"{filename}: K.{unknown[0]}: its header names no such key")
    if re.search(r"(?<![\w.])K\s*=[^=]|local\s+K\b", code):
        raise ValueError(f"{filename}: K is the header's keys: name the variable otherwise")
    sole = dict(fixed)
    body = _K_RE.sub(
        lambda m: f"KEYS[{sole[m.group(1)]}]" if m.group(1) in sole else m.group(0), body
    )
    lines = []
    if re.search(r"(?<![\w.])K\b", COMMENT_RE.sub("", body)):
        lines.append(f"local K = {{{_fields(fixed)}}}")
    if group:
        skip, size = first - 1, len(group)
        rest = f"(#KEYS - {skip})" if skip else "#KEYS"
        step = f"{size} * (g - 1)" if size > 1 else "g - 1"
        lines += [
            f"local GROUPS = math.floor({rest} / {size})" if size > 1 else f"local GROUPS = {rest}",
            "local function group_keys(g)",
            f"  local at = {f'{skip} + {step}' if skip else step}",
            f"  return {{{_fields(in_group)}}}",
            "end",
        ]
    if lines:
        lines.insert(0, "-- the header's KEYS by name (dynoq/_core/lua.py)")
    return "\n".join(lines), body


def parse(filename: str, text: str) -> Script:
    """A Script from a file's name and text; raises ValueError on a malformed header."""
    m = _FILE_RE.fullmatch(filename)
    if m is None:
        raise ValueError(f"{filename}: a script file is named <verb>-<numkeys>.lua")
    name, numkeys = m.group(1), int(m.group(2))
    if not text.startswith("--[["):
        raise ValueError(f"{filename}: a script opens with its --[[ header ]]")
    header = text.split("]]", 1)[0]
    named, body = _named(filename, header, text[len(header) + 2 :], numkeys)
    flags = _FLAGS_RE.findall(header)
    words = flags[0].split() if len(flags) == 1 else []
    if len(flags) != 1 or not words or not (words == ["none"] or set(words) <= FLAGS):
        raise ValueError(
            f"{filename}: the header must say 'flags: none' or name flags of "
            f"{sorted(FLAGS)} on one 'flags:' line"
        )
    shebang = "#!lua" if words == ["none"] else "#!lua flags=" + ",".join(words)
    # the keys by name right after the header, before the body's first line
    text = header + "]]" + ("\n" + named if named else "") + body
    plain = "\n".join([*_reached([_read(lib) for lib in _libs(header, [])], text), text])
    source = shebang + "\n" + plain
    keys = tuple(k.split("|", 1)[0] for _, k in _KEY_RE.findall(header))
    group = _GROUP_RE.search(header)
    return Script(
        name,
        keys,
        source,
        _sha(source),
        group is not None and int(group.group(1)) <= numkeys,
        plain,
        _sha(plain),
    )


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def load() -> dict[str, Script]:
    files = sorted(
        p.name for p in (resources.files("dynoq") / "lua").iterdir() if p.name.endswith(".lua")
    )
    scripts = [parse(f, _read(f)) for f in files]
    return {s.name: s for s in scripts}


SCRIPTS: dict[str, Script] = load()
SOURCES: dict[str, str] = {s.sha: s.source for s in SCRIPTS.values()}  # for NOSCRIPT


def script(name: str) -> Script:
    return SCRIPTS[name]
