"""Workflows: start a chain, group or chord of tasks, advance it when one of its calls
returns, and the handle of a started flow (DESIGN.md §3.8).

The decisions are in :mod:`dynoq._core.flows`; this shell runs them on the app's client.
The asyncio shell is written by hand; the sync one is generated from it
(scripts/unasync.py).
"""

from __future__ import annotations

import asyncio  # unasync: import time
from collections.abc import Iterable
from typing import Any, Protocol

from .._core import canvas, validate
from .._core import flows as core
from .._core import reconcile as reconciling
from .._core.calls import Batch, Call
from .._core.canvas import Node
from .._core.flows import RECONCILE_EVERY, FlowInfo, FlowMember, Member, Step
from .._core.queue import QueueOps
from .._core.timeouts import Patience
from ..errors import ResultTimeout
from .backend import AsyncBackend
from .handles import now
from .queue import Queue


class App(Protocol):
    """What a flow asks of its tasks app (dynoq.asyncio.Tasks), or of a client: its
    queues, opened."""

    async def queue(self, name: str) -> Queue: ...


class Where(Protocol):
    """What a flow's handle reads through (a dynoq.asyncio.Client)."""

    backend: AsyncBackend
    prefix: str
    max_payload_bytes: int

    async def queue(self, name: str) -> Queue: ...


async def start(
    app: App, client: Where, root: Node, keep_result: float | None = None
) -> FlowHandle:
    """Store a flow's plan and push its first calls (through ``app``'s queues, on
    ``client``), its state and result kept ``keep_result`` seconds once it ended (None:
    a day); its handle."""
    keep = core.check_keep(keep_result)  # refused before anything is stored
    plan = canvas.plan(root)
    opened = await _opened(app, plan.queues())
    for ops in opened.values():
        core.check_queue(ops)  # refused before anything is stored
    flow_id = core.new_flow_id()
    # tracked with its create: a starter that dies after it leaves a flow a sweeper finds;
    # the create's parts one after the other (the last makes the flow run)
    first, *more = core.create(client.prefix, flow_id, plan, keep)
    await client.backend.run(Batch([core.track(client.prefix, "start", flow_id), first]))
    for part in more:
        await client.backend.run(part)
    roots = [(leaf, plan.leaves[leaf]) for leaf in plan.roots]
    calls, _ = core.pushes(flow_id, roots, False, None, opened.get)
    calls = [core.count(client.prefix, "started"), *calls]
    for i in range(0, len(calls), core.PUSHES_PAGE):  # pipelines of a bounded size
        await client.backend.run(Batch(calls[i : i + core.PUSHES_PAGE]))
    return FlowHandle(client, flow_id, app)


async def advance(app: App, queue: Queue, member: Member, value: Any) -> Step:
    """A flow's call returned ``value``: record it and push what starts next, once;
    what flow-advance said."""
    ops = queue.ops
    packed = core.encode_value(value, ops.limit)
    return await _walk(app, queue, member, core.advance(ops.keys.prefix, member, packed, ops.limit))


async def fail(app: App, queue: Queue, member: Member, marker: bytes) -> Step:
    """A flow's call was dead-lettered (``marker``: core.failure_marker): record it,
    and push what starts next (a chord that continues), once."""
    ops = queue.ops
    return await _walk(app, queue, member, core.fail(ops.keys.prefix, member, marker, ops.limit))


async def _walk(app: App, queue: Queue, member: Member, call: Call) -> Step:
    step: Step = await queue.backend.run(call)
    opened = await _opened(app, {spec.queue for _, spec in step.leaves})
    calls, _ = core.follow(step, member.flow_id, queue.ops.keys.prefix, opened.get)
    if calls:
        await queue.backend.run(Batch(calls))
    return step


async def _opened(app: App, names: Iterable[str]) -> dict[str, QueueOps]:
    """These queues of the app, opened (each once): their ops by name."""
    return {name: (await app.queue(name)).ops for name in set(names)}


