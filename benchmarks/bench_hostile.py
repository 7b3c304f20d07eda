"""What one hostile call of each role costs every other tenant (DESIGN §2.14: no call of a
script runs past ~50 ms, whatever arguments a role sends).

    python -m benchmarks.bench_hostile [--url redis://...] [--n 300000] [--repeats 3]

Each role's user (``dynoq.acl.rules``) sends the largest call its scripts took before they
were bounded, straight by EVALSHA, on queues of ``--n`` messages (one shard each):
  producer           push of n messages in one call
  spark              push-batch of n messages in one call
  consumer           pop of n
  sweeper            promote of n due delayed messages
  dashboard          peek of n
  dashboard-actions  replay of n dead letters
then the largest call dynoq itself sends for the same work (500 pushed, 1,000 popped,
peeked, promoted or replayed: the bounds of docs/security.md). The server's own time for a
call is its SLOWLOG entry (the threshold set to 0: use a private server); meanwhile a
thread PINGs the server on a connection of its own, as another tenant: its slowest PING
while the call ran. Medians of the repeats; each repeat fills the queues afresh.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

import dynoq
from benchmarks.bench_clear import Pinger, slowest_entry
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table
from dynoq import acl
from dynoq._core.batches import BatchOps
from dynoq._core.calls import Call
from dynoq._core.lua import script

FILL_CHUNK = 10_000
HOUR_MS = 3_600_000


def _user(admin: redis.Redis, url: str, role: str, prefix: str) -> redis.Redis:
    name = f"bench-hostile-{role}"
    admin.execute_command("ACL", "SETUSER", name, "reset", "on", ">pw", *acl.rules(prefix, role))
    return redis.Redis.from_url(url.replace("redis://", f"redis://{name}:pw@", 1))


def _fill(q: dynoq.Queue, n: int, delay: float = 0.0) -> None:
    for i in range(0, n, FILL_CHUNK):
        q.push_many(
            [
                dynoq.Message({"n": j, "pad": "x" * 40}, id=f"m{j}", delay=delay)
                for j in range(i, min(i + FILL_CHUNK, n))
            ]
        )


def _messages(n: int, first: int) -> list[Any]:
    """The ARGV tail of a push of n messages: id, delay ms, priority, body each."""
    body = b"\x82\xa1n\x00\xa3pad\xd9\x28" + b"x" * 40
    out: list[Any] = []
    for j in range(first, first + n):
        out += (f"h{j}", 0, 0, body)
    return out


class Scenario:
    """One role's call on its own queue (filled as the call needs): ``call(count)`` is
    the EVALSHA command of a call of ``count`` messages."""

    def __init__(self, client: dynoq.Client, admin: redis.Redis, role: str, n: int) -> None:
        self.role, self.admin, self.n = role, admin, n
        self.q = client.queue(f"hostile-{role}", shards=1)
        self.keys = self.q.ops.shard_keys[0]
        self.what, self.own = WHAT[role]

    def fill(self) -> None:
        q, k, n = self.q, self.keys, self.n
        if self.role in ("consumer", "dashboard"):
            _fill(q, n)
        elif self.role == "sweeper":  # n delayed messages, all due: their scores set to 0
            _fill(q, n, delay=HOUR_MS / 1000)
            self.admin.execute_command("ZUNIONSTORE", k.delayed, 1, k.delayed, "WEIGHTS", 0)
        elif self.role == "dashboard-actions":  # n dead letters: the ready set renamed
            _fill(q, n)
            self.admin.rename(k.ready, k.dead)

    def call(self, count: int) -> tuple[Any, ...]:
        ops, k = self.q.ops, self.keys
        s = script(self.what)
        if self.what in ("push", "push-batch"):
            # dynoq's own call of one message, its head kept and its message replaced
            one = [ops.prepare(dynoq.Message(0, id="h0"))]
            own = ops.push_call("push", 0, one) if self.what == "push" else BatchOps(ops).push(one)
            assert isinstance(own, Call)
            keys, args = list(own.keys), [*own.args[:-4], *_messages(count, 0)]
        else:
            keys = s.key_list(k)
            args = {
                "pop": [ops.epoch, count, HOUR_MS, "0badc0de", "0", "", 3, ops.wake, 0, 99],
                "promote": [ops.epoch, count],
                "peek": [ops.epoch, count],
                "replay": [ops.epoch, count, ops.wake],
            }[self.what]
        return ("EVALSHA", s.sha, len(keys), *keys, *args)


# Each role's call, and the largest one dynoq sends for that work.
WHAT = {
    "producer": ("push", 500),
    "spark": ("push-batch", 500),
    "consumer": ("pop", 1000),
    "sweeper": ("promote", 1000),
    "dashboard": ("peek", 1000),
    "dashboard-actions": ("replay", 1000),
}


def _run(
    admin: redis.Redis, user: redis.Redis, pinger: Pinger, command: tuple[Any, ...]
) -> tuple[str, float, float]:
    """(the reply, the server's time for the call in ms, the slowest PING meanwhile)."""
    time.sleep(0.2)
    admin.slowlog_reset()
    start = time.perf_counter()
    try:
        reply = user.execute_command(*command)
    except redis.ResponseError as exc:
        reply = f"error: {str(exc)[:40]}"
    end = time.perf_counter()
    time.sleep(0.05)
    if type(reply) is int and reply < 0:
        shown = f"refused ({reply})"
    elif isinstance(reply, list):
        shown = f"{len(reply)} items"
    else:
        shown = str(reply)
    return shown, slowest_entry(admin, "EVALSHA"), pinger.worst(start, end)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=300_000)
    args = p.parse_args()
    with server_url(args.url) as url:
        admin = redis.Redis.from_url(url)  # a private server: its SLOWLOG threshold is changed
        old = admin.config_get("slowlog-*")
        admin.config_set("slowlog-log-slower-than", 0)
        admin.config_set("slowlog-max-len", 1_000_000)
        acl.install(admin)
        pinger = Pinger(url)
        pinger.start()
        results: dict[tuple[str, str], list[tuple[str, float, float]]] = {}
        try:
            for _ in range(args.repeats):
                for role in WHAT:
                    for count in (args.n, WHAT[role][1]):
                        prefix = f"bhost-{uuid.uuid4().hex[:8]}"
                        user = _user(admin, url, role, prefix)
                        client = dynoq.connect(url, prefix=prefix)
                        try:
                            s = Scenario(client, admin, role, args.n)
                            s.fill()
                            label = f"{s.what} of {count:,}" + (
                                " (dynoq's largest)" if count == s.own else ""
                            )
                            results.setdefault((role, label), []).append(
                                _run(admin, user, pinger, s.call(count))
                            )
                        finally:
                            user.close()
                            client.close()
                            drop_prefix(admin, prefix)
        finally:
            pinger.done.set()
            pinger.join()
            for role in acl.ROLES:
                admin.execute_command("ACL", "DELUSER", f"bench-hostile-{role}")
            for setting, value in old.items():
                admin.config_set(str(setting), str(value))
        print(
            f"server {server_version(admin)}; queues of {args.n:,} messages, one shard; "
            f"medians of {args.repeats}"
        )
        rows: list[tuple[str, ...]] = [
            (
                "role",
                "call (EVALSHA as the role's user)",
                "reply",
                "server ms",
                "slowest PING meanwhile (ms)",
            )
        ]
        for (role, label), got in results.items():
            rows.append(
                (
                    role,
                    label,
                    got[-1][0],
                    f"{median([g[1] for g in got]):.1f}",
                    f"{median([g[2] for g in got]):.1f}",
                )
            )
        print(table(rows))
        admin.close()


if __name__ == "__main__":
    main()
