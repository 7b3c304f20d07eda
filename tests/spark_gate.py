"""format("dynoq-gated"): dynoq's data source with a failure injected mid-partition, for
tests/test_spark.py (importable by Spark's Python workers: the spark fixture puts this
folder on their PYTHONPATH).

On a task's first attempt, after ``failAfter`` rows have gone through the real writer
(and so were pushed), it waits until the Redis counter ``gateKey`` reaches ``waitFor``
(the test's consumer counts its acks there), records the count, then raises: the task
fails half-way and Spark retries it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
