"""A job for tests/test_spark_session.py: builds its session with dynoq.spark's
spark_session() and prints what it runs on, as JSON on the last line.

    spark-submit [options] tests/spark_session_job.py
    python tests/spark_session_job.py
"""

from __future__ import annotations

import json

from dynoq.spark import spark_session


def main() -> None:
    spark, started = spark_session("session-job")
    conf = spark.sparkContext.getConf()
    print(
        json.dumps(
            {
                "master": spark.sparkContext.master,
                "started": started,
                "ui": conf.get("spark.ui.enabled", None),
                "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
