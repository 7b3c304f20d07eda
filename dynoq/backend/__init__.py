"""The one Redis seam: the only package that imports redis (its asyncio twin is
``dynoq.asyncio.backend``). It turns URLs into clients, runs the core's requests with one
script runner, translates every redis-py error, handles Redis Cluster, and keeps the
wake-up subscriptions."""

from .hosts import redact
from .runner import Backend
from .urls import DEFAULT_URL, SCHEMES, open_backend, wrap

__all__ = ["DEFAULT_URL", "SCHEMES", "Backend", "open_backend", "redact", "wrap"]
