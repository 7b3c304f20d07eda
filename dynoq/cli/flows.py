"""The command that looks at a workflow: dynoq flow ID."""

from __future__ import annotations

import sys
from typing import Any

import click

from .._core import tasks as core_tasks
from .._core.flows import FlowMember
from .._core.jsontext import to_json
from .._core.tasks import TaskInfo
from .base import EXIT_FAILURE, JSON_OPTION, Env, cli, pass_env
from .output import print_table


@cli.command()
@click.argument("flow_id")
@JSON_OPTION
@pass_env
def flow(env: Env, flow_id: str, as_json: bool) -> None:
    """A workflow (a chain, group or chord of tasks): its status, its result or first
    failure, and each task call: its id, task, state (pending, started, succeeded,
    failed; a started one's state on its queue), attempts and the size of its value.
    Exits 1 for a flow unknown (ended longer ago than it is kept, or never was)."""
    client = env.client()
    handle = client.flow(flow_id)
    info = handle.info()
    if info.status == "unknown":
        click.echo(f"flow {flow_id!r} is unknown (ended longer ago than it is kept, or never was)")
        sys.exit(EXIT_FAILURE)
    rows = [_member(client, m) for m in handle.members()]
    report: dict[str, Any] = {
        "id": flow_id,
        "status": info.status,
        "calls": info.calls,
        "ended": info.ended,
        "result": info.result,
        "failure": None if info.failure is None else str(info.failure),
        "members": rows,
    }
    if as_json:
        click.echo(to_json(report, indent=2))
        return
    click.echo(f"flow {flow_id}: {info.status}, {info.ended} of {info.calls} calls ended")
    if info.failure is not None:
        click.echo(f"failed: {info.failure}")
    print_table(
        f"calls of flow {flow_id!r}",
        ["id", "task", "state", "attempts", "value bytes"],
        [
            [
                r["id"],
                r["task"],
                r["state"],
                str(r["attempts"] if r["attempts"] else "-"),
                str(r["size"] or "-"),
            ]
            for r in rows
        ],
    )


def _member(client: Any, m: FlowMember) -> dict[str, Any]:
    """One call as the command shows it: a started call's state is its task's, read from
    its queue (waiting, delayed, running, retrying, dead...)."""
    state, attempts = m.state, None
    if m.state == "started":
        q = client.open_existing(m.call.queue)
        if q is not None:
            shard = q.ops.shard_for(m.id)
            task: TaskInfo = q.backend.run(core_tasks.state(q.ops, shard, m.id))
            state, attempts = f"started: {task.state.value}", task.attempts
    return {
        "leaf": m.leaf,
        "id": m.id,
        "task": m.task,
        "state": state,
        "attempts": attempts,
        "size": m.size,
    }
