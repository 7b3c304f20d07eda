"""Where a single push's time goes: client round trips and server time, against the raw
baseline of bench_core (one EVALSHA of HSET + ZADD per message), in one run.

    python -m benchmarks.bench_push [--url redis://...] [--n 20000] [--repeats 5]

Round trip per message (each a median of --repeats runs, the cases interleaved):
  raw script      bench_core's baseline: redis-py's Script object (what bench_core times)
  raw EVALSHA     the same script through execute_command (no Script wrapper)
  push script     dynoq's push script through execute_command, arguments made once (the
                  server's work and the longer command, without dynoq's Python)
  q.push          the public call: validation, id, msgpack, the push script
  push script + spin   the push script, the client then busy for as long as dynoq's
                  Python takes a push when timed alone (no I/O): what that much client
                  CPU per call costs in wall time on this machine, without dynoq's code
Server time per call (INFO commandstats, usec_per_call of EVALSHA) for the raw script and
the push script: the part of the gap Python cannot close.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import redis

import dynoq
from benchmarks.bench_core import RAW_PUSH
from benchmarks.common import (
    clean_up,
    drop_prefix,
    median,
    parser,
    rate,
    server_url,
    server_version,
    table,
)
from dynoq.backend.runner import eval_args


def per_op(n: int, fn: Callable[[], object]) -> float:
    """Microseconds per message of one timed run of ``fn`` over ``n`` messages."""
    return 1e6 / rate(n, fn)


def server_usec(r: redis.Redis, fn: Callable[[], object]) -> float:
    """EVALSHA's server time per call while ``fn`` runs (the server's own count)."""
    r.config_resetstat()
    fn()
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=20_000)
    p.set_defaults(repeats=5)
    args = p.parse_args()
    n, payload = args.n, os.urandom(50).hex().encode()  # 100 bytes
    with server_url(args.url) as url:
        r = redis.Redis.from_url(url)
        client = dynoq.connect(url, prefix="bench-push")
        q = client.queue("single", shards=1)
        raw = r.register_script(RAW_PUSH)
        r.script_load(RAW_PUSH)  # both EVALSHA cases call their script by its hash
        q.push(payload)  # (dynoq loads its push script on the first push)

        def python_side() -> tuple[object, ...]:  # what q.push does before it sends
            return eval_args(q.ops.push([q.ops.prepare(dynoq.Message(payload))]))

        # The push script's command for one message, made once; each run changes the id.
        command = list(python_side())
        execute = r.execute_command

        def raw_script() -> None:
            for i in range(n):
                raw(keys=["raw:msgs", "raw:ready"], args=[f"s{i}", i, payload])

        def raw_evalsha() -> None:
            for i in range(n):
                execute("EVALSHA", raw.sha, 2, "raw:msgs", "raw:ready", f"s{i}", i, payload)

        def push_script() -> None:
            cmd = command[:]
            for i in range(n):
                cmd[-4] = f"s{i:014d}"
                execute(*cmd)

        def public_push() -> None:
            for _ in range(n):
                q.push(payload)

        def python_alone() -> None:
            for _ in range(n):
                python_side()

        python_us = median([per_op(n, python_alone) for _ in range(3)])

        def push_script_spin() -> None:
            cmd, clock = command[:], time.perf_counter
            for i in range(n):
                cmd[-4] = f"s{i:014d}"
                execute(*cmd)
                end = clock() + python_us / 1e6
                while clock() < end:
                    pass

        cases = {
            "raw script": raw_script,
            "raw EVALSHA": raw_evalsha,
            "push script": push_script,
            "push script + spin": push_script_spin,
            "q.push": public_push,
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(args.repeats):
            order = list(cases)
            random.shuffle(order)  # drift on a shared machine hits every case alike
            for name in order:
                drop_prefix(r, "raw:")
                q.clear()
                times[name].append(per_op(n, cases[name]))
        drop_prefix(r, "raw:")
        q.clear()
        server = {
            "raw script": server_usec(r, raw_evalsha),
            "push script": server_usec(r, push_script),
        }
        version = server_version(r)
        clean_up(r, client, "raw:", "bench-push:")
    med = {k: median(v) for k, v in times.items()}
    base = med["raw script"]
    rows = [("case", "us/message (median)", "runs", "rate vs raw script", "server us/call")]
    for name, runs in times.items():
        rows.append(
            (
                name,
                f"{med[name]:.1f}",
                " ".join(f"{x:.1f}" for x in runs),
                f"{base / med[name]:.2f}x",
                f"{server[name]:.1f}" if name in server else "-",
            )
        )
    print(f"server {version}, {n} single pushes of {len(payload)} bytes, {args.repeats} repeats")
    print(table(rows))
    print(
        f"gap to the raw script: {med['q.push'] - base:.1f} us a message, of which the "
        f"server's extra work {server['push script'] - server['raw script']:.1f} and "
        f"dynoq's Python {med['q.push'] - med['push script']:.1f} (timed alone: "
        f"{python_us:.1f}; a spin that long adds "
        f"{med['push script + spin'] - med['push script']:.1f})"
    )


if __name__ == "__main__":
    main()
