"""What becomes of a message whose handler failed (pure: no I/O): retried after a delay,
given back, or dead-lettered, as the consumer's retry policy and the queue's max_retries
decide; logged; and the nack that does it."""

from __future__ import annotations

import logging

from ..message import Message
from . import logs, reasons
from .calls import Call
from .logcontext import fields as delivery
from .queue import QueueOps
from .retry import DeadLetter, RateLimited, Retry, RetryPolicy

log = logging.getLogger("dynoq.consumer")


def nack_mode(msg: Message, error: BaseException, policy: RetryPolicy) -> tuple[str, float]:
    """(nack mode, delay) for a failed message: DeadLetter dead-letters now, RateLimited
    gives it back, Retry(delay) picks the delay, anything else takes the policy's next
    delay; past the policy's own max_retries it is dead-lettered. The policy is the
    message's own (``policy.of``: a task's, on a task queue)."""
    if isinstance(error, DeadLetter) or msg.cancelled:
        return "dead", 0.0  # a cancelled one: its nack ends it cancelled (lua/lib/control.lua)
    if isinstance(error, RateLimited):
        return "back", error.delay
    policy = policy.of(msg)
    if policy.spent(msg.attempts):
        return "dead", 0.0
    if isinstance(error, Retry):
        return "retry", policy.delay(msg.attempts) if error.delay is None else error.delay
    return "retry", policy.delay(msg.attempts)


def buries(msg: Message, error: BaseException, policy: RetryPolicy, max_retries: int) -> bool:
    """Whether the nack of this failure dead-letters the message: by its mode, or past
    the queue's ``max_retries`` (as nack-10.lua decides), so a handler can end what
    depends on it (a flow's step) before the nack."""
    mode, _ = nack_mode(msg, error, policy)
    return mode == "dead" or (mode == "retry" and msg.attempts > max_retries)


def on_failure(
    msg: Message, error: BaseException, policy: RetryPolicy, queue: str
) -> tuple[str, float]:
    """:func:`nack_mode`, logged: a failure past the policy's retries, or one that is
    retried (Retry, RateLimited and DeadLetter say what they want: not logged here)."""
    mode, delay = nack_mode(msg, error, policy)
    if msg.cancelled:
        log.info("dynoq: message %s of %r was cancelled while it ran", msg.id, queue)
        return mode, delay
    if isinstance(error, (DeadLetter, RateLimited)) or (
        mode == "retry" and isinstance(error, Retry)
    ):
        return mode, delay
    if mode == "dead":
        logs.error(
            log,
            logging.WARNING,
            "dynoq: message %s of %r failed its retries "
            "(attempt %d, consumer's max_retries %s): dead-lettered",
            msg.id,
            queue,
            msg.attempts,
            policy.of(msg).max_retries,
            exc=error,
            extra=delivery(queue, msg),
        )
        return mode, delay
    logs.error(
        log,
        logging.WARNING,
        "dynoq: handler failed on message %s of %r (attempt %d)",
        msg.id,
        queue,
        msg.attempts,
        exc=error,
        extra=delivery(queue, msg),
    )
    return mode, delay


def failure_call(
    ops: QueueOps, msg: Message, error: BaseException, policy: RetryPolicy, consumer: str
) -> Call:
    mode, delay = on_failure(msg, error, policy, ops.name)
    why = b"" if mode == "back" else reasons.why(error, consumer)
    return ops.nack_call(msg, delay=delay, mode=mode, why=why)
