"""Consumers: worker threads, a consumer group, rebalance (RocketMQ's push consumer).

The package's modules, by what they hold: ``facade`` (the Consumer users start and
stop), ``workers`` (the worker loops), ``upkeep`` (heartbeat, renewal, rebalance,
takeover), ``processing`` (handler call and settling), ``middleware``, ``lease``,
``group``, ``board`` (thread coordination), ``context`` (what the threads share),
``stats``. The decisions themselves are in ``dynoq._core``.
"""

from .facade import Consumer
from .middleware import Middleware

__all__ = ["Consumer", "Middleware"]
