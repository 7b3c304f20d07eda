"""``DynoqBackend``: Django's task backend on dynoq's queues.

Each Django queue name is a dynoq queue under the backend's prefix; a task call is a
dynoq task message (``{"task": module path, "args", "kwargs"}``), so delays, priorities,
retries, dead letters, the sweeper, the CLI and the dashboard are the queue's own.
Django makes a backend per thread; they share one client per process and config."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from asgiref.sync import sync_to_async
from django.core import checks
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.module_loading import import_string

from .._core import tasks as core
from .._core import validate
from ..client import Client, connect
from ..errors import InvalidArgument
from ..queue import Queue
from . import config as options
from . import outbox, results

READS = 3  # a task's state, then its message: a task that moves on between them is read again
_clients: dict[tuple[Any, ...], Client] = {}
_lock = threading.Lock()


def shared_client(config: options.BackendConfig) -> Client:
    """The process's client for this config (a forked child makes its own)."""
    key = (os.getpid(), config.url, config.prefix, repr(sorted(config.redis_options.items())))
    with _lock:
        client = _clients.get(key)
        if client is None:
            client = connect(config.url, prefix=config.prefix, **config.redis_options)
            _clients[key] = client
        return client


def close_clients() -> None:
    """Close the process's clients (tests; a process that stops sending). The next
    enqueue connects again."""
    with _lock:
        made = list(_clients.values())
        _clients.clear()
    for client in made:
        client.close()


def _project_module(path: str) -> bool:
    """Whether ``path`` names something in the project: in an installed app's package or
    the settings module's. A message names the module a worker imports, and a message
    is data: it never makes a worker import any other module (its import could act)."""
    from django.apps import apps
    from django.conf import settings

    roots = {app.name for app in apps.get_app_configs()}
    roots.add(str(settings.SETTINGS_MODULE or "").partition(".")[0])
    module = path.rpartition(".")[0]
    return any(root and (module == root or module.startswith(root + ".")) for root in roots)


@functools.lru_cache(maxsize=1024)  # a task is imported once per process: a worker's hot path
def resolve(path: str) -> Task:
    """The Django task at ``path`` (its module path); TaskResultDoesNotExist when it would
    take importing a module outside the project's apps, cannot be imported or is not a
    task (a module already imported imports nothing)."""
    if path.rpartition(".")[0] not in sys.modules and not _project_module(path):
        raise TaskResultDoesNotExist(
            f"task {path!r} is not in an installed app or the settings' package: not imported"
        )
    try:
        found = import_string(path)
    except ImportError as exc:
        raise TaskResultDoesNotExist(f"its task {path!r} cannot be imported: {exc}") from None
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"{path!r} is a {type(found).__name__}, not a task")
    return found


class DynoqBackend(BaseTaskBackend):
    """Django's tasks on dynoq: deferred (``run_after``), async tasks, results from any
    process, priorities; an enqueue inside ``transaction.atomic()`` is sent when the
    transaction commits, never when it rolls back (with ``dynoq.django`` installed)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = options.read(alias, self.queues, self.options)
        self._queues: dict[str, Queue] = {}

    def __repr__(self) -> str:
        return f"<dynoq.django.DynoqBackend {self.alias!r} on {list(self.config.queues)}>"

    @property
    def client(self) -> Client:
        return shared_client(self.config)

    def queue(self, name: str, client: Client | None = None) -> Queue:
        """The dynoq queue of a Django queue name, opened with its ``queue_settings``
        (opened again once an operation found it gone)."""
        if client is not None:
            return client.queue(name, **self.config.queue_settings.get(name, {}))
        q = self._queues.get(name)
        if q is None or q.ops.lost:
            q = self.queue(name, self.client)
            self._queues[name] = q
        return q

    # -- sending ----------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        self.validate_task(task)
        # TaskResult holds the arguments as JSON (Django's rule): what JSON cannot carry
        # is refused here (TypeError), before anything is sent.
        result = results.make(
            task,
            uuid.uuid4().hex,
            TaskResultStatus.READY,
            args,
            kwargs,
            alias=self.alias,
            enqueued=time.time(),
        )
        payload = core.call_payload(task.module_path, result.args, result.kwargs)
        delay = results.delay_until(task.run_after, timezone.now())
        priority = results.priority(task.priority)
        q = self.queue(task.queue_name)
        if outbox.in_transaction(self.config):
            outbox.send_on_commit(q, result.id, payload, delay, priority, self.config)
        else:
            q.push(payload, id=result.id, delay=delay, priority=priority)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        # One push on the process's pooled client, from a worker thread: an async view
        # has no transaction to follow, and no loop-long client to close.
        result: TaskResult = await sync_to_async(self.enqueue, thread_sensitive=False)(
            task, args, kwargs
        )
        return result

    # -- results ----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        try:
            task_id = validate.check_id(result_id, "result id")
        except InvalidArgument as exc:
            raise TaskResultDoesNotExist(str(exc)) from None
        queues = [self.queue(name) for name in self.config.queues]
        places = [(q.ops, core.routing(q.ops, task_id, None)) for q in queues]
        found = None
        for _ in range(READS):
            i, info = queues[0].backend.run(core.locate(places, task_id))
            if i < 0 or info.state is core.TaskState.SUCCEEDED:
                found = results.from_state(info, None, resolve, self.alias)
                break
            msg = queues[i].get(task_id)
            if msg is not None:  # else it moved on between the two reads: read again
                found = results.from_state(info, msg, resolve, self.alias)
                break
        if found is None:
            raise TaskResultDoesNotExist(
                f"no task result {task_id!r} in queues {list(self.config.queues)}: never "
                "enqueued here, or its kept result expired (OPTIONS keep_result)"
            )
        return found

    async def aget_result(self, result_id: str) -> TaskResult:
        result: TaskResult = await sync_to_async(self.get_result, thread_sensitive=False)(result_id)
        return result

    # -- system checks ----------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if self.config.database is not None and not outbox.installed():
            return [
                checks.Warning(
                    f"task backend {self.alias!r} follows database transactions "
                    "(OPTIONS database), but 'dynoq.django' is not in INSTALLED_APPS: "
                    "an enqueue inside transaction.atomic() cannot write its outbox row",
                    hint="add 'dynoq.django' to INSTALLED_APPS and migrate, or set "
                    "OPTIONS['database'] to None",
                    id="dynoq.W001",
                )
            ]
        return []
