"""Spark jobs that feed and audit dynoq queues (run from the repo root).

    python -m spark.enqueue --help        # Parquet/CSV/JSON rows into a queue
    python -m spark.export --help         # a queue's waiting and dead messages to Parquet
    python -m spark.demo_pipeline --help  # orders + delayed cancel timers, consumed, reported

Each also runs with ``spark-submit spark/<job>.py``. The sinks they use are in
``dynoq.spark`` (installed with ``pip install 'dynoq[spark]'``).
"""
