"""A queue's operations on messages named by id, or popped (pure: no I/O).

Each finds the shard of its messages first (:func:`locate`: known at once on a
concurrent queue, asked of the server on an ordered one, whose messages are routed by
key), then makes one of :class:`~.ops.QueueOps`'s calls there: ack, nack and extend a
delivery; reschedule, remove, read or look for a message.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import repeat

from ..errors import InvalidArgument, OrderedQueueError
from ..message import Message
from . import codec, delivered, reasons, steering, validate
from .calls import Batch, Cmd, Flow
from .keys import held_name
from .queue import QueueOps

# Where a delivery is: (shard, id, delivery token, lease token).
Where = tuple[int, str, str, str]


def locate(ops: QueueOps, ids: Sequence[str], *, held: bool = False) -> Flow[list[int]]:
    """The shard holding each id (an unknown id maps to its hash shard). Ordered queues
    route by key, so this asks every shard (one round trip for all the ids). ``held``:
    a debounced copy held for an id (lua/lib/debounce.lua) counts too (not for a
    delivery: a held copy is not one)."""
    homes = [ops.home(i) for i in ids]
    unknown = [i for i, h in zip(ids, homes, strict=True) if h is None]
    where: dict[str, int] = {}
    if unknown:
        probes = [
            (shard, msg_id, field)
            for shard in range(ops.settings.shards)
            for msg_id in unknown
            for field in ((msg_id, held_name(msg_id)) if held else (msg_id,))
        ]
        hits = yield Batch(
            [Cmd(("HEXISTS", ops.shard_keys[shard].msgs, f)) for shard, _, f in probes]
        )
        for (shard, msg_id, _), hit in zip(probes, hits, strict=True):
            if hit:
                where.setdefault(msg_id, shard)
    return [
        h if h is not None else where.get(i, ops.shard_for(i))
        for i, h in zip(ids, homes, strict=True)
    ]


def _delivery(ops: QueueOps, msg: Message | str) -> tuple[int | None, str, str, str]:
    """(shard or None when it must be located, id, delivery token, lease token)."""
    if isinstance(msg, Message):
        return ops.shard_of(msg), msg.id or "", msg.token or "", msg.lease or ""
    msg_id = validate.check_id(msg)
    return ops.home(msg_id), msg_id, "", ""


def located(ops: QueueOps, msgs: Iterable[Message | str]) -> Flow[list[Where]]:
    """(shard, id, delivery token, lease token) of popped messages or bare ids."""
    items = [_delivery(ops, m) for m in msgs]
    missing = [msg_id for shard, msg_id, _, _ in items if shard is None]
    found = iter((yield from locate(ops, missing)) if missing else ())
    return [
        (next(found) if shard is None else shard, msg_id, token, lease)
        for shard, msg_id, token, lease in items
    ]


# -- deliveries ----------------------------------------------------------------------------


def ack_many(ops: QueueOps, msgs: Iterable[Message | str]) -> Flow[int]:
    """Ack deliveries (popped messages or ids; one round trip); returns how many."""
    items = validate.check_items(msgs, "ack_many()")
    if not items:
        return 0
    if all(map(isinstance, items, repeat(Message))):  # a consumer's batch: no lookup
        return sum((yield Batch(ops.ack_calls(items))))
    groups: dict[tuple[int, str], list[str]] = defaultdict(list)
    for shard, msg_id, token, lease in (yield from located(ops, items)):
        groups[(shard, lease)] += (msg_id, token)
    return sum((yield Batch(ops.kind.ack_calls(groups))))


def nack(
    ops: QueueOps, msg: Message | str, *, delay: float = 0.0, mode: str = "retry"
) -> Flow[bool]:
    """Give a delivery back after ``delay`` seconds (mode "retry"), dead-letter it
    (mode "dead"), or give it back unhandled without counting the attempt (mode
    "back"); False if the delivery is no longer current."""
    delay = validate.check_seconds(delay, "delay")
    if mode not in ("retry", "dead", "back"):
        raise InvalidArgument(f"nack mode must be 'retry', 'dead' or 'back', got {mode!r}")
    [(shard, msg_id, token, lease)] = yield from located(ops, [msg])
    back, buried = yield ops.kind.nack_call(shard, msg_id, token, lease, delay, mode)
    return bool(back + buried > 0)


def extend(ops: QueueOps, msg: Message | str, timeout: float) -> Flow[bool]:
    """Set the delivery's visibility deadline to now + ``timeout`` seconds (0: it is
    given back at once, as when its visibility runs out; Dyno's setUnackTimeout)."""
    timeout = validate.check_seconds(timeout, "timeout")
    [(shard, msg_id, token, lease)] = yield from located(ops, [msg])
    extended: bool = yield ops.extend_call(shard, msg_id, token, lease, timeout)
    return extended


