"""Wake-up subscriptions: blocking without polling.

Every transition that makes a message deliverable PUBLISHes on the queue's wake channel.
A thread blocked in ``pop(wait=...)`` keeps one subscription per client (:class:`Waiter`),
so an idle consumer sends no command while it waits; it re-checks the shards only when
woken or when something may have become due. Consumers follow their group's channel with
a :class:`Subscription`. A wake-up is only a hint: when a subscription's connection drops
(a restart, a cluster failover) it is dropped and made again, and the caller re-checks.
A subscription is quiet by design, so a dead path (half-open: nothing ever comes back)
looks like a quiet channel: a subscription quiet for a while sends a PING and is dropped
when no answer comes in time (:class:`dynoq._core.timeouts.Liveness`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, MutableSet
from typing import Any

import redis

from .._core.timeouts import Liveness, Timeouts
from .errors import DROPPED, translate

RESUBSCRIBE_PAUSE = 0.1  # seconds between attempts while the server is away
# What redis-py raises when another thread (Client.close) closes the socket a wait is on
# (select() on a closed descriptor): treated as a dropped connection.
CLOSED_UNDER: tuple[type[BaseException], ...] = (TypeError, ValueError, OSError)


def listen(pubsub: Any, live: Liveness, timeout: float) -> bool | None:
    """Read ``pubsub`` for up to ``timeout`` seconds, keeping it alive: True when a
    published message came (what is already waiting after it is drained too), False when
    nothing did, None when the connection did not answer a PING in time (dead). Raises what
    redis-py raises for a dropped connection."""
    deadline = time.monotonic() + timeout
    woken = False
    while True:
        now = time.monotonic()
        if live.ping_due(now):
            pubsub.ping()
            live.pinged(now)
        wait = 0.0 if woken else min(max(deadline - now, 0.0), live.next_check(now))
        msg = pubsub.get_message(timeout=wait)
        now = time.monotonic()
        if msg is not None:
            live.heard(now)
            woken = woken or msg.get("type") in ("message", "pmessage")
            continue
        if live.dead(now):
            return None
        if woken or now >= deadline:
            return woken


class Waiter:
    """One wake-up subscription per thread, on whatever channels the thread waits on.
    ``hold`` is called before a subscription takes a connection for good (the backend
    makes room for it in the pool); ``timeouts`` bound its liveness check."""

    def __init__(
        self, redis: Any, hold: Callable[[], None] | None = None, timeouts: Timeouts | None = None
    ) -> None:
        self._redis = redis
        self._hold = hold
        self._quiet = (timeouts or Timeouts()).subscription
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
            self._local.live = Liveness(self._quiet, self._quiet, time.monotonic())
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
        started = time.monotonic()
        try:
            outcome = listen(pubsub, self._local.live, timeout)
        except (*DROPPED, *CLOSED_UNDER):
            outcome = None
        if outcome is None:
            self._drop(pubsub)
            left = timeout - (time.monotonic() - started)
            time.sleep(min(max(left, 0.0), RESUBSCRIBE_PAUSE))  # no tight loop
            return False
        return not outcome

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
    """A subscription to one channel that survives dropped connections; ``hold``,
    ``registry`` (which counts the open ones) and ``timeouts`` as for :class:`Waiter`."""

    def __init__(
        self,
        redis: Any,
        channel: str,
        hold: Callable[[], None] | None = None,
        registry: MutableSet[Subscription] | None = None,
        timeouts: Timeouts | None = None,
    ) -> None:
        self._redis = redis
        self._channel = channel
        self._hold = hold
        self._quiet = (timeouts or Timeouts()).subscription
        self._pubsub: Any = None
        self._live = Liveness(self._quiet, self._quiet, time.monotonic())
        try:
            self._connect()
        except DROPPED as exc:
            raise translate(exc) from exc
        if registry is not None:
            registry.add(self)

    def _connect(self) -> bool:
        if self._hold is not None:
            self._hold()
        # Subscribe messages are read (listen() counts them as signs of life, not as
        # wake-ups): the first is the confirmation this waits for.
        pubsub = self._redis.pubsub()
        try:
            pubsub.subscribe(self._channel)
            # Subscribed from now on; no confirmation within the bound: the path is dead,
            # and this attempt a dropped connection.
            msg = pubsub.get_message(timeout=self._quiet)
            if msg is None or msg.get("type") != "subscribe":
                raise redis.TimeoutError(
                    f"no confirmation of the subscription within {self._quiet:g}s"
                )
        except BaseException:
            with contextlib.suppress(Exception):
                pubsub.close()
            raise
        self._pubsub = pubsub
        self._live = Liveness(self._quiet, self._quiet, time.monotonic())
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
            outcome = listen(self._pubsub, self._live, timeout)
        except (*DROPPED, *CLOSED_UNDER):
            outcome = None
        if outcome is None:
            self.close()
            return False
        return outcome

    def close(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                self._pubsub.close()
            self._pubsub = None
