"""What the dashboard tests share: a small HTTP client (no redirects followed), a scenario
of queues in every state, where Chromium is, and a server for any ASGI app."""

from __future__ import annotations

import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import dynoq
from dynoq._core import reasons
from dynoq._core.group import GroupOps, LeaseOps

LEASE_TOKEN = "worker-9:leasehost:5ecre7random"  # the part after the last ':' fences
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The Chromium to drive: $DYNOQ_CHROMIUM, else Debian's (never a downloaded one)."""
    for candidate in (
        os.environ.get("DYNOQ_CHROMIUM"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        "/usr/bin/chromium",
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def http(
    url: str,
    *,
    method: str = "GET",
    data: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """One request; the reply whatever its status."""
    body = None
    if data is not None:
        from urllib.parse import urlencode

        body = urlencode(data, doseq=True).encode()
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(req, timeout=30) as r:
            return Reply(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode())
    except urllib.error.HTTPError as e:
        return Reply(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode())


@dataclass
class Scene:
    """Queues in every state, as a dashboard shows them."""

    orders: dynoq.Queue
    events: dynoq.Queue
    topic: dynoq.Topic
    dead_id: str
    in_flight: list[str] = field(default_factory=list)
    delayed: list[str] = field(default_factory=list)
    event_shard: int = 0


def scene(client: dynoq.Client) -> Scene:
    """``orders`` (4 shards): ready, delayed, in-flight messages and a dead letter that
    failed in a handler; ``events`` (ordered, 3 shards) with a shard leased by
    worker-9; group ``billing`` with two members and their rebalances; topic
    ``payments`` with group ``audit``."""
    orders = client.queue("orders", shards=4, max_retries=3)
    orders.push_many([dynoq.Message({"n": i}, id=f"ready-{i}", priority=5) for i in range(5)])
    delayed = orders.push_many(
        [dynoq.Message({"n": i}, id=f"later-{i}", delay=600 + i) for i in range(3)]
    )
    orders.push({"card": "declined"}, id="doomed", priority=0)
    [doomed] = orders.backend.drive(orders.planner.pop(1, shards=[orders.shard_for("doomed")]))
    assert doomed.id == "doomed"  # priority 0 goes first in its shard
    try:
        raise ValueError("card declined by the bank")
    except ValueError as exc:
        why = reasons.why(exc, "billing-worker-1")
    orders.backend.run(orders.ops.nack_call(doomed, delay=0.0, mode="dead", why=why))
    flying = [m.id for m in orders.pop(2, visibility=300)]
    for member, shards in (("billing-a", [0, 1]), ("billing-b", [2, 3])):
        g = GroupOps(orders.ops.keys, "billing", member, ttl=60)
        orders.backend.run(g.heartbeat())
        orders.backend.run(g.record(["billing-a", "billing-b"], shards))
    events = client.queue("events", shards=3, ordered=True)
    events.push({"e": 1}, key="user-1")
    shard = events.shard_for("user-1")
    events.backend.drive(LeaseOps(events.ops, LEASE_TOKEN, 60).acquire(shard))
    topic = client.topic("payments", shards=2)
    topic.subscribe("audit")
    topic.publish({"paid": 10}, id="pay-1")
    return Scene(orders, events, topic, "doomed", [i for i in flying if i], delayed, shard)


class Served:
    """Any ASGI app (a host app with the dashboard mounted in it) served by uvicorn on a
    free 127.0.0.1 port, on a thread, while the ``with`` block runs."""

    def __init__(self, app: Any) -> None:
        import socket

        import uvicorn

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, port=self.port, log_level="warning", lifespan="auto")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "no server"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
