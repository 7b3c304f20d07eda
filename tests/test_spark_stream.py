"""Exactly-once streaming into dynoq through real driver crashes: a streaming query
(format("dynoq"), ordered queue) is SIGKILLed at each stage of a micro-batch (before its
first row is written, half-way through it, once it is written but not committed in Redis,
once committed in Redis but not in Spark's checkpoint) and restarted from its
checkpoint, while a consumer acks what arrives. Every event is delivered once, in order
per key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import delete_prefix, wait_for
from spark_gate import Ledger, driver_env, kill_when_held

import dynoq
from dynoq.spark import Target
from dynoq.spark.rows import RowSpec
from dynoq.spark.writer import RowWriter

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.slow]
# Started (and killed) as processes of their own, sharing no session (conftest.py):
OWN_DRIVERS = ("test_killed_driver_restarts_from_checkpoint_exactly_once",)

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


def write_files(src: Path) -> None:
    """FILES files of ROWS events; seq grows from file to file. Their modification times
    are a second apart: Spark's file source reads files by modification time, and files
    written in the same millisecond come in directory order (on ext4, a hash of the
    names), which would make a later file an earlier micro-batch."""
    src.mkdir()
    seq = 0
    start = time.time() - FILES
    for f in range(FILES):
        lines = []
        for _ in range(ROWS):
            lines.append(json.dumps({"event_id": f"e{seq}", "key": f"k{seq % KEYS}", "seq": seq}))
            seq += 1
        path = src / f"part-{f}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (start + f, start + f))


# Where each driver is killed: (stage, micro-batch), one driver each, then one that runs
# to the end. Gates in tests/spark_gate.py hold the driver exactly there.
KILLS = [("before-write", 1), ("mid-write", 2), ("after-write", 3), ("after-commit", 4)]


@pytest.mark.timeout(900)  # five drivers, one after the other, on a loaded machine
def test_killed_driver_restarts_from_checkpoint_exactly_once(
    stream_client: dynoq.Client, tmp_path: Path
) -> None:
    client = stream_client
    q = client.queue("events", shards=4, ordered=True)
    src, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    write_files(src)
    ledger = Ledger()
    consumer = client.consumer(
        q, ledger.handle, group="audit", concurrency=2, batch_size=20, rebalance_interval=0.5
    ).start()
    args = [sys.executable, JOB, client.url, client.prefix, "events", str(src), str(checkpoint)]
    probe = RowWriter(Target.of(client, "events"), RowSpec.of("event_id")).for_query
    try:
        for stage, batch in KILLS:
            kill_when_held(client.redis, args, stage, batch, f"{client.prefix}:gate")
            progress = probe(_query_id(checkpoint)).progress()
            spark_committed = len(_batch_files(checkpoint / "commits"))
            # Where the driver died, as dynoq's records and Spark's checkpoint say:
            assert spark_committed == batch, (stage, spark_committed)
            assert progress.committed == (batch if stage == "after-commit" else batch - 1)
            if stage == "mid-write":
                assert 100 <= progress.written < ROWS, progress
            elif stage == "after-write":
                assert progress.written == ROWS, progress
        job = subprocess.run(
            args, env=driver_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300
        )
        assert job.returncode == 0, job.stderr.decode()[-3000:]
        wait_for(lambda: len(ledger.ids) >= FILES * ROWS, timeout=30, what="every event consumed")
        time.sleep(0.3)  # a duplicate would arrive now
    finally:
        consumer.stop()
    # One file per micro-batch, in file order (else the order check below means nothing).
    assert _files_by_batch(checkpoint) == [f"part-{f}.json" for f in range(FILES)]
    assert len(ledger.ids) == FILES * ROWS  # the count is the input's
    assert len(set(ledger.ids)) == len(ledger.ids)  # no duplicate handled
    for key, seqs in ledger.seqs.items():
        assert seqs == sorted(seqs), f"key {key} out of order"
    progress = probe(_query_id(checkpoint)).progress()
    assert progress.committed == FILES - 1 and progress.written == 0
    assert q.size() == 0


def _query_id(checkpoint: Path) -> str:
    """Spark's id of the query, which it keeps in the checkpoint across restarts."""
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


def _files_by_batch(checkpoint: Path) -> list[str]:
    """The input file of each micro-batch, from the file source's log in the checkpoint."""
    names = []
    for n in sorted(int(b) for b in _batch_files(checkpoint / "sources" / "0")):
        [entry] = (checkpoint / "sources" / "0" / str(n)).read_text().splitlines()[1:]
        names.append(json.loads(entry)["path"].rsplit("/", 1)[1])
    return names


def _batch_files(folder: Path) -> list[str]:
    return [p.name for p in folder.glob("[0-9]*")] if folder.exists() else []