# -- messages --------------------------------------------------------------------------------


def reschedule(ops: QueueOps, msg_id: str, *, delay: float) -> Flow[bool]:
    if ops.settings.ordered:
        raise OrderedQueueError(
            "ordered queues deliver in push order: reschedule "
            "is refused (remove and push again instead)"
        )
    delay = validate.check_seconds(delay, "delay")
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(ops, [msg_id])
    return bool((yield ops.reschedule_call(shard, msg_id, delay)))


def remove(ops: QueueOps, msg_id: str) -> Flow[bool]:
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(ops, [msg_id], held=True)
    return bool((yield ops.kind.remove_call(shard, msg_id)))


def cancel(ops: QueueOps, msg_id: str) -> Flow[bool]:
    """Cancel a message: one that waits is taken off (it never runs), one that runs is
    asked to stop (its handler hears it: Message.cancelled), and either ends "cancelled"
    (counted, never delivered again). False when it neither waits nor runs."""
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(ops, [msg_id], held=True)
    return bool((yield ops.kind.cancel_call(shard, msg_id)))


def get(ops: QueueOps, msg_id: str) -> Flow[Message | None]:
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(ops, [msg_id], held=True)
    [found] = yield from stored(ops, [(shard, msg_id)], held=bool(ops.settings.ordered))
    return found


def stored(
    ops: QueueOps, where: Sequence[tuple[int, str]], *, held: bool = False
) -> Flow[list[Message | None]]:
    """The stored messages at (shard, id), with their attempts and failure (None for
    an id that is gone). ``held``: an id with no message in its shard but a debounced
    copy held for it (an ordered queue's, lua/lib/debounce.lua) reads as that copy."""
    fields = ("msgs", "dlv", "why")
    checks = ops.epoch_checks((shard for shard, _ in where), f"read of {ops.name!r}")
    reads: list[Cmd] = []
    size = 6 if held else 5
    for shard, msg_id in where:
        keys = ops.shard_keys[shard]
        reads += [Cmd(("HGET", getattr(keys, f), msg_id)) for f in fields]
        reads.append(Cmd(("ZSCORE", keys.unack, msg_id)))
        reads.append(Cmd(("HGET", keys.control, f"p:{msg_id}")))
        if held:
            reads.append(Cmd(("HGET", keys.msgs, held_name(msg_id))))
    raw = (yield Batch([*checks, *reads]))[len(checks) :]
    out: list[Message | None] = []
    for k, (shard, msg_id) in enumerate(where):
        record, state, why, in_flight, progress = raw[size * k : size * k + 5]
        if record is None and held:
            record = raw[size * k + 5]
        if record is None:
            out.append(None)
            continue
        attempts = delivered.attempts_of(state, in_flight is not None)
        m = codec.readable(msg_id, record, shard, attempts, limit=ops.limit)
        m.failure = reasons.failure(why)
        if in_flight is not None:
            m.reported = steering.progress(progress)
        out.append(m)
    return out


def contains(ops: QueueOps, msg_id: str) -> Flow[bool]:
    msg_id = validate.check_id(msg_id)
    [shard] = yield from locate(ops, [msg_id], held=True)
    checks = ops.epoch_checks([shard], f"contains on {ops.name!r}")
    msgs = ops.shard_keys[shard].msgs
    *_, found, held = yield Batch(
        [*checks, Cmd(("HEXISTS", msgs, msg_id)), Cmd(("HEXISTS", msgs, held_name(msg_id)))]
    )
    return bool(found or held)