class FlowHandle:
    """A started flow: its ``id``, its state and its result, from any process
    (``tasks.flow(id)`` makes one anew)."""

    def __init__(self, client: Where, id: str, app: App | None = None) -> None:
        self._client = client
        self._app: App = client if app is None else app  # opens its calls' queues
        self._prefix, self._limit = client.prefix, client.max_payload_bytes
        self.id = id

    def __repr__(self) -> str:
        return f"<dynoq.asyncio.FlowHandle {self.id!r}>"

    async def info(self) -> FlowInfo:
        """Its status, how many task calls it makes and how many ended, its result or
        its first failure."""
        info: FlowInfo = await self._run(core.state(self._prefix, self.id, self._limit))
        return info

    async def _run(self, request: Call | Batch) -> Any:
        return await self._client.backend.run(request)

    async def status(self) -> str:
        """running, succeeded, failed, cancelled, or unknown (it ended longer ago than
        it is kept, or never was)."""
        return (await self.info()).status

    async def members(self, limit: int | None = None) -> list[FlowMember]:
        """Its task calls, in plan order (the first ``limit``; None: all): each one's id,
        task and state (pending, started, succeeded, failed); ``tasks.handle(m.id)``
        says more of one started."""
        if limit is not None:
            limit = validate.check_int(limit, "limit", low=1)
        _, found = await self._pages(limit)
        return found if limit is None else found[:limit]

    async def _pages(self, most: int | None = None) -> tuple[str | None, list[FlowMember]]:
        """Its status and its calls (the first ``most`` or so; a page of plan ids a
        round trip)."""
        found: tuple[str | None, list[FlowMember]]
        found = await self._client.backend.drive(
            reconciling.read_members(self._prefix, self.id, self._limit, most)
        )
        return found

    async def cancel(self) -> bool:
        """Stop the flow: nothing of it starts any more, and each call pushed and not
        started is taken off its queue (one running finishes; what it returns is not
        used). True if it was running."""
        if not await self._run(core.cancel(self._prefix, self.id)):
            return False
        await self._run(Batch(core.ended(self._prefix, self.id, "cancelled")))
        started = [m for m in await self.members() if m.state == "started"]
        opened = await _opened(self._app, (m.call.queue for m in started))
        for page in range(0, len(started), core.MEMBERS_PAGE):  # one round trip a page
            await self._run(
                Batch(
                    [
                        core.call_cancel(opened[m.call.queue], m.id, m.task)
                        for m in started[page : page + core.MEMBERS_PAGE]
                    ]
                )
            )
        return True

    async def reconcile(self) -> int:
        """End what nobody will end: a call of the running flow whose message was
        dead-lettered where no worker saw it (its delivery expired past its retries)
        or is gone (removed, cleared, its queue deleted) fails, and a call that was
        due to start but never pushed (its pusher died) is pushed. Returns how many
        calls it settled. ``result()`` runs it while it waits."""
        status, found = await self._pages()
        if status != "running":
            return 0
        # every queue of the flow, opened: a failure's walk may start a step on any
        opened = await _opened(self._app, (m.call.queue for m in found))
        settled: int = await self._client.backend.drive(
            reconciling.settle(self._prefix, self.id, self._limit, status, found, opened.get)
        )
        return settled

    async def result(self, timeout: float | None = None) -> Any:
        """Wait for the end (up to ``timeout`` seconds; None: no limit) and return the
        flow's value: a chain's last step's, a group's list, a chord's callback's.
        Raises TaskFailed (naming the first call that failed) when it failed,
        TaskCancelled when it was cancelled, ResultTimeout when it had not ended in
        time, ResultNotKept when nothing is known of it. While it waits, when no call
        of the flow ended for RECONCILE_EVERY seconds, it reconciles the flow
        (:meth:`reconcile`), so it never waits for a call that nobody runs."""
        if timeout is not None:
            timeout = validate.check_seconds(timeout, "timeout")
        patience = Patience(timeout, now())
        looked, ended = now(), -1
        while True:
            info = await self.info()
            if info.status != "running":
                return core.outcome(info)
            if info.ended != ended:  # it moves: nothing to reconcile
                looked, ended = now(), info.ended
            elif now() - looked >= RECONCILE_EVERY:
                looked = now()
                await self.reconcile()
            wait = patience.nap(now())
            if wait is None:
                raise ResultTimeout(
                    f"flow {self.id!r} had not ended within {timeout:g}s "
                    f"({info.ended} of its {info.calls} calls ended)"
                )
            await asyncio.sleep(wait)  # unasync: time.sleep(wait)
