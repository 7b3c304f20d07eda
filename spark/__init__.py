"""Spark jobs that feed and audit dynoq queues (run from the repo root).

    python -m spark.enqueue --help        # Parquet/CSV/JSON rows into a queue
    python -m spark.export --help         # a queue's waiting and dead messages to Parquet
    python -m spark.demo_pipeline --help  # orders + delayed cancel timers, consumed, reported

Each also runs with ``spark-submit spark/<job>.py``, on dynoq's public API only
(``dynoq.spark``, installed with ``pip install 'dynoq[spark]'``). Without spark-submit or
``--master`` they run on ``local[2,4]``: two threads, and a failed task is retried.
"""
