"""Spark in and out of dynoq (the ``spark`` extra; importable without pyspark).

- ``format("dynoq")`` (Spark 4): :class:`DynoqDataSource`, registered with
  ``spark.dataSource.register(DynoqDataSource)`` (or by :func:`spark_session`); batch and
  exactly-once streaming writes, reads, and streaming reads (a queue consumed exactly
  once per micro-batch; :func:`stream_stats` its counters). :func:`source_options`
  points it at a client's server, prefix and connection options.
- Sinks for ``foreachPartition`` / ``foreachBatch``: :func:`partition_sink`,
  :func:`batch_sink` (exactly-once per micro-batch), and :func:`write` (one job, counts).
- :func:`queue_dataframe`: a queue's messages as a DataFrame (read-only).
- :func:`spark_session`: the SparkSession dynoq's jobs, demo and tests use.

Modules: ``target`` (where to write, secrets hidden), ``types`` (Spark types to payload
values, checked on the driver), ``rows`` (rows to messages), ``writer`` (the one write
path), ``throttle`` (a write's rows per second, across its tasks), ``job`` (one Spark job
of it), ``report`` (counts to the driver's log and Prometheus), ``sink``, ``datasource``,
``export`` (the read-only scan), ``decode`` (typed reads: payloads to rows), ``inverse``
(payload values back to Spark values), ``metadata`` (a typed read's ``_metadata``),
``stream`` (the streaming source), ``session``.
"""

# No `from __future__ import annotations`, and typing's names kept private: dir() of the
# package is its public API and its modules.
from typing import Any as _Any

from .._core.batches import Counts, Progress
from .report import WriteResult
from .rows import Rejection
from .sink import BatchSink, QueueSink, batch_sink, partition_sink, write
from .target import Target, source_options

_NEED_PYSPARK = {
    "DynoqDataSource": "datasource",
    "queue_dataframe": "datasource",
    "register": "datasource",
    "spark_session": "session",
    "stream_stats": "stream",
}


def __getattr__(name: str) -> _Any:
    """Names that need pyspark, imported on first use."""
    module = _NEED_PYSPARK.get(name)
    if module is None:
        raise AttributeError(f"module 'dynoq.spark' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    """The module's names and those imported on first use (tab completion, ``dir()``)."""
    return sorted({*globals(), *_NEED_PYSPARK})


__all__ = [
    "BatchSink",
    "Counts",
    "DynoqDataSource",
    "Progress",
    "QueueSink",
    "Rejection",
    "Target",
    "WriteResult",
    "batch_sink",
    "partition_sink",
    "queue_dataframe",
    "register",
    "source_options",
    "spark_session",
    "stream_stats",
    "write",
]
