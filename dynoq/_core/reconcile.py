"""Reconciling flows (pure: no I/O): ending what nobody will end. A flow's call whose
message was lost where no worker saw it (dead-lettered by its expiry, removed, its queue
deleted) never ends by itself, and a call its pusher died before pushing never starts;
a reconcile finds both from the flow's calls and their states on their queues. A waiting
handle runs it (``FlowHandle.result``), and the sweeper for every running flow where no
call ended for a while (:func:`look`), so a flow ends without a waiter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import ConnectionFailed, DynoqError
from . import validate
from .calls import Batch, Cmd, Flow, server_time
from .canvas import MAX_NODES
from .flows import (
    MEMBERS_PAGE,
    FlowInfo,
    FlowMember,
    Member,
    call_state,
    check_flow_id,
    fail,
    failure_marker,
    follow,
    members,
    pushed,
    pushes,
    state,
    track,
)
from .keys import running_flows_key
from .queue import QueueOps
from .tasks import TaskInfo, TaskState

LOOK_PAGE = 100  # running flows one sweeper's look reads (the longest unlooked first)
SEEN_CAP = 100_000  # flows a sweeper remembers the progress of (forgets all when over)


def read_members(
    prefix: str, flow_id: str, limit: int, most: int | None = None
) -> Flow[tuple[str | None, list[FlowMember]]]:
    """A flow's status and its calls (the first ``most`` or so: whole pages), read a page
    of plan ids at a time: a page without a call ends it (inner nodes are never a page's
    worth in a row: MAX_DEPTH)."""
    status, first = None, 0
    found: list[FlowMember] = []
    while first < MAX_NODES and (most is None or len(found) < most):
        status, page = yield members(prefix, flow_id, limit, first)
        if not page:
            break
        found += page
        first += MEMBERS_PAGE
    return status, found


def settle(
    prefix: str,
    flow_id: str,
    limit: int,
    status: str | None,
    found: Sequence[FlowMember],
    ops_of: Callable[[str], QueueOps | None],
) -> Flow[int]:
    """Reconcile a flow (its ``status`` and calls as :func:`read_members` read them): a
    started call whose message was dead-lettered where no worker saw it (its delivery
    expired past its retries), cancelled, or is gone (removed, cleared, its queue
    deleted) fails, and one due to start and never pushed (its pusher died) is pushed;
    calls on queues ``ops_of`` does not know are left. How many calls it settled.
    Safe at any time: a call's first end counts (lib/flow.lua) and a call is pushed
    once (flow-push), so racing the call's own worker changes nothing."""
    started = [m for m in found if m.state == "started"] if status == "running" else []
    settled = 0
    for page in range(0, len(started), MEMBERS_PAGE):  # one round trip of states a page
        known = [
            (m, ops)
            for m in started[page : page + MEMBERS_PAGE]
            if (ops := ops_of(m.call.queue)) is not None
        ]
        if not known:
            continue
        infos: list[TaskInfo] = yield Batch([call_state(ops, m.id) for m, ops in known])
        for (m, ops), info in zip(known, infos, strict=True):
            marker = yield from _lost(m, ops, info)
            if marker is None:
                continue
            if marker:
                step = yield fail(prefix, Member(flow_id, m.leaf), marker, limit)
                calls, _ = follow(step, flow_id, prefix, ops_of)
            else:  # due to start and never pushed: pushed now (once, as always)
                calls, _ = pushes(flow_id, [(m.leaf, m.call)], m.has_input, m.input, ops_of)
            if calls:
                yield Batch(calls)
            settled += 1
    return settled


def _lost(m: FlowMember, ops: QueueOps, info: TaskInfo) -> Flow[bytes | None]:
    """What a started call's state on its queue asks: its failure marker (it will never
    end by itself), b"" (never pushed: push it), or None (it runs or waits: nothing)."""
    if info.state is TaskState.DEAD or info.state is TaskState.CANCELLED:
        why = info.failure.error if info.failure else f"it is {info.state.value}"
        kind = info.failure.error_type if info.failure else "DeadLetter"
        return failure_marker(m.task, m.id, None, f"{kind}: {why}")
    if info.state is not TaskState.UNKNOWN:
        return None
    if (yield pushed(ops, m.id)):
        gone = "its message is gone (removed, cleared, or its queue deleted)"
        return failure_marker(m.task, m.id, None, gone)
    return b""


def reconcile(
    prefix: str, flow_id: str, limit: int, ops_of: Callable[[str], QueueOps | None]
) -> Flow[int]:
    """Read a flow's calls and reconcile it (:func:`settle`)."""
    status, found = yield from read_members(prefix, flow_id, limit)
    return (yield from settle(prefix, flow_id, limit, status, found, ops_of))


def _flow_id(raw: bytes | str) -> str | None:
    """A running flow's id as the set holds it, or None: no flow has it."""
    try:
        return check_flow_id(raw.decode() if isinstance(raw, bytes) else raw)
    except (DynoqError, UnicodeDecodeError):
        return None


def look(
    prefix: str,
    limit: int,
    ops_of: Callable[[str], QueueOps | None],
    seen: dict[str, int],
    every: float,
) -> Flow[tuple[int, list[tuple[str, DynoqError]]]]:
    """A sweeper's look at the running flows it is due to look at (up to LOOK_PAGE, the
    longest unlooked first): one that ended leaves the set; one where no call ended
    since this sweeper's last look (``seen``: flow id -> calls ended) is reconciled; each
    is looked at again ``every`` seconds later. So a flow whose call was lost where no
    worker saw it ends without a waiting handle. Returns how many calls it settled, and
    the flows whose reconcile failed (each looked at again later), with why."""
    now = yield server_time()
    key = running_flows_key(prefix)
    found = yield Cmd(("ZRANGEBYSCORE", key, "-inf", validate.to_ms(now), "LIMIT", 0, LOOK_PAGE))
    if not found:
        return 0, []
    # an id no flow has (planted by a raw ZADD: its role may write the set) is dropped
    planted = [raw for raw in found if _flow_id(raw) is None]
    due = [flow_id for raw in found if (flow_id := _flow_id(raw)) is not None]
    infos: list[FlowInfo] = (
        (yield Batch([state(prefix, flow_id, limit) for flow_id in due])) if due else []
    )
    settled, failed = 0, []
    after = [track(prefix, "end", flow_id) for flow_id in planted]
    if len(seen) > SEEN_CAP:
        seen.clear()  # a look or two later than it would have been: no harm
    for info in infos:
        if info.status != "running":
            seen.pop(info.id, None)
            after.append(track(prefix, "end", info.id))
            continue
        if seen.get(info.id) == info.ended:
            try:
                settled += yield from reconcile(prefix, info.id, limit, ops_of)
            except ConnectionFailed:
                raise
            except DynoqError as exc:  # this flow's trouble: the others are looked at
                failed.append((info.id, exc))
        seen[info.id] = info.ended
        after.append(track(prefix, "next", info.id, every))
    yield Batch(after)
    return settled, failed
