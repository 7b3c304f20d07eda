"""``dynoq worker --django mysite.settings``: run the tasks of Django's tasks framework
on a ``dynoq.django.DynoqBackend`` (``--backend``: its alias in TASKS), one consumer
per queue (``--queues`` picks), plus the checker of its transaction outbox. It connects
where the backend's OPTIONS say (url and prefix), as the web app that sends the tasks."""

from __future__ import annotations

import os
import sys
from typing import Any

from .base import Env
from .task_worker import Serving, serve
from .worker import HandlerImportError


def load(settings: str, alias: str) -> Any:
    """The worker of backend ``alias`` of these Django settings (Django set up)."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # the project, as manage.py would find it
    try:
        import django

        django.setup()
        from django.tasks import task_backends
        from django.tasks.exceptions import InvalidTaskBackend

        from ..django.backend import DynoqBackend
        from ..django.worker import DjangoWorker
    except ImportError as exc:
        raise HandlerImportError(
            f"cannot set up Django with settings {settings!r}: {exc} (Django 6 and the "
            "django extra: pip install 'dynoq[django]')"
        ) from None
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise HandlerImportError(f"no task backend {alias!r} in {settings}.TASKS: {exc}") from None
    if not isinstance(backend, DynoqBackend):
        raise HandlerImportError(
            f"task backend {alias!r} of {settings} is a {type(backend).__name__}, "
            "not a dynoq.django.DynoqBackend"
        )
    return DjangoWorker(backend)


def run(
    settings: str, alias: str, queues: str | None, options: dict[str, Any], how: Serving
) -> None:
    worker = load(settings, alias)
    config = worker.backend.config
    label = f"Django tasks of {settings} ({alias!r})"
    serve(Env(config.url, config.prefix), worker, label, queues, options, how)
