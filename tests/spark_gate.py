"""format("dynoq-gated"): dynoq's data source with a failure injected mid-partition, for
tests/test_spark.py (importable by Spark's Python workers: the spark fixture puts this
folder on their PYTHONPATH).

On a task's first attempt, after ``failAfter`` rows have gone through the real writer
(and so were pushed), it waits until the Redis counter ``gateKey`` reaches ``waitFor``
(the test's consumer counts its acks there), records the count, then raises: the task
fails half-way and Spark retries it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from dynoq.spark import DynoqDataSource

GATE = ("gatekey", "waitfor", "failafter")


class GatedWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner: Any, url: str, key: str, wait_for: int, fail_after: int) -> None:
        self.inner, self.url, self.key = inner, url, key
        self.wait_for, self.fail_after = wait_for, fail_after

    def _gated(self, batches: Iterator[Any]) -> Iterator[Any]:
        ctx = TaskContext.get()
        first = ctx is not None and ctx.attemptNumber() == 0
        rows = 0
        for rb in batches:
            yield rb
            rows += rb.num_rows
            if first and rows >= self.fail_after:
                r = redis.Redis.from_url(self.url)
                deadline = time.monotonic() + 30
                while int(r.get(self.key) or 0) < self.wait_for and time.monotonic() < deadline:
                    time.sleep(0.02)
                r.set(f"{self.key}-at-failure", int(r.get(self.key) or 0))
                raise RuntimeError("simulated executor loss half-way through a partition")

    def write(self, iterator: Iterator[Any]) -> Any:
        return self.inner.write(self._gated(iterator))

    def commit(self, messages: Any, batchId: int) -> None:
        self.inner.commit(messages, batchId)

    def abort(self, messages: Any, batchId: int) -> None:
        self.inner.abort(messages, batchId)


class GatedDataSource(DynoqDataSource):
    @classmethod
    def name(cls) -> str:
        return "dynoq-gated"

    def streamWriter(self, schema: Any, overwrite: bool) -> GatedWriter:
        opts = {k.lower(): v for k, v in self.options.items()}
        gate = [opts.pop(k) for k in GATE]
        for k in GATE:
            del self.options[k]
        inner = super().streamWriter(schema, overwrite)
        return GatedWriter(inner, opts["url"], gate[0], int(gate[1]), int(gate[2]))


# -- format("dynoq-staged"): a streaming driver held at one stage of one micro-batch ----------

STAGES = ("before-write", "mid-write", "after-write", "after-commit")
HOLD = 120.0  # seconds a held stage waits to be killed before it gives up (and fails)


class StagedWriter(DataSourceStreamArrowWriter):
    """Holds the driver at ``stage`` of micro-batch ``batch``: before a task pushes its
    first row, once it pushed ``mid_rows`` rows, when every task has written but dynoq has
    not committed, or when dynoq committed and Spark has not. It records that it got
    there (Redis key ``<key>:reached`` = "<stage>:<batch>") and waits to be killed."""

    def __init__(
        self, inner: Any, url: str, key: str, stage: str, batch: int, mid_rows: int = 100
    ) -> None:
        self.inner, self.url, self.key = inner, url, key
        self.stage, self.batch, self.mid_rows = stage, batch, mid_rows

    def _hold(self, stage: str, batch: int) -> None:
        if (stage, batch) != (self.stage, self.batch):
            return
        redis.Redis.from_url(self.url).set(f"{self.key}:reached", f"{stage}:{batch}")
        deadline = time.monotonic() + HOLD
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"held at {stage} of batch {batch}, and nobody killed the driver")

    def write(self, iterator: Iterator[Any]) -> Any:
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId")) if ctx else -1
        self._hold("before-write", batch)

        def gated() -> Iterator[Any]:
            rows = 0
            for rb in iterator:
                yield rb  # the writer pushes it before it asks for the next
                rows += rb.num_rows
                if rows >= self.mid_rows:
                    self._hold("mid-write", batch)

        return self.inner.write(gated())

    def commit(self, messages: Any, batchId: int) -> None:
        self._hold("after-write", batchId)
        self.inner.commit(messages, batchId)
        self._hold("after-commit", batchId)

    def abort(self, messages: Any, batchId: int) -> None:
        self.inner.abort(messages, batchId)


class StagedDataSource(DynoqDataSource):
    """Option ``stopAt`` = "<stage>:<batch>:<redis key>" (or "" to run through)."""

    @classmethod
    def name(cls) -> str:
        return "dynoq-staged"

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        stop = {k.lower(): v for k, v in self.options.items()}.get("stopat", "")
        for k in [k for k in self.options if k.lower() == "stopat"]:
            del self.options[k]
        inner = super().streamWriter(schema, overwrite)
        if not stop:
            return inner
        stage, batch, key = stop.split(":", 2)
        assert stage in STAGES, stage
        return StagedWriter(inner, inner.writer.target.url, key, stage, int(batch))


# -- format("dynoq-staged-source"): a streaming source held at one stage of one batch ---------

SOURCE_STAGES = ("after-take", "read")


class StagedSource(DynoqDataSource):
    """Option ``stopAt`` = "<stage>:<batch>:<redis key>": the source holds once it took
    its batch number ``batch`` from the queue (recorded, not yet planned by Spark), or
    once a task read that batch's messages (planned, not yet written by the sink)."""

    @classmethod
    def name(cls) -> str:
        return "dynoq-staged-source"

    def streamReader(self, schema: Any) -> Any:
        stop = {k.lower(): v for k, v in self.options.items()}.get("stopat", "")
        for k in [k for k in self.options if k.lower() == "stopat"]:
            del self.options[k]
        inner = super().streamReader(schema)
        if not stop:
            return inner
        stage, batch, key = stop.split(":", 2)
        assert stage in SOURCE_STAGES, stage
        return StagedReader(inner.settings, schema, stage, int(batch), key)


