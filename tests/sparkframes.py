"""What the Spark writers' and typed reads' tests share: the writers, one call to write a
frame with any of them, and the frame of every type with the payload each writer must
store for its first row."""

from __future__ import annotations

import uuid
from typing import Any

import dynoq
from dynoq.spark import batch_sink, partition_sink, source_options, write

WRITERS = ("format-arrow", "format-rows", "partition_sink", "batch_sink", "write")


def write_with(how: str, df: Any, client: dynoq.Client, queue: str, **cols: Any) -> None:
    """Write ``df`` to ``queue`` with one of the WRITERS (column options as the sinks')."""
    if how.startswith("format"):
        names = {
            "id_col": "idCol",
            "key_col": "keyCol",
            "delay_col": "delayCol",
            "priority_col": "priorityCol",
            "expires_col": "expiresCol",
            "batch_size": "batchSize",
        }
        (
            df.write.format("dynoq")
            .options(**source_options(client, queue))
            .options(**{names[k]: v for k, v in cols.items()})
            .option("arrow", str(how == "format-arrow").lower())
            .mode("append")
            .save()
        )
    elif how == "partition_sink":
        df.foreachPartition(partition_sink(client, queue, schema=df.schema, **cols))
    elif how == "batch_sink":
        batch_sink(client, queue, query=f"q-{uuid.uuid4().hex[:8]}", **cols)(df, 0)
    else:
        write(df, client, queue, **cols)


# -- one stored form per Spark type ------------------------------------------------------------

EVERY_TYPE = """SELECT * FROM VALUES (
  'r1', CAST(1 AS TINYINT), CAST(2 AS SMALLINT), 3, CAST(4 AS BIGINT), CAST(1.5 AS FLOAT),
  2.25D, CAST('12.30' AS DECIMAL(10,2)), 'text', X'0001', true, DATE'2024-05-01',
  timestamp_millis(1714557600250), TIMESTAMP_NTZ'2024-05-01 12:00:00',
  INTERVAL '0 00:01:30' DAY TO SECOND, array(1, 2, NULL), map('a', 1, 'b', 2),
  named_struct('n', 1, 'due', map(DATE'2024-05-01', array(named_struct('x', 1.5D)))),
  array(map('k', named_struct('t', timestamp_millis(0)))), NULL,
  CAST(0 AS DECIMAL(38,18)), CAST('0.0000001' AS DECIMAL(20,10)),
  CAST('-0.0000000001' AS DECIMAL(20,10))
), (
  'r2', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
) AS t(id, i8, i16, i32, i64, f32, f64, dec, s, bin, flag, day, ts, ntz, dur, arr, m, st,
       nested, nothing, zero, tiny, negative)"""

R1 = {
    "id": "r1",
    "i8": 1,
    "i16": 2,
    "i32": 3,
    "i64": 4,
    "f32": 1.5,
    "f64": 2.25,
    "dec": "12.30",
    "s": "text",
    "bin": b"\x00\x01",
    "flag": True,
    "day": "2024-05-01",
    "ts": "2024-05-01T10:00:00.250000+00:00",
    "ntz": "2024-05-01T12:00:00",
    "dur": 90.0,
    "arr": [1, 2, None],
    "m": {"a": 1, "b": 2},
    "st": {"n": 1, "due": {"2024-05-01": [{"x": 1.5}]}},
    "nested": [{"k": {"t": "1970-01-01T00:00:00+00:00"}}],
    "nothing": None,
    # plain digits, exactly the scale's decimals (not "0E-18", "1.000E-7", "-1E-10")
    "zero": "0.000000000000000000",
    "tiny": "0.0000001000",
    "negative": "-0.0000000001",
}
