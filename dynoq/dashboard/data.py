"""What the pages read, through the client's backend and the core's read-only views.

Every read is bounded (``dynoq._core.inspect``): a page of a sorted set, the first entries
of a few shards merged, one registry page. Nothing here writes, but the two actions in
:meth:`Reader.replay` and :meth:`Reader.purge`, which the app only calls when actions are
allowed and the request passed the CSRF check.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from .._core import inspect
from .._core.jsontext import to_json
from .._core.keys import registry_key, topic_registry_key
from .._core.queue import QueueOps
from .._core.topics import TopicOps
from .._core.transactions import Prepared
from ..client import Client
from ..errors import LayoutError
from ..message import Message
from ..queue import Queue
from ..topic import Topic

MAX_SAMPLED_SHARDS = 8192  # shards whose stats one sample reads, over every queue
SHARD_PAGE = 100  # shards one queue page lists
LIST = 20  # entries of each list on a queue page
FLOW_MEMBERS = 1000  # calls a flow's page lists (its counts say how many it makes)
FLOW_RESULT_CHARS = 20_000  # of a flow's result the page shows


@dataclass(frozen=True)
class Source:
    """A queue the overview shows: a plain queue, or a topic's group queue (``topic``
    and ``group`` set; its name is ``<topic>:<group>[:<member>]``)."""

    name: str
    ops: QueueOps
    topic: str | None = None
    group: str | None = None
    mode: str | None = None

    @property
    def shards(self) -> int:
        return self.ops.settings.shards


@dataclass(frozen=True)
class Sources:
    """The queues one sample reads, and how many exist (some may be left out)."""

    queues: list[Source]
    queue_count: int
    topic_count: int
    left_out: int  # queues or group queues not sampled (past the limits)
    # Queues and topics this version cannot read (LayoutError), each with why: shown by
    # name, so that one of them never hides the others.
    unreadable: tuple[tuple[str, str], ...] = ()


class Reader:
    """The dashboard's reads (and its two actions) on one client. Thread-safe."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.backend = client.backend
        self.prefix = client.prefix
        self._queues: dict[str, QueueOps] = {}
        self._topics: dict[str, TopicOps] = {}
        self._lock = threading.Lock()

    # -- workflows -----------------------------------------------------------------------

    def flow(self, flow_id: str) -> dict[str, Any] | None:
        """A flow as its page shows it (JSON-ready), or None when it is unknown."""
        handle = self.client.flow(flow_id)
        info = handle.info()
        if info.status == "unknown":
            return None
        result = to_json(info.result, indent=2) if info.status == "succeeded" else None
        if result is not None and len(result) > FLOW_RESULT_CHARS:  # a group of 100,000
            result = result[:FLOW_RESULT_CHARS] + "\n... (dynoq flow ID --json: all of it)"
        return {
            "id": flow_id,
            "status": info.status,
            "calls": info.calls,
            "ended": info.ended,
            "shown": min(info.calls, FLOW_MEMBERS),
            "result": result,
            "failure": None if info.failure is None else str(info.failure),
            "members": [
                {
                    "leaf": m.leaf,
                    "id": m.id,
                    "task": m.task,
                    "queue": m.call.queue,
                    "state": m.state,
                    "size": m.size,
                    "depth": len(m.nesting),
                    "within": " / ".join(f"{kind} {node}" for node, kind in m.nesting),
                }
                for m in handle.members(limit=FLOW_MEMBERS)
            ],
        }

    # -- opening -------------------------------------------------------------------------

    def queue(self, name: str) -> Queue | None:
        """The registered queue ``name``, or a topic's group queue ``<topic>:<group>...``;
        None when there is none (nothing is ever created)."""
        if ":" in name:
            topic = self.topic(name.partition(":")[0])
            if topic is None or name not in self.backend.drive(topic.ops.targets()):
                return None
            return Queue(self.backend, topic.ops.target_queue(name))
        return self.client.open_existing(name)

    def topic(self, name: str) -> Topic | None:
        return self.client.open_existing_topic(name)

    def server_time(self) -> float:
        return self.client.server_time()

    # -- the overview's queues -----------------------------------------------------------

    def sources(self, limit: int) -> Sources:
        """Up to ``limit`` queues and topic group queues (and at most MAX_SAMPLED_SHARDS
        shards in all) for the overview and the charts."""
        names, queue_count = self.backend.drive(inspect.names(registry_key(self.prefix), limit))
        topics, topic_count = self.backend.drive(
            inspect.names(topic_registry_key(self.prefix), limit)
        )
        found: list[Source] = []
        unreadable: list[tuple[str, str]] = []
        for name in names:
            try:
                q = self._queue_ops(name)
            except LayoutError as exc:
                unreadable.append((name, str(exc)))
                continue
            if q is not None:
                found.append(Source(name, q))
        for topic in topics:
            try:
                t = self._topic_ops(topic)
            except LayoutError as exc:
                unreadable.append((topic, str(exc)))
                continue
            if t is None:
                continue
            targets = self.backend.drive(t.targets())
            for target, (group, mode, _) in sorted(targets.items()):
                found.append(Source(target, t.target_queue(target), topic, group, mode))
        chosen, shards = [], 0
        for s in found[:limit]:
            if shards + s.shards > MAX_SAMPLED_SHARDS:
                break
            chosen.append(s)
            shards += s.shards
        left_out = (queue_count - len(names)) + (len(found) - len(chosen))
        return Sources(chosen, queue_count, topic_count, max(left_out, 0), tuple(unreadable))

    def forget(self) -> None:
        """Drop the queues and topics read so far (one of them is gone: QueueGone)."""
        with self._lock:
            self._queues.clear()
            self._topics.clear()

    def _queue_ops(self, name: str) -> QueueOps | None:
        with self._lock:
            known = self._queues.get(name)
        if known is None:
            q = self.client.open_existing(name)
            if q is None:
                return None
            known = q.ops
            with self._lock:
                self._queues[name] = known
        return known

    def _topic_ops(self, name: str) -> TopicOps | None:
        with self._lock:
            known = self._topics.get(name)
        if known is None:
            t = self.client.open_existing_topic(name)
            if t is None:
                return None
            known = t.ops
            with self._lock:
                self._topics[name] = known
        return known

    # -- one queue -----------------------------------------------------------------------

    def leases(self, q: Queue, shards: list[int]) -> list[inspect.ShardLease]:
        return self.backend.run(inspect.leases(q.ops, shards))  # type: ignore[no-any-return]

    def page(
        self, q: Queue, kind: str, *, shard: int | None, offset: int = 0, count: int = LIST
    ) -> tuple[list[inspect.Entry], bool]:
        """A page of in-flight, delayed or dead messages: of one shard from ``offset``,
        or (``shard`` None) the earliest ``count`` of the first MAX_MERGED_SHARDS shards."""
        shards = (
            [shard]
            if shard is not None
            else list(range(min(q.settings.shards, inspect.MAX_MERGED_SHARDS)))
        )
        return self.backend.drive(
            inspect.page(q.ops, kind, shards=shards, offset=offset, count=count)
        )

    def find(self, q: Queue, msg_id: str) -> inspect.Located | None:
        return self.backend.drive(inspect.find(q.ops, msg_id))

    def peek(self, q: Queue, count: int = LIST) -> list[Message]:
        return q.peek(count)

    def prepared(self, q: Queue, count: int = LIST) -> list[Prepared]:
        """Prepared (transactional) messages, the next to be checked first."""
        return q.prepared(count)

    def keys(self, q: Queue, limit: int = LIST) -> dict[str, list[dict[str, Any]]]:
        """A keyed queue's (ordered="key") busiest keys and the keys blocked by a failing
        message, at most ``limit`` of each (``q.keys``: a bounded read a shard)."""
        return q.keys(limit)

    def groups(
        self, q: Queue, *, members: int = 100, history: int = 20
    ) -> tuple[list[inspect.GroupView], int]:
        """The queue's consumer groups (the first 50 of its registry) and how many."""
        names, total = self.backend.drive(inspect.names(q.ops.keys.groups, 50))
        views = [
            self.backend.drive(inspect.group(q.ops.keys, g, members=members, history=history))
            for g in names
        ]
        return views, total

    # -- actions -------------------------------------------------------------------------

    def replay(self, q: Queue, ids: list[str] | None) -> int:
        """Replay dead letters: these ids, or all (None)."""
        return q.replay_dead(ids)

    def purge(self, q: Queue) -> int:
        return q.purge_dead()

    def cancel(self, q: Queue, msg_id: str) -> bool:
        """Cancel a message (a running one: its handler is asked to stop)."""
        return q.cancel(msg_id)

    def pause(self, q: Queue, on: bool) -> bool:
        """Pause (``on``) or resume the queue; whether it changed."""
        return q.pause() if on else q.resume()


def stats_row(stats: Any) -> dict[str, int]:
    """The four counts of a QueueStats or ShardStats as the pages show them."""
    return {
        "ready": stats.ready,
        "delayed": stats.delayed,
        "in_flight": stats.unacked,
        "dead": stats.dead,
    }
