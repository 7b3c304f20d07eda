"""One Spark job that pushes a DataFrame with a :class:`~.writer.RowWriter` (the
``write()``, ``QueueSink.write`` and ``batch_sink`` path): :func:`write_dataframe` runs
it (``mapInArrow`` when pandas and pyarrow are there, else the partitions' Rows) and
returns a :class:`~.report.WriteResult` (per partition and in total), each task's counts
coming back as one row; :func:`report` logs it on the driver (logger ``dynoq.spark``)
and counts it in Prometheus.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any

from .._core.batches import Counts
from .report import Report, WriteResult, channel, emit
from .rows import Rejection
from .writer import Recorded, RowWriter, settle

COUNTS_SCHEMA = (
    "partition long, pushed long, skipped long, refused long, invalid long, "
    "rejected string, recorded string"
)


def has_arrow() -> bool:
    """mapInArrow needs pyarrow and (for its UDF machinery) pandas on the driver."""
    return all(importlib.util.find_spec(m) is not None for m in ("pandas", "pyarrow"))


def _partition() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.partitionId()


def _arrow_task(
    writer: RowWriter, batch: int | None, acc: Any, record_batches: Iterable[Any]
) -> Iterator[Any]:
    pa = importlib.import_module("pyarrow")  # untyped; present wherever Arrow runs
    t = writer.push_arrow(record_batches, batch)
    c = t.counts
    done = None if settle(writer, t, acc) else t.recorded
    yield pa.RecordBatch.from_pydict(
        {
            "partition": [_partition()],
            "pushed": [c.pushed],
            "skipped": [c.skipped],
            "refused": [c.refused],
            "invalid": [c.invalid],
            "rejected": [_json(t.rejected)],
            "recorded": [done.text() if done else ""],
        }
    )


def _json(rejected: list[Rejection]) -> str:
    return json.dumps([[r.row, r.column, r.reason] for r in rejected])


def _unjson(text: str) -> list[Rejection]:
    return [Rejection(int(row), col, str(reason)) for row, col, reason in json.loads(text)]


def _rows_task(
    writer: RowWriter, batch: int | None, acc: Any, part: int, rows: Iterable[Any]
) -> list[tuple[int, Counts, list[Rejection], Recorded | None]]:
    t = writer.push_rows((r.asDict() for r in rows), batch)
    return [(part, t.counts, t.rejected, None if settle(writer, t, acc) else t.recorded)]


def _channel_of(df: Any) -> Any:
    try:
        context = df.sparkSession.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no context, no accumulators
        return None
    return channel(context)


def write_dataframe(df: Any, writer: RowWriter, batch: int | None = None) -> WriteResult:
    """Push a DataFrame in one Spark job (Arrow when available); per-partition counts.
    Validates the columns, their types and the queue on the driver first. Does not
    commit ``batch``: the caller does, once this returned."""
    writer.check(df.columns, streaming=batch is not None)
    df = df.select(*writer.spec.needed(df.columns))
    writer = writer.typed(df.schema.jsonValue())
    acc = _channel_of(df)
    if has_arrow():
        rows = df.mapInArrow(partial(_arrow_task, writer, batch, acc), COUNTS_SCHEMA).collect()
        got = [
            (
                r.partition,
                Counts(r.pushed, r.skipped, r.refused, r.invalid),
                _unjson(r.rejected),
                Recorded.from_text(r.recorded),
            )
            for r in rows
        ]
    else:
        got = df.rdd.mapPartitionsWithIndex(partial(_rows_task, writer, batch, acc)).collect()
    writer.forget(done for *_, done in got)  # what no channel settled: the write is over
    return WriteResult.of(
        [(p, c) for p, c, _, _ in got], [(p, r) for p, _, rs, _ in got for r in rs]
    )


def report(writer: RowWriter, result: WriteResult, what: str) -> None:
    """Log ``result`` on this process's dynoq.spark logger and count it in Prometheus."""
    emit(Report(writer.label, writer.where, what, result))
