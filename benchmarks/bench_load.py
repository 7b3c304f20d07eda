"""An asyncio web service under load: an ASGI app (Starlette on uvicorn) whose every
request pushes one message, 300 concurrent HTTP clients, consumers running in the app.

    python -m benchmarks.bench_load [--url redis://...] [--clients 300] [--requests 20]
                                    [--repeats 5] [--before REF]

Variants, each its own app process, interleaved in every round:

  dynoq   this checkout's dynoq.asyncio: ``await queue.push(...)`` per request; a
          consumer (concurrency 8) and an ordered-queue consumer (concurrency 4) run
  raw     the baseline: redis.asyncio on a BlockingConnectionPool of 100, one EVALSHA
          per request (HSET + ZADD, what a push writes at least); 8 tasks pop and
          delete with one script each (what a consumer does at least)
  before  (with --before REF) dynoq as it was at git ref REF, same app as ``dynoq``

The load client (this process, asyncio sockets, HTTP/1.1 keep-alive) opens --clients
connections that each send --requests requests one after another. Reported per
variant: failed requests (an error status or a broken connection), p50 and p99 of the
request latency (the push and the HTTP round trip), requests/s, and messages lost
(pushed with a 200 but never handled by the consumers). Each figure is the median over
--repeats rounds; "x raw" is each round's figure over the raw baseline's in that
round, median of the rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from common import median, parser, server_url, table

ROOT = Path(__file__).resolve().parent.parent
PUSH_LUA = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
return 1
"""
POP_LUA = """
local ids = redis.call('ZRANGE', KEYS[2], 0, 9)
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[1], unpack(ids))
return #ids
"""


# -- the app (run in its own process: python -m benchmarks.bench_load --serve ...) -------


def make_app(variant: str, url: str, prefix: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, PlainTextResponse
    from starlette.routing import Route

    state: dict[str, Any] = {"handled": 0, "errors": 0}

    async def handled(_: Any) -> None:
        state["handled"] += 1

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> Any:
        if variant == "raw":
            import redis.asyncio as aredis

            pool = aredis.BlockingConnectionPool.from_url(url, max_connections=100, timeout=10)
            r = aredis.Redis(connection_pool=pool)
            push_sha = await r.script_load(PUSH_LUA)
            pop_sha = await r.script_load(POP_LUA)
            keys = (f"{prefix}:h", f"{prefix}:z")
            stop = asyncio.Event()

            async def push(mid: str, body: bytes) -> None:
                await r.evalsha(push_sha, 2, *keys, mid, body, time.time())

            async def consume() -> None:
                while not stop.is_set():
                    try:
                        n = await r.evalsha(pop_sha, 2, *keys)
                    except Exception:  # noqa: BLE001 - counted, the loop goes on
                        state["errors"] += 1
                        n = 0
                    state["handled"] += int(n)
                    if not n:
                        await asyncio.sleep(0.05)

            tasks = [asyncio.create_task(consume()) for _ in range(8)]
            state["push"] = push
            yield
            stop.set()
            await asyncio.gather(*tasks)
            await r.delete(*keys)
            await r.aclose()
            await pool.disconnect()
            return
        import dynoq.asyncio

        client = dynoq.asyncio.connect(url, prefix=prefix)
        q = await client.queue("load", shards=4)
        oq = await client.queue("load-ordered", shards=4, ordered=True)
        consumers = [
            client.consumer(q, handled, concurrency=8),
            client.consumer(oq, handled, concurrency=4),
        ]
        for c in consumers:
            await c.start()

        async def push(mid: str, body: bytes) -> None:
            if mid.endswith(("0", "5")):  # a fifth of the requests: the ordered queue
                await oq.push(body, id=mid, key=mid[:4])
            else:
                await q.push(body, id=mid)

        state["push"] = push
        yield
        for c in consumers:
            await c.stop()
        await q.clear()
        await oq.clear()
        await client.close()

    async def push(request: Request) -> Any:
        body = await request.body()
        try:
            await state["push"](uuid.uuid4().hex, body)
        except Exception as exc:  # noqa: BLE001 - the client counts the 503
            return PlainTextResponse(f"{type(exc).__name__}: {exc}", status_code=503)
        return PlainTextResponse("ok")

    async def stats(_: Request) -> Any:
        return JSONResponse({"handled": state["handled"], "errors": state["errors"]})

    return Starlette(
        routes=[Route("/push", push, methods=["POST"]), Route("/stats", stats)], lifespan=lifespan
    )


def serve(variant: str, url: str, prefix: str) -> None:
    import logging

    import uvicorn

    import dynoq

    logging.getLogger("dynoq").setLevel(logging.CRITICAL)  # a failing push logs nothing
    print(f"{variant}: dynoq from {Path(dynoq.__file__).parent}", file=sys.stderr)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        make_app(variant, url, prefix), log_level="critical", lifespan="on", backlog=2048
    )
    server = uvicorn.Server(config)
    print(sock.getsockname()[1], flush=True)  # the port, for the load client
    server.run(sockets=[sock])


