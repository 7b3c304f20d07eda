"""The test project's tasks: each one a capability of the backend."""

import asyncio
import time

from django.tasks import TaskContext, task

from .models import Run


@task
def add(a: int, b: int) -> int:
    return a + b


@task(priority=50, queue_name="serial")
def urgent(ref: str) -> str:
    Run.objects.create(task="urgent", ref=ref)
    return ref


@task(priority=-50, queue_name="serial")
def routine(ref: str) -> str:
    Run.objects.create(task="routine", ref=ref)
    return ref


@task
def ship(ref: str) -> str:
    """Records each run: a transactional enqueue must run exactly once."""
    Run.objects.create(task="ship", ref=ref)
    return f"shipped {ref}"


@task
async def fetch(n: int) -> list[int]:
    await asyncio.sleep(0.01)
    return list(range(n))


@task(takes_context=True)
def whoami(context: TaskContext, tag: str) -> dict:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task(queue_name="emails")
def email(to: str) -> str:
    return f"mailed {to}"


@task
def slow(seconds: float, ref: str) -> str:
    time.sleep(seconds)
    Run.objects.create(task="slow", ref=ref)
    return ref


@task
def fail(why: str) -> None:
    raise ValueError(why)


class OrderError(Exception):
    pass


@task
def fail_custom(ref: str) -> None:
    raise OrderError(f"order {ref} is broken")


@task
def noop(*args: object, **kwargs: object) -> None:
    return None


@task
async def anoop(*args: object, **kwargs: object) -> None:
    return None


@task
def exits() -> None:
    raise SystemExit("the task called exit")


@task
def odd_return() -> object:
    return {1, 2}  # a set: JSON has none


@task(takes_context=True)
def own_id(context: TaskContext) -> str:
    return context.task_result.id
