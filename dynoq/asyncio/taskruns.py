"""The handler of a task queue's consumer (a worker of :class:`dynoq.asyncio.Tasks`):
it runs each message's task (within the task's own rate limit), hands a flow's call's
value to its flow before the ack (:mod:`dynoq._core.endings`), and leaves what a task
keeps with its message.

The asyncio shell is written by hand; the sync one is generated from it
(scripts/unasync.py).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from typing import Any, Protocol

from .._core import failures, rates, taskapp
from .._core import flows as flow_core
from .._core import tasks as core
from .._core.calls import Call
from .._core.endings import Ending
from .._core.flows import Member, Step
from .._core.keys import RateKeys
from .._core.retry import RateLimited, RetryPolicy
from ..message import Message
from . import flows
from .queue import Queue

HOOKS_KEPT = 1000  # flows a runner keeps the ending hooks of (all forgotten when over)


class Runnable(Protocol):
    """What a runner calls of a task (dynoq.asyncio.Task)."""

    name: str
    keep_ms: int
    rate_limit: tuple[int, float] | None

    async def run(self, *args: Any, **kwargs: Any) -> Any: ...


class App(flows.App, Protocol):
    """What a runner asks of its tasks app (dynoq.asyncio.Tasks)."""

    registry: taskapp.Registry[Any]

    def follow(self, flow_id: str, step: Step) -> list[Call]: ...


class Runner:
    """The handler of a task queue's consumer: runs each message's task (a message whose
    task this app does not declare is dead-lettered at once, with the reason) and leaves
    what its task keeps with the message, for the ack."""

    def __init__(self, app: App, queue: Queue, policy: RetryPolicy) -> None:
        self.app = app
        self.policy = policy
        self.registry = app.registry
        self.ops = queue.ops
        self._queue = queue
        self.queue = queue.name
        self._hooks: dict[str, tuple[Any, Any]] = {}  # a flow's Ending make and then
        self._limits: dict[str, tuple[RateKeys, rates.RateLimit]] = {}  # by task name

    def __repr__(self) -> str:
        return f"<dynoq.asyncio tasks of queue {self.queue!r}>"

    def _ending(self, member: Member, value: Any) -> Ending:
        """What tells a flow that its call returned ``value``, and pushes what starts."""
        ops, flow_id = self.ops, member.flow_id
        packed = flow_core.encode_value(value, ops.limit)
        hooks = self._hooks.get(flow_id)
        if hooks is None:  # made once a flow (a group's members share them)
            if len(self._hooks) >= HOOKS_KEPT:
                self._hooks.clear()
            make = functools.partial(flow_core.advance_many, ops.keys.prefix, flow_id, ops.limit)
            hooks = self._hooks[flow_id] = (make, functools.partial(self.app.follow, flow_id))
        return Ending(flow_id, (member.leaf, packed, False), *hooks)

    async def _step(
        self,
        msg: Message,
        member: Member,
        task: Runnable,
        args: Sequence[Any],
        kwargs: dict[str, Any],
    ) -> Any:
        """Run a flow's call; its value goes to its flow with the ack, before it
        (``Message.ending``: one round trip for a batch's calls, and one for what
        starts; a call run again walks the same path, and its next step is pushed
        once); a failure that dead-letters it goes to its flow now."""
        if args:  # its input: a chord that continues passes TaskFailed values on
            args = [flow_core.with_failures(args[0]), *args[1:]]
        try:
            value = await task.run(*args, **kwargs)
            msg.ending = self._ending(member, value)
        except Exception as exc:
            if failures.buries(msg, exc, self.policy, self.ops.settings.max_retries):
                marker = flow_core.failure_marker(task.name, str(msg.id), exc)
                await flows.fail(self.app, self._queue, member, marker)
            raise
        return value

    async def _permit(self, task: Runnable, limit: tuple[int, float]) -> None:
        """A permit of the task's own rate limit for the call about to start (one round
        trip: taken right before the call, it is fresh, lua/rate-take-2.lua), or
        RateLimited: the message comes back when a permit may be free, spread over a
        period so that the refused ones do not all come back at once."""
        found = self._limits.get(task.name)
        if found is None:
            keys = RateKeys.task(self.ops.keys.prefix, self.queue, task.name)
            found = self._limits[task.name] = (keys, rates.RateLimit(limit))
        keys, rl = found
        granted, wait = await self._queue.backend.run(rates.take(keys, rl.count, rl.window, 1))
        if not granted:
            raise RateLimited(
                wait + random.random() * rl.period,
                f"task {task.name!r} is rate limited ({rl.count} per {rl.period:g}s)",
            )

    async def __call__(self, msg: Message) -> None:
        name, args, kwargs = core.call_of(msg)
        task = self.registry.runnable(name)
        if task.rate_limit is not None:
            await self._permit(task, task.rate_limit)
        member = flow_core.member_of(msg)
        if member is None:
            value = await task.run(*args, **kwargs)
        else:
            value = await self._step(msg, member, task, args, kwargs)
        if task.keep_ms:
            msg.keep = core.keep_success(self.ops, msg, name, value, task.keep_ms)
