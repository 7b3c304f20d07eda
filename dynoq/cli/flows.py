"""The command that looks at a workflow: dynoq flow ID."""

from __future__ import annotations

import sys
from typing import Any

import click

from .._core.calls import Batch
from .._core.flows import MEMBERS_PAGE, FlowMember, call_state
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
    rows = _rows(client, handle.members())
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


def _rows(client: Any, members: list[FlowMember]) -> list[dict[str, Any]]:
    """Each call as the command shows it: a started call's state is its task's, read
    from its queue (waiting, delayed, running, retrying, dead...), a page of them a
    round trip."""
    queues = {name: client.open_existing(name) for name in {m.call.queue for m in members}}
    started = [m for m in members if m.state == "started" and queues[m.call.queue]]
    tasks: dict[str, TaskInfo] = {}
    for page in range(0, len(started), MEMBERS_PAGE):
        part = started[page : page + MEMBERS_PAGE]
        reads = [call_state(queues[m.call.queue].ops, m.id) for m in part]
        tasks.update(zip((m.id for m in part), client.backend.run(Batch(reads)), strict=True))
    rows = []
    for m in members:
        task = tasks.get(m.id)
        rows.append(
            {
                "leaf": m.leaf,
                "id": m.id,
                "task": m.task,
                "state": m.state if task is None else f"started: {task.state.value}",
                "attempts": None if task is None else task.attempts,
                "size": m.size,
            }
        )
    return rows
