# Generated from dynoq/asyncio/checker.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest cf890bbf28d2c6ab: of the text below, an edit by hand does not match).
"""The transaction checker (RocketMQ's check-back): it asks ``check(msg)`` about prepared
messages their producer left undecided past their ``check_after`` and settles each as
answered (DESIGN.md §3.6).

Each prepared message due for a check is claimed by one checker of the group for
``claim_timeout`` seconds (lua/transaction-claim-13.lua); the answer is settled with the claim's
token (lua/transaction-settle-16.lua), so a checker paused past its claim decides nothing: another
has claimed it, or will. "unknown", a raising ``check`` or any other answer asks again
``check_interval`` seconds later; after ``max_checks`` checks the message is rolled back
into the dead letters (reason: transaction unresolved).

Checker groups are their own namespace: a checker joins no consumer group and holds no
shard lease, so a checker group named like a consumer group conflicts with nothing.
The asyncio shell is written by hand; the sync one is generated from it (scripts/unasync.py).
"""

from __future__ import annotations

from ._core.callables import not_awaitable
import logging
import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

from ._core import transactions, validate
from ._core.callables import refuse_coroutine_function
from .errors import DynoqError, InvalidType
from .message import Message
from .events import join, new_event, spawn, until_stopped, wait_event
from .queue import Queue
from .topic import Topic

log = logging.getLogger("dynoq.checker")

Check = Callable[[Message], Any]
OUTCOMES = ("commit", "rollback", "unknown", "invalid", "error", "stale", "buried")


AWAITS = False


def _answer(check: Check, msg: Message) -> Any:
    """A check's answer, awaited when the check is a coroutine function (the sync
    checker refuses one, and fails an awaitable answer: nothing there awaits it)."""
    v = check(msg)
    return not_awaitable(v, check)


