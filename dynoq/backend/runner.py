"""The sync backend: runs the core's requests on a redis-py client.

One runner for every call: single scripts and pipelined batches alike send ``EVALSHA``
and load the script on ``NOSCRIPT`` (a restarted server, a promoted replica), and every
redis-py exception is translated to a DynoqError on the way out. Redis Cluster's routing,
batching per node and retries live in :mod:`.cluster`; nothing above this package asks
whether it talks to a cluster, only what the backend can do (:attr:`Backend.cross_slot`,
:attr:`Backend.replicas`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import NoScriptError

from .._core.calls import Batch, Call, Cmd, Request, Script, Wake
from .._core.pool import PoolLimits
from .._core.retry import RetryWindow
from .._core.timeouts import Timeouts, wait_steps
from ..errors import DynoqError
from .bounds import dropped
from .combine import Combining
from .errors import CLIENT_ERRORS, refused_load, translate
from .pools import limits_of, make_room
from .wakeup import Subscription, Waiter

if TYPE_CHECKING:
    from .._core.codec import Outgoing
    from .._core.queue import QueueOps

T = TypeVar("T")
# What a request may end in: redis-py's errors, and DynoqErrors translated from them.
ANY_ERROR: tuple[type[BaseException], ...] = (*CLIENT_ERRORS, DynoqError)


class Backend:
    """One connection pool (or cluster client) and what runs on it. Thread-safe.

    ``url`` is a URL other processes can connect with (secrets included: never print it;
    ``display_url`` is the redacted form). ``cross_slot``: one script may touch keys of
    several hash tags (not on Redis Cluster). ``replicas``: ``WAIT`` means something (not
    in memory). ``plain``: send the scripts without their ``#!lua`` flags line (fakeredis
    reads none; see ``_core/lua.py``). ``timeouts``: the client's bounds; a request that
    fails on a dropped connection or a timeout (or one of ``retry_on``) is sent again
    within ``timeouts.retry_window``, unless the client resends on its own
    (``client_resends``: a cluster client, which also follows MOVED and TRYAGAIN).

    ``pool``: the limits of a pool dynoq built (it grows by what wake-up subscriptions
    hold, see :mod:`.pools`); None for a client the caller built, whose pool is left as
    it is (its limits are read for error messages only).
    """

    def __init__(
        self,
        client: Any,
        *,
        url: str,
        display_url: str,
        closer: Callable[[], None] | None = None,
        cross_slot: bool = True,
        replicas: bool = True,
        plain: bool = False,
        connect_options: dict[str, Any] | None = None,
        pool: PoolLimits | None = None,
        timeouts: Timeouts | None = None,
        retry_on: tuple[type[BaseException], ...] = (),
        client_resends: bool = False,
    ) -> None:
        self.redis = client  # the redis-py client: for the user's own commands
        self.url = url
        self.display_url = display_url
        self.cross_slot = cross_slot
        self.replicas = replicas
        self.plain = plain
        self.connect_options = dict(connect_options or {})
        self.pool = pool or limits_of(client)
        self._grows = pool is not None
        self._room = 0  # connections the pool was grown by, for subscriptions
        self._room_lock = threading.Lock()
        self._subscriptions: weakref.WeakSet[Subscription] = weakref.WeakSet()
        self.timeouts = timeouts or Timeouts()
        self._retry_on = retry_on
        self._window = 0.0 if client_resends else self.timeouts.retry_window
        self._closer = closer or client.close
        self._waiter = Waiter(client, self._hold, self.timeouts)
        self._combining = Combining(self.run)

    def __repr__(self) -> str:
        return f"<dynoq backend {self.display_url}>"

    # -- running requests ------------------------------------------------------------------

    def run(self, request: Call | Cmd | Batch) -> Any:
        """Run one request; its parsed reply. Sent again after a dropped connection or a
        timeout until the retry window is spent (every request is safe to resend: see
        docs/security.md, "What is retried")."""
        window: RetryWindow | None = None
        while True:
            try:
                return self._attempt(request)
            except ANY_ERROR as exc:
                if dropped(exc, self._retry_on):
                    window = window or RetryWindow(self._window)
                    pause = window.pause(time.monotonic())
                    if pause is not None:
                        time.sleep(pause)
                        continue
                if isinstance(exc, DynoqError):
                    raise
                raise translate(exc, self.pool, request) from exc

    def _attempt(self, request: Call | Cmd | Batch) -> Any:
        if type(request) is Call:
            raw = self._eval(request)
        elif type(request) is Cmd:
            raw = self.redis.execute_command(*request.args)
        else:
            return self._batch(request)  # type: ignore[arg-type]
        parse = request.parse
        return raw if parse is None else parse(raw)

    def _eval(self, call: Call) -> Any:
        for _ in range(RELOADS):
            try:
                return self.redis.execute_command(*eval_args(call, self.plain))
            except NoScriptError:
                self._load(call.script)
        return self.redis.execute_command(*eval_args(call, self.plain))

    def _load(self, script: Script) -> None:
        try:
            self.redis.script_load(load_source(script, self.plain))
        except CLIENT_ERRORS as exc:
            raise refused_load(exc) from exc

    def _batch(self, batch: Batch) -> Any:
        calls = batch.calls
        if len(calls) == 1 and batch.wait is None:  # one call: no pipeline to build
            out = [self._attempt(calls[0])]
            return out if batch.parse is None else batch.parse(out)
        replies = self._pipeline(calls, batch.wait)
        for _ in range(RELOADS):
            redo, scripts = noscript(calls, replies)
            if not redo:
                break
            for s in scripts:  # those calls did not run: load their scripts, send again
                self._load(s)
            resent(replies, redo, self._pipeline([calls[i] for i in redo], batch.wait), batch.wait)
        return finish(batch, replies, self.pool)

    def _pipeline(self, calls: Any, wait: tuple[int, int] | None) -> list[Any]:
        pipe = self.redis.pipeline(transaction=False)
        for c in calls:
            if type(c) is Call:
                pipe.execute_command(*eval_args(c, self.plain))
            else:
                pipe.execute_command(*c.args)
        for step in wait_steps(wait, self.timeouts.command):
            pipe.execute_command("WAIT", *step)
        return list(pipe.execute(raise_on_error=False))

    def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message, sent with the single pushes other threads make
        meanwhile (group commit, :mod:`.combine`); 1 pushed, 0 skipped (mode "ensure")."""
        return self._combining.push(ops, out, mode)

    def drive(self, flow: Generator[Request, Any, T]) -> T:
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
                    reply = self.wait(request.channel, request.timeout)
                else:
                    reply = self.run(request)
            except DynoqError as exc:
                error, reply = exc, None

    # -- wake-ups ------------------------------------------------------------------------

    def wait(self, channel: str, timeout: float) -> bool:
        """Block up to ``timeout`` seconds for a wake-up on ``channel``; True when none
        came (see Waiter)."""
        try:
            return self._waiter.wait(channel, timeout)
        except CLIENT_ERRORS as exc:
            raise translate(exc, self.pool) from exc

    def release_thread(self) -> None:
        """Close the calling thread's wake-up subscription (it stops waiting for good)."""
        self._waiter.release()

    @property
    def open_subscriptions(self) -> int:
        return self._waiter.open_count

    def subscribe(self, channel: str) -> Subscription:
        """A subscription to ``channel`` that survives dropped connections."""
        return Subscription(self.redis, channel, self._hold, self._subscriptions, self.timeouts)

    def _hold(self) -> None:
        """A wake-up subscription is about to take a connection for its lifetime: grow
        the pool (one dynoq built) to the most ever held at once (counting this one), so
        that what callers share stays ``max_connections``. Never shrinks: the room is
        bounded by the peak, and a dropped subscription comes back."""
        if not self._grows:
            return
        with self._room_lock:
            held = self._waiter.open_count + len(self._subscriptions) + 1
            if held > self._room:
                make_room(self.redis, held - self._room)
                self._room = held

    def close(self) -> None:
        self._waiter.close()
        self._closer()


