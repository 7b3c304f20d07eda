"""Topics (RocketMQ publish/subscribe) as pure requests and flows (no I/O).

A topic has shards like a queue. Every subscribed consumer group has its own queue whose
shards live under the topic shards' hash tags (``keys.TopicKeys.group_queue``), so one
script per topic shard adds each message to every matching group atomically: the
``publish`` script filters by tag (RocketMQ's ``"*"`` or ``"a || b"``) and pushes if
absent per group. A clustering group shares its queue among its members; in a
broadcasting group every member has a queue of its own.

Each topic shard keeps a copy of the subscriptions (in its slot) with a version; a
publish names the version its KEYS were built from, and the script refuses it (STALE)
if they changed, so a group subscribed before a publish began always gets its messages.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import STALE, GroupConflict, InvalidArgument, raise_for
from ..message import Message, QueueStats
from . import codec, validate
from .bounds import PUSH_BYTES, PUSH_CHUNK, body_size, chunks
from .calls import Batch, Call, Cmd, Flow, pairs, text
from .grants import RESERVED_GROUPS
from .keys import QueueKeys, ShardKeys, TopicKeys, member_token, topic_registry_key
from .lua import script
from .opening import Opened, open_stored, read_stored
from .queue import QueueOps
from .settings import TopicSettings

MODES = ("clustering", "broadcasting")
MAX_TARGETS = 1000  # group and member queues of one topic
# Copies one publish call places (its messages times the topic's group queues): the
# call's time on the server (lua/publish-12.lua refuses more; DESIGN §2.14).
MAX_COPIES = 2000
STALE_RETRIES = 10
_PUBLISH, _SUBSCRIPTION = script("publish"), script("subscription")
_TRANSACTION_PUBLISH = script("transaction-publish")
_QUEUE_KEYS = _PUBLISH.keys[2:]  # the ten keys of each target queue shard
# ... of a keyed topic's (ordered="key"): its waiting keys and states in place of the first three
_KEYED_KEYS = ("kwait", "kturn", "kstate", *_QUEUE_KEYS[3:])


@dataclass(frozen=True)
class Subscription:
    """A consumer group's subscription to a topic. ``tags`` is the tag expression as
    given ("*" or "a || b")."""

    group: str
    mode: str
    tags: str


@dataclass(frozen=True)
class GroupBacklog:
    """One queue of a subscribed group (a broadcasting group has one per member) and its
    counts."""

    group: str
    mode: str
    tags: str
    queue: str  # the queue's name: <topic>:<group>[:<member>]
    stats: QueueStats


@dataclass(frozen=True)
class _Shard:
    """One topic shard's subscriptions as a publish needs them."""

    version: bytes
    targets: tuple[tuple[str, str], ...]  # (target queue name, tag filter)


def _target_spec(spec: str) -> tuple[str, str, str, str]:
    """(group, mode, tags, subscribed ms) of a target's "group|mode|tags|ms" (the tag
    expression may hold "||")."""
    group, mode, rest = spec.split("|", 2)
    tags, since = rest.rsplit("|", 1)
    return group, mode, tags, since


