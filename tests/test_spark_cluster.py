"""dynoq on a real Spark cluster: ``spark-submit --master local-cluster[2,1,1024]`` (a
master and two workers in the driver's JVM, each executor a JVM of its own with Python
workers of its own), with dynoq reaching the executors only in a packed environment, as
docs/spark.md ("On a cluster") tells users to ship it:

    --archives dynoq-env.tar.gz#environment --conf spark.pyspark.python=./environment/bin/python

The archive is a venv with dynoq built from this checkout, pyarrow and dynoq's dependencies
at the versions this interpreter has, packed by venv-pack. Building it takes 20 to 30 s
(pip, then packing 60 MB), so it is kept in the temp dir under a hash of what goes into it
and rebuilt when that changes. With dynoq left out of the archive the job fails
(``ModuleNotFoundError: No module named 'dynoq'`` in the executors' tasks): nothing else
on their path holds a dynoq, and the test checks that too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import delete_prefix

import dynoq

pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.slow]
# Started (and killed) as processes of their own, sharing no session (conftest.py):
OWN_DRIVERS = ("test_executors_get_dynoq_from_the_archive_only",)

ROOT = Path(__file__).resolve().parent.parent
JOB = str(Path(__file__).with_name("spark_cluster_job.py"))
CACHE = Path(tempfile.gettempdir()) / "dynoq-spark-env"
KEEP = 3  # archives kept in CACHE (other checkouts' builds included)
ROWS = 500  # per writer: format("dynoq") writes ids 0..ROWS-1, partition_sink the next ROWS
# Executors need pyarrow beside dynoq: Spark's Python data sources exchange Arrow batches
# with the JVM (write, read and planning alike), whatever the writer's `arrow` option.
# No pandas: executors run dynoq's Arrow paths without it. venv-pack packs the venv it
# is installed in, as Spark's docs do.
PACKAGES = ("pyarrow", "venv-pack")
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _sources() -> Iterator[Path]:
    yield ROOT / "pyproject.toml"
    for path in sorted((ROOT / "dynoq").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path


def _constraints() -> str:
    """This interpreter's versions of everything, so the executors run what the suite
    ran (and pip takes them from its cache); dynoq itself comes from the checkout."""
    pins = {
        d.metadata["Name"].lower(): d.version
        for d in importlib.metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() != "dynoq"
    }
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def _key(constraints: str) -> str:
    h = hashlib.sha256()
    # the venv's python is a link to this interpreter's base one: another Python, another env
    h.update(f"{sys._base_executable}\n{sys.version}\n{constraints}\n{PACKAGES}\n".encode())
    for path in _sources():
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _run(args: list[str], what: str, **kwargs: Any) -> str:
    """The command's output; its end and its errors' when it fails."""
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{what} failed:\n{done.stdout[-3000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _build(entry: Path) -> None:
    """The recipe of docs/spark.md, "On a cluster": a venv, dynoq and pyarrow installed
    into it, venv-pack; then the archive unpacked as the driver's ./environment."""
    CACHE.mkdir(exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=CACHE, prefix=f"{entry.name}.building-"))
    try:
        venv = tmp / "venv"
        _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
        (tmp / "constraints.txt").write_text(_constraints())
        pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install"]
        pins = ["-c", str(tmp / "constraints.txt")]
        _run(
            [*pip, "--quiet", "--no-warn-script-location", *pins, str(ROOT), *PACKAGES],
            "pip install into the packed venv",
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        archive = tmp / "dynoq-env.tar.gz"
        _run([str(venv / "bin" / "venv-pack"), "-p", str(venv), "-o", str(archive), "-q"], "pack")
        (tmp / "environment").mkdir()
        _run(["tar", "-xzf", str(archive), "-C", str(tmp / "environment")], "tar -x")
        shutil.rmtree(venv)
        try:
            tmp.rename(entry)  # whole or not at all: an entry that exists is complete
        except OSError:
            if not entry.is_dir():
                raise  # not a concurrent build of the same key that won the race
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _prune(keep: Path) -> None:
    entries = sorted(
        (p for p in CACHE.iterdir() if p != keep and ".building-" not in p.name),
        key=lambda p: p.stat().st_mtime,
    )
    for old in entries[: max(0, len(entries) - (KEEP - 1))]:
        shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="module")
