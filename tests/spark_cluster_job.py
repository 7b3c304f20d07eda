"""A job for tests/test_spark_cluster.py, submitted to a cluster whose executors get dynoq
only from a packed environment (docs/spark.md, "On a cluster"):

    spark-submit --master 'local-cluster[2,1,1024]' \\
        --archives dynoq-env.tar.gz#environment \\
        --conf spark.pyspark.python=./environment/bin/python \\
        tests/spark_cluster_job.py URL PREFIX QUEUE ROWS

It writes ROWS rows with ``format("dynoq")`` (ids 0..ROWS-1) and ROWS more with a
``partition_sink`` (ids ROWS..2*ROWS-1) into QUEUE, reads the queue back with
``spark.read.format("dynoq")``, and prints one JSON object on its last line: the ids read,
and where the driver's and each sink task's dynoq came from.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import dynoq
from dynoq.spark import partition_sink, source_options, spark_session

PARTITIONS = 4


def whereabouts() -> dict[str, Any]:
    """Where this Python process runs and where its dynoq came from: the test holds the
    executors' answers to the archive Spark unpacked in their working directories."""
    import dynoq  # the executor's own import, whatever the driver had

    return {
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "dynoq": dynoq.__file__,
        # every entry of the path that holds a dynoq: only one may
        "dynoqs": [
            os.path.abspath(p) for p in sys.path if os.path.isdir(os.path.join(p or ".", "dynoq"))
        ],
    }


def main() -> None:
    url, prefix, queue, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    spark, started = spark_session("dynoq-cluster-job")
    client = dynoq.connect(url, prefix=prefix)
    client.queue(queue, shards=2)  # a writer never creates a queue: the driver does
    opts = source_options(client, queue)

    df = spark.range(0, rows, numPartitions=PARTITIONS).selectExpr(
        "id", "concat('row-', id) AS name"
    )
    df.write.format("dynoq").options(**opts).option("idCol", "id").mode("append").save()

    sinked = spark.range(rows, 2 * rows, numPartitions=PARTITIONS).selectExpr(
        "id", "concat('row-', id) AS name"
    )
    sink = partition_sink(client, queue, id_col="id", schema=sinked.schema)

    def write_and_tell(part: Iterable[Any]) -> Iterator[dict[str, Any]]:
        sink(part)
        yield whereabouts()  # the very process that pushed this partition

    writers = sinked.rdd.mapPartitions(write_and_tell).collect()

    read = spark.read.format("dynoq").options(**opts).load().select("id", "payload").collect()
    ids = [r["id"] for r in read]
    names = {json.loads(r["payload"])["name"] for r in read}
    print(
        json.dumps(
            {
                "master": spark.sparkContext.master,
                "driver": whereabouts(),
                "writers": writers,
                "ids": ids,
                "names": len(names),
            }
        )
    )
    client.close()
    if started:
        spark.stop()


if __name__ == "__main__":
    main()
