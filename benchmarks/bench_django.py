"""Django's tasks on dynoq against dynoq's own queue, in the same run (ratios per round,
then medians). Needs Django 6 (Python 3.12+): run it from .venv-django.

    .venv-django/bin/python -m benchmarks.bench_django [--url redis://...] [--n 2000]
        [--repeats 5] [--engine sqlite|postgres]

  enqueue      task.enqueue(1, 2) (autocommit) against q.push() of the same payload with
               an id, in alternating chunks of 50 calls (goal: >= 0.8x)
  in atomic()  a transaction.atomic() block writing a row of its own and enqueueing one
               task (a half message, an outbox row, the commit of the half and the row's
               delete) against the same block pushing at its commit
               (transaction.on_commit: no outbox, lost if the process dies between the
               two): the price of exactly-once
  worker       the Django worker's consumers (a no-op task, concurrency 4) against a
               consumer with a no-op handler on the same N waiting messages: what
               Django's task machinery costs (its result object, signals and their log
               records, fresh database connections), a figure to report
The database is the test project's (tests/django_project): SQLite in a temporary
directory, or a fresh PostgreSQL database on 127.0.0.1 (--engine postgres).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

import dynoq
from benchmarks.common import drop_prefix, median, parser, server_url, server_version, table

PROJECT = Path(__file__).resolve().parent.parent / "tests" / "django_project"
CHUNK = 50


@contextmanager
def django_project(engine: str) -> Iterator[None]:
    """Django set up on the test project, its database migrated (and dropped after)."""
    pg = None
    with tempfile.TemporaryDirectory() as tmp:
        if engine == "postgres":
            pg = f"dynoq_bench_{uuid.uuid4().hex[:8]}"
            psql = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-c"]
            subprocess.run([*psql, f"CREATE DATABASE {pg}"], check=True, capture_output=True)
            os.environ["DJANGO_TEST_PG"] = pg
        else:
            os.environ["DJANGO_TEST_DB"] = str(Path(tmp) / "db.sqlite3")
        os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
        sys.path.insert(0, str(PROJECT))
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0)
        try:
            yield
        finally:
            if pg is not None:
                from django.db import connections

                connections.close_all()
                subprocess.run([*psql, f"DROP DATABASE {pg} (FORCE)"], capture_output=True)


def _settings(url: str, prefix: str) -> Any:
    from django.conf import settings
    from django.test.utils import override_settings

    base = settings.TASKS["default"]
    options = {**base["OPTIONS"], "url": url, "prefix": prefix, "keep_result": 0}
    return override_settings(TASKS={"default": {**base, "OPTIONS": options}})


def _alternate(
    first: Callable[[], None], second: Callable[[], None], n: int
) -> tuple[float, float]:
    """Calls/s of each, timed in alternating chunks (the load varies faster than a run)."""
    spent = [0.0, 0.0]
    for _ in range(n // CHUNK):
        for i, fn in enumerate((first, second)):
            start = time.perf_counter()
            for _ in range(CHUNK):
                fn()
            spent[i] += time.perf_counter() - start
    done = (n // CHUNK) * CHUNK
    return done / spent[0], done / spent[1]


def enqueue_rates(url: str, n: int, atomic: bool) -> tuple[float, float]:
    from django.db import transaction
    from django.tasks import task_backends
    from shop.models import Order
    from shop.tasks import add

    prefix = f"bdj-{uuid.uuid4().hex[:8]}"
    with _settings(url, prefix):
        q = task_backends["default"].queue("default")
        payload = {"task": add.module_path, "args": [1, 2], "kwargs": {}}

        def push() -> None:
            q.push(payload, id=uuid.uuid4().hex)

        def django_enqueue() -> None:
            add.enqueue(1, 2)

        if atomic:

            def in_block() -> None:
                with transaction.atomic():
                    Order.objects.create(ref=uuid.uuid4().hex)
                    add.enqueue(1, 2)

            def push_at_commit() -> None:
                with transaction.atomic():
                    Order.objects.create(ref=uuid.uuid4().hex)
                    transaction.on_commit(push)

            rates = _alternate(in_block, push_at_commit, n)
        else:
            rates = _alternate(django_enqueue, push, n)
    r = redis.Redis.from_url(url)
    drop_prefix(r, prefix)
    r.close()
    from dynoq.django.backend import close_clients

    close_clients()
    return rates


class Calls:
    def __init__(self, n: int) -> None:
        self.n, self.seen, self.first, self.last = n, 0, 0.0, 0.0

    def hit(self) -> None:
        now = time.perf_counter()
        if not self.seen:
            self.first = now
        self.last, self.seen = now, self.seen + 1

    def rate(self) -> float:
        return (self.seen - 1) / (self.last - self.first) if self.seen > 1 else 0.0


def worker_rates(url: str, n: int) -> tuple[float, float]:
    from django.tasks import task_backends
    from django.tasks.signals import task_finished
    from shop.tasks import noop

    from dynoq.django.worker import DjangoWorker

    prefix = f"bdj-{uuid.uuid4().hex[:8]}"
    payload = {"task": noop.module_path, "args": [], "kwargs": {}}
    out = []
    with _settings(url, prefix), dynoq.connect(url, prefix=prefix) as client:
        backend = task_backends["default"]
        calls = Calls(n)
        hit = functools.partial(lambda calls, **_: calls.hit(), calls)
        task_finished.connect(hit, weak=False)
        q = backend.queue("default", client)
        q.push_many([dynoq.Message(payload) for _ in range(n)])
        worker = DjangoWorker(backend).consumers(client, ["default"], concurrency=4)
        with worker:
            _wait(lambda: calls.seen >= n)
        task_finished.disconnect(hit)
        out.append(calls.rate())
        plain = Calls(n)
        q.push_many([dynoq.Message(payload) for _ in range(n)])
        with client.consumer(q, lambda _msg: plain.hit(), concurrency=4):
            _wait(lambda: plain.seen >= n)
        out.append(plain.rate())
    r = redis.Redis.from_url(url)
    drop_prefix(r, prefix)
    r.close()
    return out[0], out[1]


def _wait(done: Callable[[], bool], timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--engine", choices=["sqlite", "postgres"], default="sqlite")
    args = p.parse_args()
    with server_url(args.url) as url, django_project(args.engine):
        r = redis.Redis.from_url(url)
        print(
            f"server {server_version(r)}, database {args.engine}, n={args.n}, "
            f"{args.repeats} rounds (medians; ratio per round)"
        )
        r.close()
        cases = {
            "enqueue": lambda: enqueue_rates(url, args.n, atomic=False),
            "in atomic()": lambda: enqueue_rates(url, args.n // 2, atomic=True),
            "worker": lambda: worker_rates(url, args.n),
        }
        rows = [("case", "django/s", "baseline/s", "ratio", "ratios")]
        for name, run in cases.items():
            got = [run() for _ in range(args.repeats)]
            ratios = sorted(a / b for a, b in got)
            rows.append(
                (
                    name,
                    f"{median([a for a, _ in got]):,.0f}",
                    f"{median([b for _, b in got]):,.0f}",
                    f"{median(ratios):.2f}x",
                    " ".join(f"{x:.2f}" for x in ratios),
                )
            )
        print(table(rows))


if __name__ == "__main__":
    main()
