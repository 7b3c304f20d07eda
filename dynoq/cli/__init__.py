"""The ``dynoq`` command line (DESIGN.md §4). Modules by what they hold: ``base`` (the
group, connecting, errors and exit codes), ``inspect`` (stats, peek, dead, queues,
schedules), ``changes`` (replay, purge, clear, push, queue create), ``acl`` (roles' ACL
rules, installing the scripts), ``service`` (sweeper, worker, demo), ``worker`` (the
worker's supervisor and logging), ``output`` (tables and JSON), ``demo``."""

from . import acl, changes, inspect, service  # noqa: F401 - they register their commands
from .base import EXIT_FAILURE, EXIT_IMPORT, EXIT_UNREACHABLE, EXIT_USAGE, cli, main

__all__ = ["EXIT_FAILURE", "EXIT_IMPORT", "EXIT_UNREACHABLE", "EXIT_USAGE", "cli", "main"]
