"""The soak's worker processes as the harness sees them: started, SIGKILLed, restarted
(each restart is a new generation: consumer ``c1`` runs as ``c1.0``, then ``c1.1``...)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # Linux: the child gets SIGKILL when the harness dies, so no soak process outlives it.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


class Proc:
    """A worker process that can be SIGKILLed and started again. Its output goes to
    ``<logs>/<name>.<generation>.log``."""

    def __init__(
        self, name: str, argv: Callable[[int], list[str]], env: dict[str, str], logs: Path
    ) -> None:
        self.name, self.argv, self.env, self.logs = name, argv, env, logs
        self.gen = -1
        self.popen: subprocess.Popen[bytes] | None = None
        self.restart_at: float | None = None  # monotonic time of a pending restart

    @property
    def incarnation(self) -> str:
        return f"{self.name}.{self.gen}"

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        self.gen += 1
        self.restart_at = None
        with open(self.logs / f"{self.incarnation}.log", "wb") as log:
            self.popen = subprocess.Popen(
                self.argv(self.gen),
                env=self.env,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
            )

    def kill(self) -> None:
        if self.popen is not None and self.alive:
            self.popen.kill()
            self.popen.wait(10)

    def stop(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; True if it ended on its own."""
        if self.popen is None or not self.alive:
            return True
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.kill()
            return False


def crew(
    url: str,
    prefix: str,
    logs: Path,
    *,
    producers: int,
    consumers: int,
    sweepers: int,
    producer_args: list[str],
    consumer_args: list[str],
    async_consumers: int = 0,
) -> dict[str, list[Proc]]:
    """The soak's processes by role (not started): producers and consumers from
    benchmarks/chaos_roles.py (the last ``async_consumers`` of them on dynoq.asyncio),
    sweepers from ``python -m dynoq sweeper``. The URL goes in the environment
    (``DYNOQ_URL``), not on the command line."""
    py = sys.executable
    env = {
        **os.environ,
        "DYNOQ_URL": url,
        "DYNOQ_PREFIX": prefix,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    sweeper_env = dict(env)
    if url.startswith("redis://"):  # name the sweepers' connections too (see Server)
        sweeper_env["DYNOQ_URL"] = f"{url}{'&' if '?' in url else '?'}client_name={prefix}:sweeper"
    role = [py, "-m", "benchmarks.chaos_roles"]

    def worker(kind: str, name: str, args: list[str]) -> Proc:
        return Proc(
            name, lambda gen: [*role, kind, "--name", name, "--gen", str(gen), *args], env, logs
        )

    sweeper = [
        py,
        "-m",
        "dynoq",
        "sweeper",
        "--interval",
        "0.5",
        "--refresh-interval",
        "2",
        "--log-level",
        "warning",
    ]
    return {
        "producer": [worker("producer", f"p{i}", producer_args) for i in range(producers)],
        "consumer": [
            worker(
                "consumer-async" if i >= consumers - async_consumers else "consumer",
                f"c{i}",
                consumer_args,
            )
            for i in range(consumers)
        ],
        "sweeper": [Proc(f"s{i}", lambda _: sweeper, sweeper_env, logs) for i in range(sweepers)],
    }
