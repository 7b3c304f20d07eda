"""The Django app of dynoq's backend: its outbox table (the enqueues of open database
transactions, read by the worker's checker) and the ``dynoq_worker`` command."""

from __future__ import annotations

from django.apps import AppConfig


class DynoqConfig(AppConfig):
    name = "dynoq.django"
    label = "dynoq"
    verbose_name = "dynoq"
    default_auto_field = "django.db.models.BigAutoField"
