"""Transactional messages (DESIGN.md §3.6, RocketMQ's half messages) as pure requests.

A prepared message is stored in its shard's ``msgs`` and ``half`` only, so nothing
delivers, peeks or counts it as waiting (lua/transaction-prepare-5.lua). Its producer commits or
rolls it back by id (lua/transaction-settle-16.lua); one left undecided past its ``check_after``
is claimed by one checker (lua/transaction-claim-13.lua), whose answer is settled with the claim's
token, so a checker that lost its claim decides nothing. The shells are
``dynoq/asyncio/transactions.py`` (the Half handle) and ``dynoq/asyncio/checker.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument, InvalidType, RecordError
from ..message import Message
from . import codec, validate
from .byid import locate
from .calls import Batch, Call, Cmd, Flow, pairs, text
from .lua import script
from .queue import QueueOps
from .topics import TopicOps

_PREPARE, _SETTLE, _CLAIM = (
    script("transaction-prepare"),
    script("transaction-settle"),
    script("transaction-claim"),
)

ANSWERS = ("commit", "rollback", "unknown")  # what a checker's check may return
ASYNC_CHECKER = "dynoq.asyncio's client.checker()"  # where an async def check runs
MAX_CLAIM = 100  # prepared messages one claim call hands out
DONE, SAME, OTHER, NO_SUCH, PUT_OFF, BURIED = 1, 2, 0, 5, 3, 4  # transaction-settle's replies
UNRESOLVED = "transaction unresolved"  # the dead-letter reason after max_checks


@dataclass(frozen=True)
class Claimed:
    """A prepared message handed to one checker until its claim runs out."""

    msg: Message
    checks: int  # checks so far, this one included
    token: str


@dataclass(frozen=True)
class Prepared:
    """A prepared message as the CLI and dashboard list it."""

    id: str
    shard: int
    prepared_at: float  # seconds, server clock
    next_check_at: float  # when a checker may ask about it (or its claim ends)
    checks: int

    def age(self, now: float) -> float:
        return max(0.0, now - self.prepared_at)


def check_after(value: object, what: str = "check_after") -> float:
    """Seconds >= 0 and finite (typed errors otherwise)."""
    return validate.check_seconds(value, what)


def check_max_checks(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"max_checks must be an int, got {type(value).__name__}")
    if value < 1:
        raise InvalidArgument(
            f"max_checks must be at least 1, got {value}: a prepared "
            "message must be checked at least once before it is buried"
        )
    return value


def check_interval(value: object, what: str = "check_interval") -> float:
    """Seconds > 0 and finite (a checker's intervals and its claim's lifetime)."""
    seconds = validate.check_seconds(value, what)
    if seconds <= 0 or not math.isfinite(seconds):
        raise InvalidArgument(f"{what} must be above 0 seconds, got {value!r}")
    return seconds


class TransactionOps:
    """The transaction operations of one queue (``ops``: its :class:`QueueOps`)."""

    def __init__(self, ops: QueueOps) -> None:
        self.ops = ops
        # KEYS lists per shard, built once: prepare and commit are a producer's hot path
        self._prepare_keys = [_PREPARE.key_list(k) for k in ops.shard_keys]
        self._settle_keys = [_SETTLE.key_list(k) for k in ops.shard_keys]

    def prepare(
        self,
        payload: Any,
        *,
        id: str | None,
        key: str | None,
        delay: float,
        priority: int,
        headers: dict[str, Any] | None,
        check_after_s: float,
        tag: str | None = None,
    ) -> tuple[str, int, Call]:
        """(id, shard, the call): the call's reply is True once stored. A resent call of
        a made id that finds it stored was the first attempt's (a made id cannot exist
        before); a given id already stored is refused (InvalidArgument)."""
        wait = check_after(check_after_s)
        out = self.ops.prepare(
            Message(
                payload, id=id, delay=delay, priority=priority, key=key, headers=headers, tag=tag
            )
        )
        shard = self.ops.shard_for(out.routing)
        checked = self.ops.parser("prepare", shard, int)

        def parse(reply: Any) -> bool:
            if checked(reply) == 0 and not out.generated:
                raise InvalidArgument(
                    f"a message with id {out.id!r} is stored in "
                    f"{self.ops.name!r} already: prepare a new id"
                )
            return True

        return (
            out.id,
            shard,
            Call(
                _PREPARE,
                self._prepare_keys[shard],
                [
                    self.ops.epoch,
                    out.id,
                    out.delay_ms,
                    out.priority,
                    out.body,
                    validate.to_ms(wait),
                    out.routing if self.ops.keyed else "",
                ],
                parse,
            ),
        )

    def settle(
        self,
        shard: int,
        msg_id: str,
        what: str,
        *,
        token: str = "",
        interval_s: float = 0.0,
        max_checks: int = 0,
    ) -> Call:
        """Commit, roll back or (a checker) put off one prepared message; the reply is
        transaction-settle's code (DONE, SAME, OTHER, NO_SUCH, PUT_OFF, BURIED)."""
        return Call(
            _SETTLE,
            self._settle_keys[shard],
            [
                self.ops.epoch,
                msg_id,
                what,
                token,
                validate.to_ms(interval_s),
                max_checks,
                self.ops.wake,
                self.ops.kind.conc,
            ],
            self.ops.parser(what, shard, int),
        )

    def settle_flow(
        self,
        shard: int,
        msg_id: str,
        what: str,
        *,
        token: str = "",
        interval_s: float = 0.0,
        max_checks: int = 0,
    ) -> Flow[int]:
        """:meth:`settle` as a flow (a topic's commit needs several steps: TopicTransactionOps)."""
        return int(
            (
                yield self.settle(
                    shard, msg_id, what, token=token, interval_s=interval_s, max_checks=max_checks
                )
            )
        )

    def decided(self, msg_id: str, what: str, reply: int) -> bool:
        """A producer's commit / rollback reply as the Half API's bool."""
        if reply == NO_SUCH:
            raise InvalidArgument(
                f"{msg_id!r} is no prepared message of {self.ops.name!r} "
                "(never prepared, or decided over a day ago): nothing "
                f"to {what}"
            )
        return reply in (DONE, SAME)

    def locate(self, msg_id: str) -> Flow[int]:
        """The shard of a prepared id (ordered queues route by key: asks the server)."""
        msg_id = validate.check_id(msg_id)
        [shard] = yield from locate(self.ops, [msg_id])
        return shard

    def claim(self, shard: int, *, count: int, claim_s: float, max_checks: int, token: str) -> Call:
        """Claim up to ``count`` prepared messages of ``shard`` due for a check."""
        what = f"check claim on shard {shard} of {self.ops.name!r}"
        limit = self.ops.limit

        def parse(reply: Any) -> list[Claimed]:
            self.ops.refused(reply, what)
            out: list[Claimed] = []
            for i in range(0, len(reply), 4):
                m = codec.readable(
                    text(reply[i]), reply[i + 1], shard, int(reply[i + 2]), limit=limit
                )
                out.append(Claimed(m, int(reply[i + 2]), text(reply[i + 3])))
            return out

        return Call(
            _CLAIM,
            _CLAIM.key_list(self.ops.shard_keys[shard]),
            [self.ops.epoch, min(count, MAX_CLAIM), validate.to_ms(claim_s), max_checks, token],
            parse,
        )

    def prepared(self, limit: int = 100) -> Flow[list[Prepared]]:
        """Up to ``limit`` (1..1000) prepared messages, the next to be checked first."""
        limit = validate.check_count(limit, high=validate.MAX_BATCH)
        keys = self.ops.shard_keys
        checks = self.ops.epoch_checks(range(len(keys)), f"prepared of {self.ops.name!r}")
        heads = yield Batch(
            [*checks, *(Cmd(("ZRANGE", k.half, 0, limit - 1, "WITHSCORES")) for k in keys)]
        )
        heads = heads[len(checks) :]
        ranked = sorted(
            (float(score), shard, text(member))
            for shard, head in enumerate(heads)
            for member, score in pairs(head)
        )[:limit]
        if not ranked:
            return []
        raw = yield Batch(
            [
                Cmd(("HGET", getattr(keys[shard], f), msg_id))
                for _, shard, msg_id in ranked
                for f in ("msgs", "txs")
            ]
        )
        out: list[Prepared] = []
        for n, (score, shard, msg_id) in enumerate(ranked):
            record, state = raw[2 * n], raw[2 * n + 1]
            if record is None:
                continue
            out.append(Prepared(msg_id, shard, _enqueued(record), score / 1000, _checks(state)))
        return out

    def counts(self) -> Batch:
        """How many prepared messages each shard holds."""
        keys = self.ops.shard_keys
        return Batch(
            [Cmd(("ZCARD", k.half)) for k in keys], parse=lambda replies: [int(r) for r in replies]
        )


