"""examples/fastapi_app.py as a service: uvicorn in a process of its own (one dynoq client
for the app's lifespan, a consumer task in the app), its worker in another, under 300
concurrent HTTP clients; every accepted order handled exactly once, by both consumers,
and a SIGTERM while requests arrive loses no accepted order."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from helpers import delete_prefix, wait_for

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CLIENTS, PER_CLIENT = 300, 10


class Service:
    def __init__(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix
        self.env = {**os.environ, "DYNOQ_URL": url, "DYNOQ_PREFIX": prefix}
        self.procs: list[subprocess.Popen[str]] = []
        self.redis = redis.Redis.from_url(url)
        self.port = 0

    def worker(self) -> subprocess.Popen[str]:
        p = self._start([sys.executable, "fastapi_app.py", "worker"])
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "worker ready" in line, line + p.stderr.read()
        return p

    def api(self) -> subprocess.Popen[str]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        p = self._start(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "fastapi_app:app",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--backlog",
                "2048",
            ]
        )

        def up() -> bool:
            try:
                return httpx.get(f"{self.base}/healthz", timeout=1).json() == {"ok": True}
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30, what="the service")
        return p

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _start(self, argv: list[str]) -> subprocess.Popen[str]:
        p = subprocess.Popen(argv, cwd=EXAMPLES, env=self.env, stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def handled(self) -> dict[str, str]:
        raw = self.redis.hgetall(f"{self.prefix}:handled")
        return {k.decode(): v.decode() for k, v in raw.items()}

    def runs(self) -> dict[str, int]:
        raw = self.redis.hgetall(f"{self.prefix}:runs")
        return {k.decode(): int(v) for k, v in raw.items()}

    def in_flight(self) -> tuple[int, int]:
        """(waiting, in flight) of the orders queue, read as the dynoq CLI would."""
        import dynoq

        with dynoq.connect(self.url, prefix=self.prefix) as c:
            s = c.open_existing("orders").stats()
            return s.ready + s.delayed, s.unacked


SERVERS = ["embedded"] + (["redis"] if os.environ.get("REDIS_URL") else [])
# uvicorn, stopped by SIGTERM, shuts down gracefully and then re-raises the signal
STOPPED = (0, -signal.SIGTERM)


@pytest.fixture(params=SERVERS)
def service(request: pytest.FixtureRequest, prefix: str) -> Iterator[Service]:
    if request.param == "embedded":
        server = request.getfixturevalue("embedded_server")
        real_url = f"redis://{server.host}:{server.port}/0"
    else:
        real_url = os.environ["REDIS_URL"]
    s = Service(real_url, prefix)
    yield s
    for p in s.procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    s.redis.close()
    delete_prefix(real_url, prefix)


async def _clients(base: str, n_clients: int, each: int) -> tuple[list[str], list[Any]]:
    """``n_clients`` concurrent clients, each placing ``each`` orders one after another:
    the ids accepted (202), and every other outcome."""
    accepted: list[str] = []
    errors: list[Any] = []
    limits = httpx.Limits(max_connections=n_clients, max_keepalive_connections=n_clients)

    async def one(http: httpx.AsyncClient, c: int) -> None:
        for i in range(each):
            try:
                r = await http.post("/orders", json={"item": f"c{c}", "quantity": i + 1})
            except httpx.HTTPError as exc:
                errors.append(repr(exc))
                continue
            if r.status_code == 202:
                accepted.append(r.json()["id"])
            else:
                errors.append((r.status_code, r.text))

    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as http:
        await asyncio.gather(*(one(http, c) for c in range(n_clients)))
    return accepted, errors


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_300_concurrent_clients_every_order_handled_once_by_both_consumers(
    service: Service,
) -> None:
    worker = service.worker()
    api = service.api()
    started = time.monotonic()
    accepted, errors = asyncio.run(_clients(service.base, CLIENTS, PER_CLIENT))
    took = time.monotonic() - started
    assert errors == [] and len(accepted) == CLIENTS * PER_CLIENT == len(set(accepted))
    wait_for(lambda: len(service.handled()) == len(accepted), timeout=60, what="every order")
    handled, runs = service.handled(), service.runs()
    assert set(handled) == set(accepted) and set(runs.values()) == {1}
    by = list(handled.values())
    assert by.count("api") > 0 and by.count("worker") > 0, (by.count("api"), took)
    some = accepted[-1]
    state = httpx.get(f"{service.base}/orders/{some}").json()
    assert state == {"id": some, "state": "handled", "by": handled[some]}
    assert httpx.get(f"{service.base}/orders/nope").status_code == 404
    assert httpx.post(f"{service.base}/orders", json={"item": "", "quantity": 0}).status_code == 422
    api.send_signal(signal.SIGTERM)
    assert api.wait(30) in STOPPED
    assert api.stderr is not None and "Traceback" not in api.stderr.read()
    print(f"{len(accepted)} orders from {CLIENTS} concurrent clients in {took:.1f}s, 0 errors")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert service.in_flight() == (0, 0)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigterm_while_requests_arrive_loses_no_accepted_order(service: Service) -> None:
    worker = service.worker()
    api = service.api()

    async def load_then_stop() -> tuple[list[str], list[Any]]:
        load = asyncio.create_task(_clients(service.base, 100, 30))
        await asyncio.sleep(0.5)
        api.send_signal(signal.SIGTERM)  # uvicorn stops taking requests, then the lifespan ends
        return await load

    accepted, errors = asyncio.run(load_then_stop())
    assert api.wait(30) in STOPPED
    assert api.stderr is not None and "Traceback" not in api.stderr.read()
    assert accepted, errors  # some were accepted before the stop
    # the worker process handles what the app's consumer did not
    wait_for(lambda: set(service.handled()) >= set(accepted), timeout=60, what="accepted")
    assert all(service.runs()[i] == 1 for i in accepted)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert service.in_flight() == (0, 0)
