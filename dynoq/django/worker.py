"""The worker of a Django backend's tasks: one dynoq consumer per queue, whose handler
runs each message's Django task (with its context, Django's signals and fresh database
connections), and the checker that settles the enqueues of transactions whose producer
died before sending (``dynoq worker --django``, ``manage.py dynoq_worker``)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from traceback import format_exception
from typing import Any

from django.db import close_old_connections
from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from .._core import tasks as core
from .._core.retry import DeadLetter
from ..checker import Checker
from ..client import Client, connect
from ..consumer.many import Consumers
from ..errors import InvalidArgument
from ..message import ConsumerStats, Message
from ..queue import Queue
from . import outbox, results
from .backend import DynoqBackend, resolve

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
CHECKER_GROUP = "django-outbox"


class TaskExit(Exception):
    """A task raised SystemExit (or another BaseException): its run failed, the worker
    goes on. Its message starts with the class path (the result's ``errors`` read it)."""


class Runner:
    """A queue consumer's handler: runs the message's Django task. A message whose task
    cannot be imported, or belongs to another backend, is dead-lettered at once."""

    def __init__(self, backend: DynoqBackend, queue: Queue) -> None:
        self.backend = backend
        self.ops = queue.ops
        self.keep_ms = backend.config.keep_ms

    def __repr__(self) -> str:
        return f"<dynoq Django tasks of {self.backend.alias!r} on {self.ops.name!r}>"

    def _task(self, path: str) -> Task:
        try:
            task = resolve(path)
        except TaskResultDoesNotExist as exc:
            raise DeadLetter(str(exc)) from None
        if task.backend != self.backend.alias:
            raise DeadLetter(
                f"task {path!r} is backend {task.backend!r}'s, not {self.backend.alias!r}'s"
            )
        return task

    def __call__(self, msg: Message) -> None:
        assert msg.id is not None
        path, args, kwargs = core.call_of(msg)
        task = self._task(path)
        started = time.time()
        result = results.make(
            task,
            msg.id,
            TaskResultStatus.RUNNING,
            args,
            kwargs,
            alias=self.backend.alias,
            enqueued=msg.enqueued_at,
            started=started,
            attempted=started,
            workers=results.attempts_as_workers(msg.attempts, WORKER_ID),
        )
        sender = type(self.backend)
        task_started.send(sender, task_result=result)
        close_old_connections()  # as a request does: a connection a task broke is not reused
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = normalize_json(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a task's sys.exit() fails the task, not the worker
            self._ended(result, TaskResultStatus.FAILED, exc)
            if isinstance(exc, Exception):
                raise
            raise TaskExit(f"{results.class_path(type(exc))}: {exc}") from exc
        finally:
            close_old_connections()
        finished = time.time()
        if self.keep_ms:
            kept = results.kept_value(
                value, args, kwargs, msg.enqueued_at, started, finished, WORKER_ID
            )
            msg.keep = core.keep_success(self.ops, msg, path, kept, self.keep_ms)
        object.__setattr__(result, "_return_value", value)
        self._ended(result, TaskResultStatus.SUCCESSFUL)

    def _ended(
        self, result: TaskResult, status: TaskResultStatus, exc: BaseException | None = None
    ) -> None:
        object.__setattr__(result, "status", status)
        object.__setattr__(result, "finished_at", results.when(time.time()))
        if exc is not None:
            result.errors.append(
                TaskError(
                    exception_class_path=results.class_path(type(exc)),
                    traceback="".join(format_exception(exc)),
                )
            )
        task_finished.send(type(self.backend), task_result=result)


class DjangoWorker:
    """What ``dynoq worker --django`` serves: a backend's queues, consumed, and its
    outbox checked. ``serve`` has the signature of ``dynoq.Tasks.serve``."""

    def __init__(self, backend: DynoqBackend) -> None:
        self.backend = backend

    def consumers(self, client: Client, queues: Iterable[str] | None, **options: Any) -> Consumers:
        """One consumer per queue (``queues``: these only), with the consumer ``options``
        (None values: the backend's OPTIONS decide)."""
        config = self.backend.config
        picked = list(config.queues) if queues is None else list(queues)
        unknown = sorted(set(picked) - set(config.queues))
        if unknown:
            raise InvalidArgument(
                f"queue(s) {unknown} not in backend {self.backend.alias!r}'s QUEUES "
                f"{list(config.queues)}"
            )
        settings = {
            **config.consumer_options(),
            **{k: v for k, v in options.items() if v is not None},
        }
        made = []
        for name in picked:
            q = self.backend.queue(name, client)
            if config.keep_ms:
                q.backend.run(core.load_keep(q.ops))
            made.append(client.consumer(q, Runner(self.backend, q), **settings))
        return Consumers(made)

    def checkers(self, client: Client, consumers: Consumers) -> list[Checker]:
        """The outbox's checkers, one per queue (none when enqueues follow no database)."""
        config = self.backend.config
        if not outbox.kept(config):
            return []
        check = outbox.checker(config)
        return [
            client.checker(
                c.queue,
                check,
                group=CHECKER_GROUP,
                check_interval=config.check_after,
                poll_interval=min(1.0, config.check_after),
            )
            for c in consumers.consumers
        ]

    def serve(
        self,
        url: str | None = None,
        *,
        prefix: str = "dq",
        queues: Iterable[str] | None = None,
        stop_timeout: float = 30.0,
        ready: Callable[[Consumers], Any] | None = None,
        **options: Any,
    ) -> ConsumerStats:
        config = self.backend.config
        with connect(url, prefix=prefix, **config.redis_options) as client:
            worker = self.consumers(client, queues, **options)
            checkers = self.checkers(client, worker)
            if ready is not None:
                ready(worker)
            for c in checkers:
                c.start()
            try:
                worker.run(stop_timeout=stop_timeout)
            finally:
                for c in checkers:
                    c.stop(stop_timeout)
            return worker.stats()
