"""Opening a queue or topic, and the epoch its operations are held to (pure: no I/O).

A queue's metadata hash holds its epoch, "<13-digit ms><8 hex>": the server's clock and a
random suffix when the queue was created (lua/open-1.lua). Each shard holds
"<epoch>|<shards>" in its epoch key, written by every open (lua/epoch-set-1.lua), and
every script that reads or writes the shard checks it. So when a queue's keys vanish (a
restart without persistence, a flush) or it is created anew (other settings, other
shards), the Queue objects and caches that knew the old one are refused: QueueGone
(:class:`Opened` says so, and tells whoever opened it to open it afresh next time).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import GONE, QueueConfigError, QueueGone, gone_error, raise_for
from . import layout, validate
from .calls import Batch, Call, Cmd, Flow, pairs, text
from .keys import QueueKeys, registry_key
from .lua import script
from .settings import QueueSettings, merge

log = logging.getLogger("dynoq")

OPEN_TRIES = 3  # reads of a queue's settings while it keeps being created anew
_OPEN, _EPOCH = script("open"), script("epoch-set")


class Opened:
    """What the operations of an opened queue or topic share: the ``epoch`` token they
    were opened for ("<epoch>|<shards>", see :func:`open_queue`; "" checks nothing: a
    queue stored before epochs existed, opened read-only) and what a refusal of one of
    their calls raises. When a shard no longer holds the epoch, the operation raises
    QueueGone, after calling ``on_gone`` so that whoever opened it opens it afresh next
    time. Thread-safe (its reply parsers are made once each, and never change)."""

    def __init__(
        self,
        name: str,
        what: str,
        epoch: str,
        epoch_key: Callable[[int], str],
        on_gone: Callable[[], None] | None,
    ) -> None:
        self.name = name
        self.what = what  # what a refusal names: "queue 'q'", or "topic 't'"
        self.epoch = epoch
        self.epoch_key = epoch_key  # the epoch key of each shard
        self.on_gone = on_gone
        self.lost = False  # a shard refused this epoch: a cache of Queue objects reopens
        self._parsers: dict[tuple[str, int, Any], Callable[[Any], Any]] = {}

    def refused(self, reply: Any, context: str) -> None:
        """Raise the typed error of a script's refusal (``context``: what was refused);
        return quietly for any other reply."""
        if type(reply) is int and reply == GONE:
            raise self.gone(context)
        raise_for(reply, context)

    def gone(self, context: str) -> QueueGone:
        """The QueueGone to raise (and ``on_gone`` told) when a shard refused this epoch."""
        self.lost = True
        if self.on_gone is not None:
            self.on_gone()
        return gone_error(self.what, context)

    def checked(
        self, context: str, parse: Callable[[Any], Any] | None = None
    ) -> Callable[[Any], Any]:
        """A reply parser that raises a script's refusal first, then applies ``parse``."""

        def check(reply: Any) -> Any:
            self.refused(reply, context)
            return reply if parse is None else parse(reply)

        return check

    def parser(self, what: str, shard: int, parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """:meth:`checked` for the hot paths: made once per operation and shard (a push
        or an ack builds no closure nor message text)."""
        key = (what, shard, parse)
        found = self._parsers.get(key)
        if found is None:
            where = f"shard {shard} of {self.name!r}" if shard >= 0 else repr(self.name)
            found = self._parsers.setdefault(key, self.checked(f"{what} on {where}", parse))
        return found

    def epoch_checks(self, shards: Iterable[int], context: str) -> list[Cmd]:
        """Reads to put first in the batch of a plain (scriptless) read or write of
        ``shards``: each raises QueueGone when its shard does not hold this epoch (not
        atomic with the rest of the batch, which a script is; enough to tell a vanished or
        re-created queue). None for a queue opened without an epoch."""
        if not self.epoch:
            return []

        def check(held: Any) -> None:
            if held is None or text(held) != self.epoch:
                raise self.gone(context)

        return [Cmd(("GET", self.epoch_key(s)), check) for s in sorted(set(shards))]


# -- queues under a prefix -----------------------------------------------------------------


def epoch_token(epoch: str, shards: int) -> str:
    """What a queue's shards hold and its scripts check: "<epoch>|<shards>"."""
    return f"{epoch}|{shards}"


def shard_epoch(prefix: str, name: str) -> Callable[[int], str]:
    """The epoch key of each shard of queue ``name``."""
    keys = QueueKeys(prefix, name)
    return lambda shard: keys.shard(shard).epoch


def open_queue(prefix: str, name: str, asked: dict[str, Any]) -> Flow[tuple[QueueSettings, str]]:
    """Store a new queue's settings (or read the stored ones), register it, and return
    the settings to use and the queue's epoch token; QueueConfigError when ``asked``
    conflicts with what is stored."""
    validate.check_name(name, "queue name")
    opened: tuple[QueueSettings, str] = yield from open_stored(
        QueueKeys(prefix, name).meta,
        registry_key(prefix),
        name,
        asked,
        QueueSettings,
        "queue",
        shard_epoch(prefix, name),
    )
    return opened


def read_queue(prefix: str, name: str) -> Flow[tuple[QueueSettings, str] | None]:
    """The settings and epoch token of a registered queue, or None; never creates one
    (nor writes anything: a queue stored before epochs gets the token "", unchecked)."""
    validate.check_name(name, "queue name")
    found: tuple[QueueSettings, str] | None = yield from read_stored(
        QueueKeys(prefix, name).meta, registry_key(prefix), name, QueueSettings, "queue"
    )
    return found


def queue_names(prefix: str) -> Cmd:
    """Every registered queue under ``prefix``, sorted."""
    return Cmd(("SMEMBERS", registry_key(prefix)), lambda raw: sorted(text(n) for n in raw))


# -- queues and topics ---------------------------------------------------------------------


def open_stored(
    meta: str,
    registry: str,
    name: str,
    asked: dict[str, Any],
    kind: Any,
    what: str,
    epoch_key: Callable[[int], str],
) -> Flow[tuple[Any, str]]:
    """A queue's or topic's settings and epoch token: stored on first open (``kind``
    validates what was asked before anything is written), checked against ``asked``
    after; its epoch written into every shard (``epoch_key(shard)``); registered."""
    wanted = merge(None, asked, name, kind, what)
    flat = [x for kv in wanted.to_hash().items() for x in kv]
    for _ in range(OPEN_TRIES):
        reply = yield Call(_OPEN, [meta], [secrets.token_hex(4), *layout.READS, *flat])
        raise_for(reply, f"open of {what} {name!r}")  # BOUNDS: a hash dynoq did not write
        if int(reply[0]) < 0:  # a layout this version does not read: nothing written
            raise layout.refusal(what, name, int(reply[1]))
        fields = {text(k): text(v) for k, v in pairs(reply[1:])}
        try:
            stored = kind.from_hash(fields)
        except QueueConfigError as exc:
            raise QueueConfigError(f"{what} {name!r}: {exc}") from None
        settings = merge(stored, asked, name, kind, what)  # a conflict writes nothing more
        token = epoch_token(fields["epoch"], stored.shards)
        later = yield from _stamp(epoch_key, token, stored.shards, f"{what} {name!r}")
        if later:
            # A shard holds a later epoch: the queue was created anew since it was read
            # (read it again), or, if the stored epoch is still this one, the shard is left
            # from a creation whose settings vanished (a server clock that went back).
            held = yield Cmd(("HGET", meta, "epoch"))
            if held is None or text(held) != fields["epoch"]:
                continue
            yield Batch([Call(_EPOCH, [epoch_key(s)], [token, "force"]) for s in later])
        yield Cmd(("SADD", registry, name))
        return settings, token
    raise QueueGone(
        f"{what} {name!r} was created anew {OPEN_TRIES} times while it was "
        "being opened; open it again"
    )


def _stamp(epoch_key: Callable[[int], str], token: str, shards: int, what: str) -> Flow[list[int]]:
    """Write ``token`` into the epoch key of every shard, taking over the shards of an
    earlier creation of the queue (and those it had beyond ``shards``, so that its Queue
    objects are refused there too); returns the shards that hold a later epoch."""
    replies = yield Batch([Call(_EPOCH, [epoch_key(s)], [token, "newer"]) for s in range(shards)])
    later, earlier = [], 0
    for shard, (written, held) in enumerate(replies):
        held = text(held)
        if not int(written) and held != token:
            later.append(shard)
        elif int(written) and held:
            earlier = max(earlier, _shards_of(held), 1)
    if earlier:
        if earlier > shards:
            yield Batch(
                [Call(_EPOCH, [epoch_key(s)], [token, "newer"]) for s in range(shards, earlier)]
            )
        log.warning(
            "dynoq: %s was created anew where an earlier %s's shards remain (its settings "
            "had vanished: a server that evicts keys or lost part of its data; `dynoq "
            "check` says what puts messages at risk). Objects that had the earlier one "
            "open get QueueGone; messages left in its shards %s are not delivered by this "
            "one.",
            what,
            what.split()[0],
            f"{shards}-{earlier - 1}" if earlier > shards else "(none beyond this one's)",
        )
    return later


def _shards_of(token: str) -> int:
    """The shard count in an epoch token (0 when it is not one)."""
    try:
        return min(max(int(token.rpartition("|")[2]), 0), validate.MAX_SHARDS)
    except ValueError:
        return 0


def read_stored(
    meta: str, registry: str, name: str, kind: Any, what: str
) -> Flow[tuple[Any, str] | None]:
    """The settings and epoch token of a registered queue or topic, or None; never creates
    one."""
    member, raw = yield Batch([Cmd(("SISMEMBER", registry, name)), Cmd(("HGETALL", meta))])
    if not member or not raw:
        return None
    fields = {text(k): text(v) for k, v in pairs(raw)}
    layout.check(fields, what, name)
    try:
        settings = kind.from_hash(fields)
    except QueueConfigError as exc:
        raise QueueConfigError(f"{what} {name!r}: {exc}") from None
    epoch = fields.get("epoch")
    return settings, "" if epoch is None else epoch_token(epoch, settings.shards)
