"""spark_session() under spark-submit and a Spark configuration: what they say wins, and
dynoq fills in only what nobody set (real JVMs, started the way users start them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = str(Path(__file__).with_name("spark_session_job.py"))
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def run(args: list[str], **env: str) -> dict[str, Any]:
    bin_dir = str(Path(sys.executable).parent)  # spark-submit looks for python on PATH
    clean = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "MASTER",
            "SPARK_MASTER",
            "SPARK_CONF_DIR",
            "PYSPARK_SUBMIT_ARGS",
            "PYSPARK_GATEWAY_PORT",
            "PYSPARK_GATEWAY_SECRET",
        )
    }
    full = {
        **clean,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        "PYTHONPATH": str(Path(__file__).parent.parent),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "JAVA_TOOL_OPTIONS": FAST_JVM,
        **env,
    }
    done = subprocess.run(args, env=full, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_spark_submit_says_what_runs() -> None:
    submit = str(Path(sys.executable).with_name("spark-submit"))
    got = run(
        [
            submit,
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=true",
            "--conf",
            "spark.sql.shuffle.partitions=64",
            JOB,
        ]
    )
    assert got == {"master": "local[2]", "started": True, "ui": "true", "shuffle": "64"}


def test_spark_defaults_conf_and_the_environment_win(tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.master  local[1]\nspark.sql.shuffle.partitions=7\n"
    )
    got = run([sys.executable, JOB], SPARK_CONF_DIR=str(tmp_path))
    assert got == {"master": "local[1]", "started": True, "ui": "false", "shuffle": "7"}
    got = run([sys.executable, JOB], SPARK_MASTER="local[3]")
    assert got == {"master": "local[3]", "started": True, "ui": "false", "shuffle": "4"}
