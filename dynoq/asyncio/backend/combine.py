"""Group commit on the asyncio backend: single pushes of many tasks, sent together.

The decisions are :mod:`dynoq._core.combine`, as on the sync backend
(:mod:`dynoq.backend.combine`); only the waiting differs. A push arriving at an idle
client is sent at once by its own task. Pushes arriving while a send is on its way wait
on a future; the sends that take them run in a task of their own, so that cancelling
one caller never cancels the others' answers (a cancelled caller's message may still be
written, as when it was cancelled after its own send went out).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..._core.calls import Call
from ..._core.combine import Combiner, Pending, fail, plan, settle
from ...errors import DynoqError

if TYPE_CHECKING:
    from ..._core.codec import Outgoing
    from ..._core.ops import QueueOps


class Combining:
    """The single pushes of one client's tasks (see the module). One event loop."""

    def __init__(self, run: Any) -> None:
        self._run = run  # AsyncBackend.run: retries a dropped connection within its window
        self._state = Combiner()
        self._tasks: set[asyncio.Task[None]] = set()  # sends on their own (referenced)

    async def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message (with whatever other tasks push meanwhile); its
        result: 1 pushed, 0 skipped (mode "ensure"). Raises its own call's error."""
        p = Pending(ops, out, mode)
        if self._state.arrive(p):
            batch = self._state.take()
            try:
                await self._send(batch)
            finally:  # cancelled or not: what waits meanwhile is sent by a task
                more = self._state.done()
                if more:
                    self._spawn(more)
        else:
            p.signal = asyncio.get_running_loop().create_future()
            await asyncio.shield(p.signal)
        if p.error is not None:
            raise p.error
        return p.result

    def _spawn(self, batch: list[Pending]) -> None:
        task = asyncio.get_running_loop().create_task(self._sender(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sender(self, batch: list[Pending]) -> None:
        while batch:
            await self._send(batch)
            batch = self._state.done()

    async def _send(self, batch: list[Pending]) -> None:
        """Send ``batch`` and answer its callers (every one, whatever happens)."""
        try:
            request, owners = plan(batch)
            try:
                reply = await self._run(request)
            except DynoqError as exc:
                fail(batch, exc)
            else:
                settle(owners, [reply] if type(request) is Call else reply)
        except BaseException as exc:  # cancelled, or a bug: nobody may wait forever
            fail(batch, exc)
            raise
        finally:
            for q in batch:
                if q.signal is not None and not q.signal.done():
                    q.signal.set_result(None)
