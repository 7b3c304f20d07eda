"""Handling one popped batch: call the handler, then ack, retry or dead-letter (RocketMQ's
ConsumeMessageConcurrentlyService and ConsumeMessageOrderlyService, minus the threads)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from .hooks import Invoker, StatsCounter
from .message import Message
from .queue import Queue
from .retry import DeadLetter, Retry, RetryPolicy

log = logging.getLogger("dynoq.consumer")

OK, BLOCKED = "ok", "blocked"


class Processor:
    def __init__(self, queue: Queue, handler: Callable[..., Any], invoker: Invoker,
                 policy: RetryPolicy, stats: StatsCounter, *, batch_handler: bool) -> None:
        self.queue = queue
        self.handler = handler
        self.invoker = invoker
        self.policy = policy
        self.stats = stats
        self.batch_handler = batch_handler
        self.max_retries = queue.settings.max_retries

    def concurrently(self, msgs: list[Message]) -> None:
        """Each message on its own: a failure retries only that message, later."""
        if self.batch_handler:
            error, seconds = self.invoker.call(msgs, msgs)
            failed = [(m, error) for m in msgs] if error is not None else []
            ok = msgs if error is None else []
        elif not self.invoker.middleware:
            ok, failed, seconds = self._bare(msgs)
        else:
            ok, failed, seconds = [], [], 0.0
            for msg in msgs:
                err, s = self.invoker.call(msg, (msg,))
                seconds += s
                if err is None:
                    ok.append(msg)
                else:
                    failed.append((msg, err))
        if ok:
            self.queue.ack_many(ok)
        for msg, err in failed:
            self.fail(msg, err)
        self.stats.add(handled=len(ok), failed=len(failed), handler_seconds=seconds)

    def _bare(self, msgs: list[Message]) -> tuple[list[Message],
                                                   list[tuple[Message, Exception]], float]:
        # The no-middleware fast path: one clock read per batch.
        handler = self.handler
        ok: list[Message] = []
        failed: list[tuple[Message, Exception]] = []
        t0 = time.perf_counter()
        for msg in msgs:
            try:
                handler(msg)
            except Exception as exc:  # noqa: BLE001 - the handler's failure is data for retries
                failed.append((msg, exc))
            else:
                ok.append(msg)
        return ok, failed, time.perf_counter() - t0

    def orderly(self, msgs: list[Message]) -> str:
        """In order; a failing message blocks the shard and is retried in place (the
        messages after it go back untouched). BLOCKED if the shard waits for a retry.
        Raises LeaseLost when the shard's lease is gone."""
        batch_error: Exception | None = None
        if self.batch_handler:
            batch_error, seconds = self.invoker.call(msgs, msgs)
            self.stats.add(handler_seconds=seconds)
        done: list[Message] = []
        for i, msg in enumerate(msgs):
            error = batch_error
            if not self.batch_handler:
                error, seconds = self.invoker.call(msg, (msg,))
                self.stats.add(handler_seconds=seconds)
            if error is None:
                done.append(msg)
                continue
            self.stats.add(failed=1)
            self._ack(done)
            if self.fail(msg, error):
                for m in msgs[i + 1:]:  # back in their saved places, behind the failed one
                    self.queue.nack(m, delay=0.0)
                return BLOCKED
        self._ack(done)
        return OK

    def _ack(self, msgs: list[Message]) -> None:
        if msgs:
            self.queue.ack_many(msgs)
            self.stats.add(handled=len(msgs))
            msgs.clear()

    def fail(self, msg: Message, error: Exception) -> bool:
        """Retry ``msg`` later, or dead-letter it; True if it will be retried."""
        if isinstance(error, DeadLetter):
            self.queue.dead_letter(msg)
            self.stats.add(dead_lettered=1)
            return False
        if isinstance(error, Retry) and error.delay is not None:
            delay = error.delay
        else:
            delay = self.policy.delay(msg.attempts)
        if not isinstance(error, Retry):
            log.warning("dynoq: handler failed on message %s of %r (attempt %d): %r",
                        msg.id, self.queue.name, msg.attempts, error)
        self.queue.nack(msg, delay=delay)
        if msg.attempts > self.max_retries:  # the nack script dead-lettered it
            self.stats.add(dead_lettered=1)
            return False
        self.stats.add(retried=1)
        return True
