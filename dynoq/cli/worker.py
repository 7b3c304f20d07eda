"""``dynoq worker``: run a handler as a service (as ``rq worker``, ``arq``, ``celery worker``).

One process runs one consumer until SIGTERM or SIGINT, then stops gracefully: in-flight
handlers finish, or what they have not started goes back to the queue, within
``--stop-timeout``. With ``--processes N`` a supervisor runs N such processes and starts
a crashed one again (with backoff); SIGTERM/SIGINT to the supervisor stops them all.

Exit codes: 0 stopped cleanly; 1 failure; 2 bad arguments; 3 Redis unreachable; 4 the
handler cannot be imported.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from .._core.logcontext import DeliveryFilter
from ..retry import backoff
from ..signals import StopOnSignals

EXIT_IMPORT = 4
log = logging.getLogger("dynoq.worker")


def json_formatter() -> logging.Formatter:
    """One JSON object per line (python-json-logger): time, level, logger, message, pid,
    the traceback as ``exc``, the handled delivery's ``message_id``, ``queue``,
    ``attempt`` and ``trace_id`` (logcontext), and any ``extra=`` fields of the call."""
    return JsonFormatter(
        "{asctime}{levelname}{name}{message}{process}",
        style="{",
        rename_fields={
            "asctime": "time",
            "levelname": "level",
            "name": "logger",
            "process": "pid",
            "exc_info": "exc",
        },
        json_ensure_ascii=False,
    )


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        json_formatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    )
    handler.addFilter(DeliveryFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class HandlerImportError(Exception):
    """The handler named on the command line cannot be imported."""


def import_target(spec: str, what: str = "handler", form: str = "module:function") -> Any:
    """``package.module:name`` (or ``module:object.attr``), imported from the current
    directory first."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise HandlerImportError(f"{what} {spec!r} must be {form}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise HandlerImportError(f"cannot import {what} {spec!r}: {exc}") from None
    return target


def import_handler(spec: str) -> Callable[..., Any]:
    """``package.module:function`` (or ``module:object.method``), imported from the
    current directory first."""
    target = import_target(spec)
    if not callable(target):
        raise HandlerImportError(f"handler {spec!r} is not callable")
    return target  # type: ignore[no-any-return]


def supervise(argv: Sequence[str], processes: int, stop_timeout: float) -> int:
    """Run ``processes`` workers (``argv`` is one worker's command line) until SIGTERM or
    SIGINT; start a crashed one again. Returns the exit code."""
    stop = threading.Event()
    with StopOnSignals(stop):
        return _supervise(stop, argv, processes, stop_timeout)


def _supervise(
    stop: threading.Event, argv: Sequence[str], processes: int, stop_timeout: float
) -> int:
    children: list[subprocess.Popen[bytes] | None] = [None] * processes
    failures = [0] * processes
    next_start = [0.0] * processes
    codes: list[int] = []
    log.info("supervisor started: %d worker process(es)", processes)
    while not stop.is_set():
        for i in range(processes):
            child = children[i]
            if child is not None and child.poll() is not None:
                code = child.returncode
                failures[i] = failures[i] + 1 if code != 0 else 0
                delay = backoff(failures[i]) if code != 0 else 0.0
                log.warning(
                    "worker %d (pid %d) exited with %d; starting it again in %.1fs",
                    i,
                    child.pid,
                    code,
                    delay,
                )
                if code in (2, EXIT_IMPORT):  # bad arguments or handler: restarting is futile
                    stop.set()
                    codes.append(code)
                children[i], next_start[i] = None, time.monotonic() + delay
            if children[i] is None and not stop.is_set() and time.monotonic() >= next_start[i]:
                children[i] = subprocess.Popen([sys.executable, "-m", "dynoq", *argv])
                log.info("worker %d started (pid %d)", i, children[i].pid)  # type: ignore[union-attr]
        stop.wait(0.2)
    alive = [c for c in children if c is not None and c.poll() is None]
    for c in alive:
        c.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + stop_timeout + 5
    for c in alive:
        try:
            codes.append(c.wait(max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            c.kill()
            codes.append(c.wait())
    log.info("supervisor stopped")
    return max(codes, default=0)
