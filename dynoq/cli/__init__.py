"""The ``dynoq`` command line (DESIGN.md §4). Modules by what they hold: ``base`` (the
group, connecting, errors and exit codes), ``inspect`` (stats, peek, dead, queues,
schedules), ``changes`` (replay, purge, clear, push, queue create), ``acl`` (roles' ACL
rules, installing the scripts), ``check`` (what puts messages at risk on the server),
``service`` (sweeper, dashboard, demo), ``worker_command`` (worker: its options, what it
runs), ``handler_worker`` and ``task_worker`` (a handler or checker; a tasks app),
``worker`` (the worker's supervisor and logging), ``output`` (tables and JSON), ``demo``."""

from . import acl, changes, check, flows, inspect, service, worker_command  # noqa: F401 - they register their commands
from .base import EXIT_FAILURE, EXIT_IMPORT, EXIT_UNREACHABLE, EXIT_USAGE, cli, main

__all__ = ["EXIT_FAILURE", "EXIT_IMPORT", "EXIT_UNREACHABLE", "EXIT_USAGE", "cli", "main"]
