"""Handlers for the ``dynoq worker`` tests (imported by the worker from this directory)."""

from __future__ import annotations

import asyncio
import os
import time

import dynoq

_client = dynoq.connect(os.environ["TEST_LOG_URL"]) if "TEST_LOG_URL" in os.environ else None


def slow(msg: dynoq.Message) -> None:
    """Logs the message, then takes a while (a batch is in flight when SIGTERM comes)."""
    assert _client is not None
    _client.redis.rpush(os.environ["TEST_LOG_KEY"], f"{os.getpid()}|{msg.payload}")
    time.sleep(float(os.environ.get("TEST_SLEEP", "0.3")))


not_callable = 42


def fail(msg: dynoq.Message) -> None:
    """Always fails (the worker's retry options decide when it is dead-lettered)."""
    raise RuntimeError(f"cannot handle {msg.payload!r}")


def check_even(msg: dynoq.Message) -> str:
    """A transaction check for ``dynoq worker --checker``: even payloads commit."""
    return "commit" if msg.payload % 2 == 0 else "rollback"


async def record_async(msg: dynoq.Message) -> None:
    """An ``async def`` handler: ``dynoq worker`` runs it on the asyncio client."""
    assert _client is not None
    await asyncio.sleep(0)
    _client.redis.rpush(os.environ["TEST_LOG_KEY"], f"{os.getpid()}|{msg.payload}")


async def check_even_async(msg: dynoq.Message) -> str:
    """An ``async def`` transaction check: even payloads commit."""
    await asyncio.sleep(0)
    return "commit" if msg.payload % 2 == 0 else "rollback"


def logs_and_fails_once(msg: dynoq.Message) -> None:
    """Logs a line with an extra field; the first attempt of each message then fails."""
    import logging

    logging.getLogger("shop.orders").info("handling an order", extra={"order": msg.payload})
    if msg.attempts == 1:
        raise RuntimeError("the first attempt fails")


async def logs_and_fails_once_async(msg: dynoq.Message) -> None:
    """``logs_and_fails_once`` as ``async def``: the worker runs it on the asyncio consumer."""
    import logging

    await asyncio.sleep(0)
    logging.getLogger("shop.orders").info("handling an order", extra={"order": msg.payload})
    if msg.attempts == 1:
        raise RuntimeError("the first attempt fails")
