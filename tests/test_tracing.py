"""OpenTelemetry: spans around push, receive, process and ack, and the trace carried in
the message's headers from the producer to the handler. Each run is its own process: a
tracer provider is process-wide, and would trace every other test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).with_name("traced_run.py"))


@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_trace_runs_from_push_to_the_handler(
    url: str, prefix: str, make_client: object, api: str
) -> None:
    done = subprocess.run(
        [sys.executable, SCRIPT, url, prefix, api], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["seen"] == [out["trace"]]  # the handler runs inside the producer's trace
    by_name = {s["name"]: s for s in out["spans"]}
    assert {"push traced", "process traced", "ack traced"} <= set(by_name)
    push = by_name["push traced"]
    assert push["attributes"]["messaging.message.id"] == out["id"]
    assert push["kind"] == "PRODUCER" and push["trace"] == out["trace"]
    assert by_name["process traced"]["trace"] == out["trace"] and out["left"] == 0


def test_no_cost_without_the_extra() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import dynoq.tracing as t\n"
        "assert not t.ENABLED and t.inject({'a': 1}) == {'a': 1}\n"
        "with t.span('push', 'q'): pass\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("bad", [["not", "a", "dict"], "text", 5])
def test_bad_headers_stay_a_typed_error_with_tracing(bad: object) -> None:
    from dynoq import tracing

    assert tracing.inject(bad) is bad  # type: ignore[arg-type]  # the codec refuses it
