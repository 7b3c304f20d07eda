"""Where a single push's server time goes: the raw EVALSHA, then dynoq's push piece by
piece, then dynoq's push as a Redis Function, in one run.

    python -m benchmarks.bench_push_cost [--url redis://...] [--n 5000] [--repeats 3]

Every variant is one call per message of 100 bytes with a fresh 16-character id, on the
keys of one dynoq shard. Server CPU is the delta of the server main thread's CPU (INFO
cpu, user + sys) over the calls, in µs a call; steps are cumulative (each adds one piece
to the one above), so the "adds" column accounts for the difference between one raw
EVALSHA and dynoq's push:
  raw                 HSET msgs + ZADD ready (bench_core's raw single push), 2 KEYS 3 ARGV
  dynoq's arguments   the same body, called with push-11.lua's 11 KEYS and 8 ARGV
  + shared pieces     the lib/ pieces push-11.lua includes (their functions are defined
                      again at every EVALSHA: a Function library defines them once)
  + epoch check       GET epoch (lib/refusal.lua gone())
  + server clock      TIME (lib/clock.lua)
  + promote look      ZRANGEBYSCORE delayed up to now (lib/promote.lua, nothing due)
  + sequence          INCRBY seq (the ready score's order)
  + wake check        EXISTS ready (whether a waiter needs a PUBLISH)
  + count             HINCRBY counts pushed
  + HSETNX            ensure's HSETNX for HSET (push() of a made id is an ensure)
  dynoq push          push-11.lua itself (the record built in Lua, the tables, the
                      outcome reply)
  dynoq push FCALL    push-11.lua as a Redis Function (FUNCTION LOAD; the pieces are
                      defined once, at load)
Rounds interleave the variants; medians of --repeats rounds. "in call" is what INFO
commandstats gives the EVALSHA (or FCALL): the time inside the call, at µs resolution;
its minimum over the rounds is the least disturbed on a shared machine, and "adds" is
the difference of those minimums (server CPU, at the kernel's tick, is too coarse for
steps of 1-3 µs).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq._core import lua
from dynoq._core.codec import new_id

BASE = """
redis.call('HSET', KEYS[4], ARGV[5], ARGV[8])
return redis.call('ZADD', KEYS[2], 0, ARGV[5])
"""
STEPS = [
    ("+ epoch check", "if redis.call('GET', KEYS[10]) ~= ARGV[1] then return -5 end"),
    ("+ server clock", "local t = redis.call('TIME')"),
    ("+ promote look", "redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', 1, 'LIMIT', 0, 5000)"),
    ("+ sequence", "redis.call('INCRBY', KEYS[7], 1)"),
    ("+ wake check", "redis.call('EXISTS', KEYS[2])"),
    ("+ count", "redis.call('HINCRBY', KEYS[9], 'pushed', 1)"),
]
HSETNX = """
redis.call('HSETNX', KEYS[4], ARGV[5], ARGV[8])
return redis.call('ZADD', KEYS[2], 0, ARGV[5])
"""


def libs_of(name: str) -> str:
    """The shared pieces a dynoq script includes, as one text (what comes before its
    header; after it, its keys by name and its body)."""
    s = lua.script(name)
    return s.plain[: s.plain.index(f"--[[ {name}:")]


def function_library(name: str) -> str:
    """A dynoq script as a Redis Function library: its pieces at the library's top level
    (defined once, at load), its body as the function."""
    s = lua.script(name)
    body = s.plain[len(libs_of(name)) :]
    return (
        f"#!lua name=dynoq_bench_{name}\n{libs_of(name)}\n"
        f"redis.register_function('dynoq_bench_{name}', function(KEYS, ARGV)\n"
        f"{body}\nend)\n"
    )


def server_cpu(r: redis.Redis) -> tuple[float, float]:
    """The server main thread's CPU seconds, and the µs commandstats gives the calls
    (EVALSHA and FCALL: the time inside the call, without reading and replying)."""
    info = r.info("everything")
    if "used_cpu_user_main_thread" in info:
        cpu = float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])
    else:
        cpu = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    usec = sum(
        float(info[k]["usec"])
        for k in ("cmdstat_evalsha", "cmdstat_fcall")
        if isinstance(info.get(k), dict)
    )
    return cpu, usec


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=5_000)
    args = p.parse_args()
    payload = os.urandom(50).hex().encode()
    bodies: list[tuple[str, str]] = [
        ("dynoq's arguments", BASE),
        ("+ shared pieces", libs_of("push") + BASE),
    ]
    lines: list[str] = []
    for label, line in STEPS:
        lines.append(line)
        bodies.append((label, libs_of("push") + "\n".join(lines) + BASE))
    bodies.append(("+ HSETNX", libs_of("push") + "\n".join(lines) + HSETNX))
    names = ["raw", *(b for b, _ in bodies), "dynoq push", "dynoq push FCALL"]
    server: dict[str, list[float]] = {k: [] for k in names}
    inside: dict[str, list[float]] = {k: [] for k in names}
    wall: dict[str, list[float]] = {k: [] for k in names}
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bpc")
        q = client.queue("cost", shards=1)
        q.push("warm")
        ops = q.ops
        raw_sha = r.script_load(
            BASE.replace("KEYS[4]", "KEYS[1]")
            .replace("KEYS[2]", "KEYS[2]")
            .replace("ARGV[5]", "ARGV[1]")
            .replace("ARGV[8]", "ARGV[2]")
        )
        shas = {label: r.script_load(body) for label, body in bodies}
        r.execute_command("FUNCTION", "LOAD", "REPLACE", function_library("push"))
        push_sha = r.script_load(lua.script("push").source)

        def call(kind: str) -> Any:
            out = ops.prepare(dynoq.Message(payload))
            c = ops.push_call("ensure", 0, [out])
            if kind == "raw":
                return r.execute_command(
                    "EVALSHA", raw_sha, 2, c.keys[3], c.keys[1], new_id(), payload
                )
            if kind == "dynoq push":
                return r.execute_command("EVALSHA", push_sha, len(c.keys), *c.keys, *c.args)
            if kind == "dynoq push FCALL":
                return r.execute_command("FCALL", "dynoq_bench_push", len(c.keys), *c.keys, *c.args)
            return r.execute_command("EVALSHA", shas[kind], len(c.keys), *c.keys, *c.args)

        for _ in range(args.repeats):
            for kind in names:
                (s0, u0), w0 = server_cpu(r), time.perf_counter()
                for _ in range(args.n):
                    call(kind)
                w1, (s1, u1) = time.perf_counter(), server_cpu(r)
                server[kind].append((s1 - s0) * 1e6 / args.n)
                inside[kind].append((u1 - u0) / args.n)
                wall[kind].append((w1 - w0) * 1e6 / args.n)
            drop_prefix(r, "bpc:")
            q = client.queue("cost", shards=1)
            q.push("warm")
            ops = q.ops
        version = server_version(r)
        r.execute_command("FUNCTION", "DELETE", "dynoq_bench_push")
        drop_prefix(r, "bpc:")
        client.close()
        r.close()
    rows = [
        (
            "variant",
            "server CPU µs/call",
            "runs",
            "in call µs (min, median)",
            "adds",
            "vs raw",
            "wall µs/call",
        )
    ]
    before = None
    for k in names:
        m, low = median(server[k]), min(inside[k])
        adds = "" if before is None else f"{low - before:+.2f}"
        if k == "dynoq push FCALL":
            adds = f"{low - min(inside['dynoq push']):+.2f} vs EVALSHA"
        rows.append(
            (
                k,
                f"{m:.2f}",
                " ".join(f"{x:.1f}" for x in server[k]),
                f"{low:.2f}, {median(inside[k]):.2f}",
                adds,
                f"{m / median(server['raw']):.2f}x",
                f"{median(wall[k]):.1f}",
            )
        )
        if k != "dynoq push FCALL":
            before = low
    print(f"server {version}, {args.n} calls a variant a round, {args.repeats} rounds")
    print(table(rows))


if __name__ == "__main__":
    main()
