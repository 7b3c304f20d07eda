"""The queues and topics a client has opened, and the rules for opening one (pure: no I/O).

Shared by the sync and asyncio clients: the first open of a name in a client stores or
checks its settings on the server (the :func:`~.ops.open_queue` and
:func:`~.topics.open_topic` flows); later opens in the same client only check the asked
settings against the ones known.
"""

from __future__ import annotations

from typing import Any

from ..errors import QueueConfigError
from . import validate
from .calls import Flow
from .ops import QueueOps, open_queue, read_queue
from .settings import QueueSettings, TopicSettings, merge
from .topics import TopicOps, open_topic, read_topic


class Catalog:
    """Queue and topic settings known to one client, under one prefix.

    ``cross_slot`` and ``replicas`` say what the backend can do (see the Backend classes);
    ``where`` names the server in errors (redacted)."""

    def __init__(self, prefix: str, max_payload_bytes: int, *, cross_slot: bool,
                 replicas: bool, where: str) -> None:
        self.prefix = prefix
        self.max_payload_bytes = max_payload_bytes
        self.cross_slot = cross_slot
        self.replicas = replicas
        self.where = where
        # Plain dicts: a get or a set is atomic, and two threads opening the same name at
        # once both store the same settings.
        self._queues: dict[str, QueueSettings] = {}
        self._topics: dict[str, TopicSettings] = {}

    def queue(self, name: str, asked: dict[str, Any]) -> Flow[QueueOps]:
        """Open queue ``name`` (created on first use); QueueConfigError when ``asked``
        conflicts with its stored settings."""
        validate.check_name(name, "queue name")
        known = self._queues.get(name)
        if known is None:
            if asked.get("min_replicas") and not self.replicas:
                raise QueueConfigError(f"{self.where} has no replicas: min_replicas needs a "
                                       "real server with replicas (see docs/cluster.md)")
            known = yield from open_queue(self.prefix, name, asked)
            self._queues[name] = known
        return self.queue_ops(name, merge(known, asked, name))

    def existing_queue(self, name: str) -> Flow[QueueOps | None]:
        """The registered queue ``name``, or None (never creates one)."""
        settings = yield from read_queue(self.prefix, name)
        return None if settings is None else self.queue_ops(name, settings)

    def queue_ops(self, name: str, settings: QueueSettings) -> QueueOps:
        return QueueOps(self.prefix, name, settings, self.max_payload_bytes,
                        cross_slot=self.cross_slot)

    def topic(self, name: str, asked: dict[str, Any]) -> Flow[TopicOps]:
        """Open topic ``name`` (created on first use), as :meth:`queue`."""
        validate.check_name(name, "topic name")
        known = self._topics.get(name)
        if known is None:
            known = yield from open_topic(self.prefix, name, asked)
            self._topics[name] = known
        return self.topic_ops(name, merge(known, asked, name, TopicSettings, "topic"))

    def existing_topic(self, name: str) -> Flow[TopicOps | None]:
        """The registered topic ``name``, or None (never creates one)."""
        settings = yield from read_topic(self.prefix, name)
        return None if settings is None else self.topic_ops(name, settings)

    def topic_ops(self, name: str, settings: TopicSettings) -> TopicOps:
        return TopicOps(self.prefix, name, settings, self.max_payload_bytes,
                        cross_slot=self.cross_slot)
