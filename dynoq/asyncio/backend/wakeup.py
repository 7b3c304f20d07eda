"""Wake-up subscriptions for asyncio: blocking without polling.

The rules are those of :mod:`dynoq.backend.wakeup`: a wake-up is a hint, a task that was
not yet subscribed to a channel returns at once and re-checks (a push may have slipped in
before the subscription), and a dropped connection wakes everyone (anything may have
happened meanwhile) and is made again on the next wait, and a quiet connection asks for
a sign of life (a PING) and is dropped when none comes in time, so a dead path is found
(:class:`dynoq._core.timeouts.Liveness`). What differs is the I/O: one pub/sub
connection per backend, read by one task that sets the events of whoever listens on a
channel, instead of one connection per thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ..._core.timeouts import Liveness, Timeouts
from ...backend.errors import DROPPED
from ...errors import ConnectionFailed
from ..events import wait_event
from .cluster import pubsub

RESUBSCRIBE_PAUSE = 0.1  # seconds to wait after a failed subscription (no spinning)
CLOSE_WAIT = 1.0  # seconds close() waits for the reader task to end


class Hub:
    """One pub/sub connection and the listeners on its channels."""

    def __init__(self, redis: Any, timeouts: Timeouts | None = None) -> None:
        self._redis = redis
        self._quiet = (timeouts or Timeouts()).subscription
        self._pubsub: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._subscribed: set[str] = set()
        self._listening: dict[str, set[asyncio.Event]] = {}
        self._lock: asyncio.Lock | None = None
        self.listeners = 0  # persistent listeners (Subscriptions) now open

    async def arm(self, channel: str) -> bool:
        """True when already subscribed to ``channel`` (so waiting on it is safe); else
        subscribe (or fail quietly after a short pause) and return False."""
        if channel in self._subscribed:
            return True
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if channel in self._subscribed:
                return False  # made by another task meanwhile: the caller re-checks
            fresh = self._pubsub is None
            try:
                if fresh:
                    self._pubsub = pubsub(self._redis, ignore_subscribe_messages=True)
                await self._pubsub.subscribe(channel)
            except DROPPED:
                await self._drop()
                await asyncio.sleep(RESUBSCRIBE_PAUSE)
                return False
            self._subscribed.add(channel)
            # A new connection gets a reader of its own: the last one's may still be
            # closing its dead connection (_drop), and would never read this one.
            if fresh or self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read(self._pubsub))
        return False

    def subscribed(self, channel: str) -> bool:
        return channel in self._subscribed

    def listen(self, channel: str) -> asyncio.Event:
        event = asyncio.Event()
        self._listening.setdefault(channel, set()).add(event)
        return event

    def unlisten(self, channel: str, event: asyncio.Event) -> None:
        events = self._listening.get(channel)
        if events is not None:
            events.discard(event)
            if not events:
                del self._listening[channel]

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up on ``channel``. True ("quiet")
        when the whole time passed with nothing published and the connection live
        throughout (a drop wakes every listener); False at once when not yet subscribed
        (the caller checks again first)."""
        if not await self.arm(channel):
            return False
        event = self.listen(channel)
        try:
            return not await wait_event(event, timeout)
        finally:
            self.unlisten(channel, event)

    async def _read(self, pubsub: Any) -> None:
        live = Liveness(self._quiet, self._quiet, time.monotonic())
        try:
            while True:
                now = time.monotonic()
                if live.ping_due(now):
                    await pubsub.ping()
                    live.pinged(now)
                # Never timeout=None: redis-py versions differ on what bounds that read.
                msg = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=live.next_check(now)
                )
                now = time.monotonic()
                if msg is None:
                    if live.dead(now):  # no answer to the PING: a dead path
                        break
                    continue
                live.heard(now)
                if msg.get("type") != "message":
                    continue
                channel = msg["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                for event in self._listening.get(channel, ()):
                    event.set()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a dropped connection: made again on next wait
            pass
        if self._pubsub is pubsub:
            await self._drop()

    async def _drop(self) -> None:
        """Forget the connection and wake every listener (anything may have happened)."""
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed.clear()
        for events in self._listening.values():
            for event in events:
                event.set()
        if pubsub is not None:
            with contextlib.suppress(Exception):  # its connection is already broken
                await pubsub.aclose()

    async def close(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            # Bounded: a client library that swallows the cancellation cannot hang close.
            await asyncio.wait([reader], timeout=CLOSE_WAIT)
        pubsub, self._pubsub = self._pubsub, None
        self._subscribed.clear()
        if pubsub is not None:
            with contextlib.suppress(Exception):  # best effort on shutdown
                await pubsub.aclose()


class Subscription:
    """A subscription to one channel that survives dropped connections (a consumer's
    group channel): messages that come while nobody waits are kept as one flag."""

    def __init__(self, hub: Hub, channel: str) -> None:
        self._hub = hub
        self._channel = channel
        self._event: asyncio.Event | None = None

    async def open(self) -> None:
        self._event = self._hub.listen(self._channel)
        self._hub.listeners += 1
        try:
            await self._hub.arm(self._channel)
        except BaseException:
            await self.close()
            raise
        if not self._hub.subscribed(self._channel):
            await self.close()
            raise ConnectionFailed(
                f"Redis is unreachable: could not subscribe to {self._channel!r}"
            )
        self._event.clear()

    async def get(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for messages; True when one or more came (a
        burst counts once), or when the connection was lost and made again."""
        event = self._event
        if event is None:
            return False
        if not await self._hub.arm(self._channel):
            event.clear()
            return self._hub.subscribed(self._channel)  # made again: re-check all
        came = await wait_event(event, timeout)
        event.clear()
        return came

    async def close(self) -> None:
        if self._event is not None:
            self._hub.unlisten(self._channel, self._event)
            self._hub.listeners -= 1
            self._event = None
