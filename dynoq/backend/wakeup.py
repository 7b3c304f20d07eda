"""Wake-up subscriptions: blocking without polling.

Every transition that makes a message deliverable PUBLISHes on the queue's wake channel.
A thread blocked in ``pop(wait=...)`` keeps one subscription per client (:class:`Waiter`),
so an idle consumer sends no command while it waits; it re-checks the shards only when
woken or when something may have become due. Consumers follow their group's channel with
a :class:`Subscription`. A wake-up is only a hint: when a subscription's connection drops
(a restart, a cluster failover) it is dropped and made again, and the caller re-checks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, MutableSet
from typing import Any

from .errors import DROPPED, translate

RESUBSCRIBE_PAUSE = 0.1  # seconds between attempts while the server is away
# What redis-py raises when another thread (Client.close) closes the socket a wait is on
# (select() on a closed descriptor): treated as a dropped connection.
CLOSED_UNDER: tuple[type[BaseException], ...] = (TypeError, ValueError, OSError)


class Waiter:
    """One wake-up subscription per thread, on whatever channels the thread waits on.
    ``hold`` is called before a subscription takes a connection for good (the backend
    makes room for it in the pool)."""

    def __init__(self, redis: Any, hold: Callable[[], None] | None = None) -> None:
        self._redis = redis
        self._hold = hold
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def wait(self, channel: str, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a wake-up on ``channel``. True ("quiet")
        when the whole time passed with nothing published on a subscription that was
        live throughout. Returns False at once when the thread was not yet subscribed (a
        push may have slipped in before the subscription: the caller checks again)."""
        return self._arm(channel) and self._wait(timeout)

    def _arm(self, channel: str) -> bool:
        """True when already subscribed to ``channel`` (so waiting is safe)."""
        pubsub = getattr(self._local, "pubsub", None)
        if pubsub is None:
            if self._hold is not None:
                self._hold()
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            self._local.pubsub = pubsub
            with self._lock:
                self._all.append(pubsub)
        if channel.encode() in pubsub.channels:
            return True
        try:
            pubsub.subscribe(channel)
        except DROPPED:
            self._drop(pubsub)
            time.sleep(RESUBSCRIBE_PAUSE)  # the caller re-checks at once: no spinning
        return False

    def _wait(self, timeout: float) -> bool:
        pubsub = self._local.pubsub
        deadline = time.monotonic() + timeout
        woken = False
        while True:
            left = deadline - time.monotonic()
            try:
                msg = pubsub.get_message(timeout=max(left, 0.0) if not woken else 0.0)
            except (*DROPPED, *CLOSED_UNDER):
                self._drop(pubsub)
                time.sleep(min(max(left, 0.0), RESUBSCRIBE_PAUSE))  # no tight loop
                return False
            if msg is None:
                if woken or left <= 0:
                    return not woken
                continue
            woken = True  # drain what is already there, then return

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

    @property
    def open_count(self) -> int:
        with self._lock:
            return len(self._all)

    def close(self) -> None:
        with self._lock:
            for pubsub in self._all:
                with contextlib.suppress(Exception):  # best effort on shutdown
                    pubsub.close()
            self._all.clear()


class Subscription:
    """A subscription to one channel that survives dropped connections; ``hold`` and
    ``registry`` as for :class:`Waiter` (the registry counts the open ones)."""

    def __init__(self, redis: Any, channel: str, hold: Callable[[], None] | None = None,
                 registry: MutableSet[Subscription] | None = None) -> None:
        self._redis = redis
        self._channel = channel
        self._hold = hold
        self._pubsub: Any = None
        try:
            self._connect()
        except DROPPED as exc:
            raise translate(exc) from exc
        if registry is not None:
            registry.add(self)

    def _connect(self) -> bool:
        if self._hold is not None:
            self._hold()
        pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self._channel)
            pubsub.get_message(timeout=1.0)  # the confirmation: subscribed from now on
        except BaseException:
            with contextlib.suppress(Exception):
                pubsub.close()
            raise
        self._pubsub = pubsub
        return True

    def get(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for messages; True when one or more came (a burst
        counts once), or when the connection was lost and made again (anything may have
        happened meanwhile)."""
        if self._pubsub is None:
            time.sleep(min(timeout, RESUBSCRIBE_PAUSE))
            try:
                return self._connect()
            except DROPPED:
                return False
        try:
            if self._pubsub.get_message(timeout=timeout) is None:
                return False
            while self._pubsub.get_message(timeout=0.0) is not None:
                pass
            return True
        except (*DROPPED, *CLOSED_UNDER):
            self.close()
            return False

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                self._pubsub.close()
            self._pubsub = None
