"""The asyncio backend: runs the core's requests on a redis.asyncio client.

The twin of :mod:`dynoq.backend.runner`, with the same rules: every script call sends
``EVALSHA`` and loads the script on ``NOSCRIPT``; a batch's replies are put together by
the same pure functions (:func:`dynoq.backend.runner.finish`); every redis-py exception
is translated to a DynoqError on the way out. The client is made lazily, in the running
event loop, on first use: :func:`dynoq.asyncio.connect` does no I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import NoScriptError

from ..._core.calls import Batch, Call, Cmd, Request, Script, Wake
from ..._core.pool import PoolLimits
from ..._core.retry import RetryWindow
from ..._core.timeouts import Timeouts, wait_steps
from ...backend.bounds import dropped
from ...backend.errors import CLIENT_ERRORS, refused_load, translate
from ...backend.pools import limits_of
from ...backend.runner import ANY_ERROR, RELOADS, eval_args, finish, load_source, noscript, resent
from ...errors import DynoqError
from .combine import Combining
from .facts import warn_if_evicting
from .wakeup import Hub, Subscription

if TYPE_CHECKING:
    from ..._core.codec import Outgoing
    from ..._core.queue import QueueOps

T = TypeVar("T")

# What opens a client: () -> (client, closer). Called once, in the running loop.
Opener = Callable[[], Awaitable[tuple[Any, Callable[[], Awaitable[None]]]]]
# Sends a batch's commands (and the steps of one WAIT, if any) in one round trip per node.
Sender = Callable[[Any, list[tuple[Any, ...]], list[tuple[int, int]]], Awaitable[list[Any]]]


class AsyncBackend:
    """One redis.asyncio client (or cluster client) and what runs on it. Use it from one
    event loop. ``url``, ``display_url``, ``cross_slot``, ``replicas``, ``plain``,
    ``pool``, ``timeouts`` and ``retry_on`` mean what they mean on
    :class:`dynoq.backend.Backend` (the pool needs no growing here: the one wake-up hub
    is counted in it, see :mod:`.pools`; a cluster client, ``cross_slot=False``, resends
    on its own)."""

    def __init__(
        self,
        opener: Opener,
        *,
        url: str,
        display_url: str,
        send: Sender,
        cross_slot: bool = True,
        replicas: bool = True,
        plain: bool = False,
        connect_options: dict[str, Any] | None = None,
        pool: PoolLimits | None = None,
        timeouts: Timeouts | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._opener = opener
        self._routed = not cross_slot  # a cluster: every command routed by its slot
        self._send = send
        self.url = url
        self.display_url = display_url
        self.cross_slot = cross_slot
        self.replicas = replicas
        self.plain = plain
        self.connect_options = dict(connect_options or {})
        self.pool = pool
        self.timeouts = timeouts or Timeouts()
        self._retry_on = retry_on
        self._window = 0.0 if self._routed else self.timeouts.retry_window
        self._client: Any = None
        self._closer: Callable[[], Awaitable[None]] | None = None
        self._opening: asyncio.Lock | None = None
        self._hub: Hub | None = None
        self._combining = Combining(self.run)
        self.closed = False

    def __repr__(self) -> str:
        return f"<dynoq asyncio backend {self.display_url}>"

    async def client(self) -> Any:
        """The redis.asyncio client, made on first use (for the user's own commands)."""
        return self._client or await self._open()

    async def _open(self) -> Any:
        if self.closed:
            raise DynoqError("this client is closed; connect again")
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._client is None:
                try:
                    client, self._closer = await self._opener()
                except CLIENT_ERRORS as exc:
                    raise translate(exc, self.pool) from exc
                self.pool = self.pool or limits_of(client)
                self._hub = Hub(client, self.timeouts)
                self._client = client
                if self.url == "embedded://":  # a private server: now it has an address
                    kw = client.connection_pool.connection_kwargs
                    self.url = self.display_url = f"redis://{kw['host']}:{kw['port']}/0"
                await warn_if_evicting(client, self.display_url)  # once, on first use
        return self._client

    # -- running requests ------------------------------------------------------------------

    async def run(self, request: Call | Cmd | Batch) -> Any:
        """Run one request; its parsed reply. Sent again after a dropped connection or a
        timeout until the retry window is spent, as on the sync backend."""
        window: RetryWindow | None = None
        while True:
            try:
                return await self._attempt(request)
            except ANY_ERROR as exc:
                if dropped(exc, self._retry_on):
                    window = window or RetryWindow(self._window)
                    pause = window.pause(time.monotonic())
                    if pause is not None:
                        await asyncio.sleep(pause)
                        continue
                if isinstance(exc, DynoqError):
                    raise
                raise translate(exc, self.pool, request) from exc

    async def _attempt(self, request: Call | Cmd | Batch) -> Any:
        r = self._client or await self._open()
        if self._routed and type(request) is not Batch:
            # Redis Cluster: one call is a batch of one, so that it follows MOVED,
            # ASK (ASKING on the same connection), NOSCRIPT and TRYAGAIN exactly
            # as batches do (redis.asyncio sends ASKING on another connection).
            [raw] = await self._send(r, self._commands([request]), [])
            if isinstance(raw, Exception):
                raise translate(raw, self.pool, request) from raw
        elif type(request) is Call:
            raw = await self._eval(r, request)
        elif type(request) is Cmd:
            raw = await r.execute_command(*request.args)
        else:
            return await self._batch(r, request)  # type: ignore[arg-type]
        parse = request.parse
        return raw if parse is None else parse(raw)

    async def _eval(self, r: Any, call: Call) -> Any:
        for _ in range(RELOADS):
            try:
                return await r.execute_command(*eval_args(call, self.plain))
            except NoScriptError:
                await self._load(r, call.script)
        return await r.execute_command(*eval_args(call, self.plain))

    async def _load(self, r: Any, script: Script) -> None:
        try:
            await r.script_load(load_source(script, self.plain))
        except CLIENT_ERRORS as exc:
            raise refused_load(exc) from exc

    async def _batch(self, r: Any, batch: Batch) -> Any:
        calls = batch.calls
        if len(calls) == 1 and batch.wait is None:  # one call: no pipeline to build
            out = [await self._attempt(calls[0])]
            return out if batch.parse is None else batch.parse(out)
        waits = wait_steps(batch.wait, self.timeouts.command)
        replies = await self._send(r, self._commands(calls), waits)
        for _ in range(RELOADS):
            redo, scripts = noscript(calls, replies)
            if not redo:
                break
            for s in scripts:  # those calls did not run: load their scripts, send again
                await self._load(r, s)
            resent(
                replies,
                redo,
                await self._send(r, self._commands([calls[i] for i in redo]), waits),
                batch.wait,
            )
        return finish(batch, replies, self.pool)

    def _commands(self, calls: Any) -> list[tuple[Any, ...]]:
        plain = self.plain
        return [eval_args(c, plain) if type(c) is Call else tuple(c.args) for c in calls]

    async def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message, sent with the single pushes other tasks make
        meanwhile (group commit, :mod:`.combine`); 1 pushed, 0 skipped (mode "ensure")."""
        return await self._combining.push(ops, out, mode)

    async def drive(self, flow: Generator[Request, Any, T]) -> T:
        """Run a flow to its end: each request it yields is run and its reply sent back
        (a DynoqError is thrown back into the flow, which may handle it)."""
        reply: Any = None
        error: DynoqError | None = None
        while True:
            try:
                request = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            error = None
            try:
                if isinstance(request, Wake):
                    reply = await self.wait(request.channel, request.timeout)
                else:
                    reply = await self.run(request)
            except DynoqError as exc:
                error, reply = exc, None

    # -- wake-ups ------------------------------------------------------------------------

    async def wait(self, channel: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a wake-up on ``channel``; True when none
        came (see Hub.wait)."""
        await self._open()
        assert self._hub is not None
        return await self._hub.wait(channel, timeout)

    async def subscribe(self, channel: str) -> Subscription:
        """A subscription to ``channel`` that survives dropped connections."""
        await self._open()
        assert self._hub is not None
        sub = Subscription(self._hub, channel)
        await sub.open()
        return sub

    @property
    def open_subscriptions(self) -> int:
        """Subscriptions still open (the consumers' group channels)."""
        return 0 if self._hub is None else self._hub.listeners

    async def close(self) -> None:
        self.closed = True
        if self._hub is not None:
            await self._hub.close()
            self._hub = None
        if self._closer is not None:
            closer, self._closer, self._client = self._closer, None, None
            await closer()


async def send_pipeline(
    r: Any, commands: list[tuple[Any, ...]], waits: list[tuple[int, int]]
) -> list[Any]:
    """Send ``commands`` (then the WAIT steps) in one pipeline; errors come back as
    replies."""
    pipe = r.pipeline(transaction=False)
    for args in commands:
        pipe.execute_command(*args)
    for step in waits:
        pipe.execute_command("WAIT", *step)
    return list(await pipe.execute(raise_on_error=False))
