"""Exactly-once streaming into dynoq through real driver crashes: a streaming query
(format("dynoq"), ordered queue) is SIGKILLed half-way through a micro-batch and
restarted from its checkpoint, three times, while a consumer acks what arrives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import delete_prefix, wait_for

import dynoq
from dynoq.spark import Target
from dynoq.spark.rows import RowSpec
from dynoq.spark.writer import RowWriter

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = str(Path(__file__).with_name("spark_stream_job.py"))
FILES, ROWS, KEYS = 6, 300, 20


@pytest.fixture
def stream_client(request: pytest.FixtureRequest) -> Iterator[dynoq.Client]:
    url = os.environ.get("REDIS_URL")
    if not url:
        server = request.getfixturevalue("embedded_server")
        url = f"redis://{server.host}:{server.port}/0"
    c = dynoq.connect(url, prefix=f"dqt-{uuid.uuid4().hex[:12]}")
    yield c
    c.close()
    delete_prefix(url, c.prefix)


class Ledger:
    """What the consumer handled, in order, per key."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: list[str] = []
        self.seqs: dict[str, list[int]] = {}

    def handle(self, msg: dynoq.Message) -> None:
        with self.lock:
            self.ids.append(msg.id or "")
            self.seqs.setdefault(msg.payload["key"], []).append(msg.payload["seq"])


def write_files(src: Path) -> None:
    src.mkdir()
    seq = 0
    start = time.time() - FILES
    for f in range(FILES):
        lines = []
        for _ in range(ROWS):
            lines.append(json.dumps({"event_id": f"e{seq}", "key": f"k{seq % KEYS}",
                                     "seq": seq}))
            seq += 1
        path = src / f"part-{f}.json"
        path.write_text("\n".join(lines) + "\n")
        # Spark's file source takes new files in modification-time order (ms): files
        # written within one ms were taken in any order, and a later file's keys then
        # came first (the test's own flake, not the queue's). A second apart each.
        os.utime(path, (start + f, start + f))


def test_killed_driver_restarts_from_checkpoint_exactly_once(
        stream_client: dynoq.Client, tmp_path: Path) -> None:
    client = stream_client
    q = client.queue("events", shards=4, ordered=True)
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(src)
    ledger = Ledger()
    consumer = client.consumer(q, ledger.handle, group="audit", concurrency=2,
                               batch_size=20, rebalance_interval=0.5).start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent.parent), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, JOB, client.url, client.prefix, "events", str(src),
            str(checkpoint)]
    probe = RowWriter(Target.of(client, "events"), RowSpec.of("event_id"))
    kills = 0
    try:
        for _ in range(3):
            job = subprocess.Popen(args, env=env, start_new_session=True,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            try:
                # SIGKILL the whole driver (JVM and Python workers too) half-way through
                # a micro-batch: some of its ids written (and soon consumed), uncommitted.
                wait_for(lambda: _half_way(q, ledger, checkpoint), timeout=90,
                         what="a micro-batch half-written")
            finally:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
            kills += 1
        job = subprocess.run(args, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, timeout=120)
        assert job.returncode == 0, job.stderr.decode()[-3000:]
        wait_for(lambda: len(ledger.ids) >= FILES * ROWS, timeout=30,
                 what="every event consumed")
    finally:
        consumer.stop()
    assert kills == 3
    assert len(ledger.ids) == FILES * ROWS  # the count is the input's
    assert len(set(ledger.ids)) == len(ledger.ids)  # no duplicate handled
    for key, seqs in ledger.seqs.items():
        assert seqs == sorted(seqs), f"key {key} out of order"
    progress = probe.for_query(_query_id(checkpoint)).progress()
    assert progress.committed == FILES - 1 and progress.written == 0
    assert q.size() == 0


def _query_id(checkpoint: Path) -> str:
    """Spark's id of the query, which it keeps in the checkpoint across restarts."""
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def _half_way(q: dynoq.Queue, ledger: Ledger, checkpoint: Path) -> bool:
    """True once Spark has started a micro-batch it has not committed, and at least 50
    of its rows are in the queue or consumed (read from Spark's checkpoint and the
    queue, not from dynoq's own batch records, which the test checks)."""
    started = _batch_files(checkpoint / "offsets")
    done = _batch_files(checkpoint / "commits")
    if len(started) <= len(done):
        return False
    stats = q.stats()
    with ledger.lock:
        seen = len(set(ledger.ids))
    return seen + stats.ready + stats.unacked >= len(done) * ROWS + 50


def _batch_files(folder: Path) -> list[str]:
    return [p.name for p in folder.glob("[0-9]*")] if folder.exists() else []