# -- a batch's replies: pure, shared with dynoq.asyncio --------------------------------

# How many times a call refused with NOSCRIPT is sent again after loading its script:
# another client's SCRIPT FLUSH may empty the cache between the load and the resend.
RELOADS = 3


def eval_args(call: Call, plain: bool = False) -> tuple[Any, ...]:
    """The EVALSHA command of a script call (``plain``: of its source without the
    ``#!lua`` line)."""
    s = call.script
    return ("EVALSHA", s.plain_sha if plain else s.sha, len(call.keys), *call.keys, *call.args)


def load_source(script: Script, plain: bool = False) -> str:
    """What SCRIPT LOAD sends for ``script`` (the text ``eval_args`` names by its SHA)."""
    return script.plain if plain else script.source


def noscript(calls: Sequence[Call | Cmd], replies: list[Any]) -> tuple[list[int], list[Script]]:
    """The calls of a batch refused with NOSCRIPT (they did not run), and their scripts."""
    redo = [i for i, r in enumerate(replies[: len(calls)]) if isinstance(r, NoScriptError)]
    scripts = {calls[i].script.sha: calls[i].script for i in redo}  # type: ignore[union-attr]
    return redo, list(scripts.values())


def resent(
    replies: list[Any], redo: list[int], again: list[Any], wait: tuple[int, int] | None
) -> None:
    """Put the replies of the calls sent again in their places."""
    for i, r in zip(redo, again, strict=False):
        replies[i] = r
    if wait is not None:  # the fewest replicas any write was confirmed by
        replies[-1] = min(int(replies[-1]), int(again[-1]))


def finish(batch: Batch, replies: list[Any], pool: PoolLimits | None = None) -> Any:
    """A batch's result from its raw replies: each parsed, errors translated."""
    out: list[Any] = []
    for call, reply in zip(batch.calls, replies, strict=False):
        if isinstance(reply, Exception):
            if not batch.each:
                raise translate(reply, pool, call) from reply
            out.append(translate(reply, pool, call))
            continue
        try:
            out.append(reply if call.parse is None else call.parse(reply))
        except DynoqError as exc:
            if not batch.each:
                raise
            out.append(exc)
    if batch.wait is not None:
        out.append(replies[-1])
    return out if batch.parse is None else batch.parse(out)
