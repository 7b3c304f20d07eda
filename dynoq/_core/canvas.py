"""The shapes of a workflow and the plan it is stored as (pure: no I/O).

A flow is a tree: its leaves are task calls (:class:`Signature`), its inner nodes a
:class:`Chain` (each result is the next step's first argument) or a :class:`Group` (its
members run at once; its value is their results, in order); a chord is a chain of a group
and a callback. :func:`plan` numbers the nodes in pre-order and writes, for each leaf, its
*path* (each ancestor, what kind it is, the leaf's or the subtree's place in it, its size,
and in a chain the next step), and for each node its *entries* (the leaves that start when
it starts): what lua/lib/flow.lua walks. How a stored flow runs: dynoq/_core/flows.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ..errors import InvalidArgument, InvalidType, RecordError, TaskArgumentError
from . import codec

MAX_NODES = 10_100  # steps of one flow: task calls, chains and groups (lib/bounds.lua MAX_FLOW)
# Members of one group (lib/bounds.lua MAX_GROUP): the call that ends its last member
# gathers their values, 1.5-3 µs a member (15-22 ms at 10,000, 55-72 at 25,000, 220-335
# at 100,000: benchmarks/RESULTS.md), and no call may hold the server past ~50 ms
# (DESIGN §2.14): a larger group waits for a gather in pages.
MAX_MEMBERS = 10_000
# calls a step after a flow's first starts at once (one walk marks and returns them all:
# lib/flow.lua flow_start); a flow's first calls are written in bounded steps
MAX_STARTS = 10_000
MAX_DEPTH = 32  # nesting of chains and groups
FLOW_FIELD = "flow"  # a flow call's payload: {"task", "args", "kwargs", "flow": [id, leaf]}

Check = Callable[[Sequence[Any], Mapping[str, Any]], None]


class Shape:
    """What every shape of a flow does: ``a | b`` chains them, ``delay()`` starts it."""

    def __or__(self, other: Node) -> Chain:
        return chain(self, other)  # type: ignore[arg-type]  # (self is a Node)

    def delay(self, *, keep_result: float | None = None) -> Any:
        """Start this flow; a FlowHandle (awaitable on dynoq.asyncio). ``keep_result``:
        seconds its state and result are kept once it ended (default a day)."""
        return _app(self).start_flow(self, keep_result=keep_result)  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class Signature(Shape):
    """A task call to make later, as a step of a flow (``task.s(...)``): the task's name
    and queue, the call's arguments, and whether it takes the previous step's result as
    its first argument (``task.si(...)``: immutable, it does not). ``app`` sends flows
    (``delay``); ``check`` checks a call's arguments against the function."""

    task: str
    queue: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    immutable: bool
    app: Any = field(repr=False)
    check: Check = field(repr=False)


@dataclass(frozen=True, eq=False)
class Chain(Shape):
    """Steps run one after another; each result is the next step's first argument."""

    steps: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Group(Shape):
    """Members run at once; the group's value is their results, in order. A member
    that fails (dead-lettered) fails the group (``on_failure="fail"``), or takes its
    place as a :class:`dynoq.TaskFailed` value (``"continue"``: a chord's callback
    still runs)."""

    members: tuple[Node, ...]
    on_failure: str = "fail"


Node = Signature | Chain | Group


def _check_node(node: object, what: str) -> Node:
    if not isinstance(node, (Signature, Chain, Group)):
        raise InvalidType(
            f"{what} must be a task signature (task.s(...)), a chain or a group, "
            f"got {type(node).__name__}"
        )
    return node


def chain(*steps: Node) -> Chain:
    """``a | b | c``: a chain of steps (a chain given as a step is spliced in)."""
    flat: list[Node] = []
    for step in steps:
        step = _check_node(step, "a chain's step")
        flat.extend(step.steps if isinstance(step, Chain) else (step,))
    if not flat:
        raise InvalidArgument("a chain needs at least one step")
    return Chain(tuple(flat))


ON_FAILURE = ("fail", "continue")


def group(members: Iterable[Node], on_failure: str = "fail") -> Group:
    """Members that run at once."""
    if on_failure not in ON_FAILURE:
        raise InvalidArgument(f"on_failure must be 'fail' or 'continue', got {on_failure!r}")
    if isinstance(members, (Signature, Chain, Group)):
        raise InvalidType("group() takes an iterable of signatures: group([a.s(), b.s()])")
    out = tuple(_check_node(m, "a group's member") for m in members)
    if not out:
        raise InvalidArgument("a group needs at least one member")
    if len(out) > MAX_MEMBERS:
        raise InvalidArgument(f"a group holds at most {MAX_MEMBERS} members, got {len(out)}")
    return Group(out, on_failure)


def chord(members: Group | Iterable[Node], callback: Node, on_failure: str = "fail") -> Chain:
    """A group, then ``callback`` with the list of its members' results: a failed member
    fails the chord (``on_failure="fail"``: the callback never runs), or the callback
    gets a :class:`dynoq.TaskFailed` in its place (``"continue"``)."""
    g = group(members.members if isinstance(members, Group) else members, on_failure)
    return chain(g, _check_node(callback, "a chord's callback"))


def _app(node: Node) -> Any:
    while not isinstance(node, Signature):
        node = node.steps[0] if isinstance(node, Chain) else node.members[0]
    return node.app


