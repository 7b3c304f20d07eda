"""Django's task results from what dynoq knows (no I/O): priorities, times, the record a
worker keeps of a finished task, and a ``TaskResult`` built from a task's state.

A task is a dynoq task message (``{"task": module path, "args", "kwargs"}``), so its
waiting, running, retrying and dead states are the queue's own; what dynoq keeps of a
successful one is its return value with the times and arguments Django's result carries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

from django.conf import settings
from django.tasks.base import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from django.utils import timezone

from .._core.tasks import TaskInfo, TaskState
from ..message import Failure, Message

DYNOQ_LOWEST = 99  # dynoq's priorities: 0..99, lower first


def priority(django_priority: int) -> int:
    """Django's priority (-100..100, higher first) as dynoq's (0..99, lower first): the
    order is kept (a higher Django priority never runs after a lower one); neighbouring
    Django priorities may share a dynoq one (201 values onto 100)."""
    span = int(TASK_MAX_PRIORITY - TASK_MIN_PRIORITY)
    return (int(TASK_MAX_PRIORITY) - django_priority) * DYNOQ_LOWEST // span


def delay_until(run_after: dt.datetime | None, now: dt.datetime) -> float:
    """Seconds from ``now`` to ``run_after`` (0 for None or the past)."""
    if run_after is None:
        return 0.0
    return max(0.0, (run_after - now).total_seconds())


def when(seconds: float | None) -> dt.datetime | None:
    """A server timestamp (seconds) as Django's datetime: aware UTC with USE_TZ, naive
    local time without."""
    if seconds is None:
        return None
    moment = dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    return moment if settings.USE_TZ else timezone.make_naive(moment)


def seconds(moment: dt.datetime | None) -> float | None:
    if moment is None:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    return moment.timestamp()


def class_path(kind: type[BaseException]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def exception_path(failure: Failure) -> str:
    """The importable path of a failure's exception class, for ``TaskError``: the last
    line of its traceback names it as Python prints it (``module.Class: ...``, bare for
    builtins), the record's type name when the traceback says nothing. A TaskExit (a
    task's SystemExit) names the class it stands for first in its message."""
    if failure.error_type == "TaskExit":
        return failure.error.split(":", 1)[0]
    lines = [line for line in failure.traceback.splitlines() if line and not line[0].isspace()]
    named = lines[-1].split(":", 1)[0].strip() if lines else ""
    name = named if named.endswith(failure.error_type) else failure.error_type
    return name if "." in name else f"builtins.{name}"


def error_of(failure: Failure | None) -> list[TaskError]:
    if failure is None:
        return []
    return [TaskError(exception_class_path=exception_path(failure), traceback=failure.traceback)]


def kept_value(
    value: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    enqueued_at: float | None,
    started_at: float,
    finished_at: float,
    worker: str,
) -> dict[str, Any]:
    """What a worker keeps of a task that returned (dynoq's kept record holds it)."""
    return {
        "value": value,
        "args": list(args),
        "kwargs": kwargs,
        "enqueued": enqueued_at,
        "started": started_at,
        "finished": finished_at,
        "worker": worker,
    }


def make(
    task: Task,
    id: str,
    status: TaskResultStatus,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    alias: str,
    enqueued: float | None = None,
    started: float | None = None,
    finished: float | None = None,
    attempted: float | None = None,
    errors: list[TaskError] | None = None,
    workers: list[str] | None = None,
    value: Any = None,
) -> TaskResult:
    result = TaskResult(
        task=task,
        id=id,
        status=status,
        enqueued_at=when(enqueued),
        started_at=when(started),
        finished_at=when(finished),
        last_attempted_at=when(attempted),
        args=list(args),
        kwargs=kwargs,
        backend=alias,
        errors=errors or [],
        worker_ids=workers or [],
    )
    object.__setattr__(result, "_return_value", value)  # Django's own way: it is frozen
    return result


def attempts_as_workers(attempts: int, last: str | None = None) -> list[str]:
    """``worker_ids`` of a task run ``attempts`` times: dynoq counts the runs and keeps the
    worker of a successful one; earlier runs' workers are "?"."""
    out = ["?"] * max(attempts, 0)
    if out and last:
        out[-1] = last
    return out


_LIVE = {
    TaskState.WAITING: TaskResultStatus.READY,
    TaskState.DELAYED: TaskResultStatus.READY,
    TaskState.RETRYING: TaskResultStatus.READY,
    TaskState.RUNNING: TaskResultStatus.RUNNING,
    TaskState.DEAD: TaskResultStatus.FAILED,
}


def from_state(
    info: TaskInfo,
    msg: Message | None,
    resolve: Callable[[str], Task],
    alias: str,
) -> TaskResult | None:
    """The TaskResult of a task in this state (``msg``: its stored message, for a task
    that waits, runs, retries or is dead); None when nothing is known of it."""
    if info.state is TaskState.SUCCEEDED and isinstance(info.result, dict) and info.task:
        kept = info.result
        return make(
            resolve(info.task),
            info.id,
            TaskResultStatus.SUCCESSFUL,
            kept.get("args") or [],
            kept.get("kwargs") or {},
            alias=alias,
            enqueued=kept.get("enqueued"),
            started=kept.get("started"),
            finished=kept.get("finished"),
            attempted=kept.get("started"),
            workers=attempts_as_workers(info.attempts, kept.get("worker")),
            value=kept.get("value"),
        )
    status = _LIVE.get(info.state)
    if status is None or msg is None or not isinstance(msg.payload, dict):
        return None
    payload = msg.payload
    # dynoq knows when runs failed, not when they started: a failed task's first failure
    # stands for its start, its last for its last attempt (and its end, once dead).
    failure = msg.failure or info.failure
    first, last = (failure.first_failed_at, failure.last_failed_at) if failure else (None, None)
    return make(
        resolve(str(payload.get("task"))),
        info.id,
        status,
        payload.get("args") or [],
        payload.get("kwargs") or {},
        alias=alias,
        enqueued=msg.enqueued_at,
        started=first,
        finished=last if status is TaskResultStatus.FAILED else None,
        attempted=last,
        errors=error_of(failure),
        workers=attempts_as_workers(info.attempts),
    )
