"""Group commit on the asyncio backend: single pushes of many tasks, sent together.

The decisions are :mod:`dynoq._core.combine`, as on the sync backend
(:mod:`dynoq.backend.combine`); only the waiting differs. A push arriving at an idle
client is sent at once by its own task, as the request it was before group commit.
Pushes arriving while a send is on its way wait on a future; the sends that take them
run in a task of their own, so that cancelling one caller never cancels the others'
answers (a cancelled caller's message may still be written, as when it was cancelled
after its own send went out).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..._core.calls import Call
from ..._core.combine import Combiner, Pending, alone, fail, plan, settle
from ...errors import DynoqError

if TYPE_CHECKING:
    from ..._core.codec import Outgoing
    from ..._core.queue import QueueOps


class Combining:
    """The single pushes of one client's tasks (see the module). One event loop."""

    def __init__(self, run: Any) -> None:
        self._run = run  # AsyncBackend.run: retries a dropped connection within its window
        self._state = Combiner()
        self._tasks: set[asyncio.Task[None]] = set()  # sends on their own (referenced)

    async def push(self, ops: QueueOps, out: Outgoing, mode: str) -> int:
        """Push one validated message (with whatever other tasks push meanwhile); its
        result: 1 pushed, 0 skipped (mode "ensure"). Raises its own call's error."""
        if self._state.claim():
            try:
                return int(await self._run(ops.push([out], mode=mode)))
            finally:  # cancelled or not: what waits meanwhile is sent by a task
                more = self._state.done()
                if more:
                    task = asyncio.get_running_loop().create_task(self._sender(more))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        p = Pending(ops, out, mode)
        p.signal = asyncio.get_running_loop().create_future()
        self._state.wait(p)
        await p.signal  # cancelled: the future is, and its send answers the others
        if p.error is not None:
            raise p.error
        return p.result

    async def _sender(self, batch: list[Pending]) -> None:
        while batch:
            await self._send(batch)
            batch = self._state.done()

    async def _send(self, batch: list[Pending]) -> None:
        """Send ``batch`` and answer its callers (every one, whatever happens)."""
        try:
            single = alone(batch)
            if single is not None:
                try:
                    batch[0].result = await self._run(single)
                except DynoqError as exc:
                    batch[0].error = exc
                return
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
                if not q.signal.done():
                    q.signal.set_result(None)