def packed_env() -> Path:
    """A cache entry: ``dynoq-env.tar.gz`` and ``environment/`` (the same, unpacked)."""
    entry = CACHE / _key(_constraints())
    if not entry.is_dir():
        _build(entry)
    os.utime(entry)  # in use: pruned last
    _prune(entry)
    return entry


@pytest.fixture
def spark_home(tmp_path: Path) -> Iterator[Path]:
    """pip's pyspark as SPARK_HOME (bin/, jars/, python/), but in a directory of the test:
    local-cluster's workers put the executors' working directories under
    $SPARK_HOME/work, which would be inside the venv's site-packages."""
    import pyspark

    home = tmp_path / "spark-home"
    home.mkdir()
    for part in ("bin", "jars", "python"):
        (home / part).symlink_to(Path(pyspark.__file__).parent / part)
    yield home
    shutil.rmtree(home / "work", ignore_errors=True)  # two unpacked archives: 400 MB


def _submit(spark_home: Path, packed_env: Path, submit_dir: Path, *args: str) -> dict[str, Any]:
    # Nothing of this process's Python may reach the executors: in local-cluster they
    # inherit the driver JVM's environment, and Spark puts $PYTHONPATH on their workers'
    # path.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON"))
        and k not in ("MASTER", "VIRTUAL_ENV", "JAVA_TOOL_OPTIONS")
    }
    env |= {"SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1"}
    env["JAVA_TOOL_OPTIONS"] = FAST_JVM
    command = [
        str(spark_home / "bin" / "spark-submit"),
        *("--master", "local-cluster[2,1,1024]"),
        *("--archives", f"{packed_env / 'dynoq-env.tar.gz'}#environment"),
        *("--conf", "spark.pyspark.python=./environment/bin/python"),
        # both executors up before the first task, so that both run some
        *("--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0"),
        *("--conf", "spark.ui.enabled=false"),
        JOB,
        *args,
    ]
    out = _run(command, "spark-submit", cwd=submit_dir, env=env)
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _under(path: str, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(root.resolve())


@pytest.mark.timeout(600)  # a first build of the archive, then three JVMs on a loaded machine
def test_executors_get_dynoq_from_the_archive_only(
    spark_home: Path, packed_env: Path, server_url: str, tmp_path: Path
) -> None:
    # Client mode: the driver, and the Python workers the driver's JVM starts to plan
    # format("dynoq") writes and reads, run ./environment/bin/python in the directory
    # spark-submit runs in: the same archive, unpacked there.
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    (submit_dir / "environment").symlink_to(packed_env / "environment")
    prefix, queue = f"dqt-{uuid.uuid4().hex[:12]}", "cluster"
    try:
        got = _submit(spark_home, packed_env, submit_dir, server_url, prefix, queue, str(ROWS))
        with dynoq.connect(server_url, prefix=prefix) as client:
            stats = client.queue(queue).stats()
    finally:
        delete_prefix(server_url, prefix)

    assert got["master"] == "local-cluster[2,1,1024]"
    # Every row of both writers arrived exactly once, and the read found each once.
    assert sorted(map(int, got["ids"])) == list(range(2 * ROWS)), Counter(got["ids"]).most_common(3)
    assert got["names"] == 2 * ROWS
    assert stats.ready == 2 * ROWS

    # The partition_sink's tasks: Python processes of both executors, none the driver,
    # each importing dynoq from the archive Spark unpacked in its working directory.
    driver, tasks = got["driver"], got["writers"]
    assert len(tasks) == 4
    work = spark_home / "work"
    assert len({t["cwd"] for t in tasks}) == 2, "both executors ran writing tasks"
    assert driver["pid"] not in {t["pid"] for t in tasks}
    for task in tasks:
        environment = Path(task["cwd"]) / "environment"
        assert _under(task["cwd"], work), task
        assert not Path(task["cwd"], "environment").is_symlink(), task  # Spark unpacked it
        assert _under(task["dynoq"], environment), task
        assert Path(task["python"]) == environment / "bin" / "python", task
        # nowhere else on their path could a dynoq come from
        assert task["dynoqs"] == [str(Path(task["dynoq"]).parents[1])], task
        for other in (ROOT, Path(sys.prefix), packed_env):
            assert not _under(task["dynoq"], other), (task, other)
    # ... and the driver's from the same archive, unpacked where spark-submit ran
    assert _under(driver["dynoq"], packed_env / "environment"), driver
