"""``manage.py dynoq_worker [options]``: ``dynoq worker --django <this project's
settings>`` with the same options (``--backend``, ``--queues``, ``--concurrency``,
``--stop-timeout``, ``--log-format``, ...), logs and exit codes."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run the tasks of a dynoq.django.DynoqBackend (options as `dynoq worker --help`)."

    def run_from_argv(self, argv: list[str]) -> None:
        # argv: [manage.py, dynoq_worker, ...]: the rest goes to `dynoq worker` as typed.
        from ....cli import main

        settings = os.environ["DJANGO_SETTINGS_MODULE"]
        main(["worker", "--django", settings, *argv[2:]])

    def handle(self, *args: Any, **options: Any) -> None:  # call_command(): no options
        from ....cli import main

        main(["worker", "--django", os.environ["DJANGO_SETTINGS_MODULE"]])