def _checks(state: bytes | None) -> int:
    if not state:
        return 0
    head = text(state).split("|", 1)[0]
    return int(head) if head.isdigit() else 0


def _enqueued(record: bytes) -> float:
    field = record.split(b",", 1)[0].decode()
    return (int(field) if len(field) >= 12 else int(field, 36)) / 1000


def answer(value: object) -> str | None:
    """A check's answer, or None when it is none of the three words (counts as unknown)."""
    return value if isinstance(value, str) and value in ANSWERS else None


def ids_of(claims: Sequence[Claimed]) -> list[str]:
    return [c.msg.id or "" for c in claims]


class TopicTransactionOps(TransactionOps):
    """A topic's transaction operations. Its prepared messages wait in the topic's
    staging keys (``TopicKeys.staging()``, one set per topic shard, under the shard's
    hash tag); a commit publishes one to every matching group queue in one script
    (lua/transaction-publish-17.lua); rollback, checks and burial are the queue's, on the staging
    keys (a buried one stays in the staging dead letters)."""

    def __init__(self, topic: TopicOps) -> None:
        super().__init__(
            QueueOps.of_keys(
                topic.keys.staging(),
                topic.settings.queue_settings(),
                topic.limit,
                cross_slot=topic.cross_slot,
                epoch=topic.epoch,
                on_gone=topic.on_gone,
            )
        )
        self.topic = topic

    def settle_flow(
        self,
        shard: int,
        msg_id: str,
        what: str,
        *,
        token: str = "",
        interval_s: float = 0.0,
        max_checks: int = 0,
    ) -> Flow[int]:
        if what != "commit":
            return (
                yield from super().settle_flow(
                    shard, msg_id, what, token=token, interval_s=interval_s, max_checks=max_checks
                )
            )
        keys = self.ops.shard_keys[shard]
        record = yield Cmd(("HGET", keys.msgs, msg_id))
        tag = ""
        if record is not None:
            try:
                tag = codec.decode(msg_id, record, limit=self.ops.limit).tag or ""
            except RecordError:
                tag = ""  # unreadable: it goes to the groups that take every tag
        return (yield from self.topic.commit(shard, keys, msg_id, token, tag))
