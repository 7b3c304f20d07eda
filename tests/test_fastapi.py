"""examples/fastapi_app.py as a service: uvicorn in a process of its own (one dynoq client
for the app's lifespan, a consumer task in the app), its worker in another, under 300
concurrent HTTP clients; every accepted order handled exactly once, by both consumers,
a SIGTERM while requests arrive loses no accepted order, and a full server is a 503."""

from __future__ import annotations

import asyncio
import importlib.util
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
                # a loaded machine may leave a client's connection idle past uvicorn's
                # 5 s, and a request sent as the server closes it fails: not our subject
                "--timeout-keep-alive",
                "60",
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


async def _clients(
    base: str, n_clients: int, each: int, accepted: list[str] | None = None
) -> tuple[list[str], list[Any], int]:
    """``n_clients`` concurrent clients, each on a connection of its own, placing ``each``
    orders one after another: the ids accepted (202, appended to ``accepted`` as they
    come), every other outcome, and the most requests that were in flight at once."""
    accepted = [] if accepted is None else accepted
    errors: list[Any] = []
    sending = peak = 0

    async def one(c: int) -> None:
        nonlocal sending, peak
        # a client each (its own pool of one connection): all n_clients connections are
        # open at once, and httpx's pool is not scanned n_clients wide for every request
        async with httpx.AsyncClient(base_url=base, timeout=60) as http:
            for i in range(each):
                sending += 1
                peak = max(peak, sending)
                try:
                    r = await http.post("/orders", json={"item": f"c{c}", "quantity": i + 1})
                except httpx.HTTPError as exc:
                    errors.append(repr(exc))
                    continue
                finally:
                    sending -= 1
                if r.status_code == 202:
                    accepted.append(r.json()["id"])
                else:
                    errors.append((r.status_code, r.text))

    await asyncio.gather(*(one(c) for c in range(n_clients)))
    return accepted, errors, peak


@pytest.mark.backends("embedded")  # a service under load: one server
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_300_concurrent_clients_every_order_handled_once_by_both_consumers(
    service: Service,
) -> None:
    worker = service.worker()
    api = service.api()
    started = time.monotonic()
    accepted, errors, peak = asyncio.run(_clients(service.base, CLIENTS, PER_CLIENT))
    took = time.monotonic() - started
    assert errors == [] and len(accepted) == CLIENTS * PER_CLIENT == len(set(accepted))
    assert peak == CLIENTS  # every client had a request open at the same time
    wait_for(lambda: len(service.handled()) >= len(accepted), timeout=30, what="every order")
    handled, runs = service.handled(), service.runs()
    assert set(handled) == set(accepted) == set(runs) and set(runs.values()) == {1}
    by = list(handled.values())
    assert by.count("api") > 0 and by.count("worker") > 0, (by.count("api"), took)
    some = accepted[-1]
    state = httpx.get(f"{service.base}/orders/{some}").json()
    assert state == {"id": some, "state": "handled", "by": handled[some]}
    again = httpx.post(f"{service.base}/orders", json={"id": some, "item": "x", "quantity": 1})
    assert again.status_code == 202  # a retried POST: the id is remembered, not queued again
    assert httpx.get(f"{service.base}/orders/{some}").json()["state"] == "handled"
    assert httpx.get(f"{service.base}/orders/nope").status_code == 404
    assert httpx.post(f"{service.base}/orders", json={"item": "", "quantity": 0}).status_code == 422
    api.send_signal(signal.SIGTERM)
    assert api.wait(30) in STOPPED
    assert api.stderr is not None and "Traceback" not in api.stderr.read()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert service.in_flight() == (0, 0)
    assert set(service.runs().values()) == {1}
    print(
        f"{len(accepted)} orders from {CLIENTS} clients ({peak} requests at once) in"
        f" {took:.1f}s, 0 errors;"
        f" handled once each: in the app {by.count('api')}, worker {by.count('worker')}"
    )


@pytest.mark.backends("embedded")  # a service under load: one server
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sigterm_while_requests_arrive_loses_no_accepted_order(service: Service) -> None:
    # handlers slow enough that the app's consumer is busy when the SIGTERM comes: its
    # stop must let running handlers finish (a cut one would run twice) and give back
    # what it holds (or it waits out the unack_timeout, past the wait below)
    service.env["DEMO_WORK"] = "0.2"
    worker = service.worker()
    api = service.api()
    n_clients, each = 100, 30

    async def load_then_stop() -> tuple[list[str], list[Any], int]:
        accepted: list[str] = []
        load = asyncio.create_task(_clients(service.base, n_clients, each, accepted))
        while len(accepted) < 300 and not load.done():
            await asyncio.sleep(0.01)
        api.send_signal(signal.SIGTERM)  # uvicorn stops taking requests, then the lifespan ends
        at_stop = len(accepted)
        got, errors, _ = await load
        return got, errors, at_stop

    accepted, errors, at_stop = asyncio.run(load_then_stop())
    assert api.wait(30) in STOPPED
    assert api.stderr is not None and "Traceback" not in api.stderr.read()
    # the stop came while requests were arriving: some were refused, none half-taken
    assert at_stop >= 300 and errors and len(accepted) + len(errors) == n_clients * each
    # the worker handles what the app's consumer gave back, well before the queue's
    # unack_timeout (60 s) would have redelivered a message that was not given back
    wait_for(lambda: set(service.handled()) >= set(accepted), timeout=30, what="accepted")
    runs = service.runs()
    assert set(runs.values()) == {1}  # also the orders stored whose 202 was cut off
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert service.in_flight() == (0, 0)
    by = list(service.handled().values())
    print(
        f"SIGTERM after {at_stop} orders: {len(accepted)} accepted, {len(errors)} refused,"
        f" {len(runs)} handled once each (in the app {by.count('api')})"
    )


def test_a_full_server_answers_503_and_stores_nothing(
    embedded_server: Any, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Back-pressure reaches the HTTP client as a 503 with Retry-After, not a 500: here
    Redis at its maxmemory (dynoq.ServerFull), through the app's own lifespan."""
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    monkeypatch.setenv("DYNOQ_URL", url)
    monkeypatch.setenv("DYNOQ_PREFIX", prefix)  # read when the module is loaded
    spec = importlib.util.spec_from_file_location(
        f"fastapi_app_{prefix}", EXAMPLES / "fastapi_app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    r = redis.Redis.from_url(url)

    async def place_while_full() -> list[httpx.Response]:
        async with module.lifespan(module.app):
            transport = httpx.ASGITransport(app=module.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
                r.config_set("maxmemory", 1)  # this session's own server, restored below
                try:
                    full = await http.post(
                        "/orders", json={"id": "A-1", "item": "tea", "quantity": 1}
                    )
                finally:
                    r.config_set("maxmemory", 0)
                return [full, await http.get("/orders/A-1"), await http.get("/healthz")]

    try:
        full, state, health = asyncio.run(place_while_full())
    finally:
        r.close()
        delete_prefix(url, prefix)
    assert full.status_code == 503 and full.headers["Retry-After"] == "1", full.text
    assert state.status_code == 404  # nothing was stored
    assert health.json() == {"ok": True}