from dynoq.spark.stream import QueueStreamReader  # noqa: E402 - after the writer's part


class StagedReader(QueueStreamReader):
    def __init__(self, settings: Any, schema: Any, stage: str, batch: int, key: str) -> None:
        super().__init__(settings, schema)
        self.stage, self.batch, self.key = stage, batch, key

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "gate": (self.stage, self.batch, self.key)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.stage, self.batch, self.key = state["gate"]

    def _hold(self, stage: str, batch: int) -> None:
        if (stage, batch) != (self.stage, self.batch):
            return
        redis.Redis.from_url(self.settings.target.url).set(
            f"{self.key}:reached", f"{stage}:{batch}"
        )
        deadline = time.monotonic() + HOLD
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"held at {stage} of batch {batch}, and nobody killed the driver")

    def _take(self, q: Any, ops: Any, batch: int, want: int) -> int:
        got = super()._take(q, ops, batch, want)
        if got:
            self._hold("after-take", batch)
        return got

    def read(self, partition: Any) -> Iterator[Any]:
        yield from super().read(partition)
        piece = partition.value
        if piece.first <= self.batch <= piece.last:
            self._hold("read", self.batch)


# -- a driver run as its own process, held at a stage and killed there ------------------------


def driver_env() -> dict[str, str]:
    """The environment of a driver process the tests start: dynoq and this folder (the
    gates, the jobs) on its path."""
    here = Path(__file__).parent
    path = [str(here.parent), str(here), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def kill_when_held(redis_client: Any, args: list[str], stage: str, batch: int, gate: str) -> None:
    """Start the driver ``args`` told to hold at ``stage`` of ``batch`` (the last argument
    "<stage>:<batch>:<gate>"), wait until it says it got there (``<gate>:reached``), and
    SIGKILL it: the JVM and every Python process of its session."""
    at = f"{stage}:{batch}".encode()
    job = subprocess.Popen(
        [*args, f"{stage}:{batch}:{gate}"],
        env=driver_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 300
        # (a task of an earlier, killed driver may still say where it held: wait for ours)
        while redis_client.get(f"{gate}:reached") != at and job.poll() is None:
            assert time.monotonic() < deadline, f"the driver never held at {stage}:{batch}"
            time.sleep(0.1)
        assert job.poll() is None, job.stderr.read().decode()[-3000:]  # type: ignore[union-attr]
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    redis_client.delete(f"{gate}:reached")


class Ledger:
    """What a consumer downstream of a killed driver handled, in order, per key: each
    message's ``body(msg)`` holds its "key" and "seq"."""

    def __init__(self, body: Callable[[Any], Any] = lambda msg: msg.payload) -> None:
        self.body = body
        self.lock = threading.Lock()
        self.ids: list[str] = []
        self.seqs: dict[str, list[int]] = {}

    def handle(self, msg: Any) -> None:
        body = self.body(msg)
        with self.lock:
            self.ids.append(msg.id or "")
            self.seqs.setdefault(body["key"], []).append(body["seq"])
