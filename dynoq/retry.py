"""Retry policy and the two exceptions a handler raises to steer it (public; the
implementation lives in ``dynoq._core.retry``, shared with dynoq.asyncio)."""

from ._core.retry import (
    CONCURRENT_RETRY_DELAYS,
    ORDERED_RETRY_DELAYS,
    ROCKETMQ_DELAY_LEVELS,
    DeadLetter,
    RateLimited,
    Retry,
    RetryPolicy,
    backoff,
)

__all__ = [
    "CONCURRENT_RETRY_DELAYS",
    "ORDERED_RETRY_DELAYS",
    "ROCKETMQ_DELAY_LEVELS",
    "DeadLetter",
    "RateLimited",
    "Retry",
    "RetryPolicy",
    "backoff",
]
