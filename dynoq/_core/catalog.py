"""The queues and topics a client has opened, and the rules for opening one (pure: no I/O).

Shared by the sync and asyncio clients: the first open of a name in a client stores or
checks its settings on the server and writes its epoch into every shard (the
:func:`~.opening.open_queue` and :func:`~.topics.open_topic` flows). A later open in the same
client reads the stored epoch (one command): while it is the one known, the asked
settings are only checked against the known ones; when the queue vanished or was created
anew meanwhile, or one of its operations raised QueueGone, it is opened as a first open
does (created again if it no longer exists).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import QueueConfigError
from . import validate
from .calls import Cmd, Flow, text
from .keys import QueueKeys, TopicKeys
from .opening import open_queue, read_queue
from .queue import QueueOps
from .settings import QueueSettings, TopicSettings, merge
from .topics import TopicOps, open_topic, read_topic


class Catalog:
    """Queue and topic settings known to one client, under one prefix.

    ``cross_slot`` and ``replicas`` say what the backend can do (see the Backend classes);
    ``where`` names the server in errors (redacted)."""

    def __init__(
        self, prefix: str, max_payload_bytes: int, *, cross_slot: bool, replicas: bool, where: str
    ) -> None:
        self.prefix = prefix
        self.max_payload_bytes = max_payload_bytes
        self.cross_slot = cross_slot
        self.replicas = replicas
        self.where = where
        # name -> (settings, epoch token). Plain dicts: a get or a set is atomic, and two
        # threads opening the same name at once both store the same settings.
        self._queues: dict[str, tuple[QueueSettings, str]] = {}
        self._topics: dict[str, tuple[TopicSettings, str]] = {}

    def queue(self, name: str, asked: dict[str, Any]) -> Flow[QueueOps]:
        """Open queue ``name`` (created on first use, and again once it is gone);
        QueueConfigError when ``asked`` conflicts with its stored settings."""
        validate.check_name(name, "queue name")
        known = self._queues.get(name)
        if known is not None:
            held = yield Cmd(("HGET", QueueKeys(self.prefix, name).meta, "epoch"))
            if held is None or text(held) != known[1].partition("|")[0]:
                known = None  # gone, or created anew by someone else: open it afresh
        if known is None:
            if asked.get("min_replicas") and not self.replicas:
                raise QueueConfigError(
                    f"{self.where} has no replicas: min_replicas needs a "
                    "real server with replicas (see docs/cluster.md)"
                )
            known = yield from open_queue(self.prefix, name, asked)
            self._queues[name] = known
        settings, epoch = known
        return self.queue_ops(name, merge(settings, asked, name), epoch)

    def existing_queue(self, name: str) -> Flow[QueueOps | None]:
        """The registered queue ``name``, or None (never creates one)."""
        found = yield from read_queue(self.prefix, name)
        return None if found is None else self.queue_ops(name, *found)

    def queue_ops(self, name: str, settings: QueueSettings, epoch: str = "") -> QueueOps:
        return QueueOps(
            self.prefix,
            name,
            settings,
            self.max_payload_bytes,
            cross_slot=self.cross_slot,
            epoch=epoch,
            on_gone=self._forget(self._queues, name, epoch),
        )

    def topic(self, name: str, asked: dict[str, Any]) -> Flow[TopicOps]:
        """Open topic ``name`` (created on first use, and again once it is gone), as
        :meth:`queue`."""
        validate.check_name(name, "topic name")
        known = self._topics.get(name)
        if known is not None:
            held = yield Cmd(("HGET", TopicKeys(self.prefix, name).meta, "epoch"))
            if held is None or text(held) != known[1].partition("|")[0]:
                known = None
        if known is None:
            known = yield from open_topic(self.prefix, name, asked)
            self._topics[name] = known
        settings, epoch = known
        return self.topic_ops(name, merge(settings, asked, name, TopicSettings, "topic"), epoch)

    def existing_topic(self, name: str) -> Flow[TopicOps | None]:
        """The registered topic ``name``, or None (never creates one)."""
        found = yield from read_topic(self.prefix, name)
        return None if found is None else self.topic_ops(name, *found)

    def topic_ops(self, name: str, settings: TopicSettings, epoch: str = "") -> TopicOps:
        return TopicOps(
            self.prefix,
            name,
            settings,
            self.max_payload_bytes,
            cross_slot=self.cross_slot,
            epoch=epoch,
            on_gone=self._forget(self._topics, name, epoch),
        )

    @staticmethod
    def _forget(known: dict[str, Any], name: str, epoch: str) -> Callable[[], None]:
        """What an operation calls on QueueGone: the next open of ``name`` opens it afresh
        (unless it was opened afresh already)."""

        def forget() -> None:
            entry = known.get(name)
            if entry is not None and entry[1] == epoch:
                known.pop(name, None)

        return forget
