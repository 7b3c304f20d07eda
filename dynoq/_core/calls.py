"""What the pure core asks a backend to do: the requests a flow yields (pure: no I/O).

Single operations are one :class:`Call` (a Lua script) or :class:`Cmd` (a plain command),
handed to ``backend.run``. Multi-step operations are *flows*: generators that yield
requests and receive each reply, as httpx's auth flows yield requests and receive
responses. A sync backend and an asyncio backend drive the same flow, so every decision
is written once and only the I/O differs::

    def drive(flow):                       # the sync driver, in short
        reply = None
        while True:
            request = flow.send(reply)     # StopIteration carries the result
            reply = backend.do(request)

Replies reach the flow already parsed by the request's ``parse`` (when it has one).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
Parse = Callable[[Any], Any]


@dataclass(frozen=True)
class Script:
    """A Lua script as loaded by ``lua.py`` (its KEYS names read from its header)."""

    name: str
    keys: tuple[str, ...]  # the KEYS names, in order, read from the header
    source: str  # its #!lua flags line, the shared pieces it uses, then the file
    sha: str
    repeated: bool = False  # KEYS come in groups of len(keys)
    plain: str = ""  # the source without its #!lua line (for fakeredis, which reads none)
    plain_sha: str = ""

    def call(self, keys_of: Any, args: Sequence[Any], parse: Parse | None = None) -> Call:
        """A call with KEYS taken, by name, from the attributes of ``keys_of``."""
        return Call(self, [getattr(keys_of, k) for k in self.keys], args, parse)

    def key_list(self, keys_of: Any) -> list[str]:
        return [getattr(keys_of, k) for k in self.keys]


class Call:
    """Run one Lua script: ``EVALSHA sha len(keys) *keys *args``."""

    __slots__ = ("args", "keys", "parse", "script")

    def __init__(
        self, script: Script, keys: Sequence[str], args: Sequence[Any], parse: Parse | None = None
    ) -> None:
        self.script = script
        self.keys = keys
        self.args = args
        self.parse = parse

    def __repr__(self) -> str:
        return f"Call({self.script.name!r}, keys={list(self.keys)!r})"


class Cmd:
    """Run one plain command, e.g. ``Cmd(("HGET", key, field))``."""

    __slots__ = ("args", "parse")

    def __init__(self, args: Sequence[Any], parse: Parse | None = None) -> None:
        self.args = args
        self.parse = parse

    def __repr__(self) -> str:
        return f"Cmd({self.args[0]!r})"


class Batch:
    """Several calls in one round trip per server node (not atomic across calls); the
    reply is the list of their parsed replies, in order, passed through ``parse`` when
    given. With ``wait=(replicas, ms)``, ``WAIT`` follows the writes on each node's
    connection, and the number of replicas that confirmed (the fewest over the nodes) is
    appended to the list. With ``each=True`` a call's error does not end the batch: its
    DynoqError takes its place in the list (the calls of several callers, sent together:
    see _core/combine.py)."""

    __slots__ = ("calls", "each", "parse", "wait")

    def __init__(
        self,
        calls: Sequence[Call | Cmd],
        *,
        wait: tuple[int, int] | None = None,
        parse: Parse | None = None,
        each: bool = False,
    ) -> None:
        self.calls = calls
        self.wait = wait
        self.parse = parse
        self.each = each


class Wake:
    """Block up to ``timeout`` seconds until something is published on ``channel`` (a
    hint that a message may be deliverable). Reply: True when the whole timeout passed on
    a live subscription with nothing published (nothing changed: no need to look again),
    else False."""

    __slots__ = ("channel", "timeout")

    def __init__(self, channel: str, timeout: float) -> None:
        self.channel = channel
        self.timeout = timeout


Request = Call | Cmd | Batch | Wake
Flow = Generator[Request, Any, T]


def one(request: Call | Cmd) -> Flow[Any]:
    """A flow of a single request (to run a lone call where a flow is expected)."""
    return (yield request)


def together(flows: Sequence[Flow[Any]]) -> Flow[list[Any]]:
    """Run ``flows`` side by side, as one flow: each round, the next call or command of
    every unfinished flow goes out in one :class:`Batch` (one round trip, where running
    them one after another would take one each); a batch or a wake-up a flow asks for runs
    on its own. The results, in order. An error of any call ends them all (raised)."""
    results: list[Any] = [None] * len(flows)
    pending: dict[int, Any] = {}

    def advance(i: int, reply: Any) -> None:
        try:
            pending[i] = flows[i].send(reply)
        except StopIteration as stop:
            results[i] = stop.value

    for i in range(len(flows)):
        advance(i, None)
    while pending:
        asked, pending = pending, {}
        plain = [i for i, r in asked.items() if type(r) is Call or type(r) is Cmd]
        replies: dict[int, Any] = {}
        if len(plain) > 1:
            replies.update(zip(plain, (yield Batch([asked[i] for i in plain])), strict=True))
        for i, request in asked.items():
            if i not in replies:
                replies[i] = yield request
        for i, reply in replies.items():
            advance(i, reply)
    return results


# -- reply shapes: what the client hands back, as the core reads it -------------------------


def text(value: bytes | str) -> str:
    """A reply's string (the client returns bytes; a fake or a decoding client, str)."""
    return value.decode() if isinstance(value, bytes) else value


def ints(reply: Any) -> list[int]:
    return [int(x) for x in reply]


def int_pair(reply: Any) -> tuple[int, int]:
    return int(reply[0]), int(reply[1])


def pairs(raw: Any) -> list[tuple[Any, Any]]:
    """Field/value or member/score pairs from a reply that is a dict, a list of pairs or a
    flat list (the client's reply shapes differ by command and protocol)."""
    if isinstance(raw, dict):
        return list(raw.items())
    if raw and isinstance(raw[0], (list, tuple)):
        return [(a, b) for a, b in raw]
    return list(zip(raw[::2], raw[1::2], strict=True))


def server_time() -> Cmd:
    """The server's clock, in seconds (the clock every stored time is on)."""
    return Cmd(("TIME",), lambda raw: int(raw[0]) + int(raw[1]) / 1e6)
