# Generated from dynoq/asyncio/handles.py by scripts/unasync.py: edit that file,
# then run `python scripts/unasync.py` (tests/test_unasync.py fails when this
# is stale; digest aef9c18080e1e5a1: of the text below, an edit by hand does not match).
"""A sent task's handle: its state, its result, and what can be done about it, from any
process (``tasks.handle(id)``). The decisions are in :mod:`dynoq._core.tasks`. The
asyncio shell is written by hand; the sync one is generated from it (scripts/unasync.py).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from ._core import taskapp, validate
from ._core import tasks as core
from ._core.taskapp import TaskOptions
from ._core.tasks import TaskInfo, TaskState
from ._core.timeouts import Patience
from .errors import ResultNotKept, ResultTimeout
from .queue import Queue


class App(Protocol):
    """What a handle asks of its tasks app (dynoq.Tasks)."""

    registry: taskapp.Registry[Any]

    def queue(self, name: str) -> Queue: ...


class Declared(Protocol):
    """What a handle asks of its task (dynoq.Task)."""

    name: str
    keep_ms: int
    options: TaskOptions


def now() -> float:
    """Monotonic seconds."""
    return time.monotonic()


class TaskHandle:
    """A sent call: its ``id``, and what can be asked or done about it from any process
    (``tasks.handle(id)`` makes one anew)."""

    def __init__(
        self,
        app: App,
        id: str,
        *,
        task: Declared | None = None,
        queue: Queue | None = None,
        key: str | None = None,
    ) -> None:
        self.app = app
        self.id = id
        self.task = task
        self.key = key
        self._where: tuple[Queue, int] | None = None
        if queue is not None:
            self._where = (queue, core.routing(queue.ops, id, key))

    def __repr__(self) -> str:
        return f"<dynoq.TaskHandle {self.id!r} of {self._label()}>"

    def _label(self) -> str:
        name = "a task" if self.task is None else f"task {self.task.name!r}"
        return f"{name} (id {self.id!r})"

    def _place(self) -> tuple[Queue, int] | None:
        """Where the task lives (its queue and shard), found once (None: not found)."""
        if self._where is None:
            self.info()
        return self._where

    def info(self) -> TaskInfo:
        """Its state, attempts, last failure, due time and kept result (one round trip)."""
        if self._where is not None:
            q, shard = self._where
            info: TaskInfo = q.backend.run(core.state(q.ops, shard, self.id))
            return info
        names = (
            [self.task.options.queue]
            if self.task is not None
            else self.app.registry.queues() or [self.app.registry.default_queue]
        )
        places: list[tuple[Queue, int]] = []
        for name in names:
            q = self.app.queue(name)
            ops = q.ops
            if ops.settings.ordered and self.key is None and ops.settings.shards > 1:
                places += [(q, s) for s in range(ops.settings.shards)]  # routed by a key
            else:
                places.append((q, core.routing(ops, self.id, self.key)))
        if len(places) == 1:
            self._where = places[0]
            return self.info()
        i, found = places[0][0].backend.run(core.locate([(q.ops, s) for q, s in places], self.id))
        if i >= 0:
            self._where = places[i]
        return found  # type: ignore[no-any-return]

    def status(self) -> TaskState:
        """waiting, delayed, running, retrying, succeeded, dead, cancelled or unknown
        (an ended task is unknown unless its task keeps results: keep_result)."""
        info = self.info()
        return info.state

    def progress(self) -> Any:
        """What the task's function last reported while it runs
        (``dynoq.current_message().progress(value)``), or None (none reported, or it no
        longer runs: progress is cleared when it ends)."""
        where = self._place()
        if where is None:
            return None
        found = where[0].get(self.id)
        return None if found is None else found.progress()

    def cancel(self) -> bool:
        """Cancel the task: one that waits never runs; one that runs is asked to stop (its
        function sees ``dynoq.current_message().cancelled`` within a second; a coroutine
        is cancelled; ``progress()`` / ``heartbeat()`` raise dynoq.Cancelled). Either ends
        "cancelled" (``result()`` raises TaskCancelled when it keeps results), never
        retried. False if it ended or is unknown (nothing changes then)."""
        where = self._place()
        if where is None:
            return False
        q, shard = where
        name, keep = (None, 0) if self.task is None else (self.task.name, self.task.keep_ms)
        return bool(q.backend.run(core.cancel(q.ops, shard, self.id, name, keep)))

    def reschedule(self, *, delay: float) -> bool:
        """Run it ``delay`` seconds from now instead, if it has not started (True); False
        otherwise. Refused on ordered queues (OrderedQueueError)."""
        where = self._place()
        if where is None:
            return False
        return where[0].reschedule(self.id, delay=delay)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the end (up to ``timeout`` seconds; None: no limit) and return what
        the task returned. Raises TaskFailed (its last error) when it is dead,
        TaskCancelled when it was cancelled, ResultTimeout when it had not ended in time,
        and ResultNotKept at once when its task keeps no result (keep_result=0) or
        nothing is known of it (its kept result expired, or it never was)."""
        if self.task is not None and not self.task.keep_ms:
            raise ResultNotKept(
                f"{self._label()} keeps no result (keep_result=0): declare "
                "it with @tasks.task(keep_result=seconds) to wait for one"
            )
        if timeout is not None:
            timeout = validate.check_seconds(timeout, "timeout")
        patience = Patience(timeout, now())
        while True:
            info = self.info()
            if info.state.ended or info.state is TaskState.UNKNOWN:
                return core.outcome(info, self._label())
            wait = patience.nap(now())
            if wait is None:
                raise ResultTimeout(
                    f"{self._label()} had not ended within {timeout:g}s (it is {info.state.value})"
                )
            time.sleep(wait)
