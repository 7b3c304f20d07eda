"""The tasks of benchmarks/chaos_flows.py, run by ``dynoq worker --tasks
benchmarks.chaos_flow_app:app`` processes: a chord's members and callback, a chain's
steps, each on its own queue (the callbacks' queue counts what was pushed to it)."""

from __future__ import annotations

import json
import os
from typing import Any

import dynoq

app = dynoq.Tasks(None, queue="members")


@app.task(name="member")
def member(i: int) -> int:
    return i


@app.task(name="step", queue="steps")
def step(x: int) -> int:
    return x + 1


@app.task(name="collect", queue="callbacks")
def collect(values: list[Any], run: int) -> int:
    """A chord's callback: notes what it got (each run of it: a call runs at least once)."""
    assert app.client is not None
    note = {"run": run, "n": len(values), "sum": sum(values), "pid": os.getpid()}
    app.client.redis.rpush(f"{app.client.prefix}:collected", json.dumps(note))
    return len(values)


@app.task(name="last", queue="callbacks")
def last(x: int) -> int:
    """A chain's last step."""
    return x
