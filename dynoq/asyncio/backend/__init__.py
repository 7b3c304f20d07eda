"""The asyncio Redis seam: the only asyncio code that imports redis (the twin of
``dynoq.backend``). It opens redis.asyncio clients from URLs, runs the core's requests
with one script runner, drives the core's flows, handles Redis Cluster and keeps the
wake-up subscriptions."""

from .runner import AsyncBackend
from .urls import open_backend, wrap

__all__ = ["AsyncBackend", "open_backend", "wrap"]