class Checker:
    """Checks a queue's undecided prepared messages. ``start()`` /
    ``stop(timeout)``, or ``run()`` (blocks; stops on SIGINT/SIGTERM). Get
    one with ``client.checker(q, check, group=...)``.

    ``check(msg)`` returns "commit", "rollback" or "unknown" (a coroutine function on
    asyncio is awaited). ``concurrency`` checker loops run at once; each claims up to
    ``batch_size`` due messages per shard at a time, for ``claim_timeout`` seconds; with
    nothing due a loop looks again after ``poll_interval`` seconds. ``observer(queue,
    group, outcome)`` is told each outcome of :data:`OUTCOMES` (e.g.
    ``dynoq.metrics.default_metrics().observe_check``)."""

    def __init__(
        self,
        queue: Queue | Topic,
        check: Check,
        *,
        group: str = "producers",
        check_interval: float = 60.0,
        max_checks: int = 15,
        claim_timeout: float = 30.0,
        poll_interval: float = 1.0,
        concurrency: int = 1,
        batch_size: int = 10,
        instance_id: str | None = None,
        observer: Callable[[str, str, str], None] | None = None,
    ) -> None:
        if not isinstance(queue, (Queue, Topic)):
            raise InvalidType(f"a checker checks a Queue or a Topic, got {type(queue).__name__}")
        if not callable(check):
            raise InvalidType(f"check must be callable, got {type(check).__name__}")
        if not AWAITS:
            refuse_coroutine_function(check, "the check", transactions.ASYNC_CHECKER)
        self.queue = queue
        self.check = check
        self.group = validate.check_name(group, "group")
        self.check_interval = transactions.check_interval(check_interval)
        self.max_checks = transactions.check_max_checks(max_checks)
        self.claim_timeout = transactions.check_interval(claim_timeout, "claim_timeout")
        self.poll_interval = transactions.check_interval(poll_interval, "poll_interval")
        self.concurrency = validate.check_count(concurrency, "concurrency", high=1000)
        self.batch_size = validate.check_count(
            batch_size, "batch_size", high=transactions.MAX_CLAIM
        )
        self.instance_id = instance_id or secrets.token_hex(6)
        self.counts: Counter[str] = Counter()  # outcomes so far (OUTCOMES)
        # told (queue, group, outcome) at each: dynoq.metrics.Metrics.observe_check
        self.observer = observer
        self._stopping = new_event()
        self._workers: list[Any] = []
        self._turn = 0

    def __repr__(self) -> str:
        return f"<dynoq.Checker {self.group!r} of {self.queue.name!r} {self.instance_id}>"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Checker:
        """Start the checker loops (a no-op when they run)."""
        if self._workers:
            return self
        self._stopping.clear()
        for n in range(self.concurrency):
            name = f"dynoq-checker-{self.group}-{n}"
            self._workers.append(spawn(self._loop, name))
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop: each loop finishes the check it is in; False if one was still busy after
        ``timeout`` seconds (its claims run out, and another checker asks again)."""
        self._stopping.set()
        workers, self._workers = self._workers, []
        if not workers:
            return True
        return join(workers, timeout)

    def run(self) -> None:
        """Start, wait until SIGINT/SIGTERM or :meth:`stop`, then stop."""
        try:
            until_stopped(self._stopping, self.start)
        finally:
            self.stop()

    def __enter__(self) -> Checker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return bool(self._workers) and not self._stopping.is_set()

    # -- the work ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                settled = self.check_once()
            except DynoqError as exc:  # the server is away: look again later
                log.warning("checker %s of %r: %s", self.group, self.queue.name, exc)
                settled = 0
            if not settled:
                wait_event(self._stopping, self.poll_interval)

    def check_once(self) -> int:
        """One pass over every shard: claim what is due for a check, ask, settle; returns
        how many prepared messages were asked about (or buried)."""
        transactions, backend = self.queue.transactions, self.queue.backend
        shards = self.queue.settings.shards
        self._turn += 1
        total = 0
        for i in range(shards):
            if self._stopping.is_set():
                break
            shard = (self._turn + i) % shards
            token = f"{self.instance_id}.{secrets.token_hex(4)}"
            claimed = backend.run(
                transactions.claim(
                    shard,
                    count=self.batch_size,
                    claim_s=self.claim_timeout,
                    max_checks=self.max_checks,
                    token=token,
                )
            )
            for c in claimed:
                total += 1
                what = self._ask(c)
                reply = backend.drive(
                    transactions.settle_flow(
                        shard,
                        c.msg.id or "",
                        what,
                        token=c.token,
                        interval_s=self.check_interval,
                        max_checks=self.max_checks,
                    )
                )
                self._count(self._outcome(what, reply))
        return total

    def _ask(self, c: transactions.Claimed) -> str:
        try:
            value = _answer(self.check, c.msg)
        except Exception:
            log.exception(
                "checker %s: check(%r) raised; asking again in %ss",
                self.group,
                c.msg.id,
                self.check_interval,
            )
            self._count("error")
            return "unknown"
        answer = transactions.answer(value)
        if answer is None:
            log.warning(
                "checker %s: check(%r) answered %r, not 'commit', 'rollback' or "
                "'unknown'; asking again in %ss",
                self.group,
                c.msg.id,
                value,
                self.check_interval,
            )
            self._count("invalid")
            return "unknown"
        return answer

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.observer is not None:
            try:
                self.observer(self.queue.name, self.group, outcome)
            except Exception:  # a broken observer must not stop the checks
                log.exception("checker %s: the observer raised", self.group)

    def _outcome(self, what: str, reply: int) -> str:
        if reply == transactions.BURIED:
            log.warning(
                "checker %s: a prepared message of %r is still unresolved after "
                "%d checks: rolled back into the dead letters (%s)",
                self.group,
                self.queue.name,
                self.max_checks,
                transactions.UNRESOLVED,
            )
            return "buried"
        if reply in (transactions.DONE, transactions.PUT_OFF):
            return what
        return "stale"  # its producer decided first, or this claim ran out