def publish_chunk(targets: int) -> int:
    """Messages one publish call carries to a shard of ``targets`` group queues."""
    return max(1, min(PUSH_CHUNK, MAX_COPIES // max(targets, 1)))


def tag_filter(tags: Sequence[str]) -> str:
    """The publish script's filter of a tag list: "" for every message, else "|a|b|"."""
    return "" if not tags else "|" + "|".join(tags) + "|"


def check_group(group: object) -> str:
    """A topic's group name: a name (validate.check_name), none of RESERVED_GROUPS (its
    queue would share keys with the Spark sinks' bookkeeping of a queue of the topic's
    name, and fall under the spark role's UNLINK and PEXPIRE of them)."""
    name = validate.check_name(group, "group")
    if name in RESERVED_GROUPS:
        raise InvalidArgument(
            f"a topic's group may not be named {name!r}: its queue would "
            "share keys with the Spark sinks' bookkeeping (reserved: "
            f"{', '.join(RESERVED_GROUPS)})"
        )
    return name


class TopicOps(Opened):
    """One topic's operations. Safe to share between threads (the subscription cache is
    replaced whole, never changed in place). ``epoch`` and ``on_gone``: see
    :class:`~.opening.Opened` (the topic's epoch, which its group queues share)."""

    def __init__(
        self,
        prefix: str,
        name: str,
        settings: TopicSettings,
        max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES,
        *,
        cross_slot: bool = False,
        epoch: str = "",
        on_gone: Callable[[], None] | None = None,
    ) -> None:
        self.keys = TopicKeys(prefix, name)
        super().__init__(name, f"topic {name!r}", epoch, self.keys.epoch, on_gone)
        self.cross_slot = cross_slot
        self.prefix = prefix
        self.settings = settings
        self.limit = max_payload_bytes
        self._queue_settings = settings.queue_settings()
        # publishes route like the group queues: by id, or by key on ordered topics
        self._router = QueueOps(prefix, name, self._queue_settings, max_payload_bytes)
        self._cache: dict[int, _Shard] = {}
        self._window_ms = validate.to_ms(settings.dedupe_window)
        # the scripts' key_concurrency argument ("" = not keyed) and each target's keys
        self.conc = str(self._queue_settings.key_concurrency or 1) if settings.keyed else ""
        self.target_key_names = _KEYED_KEYS if settings.keyed else _QUEUE_KEYS

    # -- group queues ----------------------------------------------------------------------

    def target(self, group: str, member: str | None = None) -> QueueKeys:
        return self.keys.group_queue(check_group(group), member)

    def group_queue(self, group: str, member: str | None = None) -> QueueOps:
        """The queue a clustering group (or one broadcasting member) consumes."""
        return QueueOps.of_keys(
            self.target(group, member),
            self._queue_settings,
            self.limit,
            cross_slot=self.cross_slot,
            epoch=self.epoch,
            on_gone=self.on_gone,
        )

    def _subscription(self, shard: int, args: Sequence[Any]) -> Call:
        return Call(
            _SUBSCRIPTION,
            [self.keys.subs(shard), self.keys.epoch(shard)],
            [self.epoch, *args],
            lambda r: self.refused(r, f"subscription change of {self.name!r}"),
        )

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(
        self, group: str, *, mode: str = "clustering", tags: str = "*", member: str | None = None
    ) -> Flow[None]:
        """Subscribe ``group`` (a broadcasting group: also its ``member``'s queue). A
        group keeps its mode; its tags may change."""
        if mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}, got {mode!r}")
        parsed = validate.check_tags(tags)
        group = check_group(group)
        if mode == "broadcasting" and member is not None:
            validate.check_text(member, "member")
        current = yield from self.subscriptions()
        known = next((s for s in current if s.group == group), None)
        if known is not None and known.mode != mode:
            raise self._conflict(group, known.mode, mode)
        spec = f"{mode}|{' || '.join(parsed) or '*'}"
        pairs = [f"~g:{group}", spec]
        if mode == "clustering" or member is not None:
            target = self.target(group, member if mode == "broadcasting" else None).queue
            pairs += [target, f"{group}|{spec}"]
        yield Batch([self._subscription(s, ["add", *pairs]) for s in range(self.settings.shards)])
        self._cache.clear()

    def _conflict(self, group: str, stored: str, asked: str) -> GroupConflict:
        return GroupConflict(
            f"group {group!r} is subscribed to topic {self.name!r} in {stored} mode, not "
            f"{asked}: consume it without mode= (the subscription decides) or with "
            f"mode={stored!r}, or unsubscribe the group first"
        )

    def consumer_queue(self, group: str, mode: str | None, member: str) -> Flow[QueueOps]:
        """The queue a consumer of ``group`` consumes (see :meth:`join`)."""
        _, ops = yield from self.join(group, mode, member)
        return ops

    def join(self, group: str, mode: str | None, member: str) -> Flow[tuple[str, QueueOps]]:
        """The mode and queue of a consumer of ``group``. A subscribed group's stored mode
        decides (``mode`` None), and an explicit ``mode`` that differs raises
        GroupConflict; a group not subscribed yet is subscribed (tags "*") in ``mode``,
        by default clustering. A broadcasting member gets a queue of its own, which
        receives what is published from then on."""
        if mode is not None and mode not in MODES:
            raise InvalidArgument(f"mode must be one of {MODES}, got {mode!r}")
        subs = yield from self.subscriptions()
        known = {s.group: s for s in subs}.get(group)
        if known is not None and mode is not None and known.mode != mode:
            raise self._conflict(group, known.mode, mode)
        mode = known.mode if known is not None else mode or "clustering"
        tags = known.tags if known is not None else "*"
        if known is None or mode == "broadcasting":
            yield from self.subscribe(group, mode=mode, tags=tags, member=member)
        return mode, self.group_queue(group, member if mode == "broadcasting" else None)

    def unsubscribe(self, group: str, member: str | None = None) -> Flow[bool]:
        """Drop a group's subscription (with ``member``: only that broadcasting member's
        queue) and delete the queues it had, with their messages."""
        group = validate.check_name(group, "group")
        entries = yield from self._entries(0)
        prefix = f"{self.name}:{group}"
        if member is None:
            fields = [
                t for t in entries if t in (f"~g:{group}", prefix) or t.startswith(prefix + ":")
            ]
        else:
            fields = [t for t in entries if t == f"{prefix}:{member_token(member)}"]
        if not fields:
            return False
        yield from self.drop(fields)
        return True

    def drop(self, fields: Sequence[str]) -> Flow[None]:
        """Drop subscription entries (and delete the queues of the targets among them)."""
        step = 2 * MAX_TARGETS  # entries one subscription call drops (subscription-2.lua)
        yield Batch(
            [
                self._subscription(s, ["drop", *fields[i : i + step]])
                for s in range(self.settings.shards)
                for i in range(0, len(fields), step)
            ]
        )
        self._cache.clear()
        yield self.delete_queues([f for f in fields if not f.startswith("~")])

    def delete_queues(self, targets: Sequence[str]) -> Batch:
        """Delete the data of target queues (every shard; the fences and counts too)."""
        cmds = []
        for target in targets:
            keys = self._target_keys(target)
            for s in range(self.settings.shards):
                k = keys.shard(s)
                # UNLINK: a group's queue may be large; the server frees it in the background.
                cmds.append(
                    Cmd(
                        (
                            "UNLINK",
                            *k.data(),
                            *(k.lease, k.fence, k.kfence, k.krate, k.counts, k.control),
                        )
                    )
                )
        return Batch(cmds, parse=lambda _: None)

    def target_queue(self, target: str) -> QueueOps:
        """The operations of a target queue, by its name (from :meth:`targets`)."""
        return QueueOps.of_keys(
            self._target_keys(target),
            self._queue_settings,
            self.limit,
            cross_slot=self.cross_slot,
            epoch=self.epoch,
            on_gone=self.on_gone,
        )

    def _target_keys(self, target: str) -> QueueKeys:
        if not target.startswith(self.name + ":"):
            raise InvalidArgument(f"{target!r} is not a queue of topic {self.name!r}")
        return QueueKeys(self.prefix, target, tag=self.name, sub=target[len(self.name) + 1 :])

    def _entries(self, shard: int) -> Flow[dict[str, str]]:
        """A topic shard's subscription entries (QueueGone when the topic is gone)."""
        read = Cmd(("HGETALL", self.keys.subs(shard)))
        if not self.epoch:
            raw = yield read
        else:
            held, raw = yield Batch([Cmd(("GET", self.keys.epoch(shard))), read])
            if held is None or text(held) != self.epoch:
                raise self.gone(f"a read of the subscriptions of {self.name!r}")
        return {text(k): text(v) for k, v in pairs(raw)}

    def subscriptions(self) -> Flow[list[Subscription]]:
        """Every group subscribed to the topic, sorted by group."""
        entries = yield from self._entries(0)
        out = []
        for field, spec in entries.items():
            if field.startswith("~g:"):
                mode, tags = spec.split("|", 1)
                out.append(Subscription(field[3:], mode, tags))
        return sorted(out, key=lambda s: s.group)

    def targets(self) -> Flow[dict[str, tuple[str, str, float]]]:
        """Every target queue: name -> (group, mode, subscribed at (seconds))."""
        entries = yield from self._entries(0)
        out = {}
        for field, spec in entries.items():
            if not field.startswith("~"):
                group, mode, _tags, since = _target_spec(spec)
                out[field] = (group, mode, int(since) / 1000)
        return out

    def backlog(self) -> Flow[list[GroupBacklog]]:
        """Every group queue of the topic with its counts, sorted by queue."""
        entries = yield from self._entries(0)
        targets = sorted((f, _target_spec(v)) for f, v in entries.items() if not f.startswith("~"))
        out = []
        for target, (group, mode, tags, _) in targets:
            stats = yield self.target_queue(target).stats()
            out.append(GroupBacklog(group, mode, tags, target, stats))
        return out

    def _shard_subs(self, shard: int) -> Flow[_Shard]:
        entries = yield from self._entries(shard)
        targets = []
        for field, spec in sorted(entries.items()):
            if not field.startswith("~"):
                _group, _mode, tags, _since = _target_spec(spec)
                targets.append((field, tag_filter(validate.check_tags(tags))))
        if len(targets) > MAX_TARGETS:
            raise InvalidArgument(f"topic {self.name!r} has over {MAX_TARGETS} group queues")
        return _Shard(entries.get("~v", "0").encode(), tuple(targets))

    # -- publishing ------------------------------------------------------------------------

    def prepare(self, item: Any) -> codec.Outgoing:
        msg = item if isinstance(item, Message) else Message(item)
        return codec.prepare(msg, ordered=self.settings.ordered, limit=self.limit)

    def shard_for(self, routing: str) -> int:
        return self._router.shard_for(routing)

    def _targets(self, shard: int, subs: _Shard) -> tuple[list[str], list[Any]]:
        """What a publish to ``shard`` names of each group queue: its keys there, and its
        tag filter and wake channel."""
        keys: list[str] = []
        args: list[Any] = []
        for target, filter_ in subs.targets:
            shard_keys = self._target_keys(target).shard(shard)
            keys += (getattr(shard_keys, k) for k in self.target_key_names)
            args += (filter_, f"{self.prefix}:wake:{target}")
        return keys, args

    def _publish_call(self, shard: int, subs: _Shard, outs: Sequence[codec.Outgoing]) -> Call:
        targets, routes = self._targets(shard, subs)
        keys: list[str] = [self.keys.subs(shard), self.keys.epoch(shard), *targets]
        args: list[Any] = [
            self.epoch,
            subs.version,
            self._window_ms,
            len(subs.targets),
            self.conc,
            *routes,
        ]
        for o in outs:  # a keyed message's routing is its key, its delay and priority 0
            args += (o.id, o.routing if self.conc else o.delay_ms, o.priority, o.tag, o.body)
        return Call(_PUBLISH, keys, args)

    def publish(self, outs: Sequence[codec.Outgoing]) -> Flow[int]:
        """Add each message to every subscribed group whose tags match it (if absent in
        that group); returns the copies added."""
        if len(outs) > validate.MAX_ITEMS:
            raise InvalidArgument(f"at most {validate.MAX_ITEMS} messages per call")
        by_shard: dict[int, list[codec.Outgoing]] = defaultdict(list)
        for o in outs:
            by_shard[self.shard_for(o.routing)].append(o)
        added = 0
        for _ in range(STALE_RETRIES):
            for shard in by_shard:
                if shard not in self._cache:
                    self._cache[shard] = yield from self._shard_subs(shard)
            jobs = [
                (shard, part)
                for shard, group in by_shard.items()
                for targets in [len(self._cache[shard].targets)]
                for part in chunks(
                    group, body_size, publish_chunk(targets), PUSH_BYTES // max(targets, 1)
                )
            ]
            replies = yield Batch(
                [self._publish_call(s, self._cache[s], chunk) for s, chunk in jobs]
            )
            stale: dict[int, list[codec.Outgoing]] = defaultdict(list)
            for (shard, chunk), reply in zip(jobs, replies, strict=True):
                if reply == STALE:
                    self._cache.pop(shard, None)
                    stale[shard] += chunk
                else:
                    self.refused(reply, f"publish to {self.name!r}")
                    added += int(reply)
            if not stale:
                return added
            by_shard = stale
        raise_for(STALE, f"publish to {self.name!r}: subscriptions kept changing")
        return added

    def commit(self, shard: int, staged: ShardKeys, msg_id: str, token: str, tag: str) -> Flow[int]:
        """Publish a prepared message of the topic's staging queue (``staged``: its keys
        on ``shard``) to every group queue whose tags match ``tag``, and mark it decided,
        in one script (lua/transaction-publish-17.lua); the reply is transaction-settle's code."""
        context = f"commit of {msg_id!r} to {self.name!r}"
        for _ in range(STALE_RETRIES):
            subs = self._cache.get(shard)
            if subs is None:
                subs = self._cache[shard] = yield from self._shard_subs(shard)
            targets, routes = self._targets(shard, subs)
            reply = yield Call(
                _TRANSACTION_PUBLISH,
                [
                    self.keys.subs(shard),
                    self.keys.epoch(shard),
                    staged.msgs,
                    staged.half,
                    staged.txs,
                    staged.decided,
                    staged.counts,
                    *targets,
                ],
                [
                    self.epoch,
                    subs.version,
                    msg_id,
                    token,
                    tag,
                    self._window_ms,
                    len(subs.targets),
                    self.conc,
                    *routes,
                ],
            )
            if reply == STALE:
                self._cache.pop(shard, None)
                continue
            self.refused(reply, context)
            return int(reply)
        raise_for(STALE, f"{context}: subscriptions kept changing")
        return 0  # not reached: raise_for raises STALE's error


# -- topics under a prefix ------------------------------------------------------------------


def open_topic(prefix: str, name: str, asked: dict[str, Any]) -> Flow[tuple[TopicSettings, str]]:
    """Store a new topic's settings (or read the stored ones) and register it; the
    settings and the topic's epoch token (see :func:`~.opening.open_stored`)."""
    validate.check_name(name, "topic name")
    keys = TopicKeys(prefix, name)
    opened: tuple[TopicSettings, str] = yield from open_stored(
        keys.meta, topic_registry_key(prefix), name, asked, TopicSettings, "topic", keys.epoch
    )
    return opened


def read_topic(prefix: str, name: str) -> Flow[tuple[TopicSettings, str] | None]:
    """The settings and epoch token of a registered topic, or None; never creates one."""
    validate.check_name(name, "topic name")
    found: tuple[TopicSettings, str] | None = yield from read_stored(
        TopicKeys(prefix, name).meta, topic_registry_key(prefix), name, TopicSettings, "topic"
    )
    return found


def topic_names(prefix: str) -> Cmd:
    return Cmd(("SMEMBERS", topic_registry_key(prefix)), lambda raw: sorted(text(n) for n in raw))