# -- the plan -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """One task call of a flow: its task, queue, arguments, and whether it takes its
    input (the previous step's value) as its first argument."""

    task: str
    queue: str
    args: list[Any]
    kwargs: dict[str, Any]
    takes_input: bool

    def record(self) -> bytes:
        packed: bytes = msgpack.packb(
            [self.task, self.queue, self.args, self.kwargs, self.takes_input], use_bin_type=True
        )
        return packed

    @classmethod
    def read(cls, record: bytes, limit: int) -> Leaf:
        fields = codec.unpack(record, limit)
        task, queue, args, kwargs, takes = fields
        if not (type(task) is str and type(queue) is str and type(args) is list) or not (
            type(kwargs) is dict and type(takes) is bool
        ):
            raise RecordError("a flow's call record is malformed")
        return cls(task, queue, args, kwargs, takes)

    def payload(self, flow_id: str, leaf: int, given: bool, value: Any) -> dict[str, Any]:
        args = [value, *self.args] if given and self.takes_input else self.args
        return {"task": self.task, "args": args, "kwargs": self.kwargs, FLOW_FIELD: [flow_id, leaf]}


@dataclass
class Plan:
    """A flow as stored: its leaves in pre-order, each leaf's path (lua/flow-advance's
    text: ``parent,kind,index,size,next`` per ancestor, innermost first, ';' between),
    each node's entry leaves, and the root's."""

    leaves: dict[int, Leaf] = field(default_factory=dict)
    records: dict[int, bytes] = field(default_factory=dict)  # each leaf's, packed once
    paths: dict[int, str] = field(default_factory=dict)
    entries: dict[int, list[int]] = field(default_factory=dict)

    def queues(self) -> list[str]:
        """The queues its calls go to, sorted."""
        return sorted({leaf.queue for leaf in self.leaves.values()})

    @property
    def roots(self) -> list[int]:
        return self.entries[0]

    def fields(self) -> list[bytes | str]:
        """The plan hash's field/value pairs (lua/flow-create-2.lua)."""
        out: list[bytes | str] = []
        for leaf in self.leaves:
            out += [f"p:{leaf}", self.paths[leaf], f"l:{leaf}", self.records[leaf]]
        for node, leaves in self.entries.items():
            if node not in self.leaves:
                out += [f"e:{node}", ",".join(map(str, leaves))]
        return out


def _check_starts(entries: list[int]) -> None:
    """A step after a flow's first starts at most MAX_STARTS calls."""
    if len(entries) > MAX_STARTS:
        raise InvalidArgument(
            f"a step after a flow's first starts at most {MAX_STARTS} calls at once (this "
            f"one starts {len(entries)}): a larger group must be where the flow starts (a "
            "chord of it, then what follows)"
        )


def plan(root: Node) -> Plan:
    """Number the tree in pre-order and write its plan. Arguments are checked against
    each task's function, counting the input a step takes (not the flow's first steps,
    which get none). Refuses a tree of over MAX_NODES nodes or MAX_DEPTH levels."""
    out = Plan()
    level: dict[int, tuple[int, str]] = {}  # node -> (its parent, its place in it)
    ids = iter(range(MAX_NODES + 1))

    def walk(node: Node, depth: int, gets_input: bool) -> int:
        me = next(ids)
        if me >= MAX_NODES:
            raise InvalidArgument(
                f"a flow holds at most {MAX_NODES} steps (task calls, chains and groups)"
            )
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"a flow nests at most {MAX_DEPTH} chains and groups deep")
        if isinstance(node, Signature):
            takes = not node.immutable
            node.check([None, *node.args] if takes and gets_input else node.args, node.kwargs)
            leaf = Leaf(node.task, node.queue, list(node.args), node.kwargs, takes)
            try:
                out.records[me] = leaf.record()
            except (TypeError, ValueError, OverflowError) as exc:
                raise TaskArgumentError(
                    f"{node.task}(): an argument of this step cannot be sent ({exc}); "
                    "never a pickle: send what rebuilds it (an id, a string, a number)"
                ) from None
            out.leaves[me] = leaf
            out.entries[me] = [me]
            return me
        is_chain = isinstance(node, Chain)
        if isinstance(node, Chain):
            children, kind = node.steps, "c"
        else:  # "h": a group whose failed members pass on as markers; "l" and "m": the
            # two of a group of task calls alone (lib/flow.lua: values stored once)
            children = node.members
            calls = all(isinstance(child, Signature) for child in children)
            kind = ("l" if calls else "g") if node.on_failure == "fail" else ("m" if calls else "h")
        # a chain's first step gets the chain's input, the others the step before's value
        kids = [
            walk(child, depth + 1, True if is_chain and i else gets_input)
            for i, child in enumerate(children)
        ]
        for i, kid in enumerate(kids):
            after = kids[i + 1] if is_chain and i + 1 < len(kids) else -1
            level[kid] = (me, f"{me},{kind},{i},{len(kids)},{after}")
            if is_chain and i:
                _check_starts(out.entries[kid])
        starting = kids[:1] if is_chain else kids
        out.entries[me] = [leaf for kid in starting for leaf in out.entries[kid]]
        return me

    walk(root, 0, False)
    for leaf in out.leaves:
        path, node = [], leaf
        while node in level:
            node, place = level[node]
            path.append(place)
        out.paths[leaf] = ";".join(path)
    return out
