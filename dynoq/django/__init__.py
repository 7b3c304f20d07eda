"""Django's tasks framework (``django.tasks``, Django 6) on dynoq (DESIGN.md §3.10).

``TASKS = {"default": {"BACKEND": "dynoq.django.DynoqBackend", "QUEUES": [...],
"OPTIONS": {"url": ..., "prefix": ...}}}``; add ``"dynoq.django"`` to INSTALLED_APPS
for enqueues that follow the database transaction (its outbox table), and run the tasks
with ``dynoq worker --django mysite.settings`` or ``manage.py dynoq_worker``. See
docs/django.md.
"""

from __future__ import annotations

from .backend import DynoqBackend

__all__ = ["DynoqBackend"]
