"""Workflows as they run (pure: no I/O), shared by both flavors: the requests that store
a flow, advance it, push its calls once, and read or stop it. Its shapes and its plan
(each call's path, each node's entries) are :mod:`dynoq._core.canvas`'s.

When a call of a flow returns, its worker hands the value to lua/flow-advance-2.lua, which
walks the path up in one script (lua/lib/flow.lua): a chain step that has a next one says
"start it with this value"; a group counts its member (once: HSETNX) and, when the last
one ended, its value is the members' values in order, and the walk goes on; past the root
the flow ended with that value. The worker then pushes the entry leaves of what starts,
each with an id made of the flow's and the leaf's, through lua/flow-push-11.lua, which
pushes a call once in the flow's lifetime. So the next step runs once however often a call
runs: a duplicate delivery, a worker killed between its return and its ack, or two workers
ending the last two members of a group at once all walk the same path with the first
run's values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import msgpack

from ..errors import (
    InvalidArgument,
    OrderedQueueError,
    ResultNotKept,
    TaskCancelled,
    TaskFailed,
)
from ..message import Message
from . import codec, tasks, validate
from .calls import Call, Cmd, pairs, text
from .canvas import FLOW_FIELD, MAX_DEPTH, MAX_NODES, Leaf, Plan
from .keys import FlowKeys, flows_key, once_key, running_flows_key
from .lua import script
from .queue import QueueOps
from .retry import DeadLetter
from .tasks import TaskKeys, by_id
from .validate import MAX_BATCH

_CREATE, _ADVANCE = script("flow-create"), script("flow-advance")
_STATE, _PUSH = script("flow-state"), script("flow-push")
_CANCEL, _MEMBERS = script("flow-cancel"), script("flow-members")
_COUNT, _TRACK = script("flow-count"), script("flow-track")

FLOW_TTL = 7 * 86400.0  # seconds a flow may run; its plan and state go after that
FLOW_KEEP = 86400.0  # seconds its state and result are kept once it ended
MEMBERS_PAGE = 1000  # plan ids one flow-members call looks at (lib/bounds.lua MAX_BATCH)
PUSHES_PAGE = 1000  # a start's pushes one pipeline sends (the first meets NOSCRIPT alone)
CREATE_FIELDS = 2000  # plan fields one flow-create call writes (lib/bounds.lua 2 * MAX_BATCH)
RECONCILE_EVERY = 1.0  # seconds without a call ending before a waiting handle reconciles
FIRST_LOOK = 2.0  # seconds from a flow's start to a sweeper's first look at it

# -- requests -------------------------------------------------------------------------------


def new_flow_id() -> str:
    """A flow's id: random, with no '}' (its keys' hash tag ends where it should), never
    starting with '-' (``dynoq flow ID`` would read it as an option)."""
    flow_id = codec.new_id()
    return "_" + flow_id[1:] if flow_id.startswith("-") else flow_id


def check_flow_id(value: object) -> str:
    """A flow id as a handle takes it: text without '}' (its keys' hash tag)."""
    flow_id = validate.check_text(value, "flow id", max_length=64)
    if "}" in flow_id or "{" in flow_id:
        raise InvalidArgument("a flow id holds no '{' or '}'")
    return flow_id


def leaf_id(flow_id: str, leaf: int) -> str:
    """The message id of a flow's call: the same whoever pushes it, so it is pushed once."""
    return f"{flow_id}.{leaf}"


def check_keep(keep_result: float | None) -> float:
    """Seconds a flow's state and result are kept once it ended: ``keep_result`` (at
    least a millisecond), or FLOW_KEEP when None."""
    if keep_result is None:
        return FLOW_KEEP
    return validate.check_seconds(keep_result, "keep_result", minimum=0.001)


def create(prefix: str, flow_id: str, p: Plan, keep: float = FLOW_KEEP) -> list[Call]:
    """Store a flow's plan (lua/flow-create-2.lua), its state kept ``keep`` seconds once
    it ended: calls to send one after the other (each a part of at most CREATE_FIELDS
    fields and MAX_BATCH first calls; the last makes the flow run); each reply is True
    when stored."""
    fields, roots = p.fields(), p.roots
    parts = max(1, -(-len(fields) // (2 * CREATE_FIELDS)), -(-len(roots) // MAX_BATCH))
    head = [validate.to_ms(FLOW_TTL), len(p.leaves), max(1, validate.to_ms(keep))]
    keys = FlowKeys.of(prefix, flow_id)
    return [
        _CREATE.call(
            keys,
            [
                *head,
                ",".join(map(str, roots[i * MAX_BATCH : (i + 1) * MAX_BATCH])),
                "1" if i == parts - 1 else "0",
                *fields[i * 2 * CREATE_FIELDS : (i + 1) * 2 * CREATE_FIELDS],
            ],
            lambda r: int(r) == 1,
        )
        for i in range(parts)
    ]


def check_queue(ops: QueueOps) -> None:
    """A flow's step may go to this queue (a message-group queue's pushes place by key,
    where a push by id does not look, as task-push's)."""
    if ops.keyed:
        raise OrderedQueueError(
            f"a flow's step cannot go to {ops.name!r}, a message-group queue "
            "(ordered='key'), yet: give its task another queue"
        )


def push(ops: QueueOps, flow_id: str, leaf: int, spec: Leaf, given: bool, value: Any) -> Call:
    """Push a flow's call once in its lifetime (lua/flow-push-11.lua)."""
    check_queue(ops)
    msg_id = leaf_id(flow_id, leaf)
    out = ops.prepare(Message(spec.payload(flow_id, leaf, given, value), id=msg_id))
    shard = ops.shard_for(out.routing)
    once = once_key(ops.keys.prefix, ops.keys.tag or ops.name, shard, msg_id)
    return _PUSH.call(
        SimpleNamespace(**vars(TaskKeys.of(ops, shard, msg_id)), once=once),
        [*by_id(ops, out), validate.to_ms(FLOW_TTL)],
        ops.checked(f"a flow's push to {ops.name!r}", lambda r: int(r) == 1),
    )


@dataclass(frozen=True)
class Member:
    """What a flow's call message says: its flow and its leaf."""

    flow_id: str
    leaf: int


def member_of(msg: Message) -> Member | None:
    """The flow a task message belongs to, or None; a malformed mark dead-letters it."""
    payload = msg.payload
    mark = payload.get(FLOW_FIELD) if type(payload) is dict else None
    if mark is None:
        return None
    if not (
        type(mark) is list
        and len(mark) == 2
        and type(mark[0]) is str
        and 0 < len(mark[0]) <= 64
        and "}" not in mark[0]
        and type(mark[1]) is int
        and 0 <= mark[1] < MAX_NODES
    ):
        raise DeadLetter(f"message {msg.id!r} carries a malformed flow mark")
    return Member(mark[0], mark[1])


@dataclass(frozen=True)
class Step:
    """What flow-advance said: ``kind`` "wait", "start" (``node``'s entry ``leaves``
    with ``value``), "succeeded", "failed" (the flow ended so, now or before), "gone"
    (the flow is unknown) or "stopped" (``status``: cancelled)."""

    kind: str
    node: int = -1
    value: Any = None
    leaves: tuple[tuple[int, Leaf], ...] = ()
    status: str = ""
    ended_now: bool = False  # "succeeded" or "failed": this call ended the flow


_ENDS = {0: "wait", 2: "succeeded", 3: "failed", -1: "gone"}
_WAIT = Step("wait")  # most replies: one shared


def _step(reply: Sequence[Any], limit: int) -> Step:
    """One call's reply of lua/flow-advance-2.lua."""
    code = int(reply[0])
    if code == 0:
        return _WAIT
    if code in _ENDS:
        return Step(_ENDS[code], ended_now=len(reply) > 1 and int(reply[1]) == 1)
    if code == -2:
        return Step("stopped", status=text(reply[1]))
    found = reply[3:]
    leaves = tuple((int(found[i]), Leaf.read(found[i + 1], limit)) for i in range(0, len(found), 2))
    return Step("start", int(reply[1]), codec.unpack(reply[2], limit), leaves)


def advance_many(
    prefix: str, flow_id: str, limit: int, ends: Sequence[tuple[int, bytes, bool]]
) -> Call:
    """Record the ends of calls of one flow, each (leaf, value or failure marker,
    failed), and walk their paths, in one script call (lua/flow-advance-2.lua, MAX_BATCH
    at most); the reply is a :class:`Step` per end, in order."""
    args: list[Any] = []
    for leaf, value, failed in ends:
        args += [leaf, value, "1" if failed else "0"]
    return _ADVANCE.call(
        FlowKeys.of(prefix, flow_id), args, lambda reply: [_step(r, limit) for r in reply]
    )


def advance(prefix: str, member: Member, value: bytes, limit: int, *, failed: bool = False) -> Call:
    """Record one call's value (or, ``failed``, its failure marker) and walk its path;
    the reply is a :class:`Step`."""
    call = advance_many(prefix, member.flow_id, limit, [(member.leaf, value, failed)])
    call.parse = lambda reply: _step(reply[0], limit)
    return call


def pushes(
    flow_id: str,
    leaves: Sequence[tuple[int, Leaf]],
    given: bool,
    value: Any,
    ops_of: Callable[[str], QueueOps | None],
) -> tuple[list[Call], list[str]]:
    """The pushes of a flow's calls that start (``given``: with ``value`` as their
    input), to the queues ``ops_of`` knows; and the queues it does not know."""
    calls, unknown = [], []
    for leaf, spec in leaves:
        ops = ops_of(spec.queue)
        if ops is None:
            unknown.append(spec.queue)
        else:
            calls.append(push(ops, flow_id, leaf, spec, given, value))
    return calls, unknown


def follow(
    step: Step, flow_id: str, prefix: str, ops_of: Callable[[str], QueueOps | None]
) -> tuple[list[Call], list[str]]:
    """What a walk's step asks to send: the pushes of what starts (to the queues
    ``ops_of`` knows), or the count of the flow's end (and its leaving the running
    flows); and the queues it does not know (their calls are left to a reconcile)."""
    if step.kind == "start":
        return pushes(flow_id, step.leaves, True, step.value, ops_of)
    if step.ended_now:
        return ended(prefix, flow_id, step.kind), []
    return [], []


def encode_value(value: Any, limit: int) -> bytes:
    """A call's return value as the flow carries it (msgpack, within the size limit);
    one it cannot carry dead-letters the call (running it again would not help)."""
    try:
        packed: bytes = msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise DeadLetter(
            f"a flow's step returned {type(value).__name__}, which msgpack cannot carry "
            f"to the next step ({exc}): return bytes, str, numbers, bools, None, lists "
            "or dicts"
        ) from None
    if len(packed) > limit:
        raise DeadLetter(f"a flow's step returned {len(packed)} bytes, over the limit of {limit}")
    return packed


# -- failures --------------------------------------------------------------------------------

FAILED = "__dynoq_failed__"  # a failure marker's one key: {FAILED: [task, id, type, error]}


def failure_marker(task: str, msg_id: str, error: BaseException | None, why: str = "") -> bytes:
    """What a failed call leaves in its flow: the group of a chord that continues
    (on_failure="continue") passes it on, as a TaskFailed, to the callback; a flow that
    failed keeps its first one (``h.result()`` raises it)."""
    kind = type(error).__name__ if error is not None else "DeadLetter"
    detail = str(error) if error is not None else why
    packed: bytes = msgpack.packb({FAILED: [task, msg_id, kind, detail[:2000]]}, use_bin_type=True)
    return packed


def failure_of(marker: Any) -> TaskFailed | None:
    """The TaskFailed a failure marker stands for (None: it is no marker)."""
    if type(marker) is not dict or len(marker) != 1 or FAILED not in marker:
        return None
    fields = marker[FAILED]
    if not (type(fields) is list and len(fields) == 4 and all(type(f) is str for f in fields)):
        return None
    task, msg_id, kind, detail = fields
    return TaskFailed(f"task {task!r} (id {msg_id!r}) failed: {kind}: {detail}", kind, detail)


def with_failures(value: Any, depth: int = 0) -> Any:
    """A step's input with each failure marker made a TaskFailed (a chord's callback
    that continues gets them in the failed members' places; groups nest: lists of
    lists, MAX_DEPTH deep at most)."""
    failure = failure_of(value)
    if failure is not None:
        return failure
    if type(value) is list and depth < MAX_DEPTH:
        return [with_failures(v, depth + 1) for v in value]
    return value


def fail(prefix: str, member: Member, marker: bytes, limit: int) -> Call:
    """A flow's call was dead-lettered: record its failure marker and walk up."""
    return advance(prefix, member, marker, limit, failed=True)


# -- what a handle reads and does -------------------------------------------------------------


@dataclass(frozen=True)
class FlowInfo:
    """A flow's state: ``status`` running, succeeded, failed, cancelled, or unknown
    (expired, or never was); how many task calls it makes and how many ended; its
    result once it succeeded; ``failure``, once it failed: the first failed call's
    TaskFailed."""

    id: str
    status: str
    calls: int = 0
    ended: int = 0
    result: Any = None
    failure: TaskFailed | None = None


def state(prefix: str, flow_id: str, limit: int) -> Call:
    """A flow's state (lua/flow-state-2.lua); the reply is a :class:`FlowInfo`."""

    def parse(reply: Sequence[Any]) -> FlowInfo:
        status, leaves, ended, result, failure = reply
        if not status:
            return FlowInfo(flow_id, "unknown")
        return FlowInfo(
            flow_id,
            text(status),
            int(leaves or 0),
            int(ended or 0),
            codec.unpack(result, limit) if result else None,
            failure_of(codec.unpack(failure, limit)) if failure else None,
        )

    return _STATE.call(FlowKeys.of(prefix, flow_id), [], parse)


def cancel(prefix: str, flow_id: str) -> Call:
    """Stop a running flow (lua/flow-cancel-2.lua); the reply is True when it ran."""
    return _CANCEL.call(FlowKeys.of(prefix, flow_id), [], lambda r: int(r) == 1)


@dataclass(frozen=True)
class FlowMember:
    """One task call of a flow: its ``leaf`` (its place in the plan), its message ``id``,
    its ``task``, and ``state``: "pending" (not started), "started" (pushed: its task's
    handle says more), "succeeded" or "failed"; ``size``: bytes of an ended call's value
    (msgpack) as the flow keeps it; ``path``: the chains and groups it is in, innermost
    first (lib/flow.lua: "node,kind,index,size,next" each, ';' between)."""

    leaf: int
    id: str
    task: str
    state: str
    size: int
    path: str = field(repr=False, compare=False)
    call: Leaf = field(repr=False, compare=False)
    input: Any = field(default=None, repr=False, compare=False)
    has_input: bool = field(default=False, repr=False, compare=False)

    @property
    def nesting(self) -> list[tuple[int, str]]:
        """The chains and groups it is in, outermost first: (node, "chain" or "group")."""
        kinds = {"c": "chain", "g": "group", "h": "group", "l": "group", "m": "group"}
        levels = reversed(self.path.split(";")) if self.path else ()
        return [(int(lv.split(",")[0]), kinds.get(lv.split(",")[1], "?")) for lv in levels]


_MEMBER_STATES = {b"p": "pending", b"s": "started", b"d": "succeeded", b"x": "failed"}


def members(prefix: str, flow_id: str, limit: int, first: int = 0) -> Call:
    """The calls of a flow among the plan's ids ``first`` to ``first + MEMBERS_PAGE``
    (a handle reads them page by page): the reply is (status, [FlowMember, ...]);
    status None for a flow unknown."""

    def parse(reply: Sequence[Any]) -> tuple[str | None, list[FlowMember]]:
        status = text(reply[0]) if reply[0] else None
        out = []
        for i in range(2, len(reply), 6):
            leaf, call, code, given = int(reply[i]), reply[i + 1], reply[i + 2], reply[i + 3]
            size, path = int(reply[i + 4]), text(reply[i + 5])
            spec = Leaf.read(call, limit)
            state = _MEMBER_STATES.get(code if isinstance(code, bytes) else code.encode(), "?")
            value = codec.unpack(given, limit) if given else None
            out.append(
                FlowMember(
                    leaf,
                    leaf_id(flow_id, leaf),
                    spec.task,
                    state,
                    size,
                    path,
                    spec,
                    value,
                    bool(given),
                )
            )
        return status, out

    return _MEMBERS.call(FlowKeys.of(prefix, flow_id), [first, MEMBERS_PAGE], parse)


OUTCOMES = ("started", "succeeded", "failed", "cancelled")  # counted (lua/flow-count-1.lua)


def count(prefix: str, what: str) -> Call:
    """Count a flow's start or end (what Prometheus reads as dynoq_flows_total)."""
    return _COUNT.call(SimpleNamespace(flows=flows_key(prefix)), [what])


def ended(prefix: str, flow_id: str, outcome: str) -> list[Call]:
    """What the process that ended a flow sends after: its count by ``outcome``, and its
    leaving the running flows a sweeper looks at."""
    return [count(prefix, outcome), track(prefix, "end", flow_id)]


def track(prefix: str, what: str, flow_id: str, seconds: float = 0.0) -> Call:
    """The running flows a sweeper looks at (lua/flow-track-1.lua): ``what`` "start" (a
    flow starts: first looked at FIRST_LOOK seconds from now, its plan stored by then;
    entries older than a flow's lifetime are dropped), "end", or "next" (looked at: the
    next look ``seconds`` from now)."""
    if what == "start":
        times = [validate.to_ms(FIRST_LOOK), validate.to_ms(FLOW_TTL)]
    else:
        times = [validate.to_ms(seconds), 0]
    key = SimpleNamespace(running=running_flows_key(prefix))
    return _TRACK.call(key, [what, flow_id, *times], lambda r: int(r) == 1)


def counts(prefix: str) -> Cmd:
    """Flows started and ended under a prefix: {outcome: count}, every outcome."""

    def parse(reply: Any) -> dict[str, int]:
        found = {text(k): int(v) for k, v in pairs(reply or [])}
        return {what: found.get(what, 0) for what in OUTCOMES}

    return Cmd(("HGETALL", flows_key(prefix)), parse)


def call_state(ops: QueueOps, msg_id: str) -> Call:
    """The state of a flow's call on its queue (task-state: a flow's calls are routed by
    their id); the reply is a TaskInfo."""
    return tasks.state(ops, ops.shard_for(msg_id), msg_id)


def call_cancel(ops: QueueOps, msg_id: str, task: str) -> Call:
    """Take a flow's call off its queue if it has not started (task-cancel)."""
    return tasks.cancel(ops, ops.shard_for(msg_id), msg_id, task, 0)


def pushed(ops: QueueOps, msg_id: str) -> Cmd:
    """Whether a flow's call was pushed (its once marker exists)."""
    shard = ops.shard_for(msg_id)
    key = once_key(ops.keys.prefix, ops.keys.tag or ops.name, shard, msg_id)
    return Cmd(("EXISTS", key), lambda r: int(r) == 1)


def outcome(info: FlowInfo) -> Any:
    """``result()`` of a flow that is not running: its value, or the error that says
    why there is none."""
    if info.status == "succeeded":
        return info.result
    if info.status == "failed":
        if info.failure is not None:
            raise info.failure
        raise TaskFailed(f"flow {info.id!r} failed")
    if info.status == "cancelled":
        raise TaskCancelled(f"flow {info.id!r} was cancelled", "TaskCancelled")
    raise ResultNotKept(
        f"nothing is known of flow {info.id!r}: it ended longer ago than a flow is "
        "kept, or never was"
    )
