"""A FastAPI service on dynoq's asyncio client: request handlers push orders, a consumer
task in the same process handles them, and so does a worker in another process.

    python examples/fastapi_app.py           # the demo: serves, sends orders, both handle
    uvicorn fastapi_app:app                  # the service alone (from examples/; $DYNOQ_URL)
    python examples/fastapi_app.py worker    # the other process's consumer, until SIGTERM

One client for the app's lifespan (a pool that hundreds of concurrent requests share),
opened and closed with the app; a server that is down or saturated answers 503, never a
stack trace. Each handled order is recorded once per handler run, so the demo (and
tests/test_fastapi.py) can count that every order ran exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import dynoq
import dynoq.asyncio

PREFIX = os.environ.get("DYNOQ_PREFIX", "fastapi-demo")
WORK = float(os.environ.get("DEMO_WORK", "0.01"))  # seconds an order takes to handle


class Order(BaseModel):
    item: str = Field(min_length=1, max_length=100)
    quantity: int = Field(ge=1, le=1000)
    id: str | None = Field(default=None, max_length=100)  # the client's idempotency key
    delay: float = Field(default=0.0, ge=0, le=3600)


async def open_orders(client: dynoq.asyncio.Client) -> dynoq.asyncio.Queue:
    """The queue as every process opens it: the first open fixes its settings."""
    # an acked order's id is remembered an hour, so a retried POST does not order twice
    return await client.queue("orders", shards=4, dedupe_window=3600)


def handler(client: dynoq.asyncio.Client, who: str) -> Callable[[dynoq.Message], Awaitable[None]]:
    async def handle(msg: dynoq.Message) -> None:  # returning acks; raising retries
        r = await client.redis()
        await r.hincrby(f"{PREFIX}:runs", msg.id, 1)  # the demo's count of runs
        await asyncio.sleep(WORK)  # the work: charge, pack, ship
        await r.hsetnx(f"{PREFIX}:handled", msg.id, who)

    return handle


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # $DYNOQ_URL; one client, one pool for every request, closed when the app stops
    async with dynoq.asyncio.connect(prefix=PREFIX) as client:
        orders = await open_orders(client)
        consumer = client.consumer(orders, handler(client, "api"), concurrency=16)
        await consumer.start()
        app.state.client, app.state.orders = client, orders
        try:
            yield
        finally:  # in-flight orders finish, or go back unhandled: none is lost
            await consumer.stop(timeout=10)


app = FastAPI(lifespan=lifespan)


@app.exception_handler(dynoq.ConnectionFailed)  # the server is down or unreachable
@app.exception_handler(dynoq.PoolExhausted)  # more requests at once than connections
@app.exception_handler(dynoq.ServerFull)  # Redis at its maxmemory: nothing was stored
async def unavailable(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"error": "queue unavailable, retry"}, 503, {"Retry-After": "1"})


@app.post("/orders", status_code=202)
async def place(order: Order, request: Request) -> dict[str, str]:
    order_id = order.id or uuid.uuid4().hex
    payload = {"item": order.item, "quantity": order.quantity}
    await request.app.state.orders.ensure(payload, id=order_id, delay=order.delay)
    return {"id": order_id}


@app.get("/orders/{order_id}")
async def status(order_id: str, request: Request) -> JSONResponse:
    msg = await request.app.state.orders.get(order_id)
    if msg is not None:
        return JSONResponse({"id": order_id, "state": "queued", "attempts": msg.attempts})
    r = await request.app.state.client.redis()
    who = await r.hget(f"{PREFIX}:handled", order_id)
    if who is None:
        return JSONResponse({"error": "no such order"}, 404)
    return JSONResponse({"id": order_id, "state": "handled", "by": who.decode()})


@app.get("/healthz")
async def healthz(request: Request) -> dict[str, bool]:
    return {"ok": await request.app.state.client.ping()}


async def worker() -> None:
    """The other process: the same handler on the same queue, until SIGTERM or SIGINT."""
    async with dynoq.asyncio.connect(prefix=PREFIX) as client:
        orders = await open_orders(client)
        consumer = client.consumer(orders, handler(client, "worker"), concurrency=16)
        await consumer.start()
        print("worker ready", file=sys.stderr, flush=True)
        await consumer.run()  # until SIGTERM or SIGINT, then in-flight orders finish


async def demo(n: int = 200) -> None:
    async with dynoq.asyncio.connect(os.environ.get("DYNOQ_URL", "embedded://")) as holder:
        await holder.ping()  # an embedded server starts here, and lives as long as this
        os.environ["DYNOQ_URL"] = holder.url
        other = subprocess.Popen([sys.executable, __file__, "worker"])
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        serving = asyncio.create_task(server.serve())
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            while not server.started:
                await asyncio.sleep(0.05)
            sent = await asyncio.gather(
                *(http.post("/orders", json={"item": "tea", "quantity": i + 1}) for i in range(n))
            )
            ids = [response.json()["id"] for response in sent]
            r = await holder.redis()
            while await r.hlen(f"{PREFIX}:handled") < n:
                await asyncio.sleep(0.05)
            last = (await http.get(f"/orders/{ids[-1]}")).json()
        server.should_exit = True
        await serving
        other.terminate()
        other.wait(30)
        by = [v.decode() for v in (await r.hgetall(f"{PREFIX}:handled")).values()]
        runs = [int(v) for v in (await r.hgetall(f"{PREFIX}:runs")).values()]
        await r.delete(f"{PREFIX}:handled", f"{PREFIX}:runs")
        print(f"order {last['id'][:8]}... {last['state']} by {last['by']}")
        print(
            f"handled {len(by)} orders: in-process {by.count('api')}, worker process "
            f"{by.count('worker')}; each ran once: {set(runs) == {1}}"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    asyncio.run(worker() if sys.argv[1:] == ["worker"] else demo())
