"""What least-privilege roles cost: the same work as the default user, as a role user with
the rules of before issue 25 (every command on ``~<prefix>:*``, any EVALSHA) and as one
with today's (EVALSHA of dynoq's SHA-1s only, each write in a selector of its kinds).

    python -m benchmarks.bench_acl [--url redis://...] [--repeats 5] [--messages 20000]

Scripts run their commands under the caller's ACL: every command inside a script is
checked against the user's root rules and selectors, so a push of 100 messages is a few
hundred checks. Each repeat runs the three variants one after the other on a fresh
prefix (a private embedded Valkey unless --url): push_many in batches of 100, single
pushes, pop(100) + ack_many; client µs a message, and the server's µs per EVALSHA
(INFO commandstats, reset before each variant). Medians of --repeats; ratios against the
default user in the same run.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq import acl
from dynoq._core.grants import glob_escape

BATCH = 100


def _before(prefix: str) -> list[str]:
    """The producer-and-consumer rules of before: every command on every key, any script."""
    p = glob_escape(prefix)
    cmds = sorted({*acl.commands("consumer"), *acl.commands("producer")} - {"evalsha"})
    return [
        "resetkeys",
        f"~{p}:*",
        "resetchannels",
        f"&{p}:*",
        "-@all",
        *(f"+{c}" for c in cmds),
        "+evalsha",
        "+script|load",
        "+client|setinfo",
    ]


def _now(role: str, prefix: str) -> list[str]:
    return acl.rules(prefix, role)


def _user_url(admin: redis.Redis, base: str, name: str, rules: list[str]) -> str:
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *rules)
    return base.replace("redis://", f"redis://{name}:pw@", 1)


def _evalsha_usec(admin: redis.Redis) -> float:
    stats = admin.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec_per_call", 0.0))


def run_variant(
    admin: redis.Redis, producer_url: str, consumer_url: str, prefix: str, messages: int
) -> dict[str, float]:
    out: dict[str, float] = {}
    with (
        dynoq.connect(producer_url, prefix=prefix) as producer,
        dynoq.connect(consumer_url, prefix=prefix) as consumer,
    ):
        q = producer.queue("bench", shards=4)
        cq = consumer.queue("bench")

        def timed(name: str, n: int, fn: Callable[[], None]) -> None:
            admin.config_resetstat()
            start = time.perf_counter()
            fn()
            out[name] = (time.perf_counter() - start) / n * 1e6
            out[name + " server"] = _evalsha_usec(admin)

        def push_many() -> None:
            for i in range(0, messages, BATCH):
                q.push_many(range(i, i + BATCH))

        def singles() -> None:
            for i in range(messages // 10):
                q.push(i)

        def pop_ack() -> None:
            while True:
                got = cq.pop(BATCH)
                if not got:
                    return
                cq.ack_many(got)

        timed("push_many(100)", messages, push_many)
        timed("push", messages // 10, singles)
        timed("pop(100) + ack_many", messages + messages // 10, pop_ack)
    drop_prefix(admin, prefix)
    return out


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--messages", type=int, default=20_000)
    args = p.parse_args()
    with server_url(args.url) as url:
        admin = redis.Redis.from_url(url)
        acl.install(admin)
        results: dict[str, dict[str, list[float]]] = {}
        for _ in range(args.repeats):
            for variant in ("default user", "rules of before", "rules of now"):
                prefix = f"bacl-{uuid.uuid4().hex[:8]}"
                if variant == "default user":
                    urls = (url, url)
                elif variant == "rules of before":
                    both = _user_url(admin, url, "bench-before", _before(prefix))
                    urls = (both, both)
                else:
                    urls = (
                        _user_url(admin, url, "bench-producer", _now("producer", prefix)),
                        _user_url(admin, url, "bench-consumer", _now("consumer", prefix)),
                    )
                got = run_variant(admin, *urls, prefix, args.messages)
                for name, value in got.items():
                    results.setdefault(variant, {}).setdefault(name, []).append(value)
        for name in ("bench-before", "bench-producer", "bench-consumer"):
            admin.execute_command("ACL", "DELUSER", name)
        print(
            f"server: {server_version(admin)}; {args.messages} messages, medians of {args.repeats}"
        )
        base = {k: median(v) for k, v in results["default user"].items()}
        rows = [("variant", "operation", "µs/msg", "vs default", "server µs/EVALSHA")]
        for variant, measured in results.items():
            for op in ("push_many(100)", "push", "pop(100) + ack_many"):
                us = median(measured[op])
                rows.append(
                    (
                        variant,
                        op,
                        f"{us:.1f}",
                        f"{base[op] / us:.2f}x",
                        f"{median(measured[op + ' server']):.1f}",
                    )
                )
        print(table(rows))
        admin.close()


if __name__ == "__main__":
    main()
