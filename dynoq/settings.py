"""Settings as frozen dataclasses whose fields carry the defaults (public; the
implementation lives in ``dynoq._core.settings``, shared with dynoq.asyncio)."""

from ._core.settings import ConsumerSettings, QueueSettings, TopicSettings, merge

__all__ = ["ConsumerSettings", "QueueSettings", "TopicSettings", "merge"]
