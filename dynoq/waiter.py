"""Blocking pop without busy polling: pushes PUBLISH on the queue's wake channel.

Each thread keeps one subscription per client, so an idle consumer sends no command while
it waits; it only re-checks the shards when woken or when something may have become due.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import redis

# A wake-up is only a hint: if the subscription's node drops (a cluster failover), the
# waiter forgets it, and the caller re-checks the shards and subscribes afresh.
DROPPED = (redis.ConnectionError, redis.TimeoutError)


class Waiter:
    def __init__(self, redis: Any) -> None:
        self._redis = redis
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def arm(self, channel: str) -> bool:
        """Subscribe this thread to ``channel``; True if newly subscribed (re-check then)."""
        pubsub = getattr(self._local, "pubsub", None)
        if pubsub is None:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            self._local.pubsub = pubsub
            with self._lock:
                self._all.append(pubsub)
        if channel.encode() in pubsub.channels:
            return False
        try:
            pubsub.subscribe(channel)
        except DROPPED:
            self._drop(pubsub)
            time.sleep(0.05)  # the caller re-checks at once: keep that from spinning
        return True

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a wake-up; True if one came."""
        pubsub = self._local.pubsub
        deadline = time.monotonic() + timeout
        woken = False
        while True:
            left = deadline - time.monotonic()
            try:
                msg = pubsub.get_message(timeout=max(left, 0.0) if not woken else 0.0)
            except DROPPED:
                self._drop(pubsub)
                time.sleep(min(max(left, 0.0), 0.1))  # no tight loop while a node is down
                return True
            if msg is None:
                if woken or left <= 0:
                    return woken
                continue
            woken = True  # keep draining what is already there, then return

    def _drop(self, pubsub: Any) -> None:
        self._local.pubsub = None
        with self._lock:
            if pubsub in self._all:
                self._all.remove(pubsub)
        with contextlib.suppress(Exception):  # its connection is already broken
            pubsub.close()

    def release(self) -> None:
        """Close the calling thread's subscription (a thread that stops waiting for good)."""
        pubsub = getattr(self._local, "pubsub", None)
        if pubsub is not None:
            self._drop(pubsub)

    def close(self) -> None:
        with self._lock:
            for pubsub in self._all:
                with contextlib.suppress(Exception):  # best effort on shutdown
                    pubsub.close()
            self._all.clear()
