"""Every script in examples/ runs to completion (on the session's embedded server), and the
README's quick start is examples/quickstart.py, verbatim, so neither can rot."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import delete_prefix

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
EXPECT = {  # a line each example prints when it did what it says
    "quickstart.py": "event shipped of order 42",
    "delay_and_cancel.py": "fired after its delay: [1]",
    "ordered_events.py": "handled in order: ['created', 'paid', 'shipped']",
    "consumer_group.py": "handled per worker:",
    "spark_sink.py": "queued 100 emails",
    "tasks.py": "sent 3 emails; retried: ['bob@flaky.example.org']",
    "transactional_outbox.py": "delivered: ['A-1', 'A-3']",
    "fastapi_app.py": "each ran once: True",
}
PREFIXES = (
    "shop",
    "timers",
    "ordered",
    "group-demo",
    "spark-demo",
    "tasks-demo",
    "outbox",
    "fastapi-demo",
)


def test_every_example_is_checked() -> None:
    assert len(EXAMPLES) >= 5
    assert {p.name for p in EXAMPLES} == set(EXPECT)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path, embedded_server: Any) -> None:
    if script.name == "spark_sink.py":
        pytest.importorskip("pyspark")
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    env = {**os.environ, "DYNOQ_URL": url, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        for prefix in PREFIXES:
            delete_prefix(url, prefix)
    assert done.returncode == 0, done.stderr[-3000:]
    assert EXPECT[script.name] in done.stdout, done.stdout
    if script.name == "quickstart.py":  # the lower priority value first, across shards
        got = [line for line in done.stdout.splitlines() if line.startswith("got")]
        assert got == [
            "got {'order': 7, 'vip': True}",
            "got {'order': 8}",
            "got {'order': 9}",
            "got {'order': 42} after its delay",
        ], done.stdout
        assert "left: 0 events, 0 orders" in done.stdout


def test_readme_quick_start_is_the_example_verbatim() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert (ROOT / "examples" / "quickstart.py").read_text() in blocks