# -- the load client -----------------------------------------------------------------------


async def request(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    path: str,
    body: bytes = b"",
) -> tuple[int, bytes]:
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def load(port: int, clients: int, requests: int) -> dict[str, Any]:
    latencies: list[float] = []
    failed = 0
    go = asyncio.Event()

    async def one_client(n: int) -> None:
        nonlocal failed
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            failed += requests
            return
        await go.wait()
        try:
            for i in range(requests):
                t = time.perf_counter()
                status, _ = await request(
                    reader, writer, "POST", "/push", json.dumps({"client": n, "i": i}).encode()
                )
                latencies.append(time.perf_counter() - t)
                failed += status != 200
        except (OSError, asyncio.IncompleteReadError, ValueError):
            failed += requests - i
        finally:
            writer.close()

    tasks = [asyncio.create_task(one_client(n)) for n in range(clients)]
    await asyncio.sleep(0.5)  # every connection open before the first request
    started = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "failed": failed,
        "ok": clients * requests - failed,
        "p50": statistics.median(latencies) * 1000 if latencies else float("nan"),
        "p99": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan"),
        "rps": len(latencies) / elapsed,
    }


async def handled(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        _, body = await request(reader, writer, "GET", "/stats")
        return int(json.loads(body)["handled"])
    finally:
        writer.close()


def run_variant(variant: str, url: str, clients: int, requests: int, home: str) -> dict[str, Any]:
    """One round of ``variant``: its app runs in ``home`` (the directory its dynoq is
    imported from: the first entry of its sys.path)."""
    prefix = f"bench-load-{uuid.uuid4().hex[:8]}"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_load",
            "--serve",
            variant,
            "--url",
            url,
            "--prefix",
            prefix,
        ],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        wait_ready(port)
        out = asyncio.run(load(port, clients, requests))
        deadline = time.monotonic() + 60  # the consumers drain what was pushed
        done = asyncio.run(handled(port))
        while done < out["ok"] and time.monotonic() < deadline:
            time.sleep(0.2)
            done = asyncio.run(handled(port))
        out["lost"] = out["ok"] - done
        return out
    finally:
        proc.terminate()
        proc.wait(30)


def wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            asyncio.run(handled(port))
            return
        except (OSError, asyncio.IncompleteReadError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def checkout(ref: str, into: str) -> str:
    """dynoq's package as it was at ``ref``, unpacked under ``into`` (for PYTHONPATH)."""
    archive = subprocess.run(
        ["git", "archive", ref, "dynoq"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=300)
    p.add_argument("--requests", type=int, default=20, help="requests per client")
    p.add_argument("--before", default=None, help="git ref of dynoq to compare with")
    p.add_argument("--serve", default=None, help="internal: run the app of this variant")
    p.add_argument("--prefix", default="bench-load")
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.url, args.prefix)
        return
    with tempfile.TemporaryDirectory() as tmp, server_url(args.url) as url:
        paths = {"dynoq": str(ROOT), "raw": str(ROOT)}
        if args.before:
            paths["before"] = checkout(args.before, tmp)
        results: dict[str, list[dict[str, Any]]] = {v: [] for v in paths}
        print(
            f"{args.clients} clients x {args.requests} requests, {args.repeats} rounds, "
            f"{url.split('@')[-1]}" + (f", before = {args.before}" if args.before else "")
        )
        for n in range(args.repeats):
            line = []
            for variant, path in paths.items():
                r = run_variant(variant, url, args.clients, args.requests, path)
                results[variant].append(r)
                line.append(
                    f"{variant} failed {r['failed']} p50 {r['p50']:.1f} ms "
                    f"p99 {r['p99']:.1f} ms {r['rps']:,.0f}/s lost {r['lost']}"
                )
            print(f"round {n + 1}: " + "; ".join(line), flush=True)
        rows = [
            (
                "variant",
                "failed (median)",
                "failed (max)",
                "p50 ms",
                "p99 ms",
                "p50 x raw",
                "p99 x raw",
                "requests/s",
                "lost (max)",
            )
        ]
        raw = results["raw"]
        for variant, rs in results.items():

            def ratio(key: str, rs: list[dict[str, Any]] = rs) -> str:
                # within each round, then the median of the rounds
                return f"{median([r[key] / b[key] for r, b in zip(rs, raw, strict=True)]):.2f}"

            rows.append(
                (
                    variant,
                    f"{median([r['failed'] for r in rs]):g}",
                    str(max(r["failed"] for r in rs)),
                    f"{median([r['p50'] for r in rs]):.1f}",
                    f"{median([r['p99'] for r in rs]):.1f}",
                    ratio("p50"),
                    ratio("p99"),
                    f"{median([r['rps'] for r in rs]):,.0f}",
                    str(max(r["lost"] for r in rs)),
                )
            )
        print(table(rows))


if __name__ == "__main__":
    main()
