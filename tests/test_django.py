"""Django's tasks framework on dynoq (DESIGN.md §3.10): a real Django project
(tests/django_project) on SQLite, or PostgreSQL when DJANGO_TEST_ENGINE=postgres, with
real worker processes (``dynoq worker --django``, ``manage.py dynoq_worker``) on the
session's embedded server and, when REDIS_URL is set, that one.

Django 6 needs Python 3.12+: ``./dev.sh test`` runs this module in a venv of its own
(.venv-django); the main suite's interpreter does not collect it (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django
import pytest
from helpers import delete_prefix

PROJECT = Path(__file__).resolve().parent / "django_project"
ROOT = PROJECT.parent.parent
SERVERS = ["embedded"] + (["redis"] if os.environ.get("REDIS_URL") else [])
ENGINE = os.environ.get("DJANGO_TEST_ENGINE", "sqlite")
WAIT = 30.0


@pytest.fixture(scope="session")
def django_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Django set up on the project, its database migrated: the environment a child
    process needs to use the same database."""
    env: dict[str, str] = {"DJANGO_SETTINGS_MODULE": "mysite.settings"}
    pg = None
    if ENGINE == "postgres":
        pg = f"dynoq_test_{uuid.uuid4().hex[:10]}"
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-c", f"CREATE DATABASE {pg}"],
            check=True,
            capture_output=True,
        )
        env["DJANGO_TEST_PG"] = pg
    else:
        env["DJANGO_TEST_DB"] = str(tmp_path_factory.mktemp("django") / "db.sqlite3")
    os.environ.update(env)
    sys.path.insert(0, str(PROJECT))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    yield env
    if pg is not None:
        from django.db import connections

        connections.close_all()
        subprocess.run(
            ["psql", "-h", "127.0.0.1", "-U", "postgres", "-c", f"DROP DATABASE {pg} (FORCE)"],
            check=False,
            capture_output=True,
        )


def tasks_setting(url: str, prefix: str, **options: Any) -> dict[str, Any]:
    from django.conf import settings

    base = settings.TASKS["default"]
    return {
        "default": {
            **base,
            "OPTIONS": {**base["OPTIONS"], "url": url, "prefix": prefix, **options},
        }
    }


@dataclass
class Site:
    """A test's Redis and key prefix, the backend set to them, and the environment of
    the processes it starts."""

    url: str
    prefix: str
    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def backend(self) -> Any:
        from django.tasks import task_backends

        return task_backends["default"]

    def queue(self, name: str = "default") -> Any:
        return self.backend.queue(name)

    @contextmanager
    def worker(self, *args: str, manage: bool = False) -> Iterator[Worker]:
        """A worker process of the project's tasks, started and ready; SIGTERM at the end
        (its exit status checked: 0)."""
        command = (
            [sys.executable, "manage.py", "dynoq_worker"]
            if manage
            else [sys.executable, "-m", "dynoq", "worker", "--django", "mysite.settings"]
        )
        w = Worker(self.start([*command, *args]))
        try:
            w.wait_for("worker started")
            yield w
        finally:
            w.stop()
        assert w.proc.returncode == 0, w.text()

    def start(self, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            argv,
            cwd=PROJECT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def python(self, code: str) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in a child process with Django set up on the project."""
        prelude = "import django\ndjango.setup()\n"
        return subprocess.run(
            [sys.executable, "-c", prelude + code],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )


class Worker:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = WAIT) -> None:
        until(lambda: needle in self.text() or self.proc.poll() is not None, timeout)
        assert needle in self.text(), self.text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


def until(done: Callable[[], Any], timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = done()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


@pytest.fixture(params=SERVERS)
def site(request: pytest.FixtureRequest, django_db: dict[str, str], prefix: str) -> Iterator[Site]:
    from django.test.utils import override_settings

    if request.param == "embedded":
        server = request.getfixturevalue("embedded_server")
        url = f"redis://{server.host}:{server.port}/0"
    else:
        url = os.environ["REDIS_URL"]
    env = {
        **os.environ,
        **django_db,
        "DYNOQ_URL": url,
        "DYNOQ_PREFIX": prefix,
        "DJANGO_TEST_CHECK_AFTER": "0.5",
        "DJANGO_TEST_TX_TIMEOUT": "2",
        "PYTHONPATH": os.pathsep.join([str(PROJECT), str(ROOT)]),
    }
    s = Site(url, prefix, env)
    with override_settings(
        TASKS=tasks_setting(url, prefix, check_after=0.5, transaction_timeout=2.0)
    ):
        try:
            yield s
        finally:
            for p in s.procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            from dynoq.django.backend import close_clients

            close_clients()
            delete_prefix(url, prefix)


def result_of(task: Any, result_id: str, *, ended: bool = True) -> Any:
    """The task's result once it ended (or the last one read after WAIT seconds)."""
    last: list[Any] = []

    def read() -> bool:
        last[:] = [task.get_result(result_id)]
        return bool(last[0].is_finished) or not ended

    until(read)
    return last[0]


def runs(site: Site, task: str, ref: str) -> int:
    from shop.models import Run

    return int(Run.objects.filter(task=task, ref=ref).count())


# -- what the backend declares --------------------------------------------------------------


def test_the_backend_declares_every_capability(site: Site) -> None:
    from dynoq.django import DynoqBackend

    b = site.backend
    assert isinstance(b, DynoqBackend)
    assert b.supports_defer and b.supports_async_task
    assert b.supports_get_result and b.supports_priority
    assert repr(b) == "<dynoq.django.DynoqBackend 'default' on ['default', 'emails', 'serial']>"


def test_a_task_runs_on_a_worker_and_its_result_is_kept(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import add

    r = add.enqueue(2, 3)
    assert r.status == TaskResultStatus.READY and r.args == [2, 3] and r.backend == "default"
    waiting = add.get_result(r.id)
    assert waiting.status == TaskResultStatus.READY and waiting.enqueued_at is not None
    assert waiting.args == [2, 3] and waiting.attempts == 0
    with site.worker():
        done = result_of(add, r.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.last_attempted_at == done.started_at
    assert done.attempts == 1 and str(os.getpid()) not in done.worker_ids[0]
    assert done.args == [2, 3] and done.kwargs == {}
    r.refresh()  # Django's own refresh reads it through the backend
    assert r.status == TaskResultStatus.SUCCESSFUL and r.return_value == 5


def test_a_failed_task_has_its_error_and_no_return_value(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import OrderError, fail, fail_custom

    builtin, custom = fail.enqueue("boom"), fail_custom.enqueue("A-7")
    with site.worker():
        one, other = result_of(fail, builtin.id), result_of(fail_custom, custom.id)
    assert one.status == TaskResultStatus.FAILED and other.status == TaskResultStatus.FAILED
    assert one.errors[0].exception_class is ValueError and "boom" in one.errors[0].traceback
    assert other.errors[0].exception_class_path == "shop.tasks.OrderError"
    assert other.errors[0].exception_class is OrderError
    assert "order A-7 is broken" in other.errors[0].traceback
    assert one.finished_at is not None and one.attempts == 1
    with pytest.raises(ValueError, match="Task failed"):
        _ = one.return_value


def test_a_worker_with_retries_runs_a_failing_task_again(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import fail

    r = fail.enqueue("again")
    with site.worker("--max-retries", "2", "--retry-delays", "0.1"):
        done = result_of(fail, r.id)
    assert done.status == TaskResultStatus.FAILED and done.attempts == 3


def test_run_after_defers_a_task(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from django.utils import timezone
    from shop.tasks import add

    later = timezone.now() + dt.timedelta(seconds=4)
    r = add.using(run_after=later).enqueue(1, 1)
    with site.worker():
        assert add.get_result(r.id).status == TaskResultStatus.READY  # started well before
        done = result_of(add, r.id)
    assert done.return_value == 2
    assert done.started_at >= later - dt.timedelta(milliseconds=50)  # server vs our clock


def test_a_higher_priority_runs_first(site: Site) -> None:
    from shop.models import Run
    from shop.tasks import routine, urgent

    tag = uuid.uuid4().hex[:8]
    low = [routine.enqueue(f"{tag}-r{i}") for i in range(4)]
    high = [urgent.enqueue(f"{tag}-u{i}") for i in range(4)]
    mid = [urgent.using(priority=0).enqueue(f"{tag}-m{i}") for i in range(4)]
    with site.worker("--concurrency", "1", "--batch-size", "1", "--queues", "serial"):
        until(lambda: Run.objects.filter(ref__startswith=tag).count() == 12)
    order = list(
        Run.objects.filter(ref__startswith=tag).order_by("id").values_list("ref", flat=True)
    )
    assert order == [r.args[0] for r in high + mid + low]


def test_priorities_keep_djangos_order_on_dynoqs_scale() -> None:
    from dynoq.django.results import priority

    mapped = [priority(p) for p in range(100, -101, -1)]
    assert mapped[0] == 0 and mapped[-1] == 99 and priority(0) == 49
    assert mapped == sorted(mapped)  # a higher Django priority never gets a later place


def test_an_async_task_runs_and_aenqueue_and_aget_result_work(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import fetch

    async def send() -> Any:
        return await fetch.aenqueue(3)

    r = asyncio.run(send())
    with site.worker():
        until(lambda: fetch.get_result(r.id).is_finished)

    async def read() -> Any:
        return await fetch.aget_result(r.id)

    done = asyncio.run(read())
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == [0, 1, 2]


def test_a_task_that_takes_context_gets_its_result_and_attempt(site: Site) -> None:
    from shop.tasks import whoami

    r = whoami.enqueue("ctx")
    with site.worker():
        done = result_of(whoami, r.id)
    assert done.return_value == {"id": r.id, "attempt": 1, "tag": "ctx"}


def test_queue_name_picks_the_dynoq_queue(site: Site) -> None:
    from django.tasks.exceptions import InvalidTask
    from shop.tasks import add, email

    r = email.enqueue("ann@example.org")
    assert site.queue("emails").get(r.id) is not None
    assert site.queue("default").get(r.id) is None
    with site.worker("--queues", "default"):
        time.sleep(0.5)
        assert not email.get_result(r.id).is_finished  # its queue is not run here
    with site.worker("--queues", "emails"):
        assert result_of(email, r.id).return_value == "mailed ann@example.org"
    with pytest.raises(InvalidTask, match="nope"):
        add.using(queue_name="nope").enqueue(1, 2)


def test_an_unknown_or_foreign_result_id_is_refused(site: Site) -> None:
    from django.tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from shop.tasks import add, email

    with pytest.raises(TaskResultDoesNotExist):
        add.get_result(uuid.uuid4().hex)
    with pytest.raises(TaskResultDoesNotExist):
        add.get_result("x" * 10_000)
    r = email.enqueue("bob@example.org")
    with pytest.raises(TaskResultMismatch):
        add.get_result(r.id)


def test_arguments_json_cannot_carry_are_refused_and_nothing_is_sent(site: Site) -> None:
    from shop.tasks import add

    with pytest.raises(TypeError):
        add.enqueue(object(), 1)
    assert sum(s.pushed + s.ready + s.prepared for s in site.queue().stats().shards) == 0


def test_bad_options_are_refused_when_the_backend_is_made() -> None:
    from dynoq.django import DynoqBackend
    from dynoq.errors import InvalidArgument, InvalidType

    with pytest.raises(InvalidArgument, match="'keep_results'"):
        DynoqBackend("x", {"OPTIONS": {"keep_results": 5}})
    with pytest.raises(InvalidArgument, match="queue name"):
        DynoqBackend("x", {"QUEUES": ["a b"]})
    with pytest.raises(InvalidArgument, match="not in QUEUES"):
        DynoqBackend("x", {"OPTIONS": {"queue_settings": {"other": {}}}})
    with pytest.raises(InvalidType, match="database"):
        DynoqBackend("x", {"OPTIONS": {"database": 3}})
    with pytest.raises(InvalidArgument, match="max_retries"):
        DynoqBackend("x", {"OPTIONS": {"max_retries": -1}})
    b = DynoqBackend("x", {"OPTIONS": {"url": "redis://:s3cret@localhost:1/0"}})
    assert "s3cret" not in repr(b)


def test_the_system_check_warns_without_the_outbox_app(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.apps import apps

    assert site.backend.check() == []
    real = apps.is_installed
    monkeypatch.setattr(apps, "is_installed", lambda name: name != "dynoq.django" and real(name))
    assert [m.id for m in site.backend.check()] == ["dynoq.W001"]


# -- transactions ---------------------------------------------------------------------------


def test_an_enqueue_in_a_committed_transaction_is_sent_at_the_commit(site: Site) -> None:
    from django.db import transaction
    from shop.models import Order
    from shop.tasks import ship

    ref = uuid.uuid4().hex[:10]
    with transaction.atomic():
        Order.objects.create(ref=ref)
        r = ship.enqueue(ref)
        shard = site.queue().stats().shards
        assert sum(s.prepared for s in shard) == 1 and sum(s.ready for s in shard) == 0
    shard = site.queue().stats().shards
    assert sum(s.prepared for s in shard) == 0 and sum(s.ready for s in shard) == 1
    with site.worker():
        assert result_of(ship, r.id).return_value == f"shipped {ref}"
    assert runs(site, "ship", ref) == 1
    from dynoq.django.models import Outbox

    assert Outbox.objects.filter(id=r.id).exists()
    with transaction.atomic():  # the thread's next one takes the sent row with it
        second = ship.enqueue(f"{ref}-2")
    assert not Outbox.objects.filter(id=r.id).exists()
    assert Outbox.objects.filter(id=second.id).exists()


def test_an_enqueue_in_a_rolled_back_transaction_is_never_sent(site: Site) -> None:
    from django.db import transaction
    from shop.tasks import ship

    ref = uuid.uuid4().hex[:10]
    with pytest.raises(RuntimeError), transaction.atomic():
        ship.enqueue(ref)
        raise RuntimeError("the view failed")
    with site.worker():  # its checker rolls the prepared message back
        stats = until(
            lambda: (s := site.queue().stats().shards) and sum(x.prepared for x in s) == 0 and s
        )
    assert sum(x.rolled_back for x in stats) == 1 and sum(x.committed for x in stats) == 0
    assert runs(site, "ship", ref) == 0


KILLED_AT_SEND = """
import os, signal, sys
from django.db import transaction
from dynoq.transactions import Half
from shop.models import Order
from shop.tasks import ship

refs = sys.argv[1:]
for ref in refs[:-1]:  # sent as usual
    with transaction.atomic():
        Order.objects.create(ref=ref)
        ship.enqueue(ref)
# the last: the database commits, then the process dies before the message is sent
Half.commit = lambda self: os.kill(os.getpid(), signal.SIGKILL)
with transaction.atomic():
    Order.objects.create(ref=refs[-1])
    ship.enqueue(refs[-1])
"""

KILLED_IN_TRANSACTION = """
import os, signal, sys
from django.db import transaction
from shop.models import Order
from shop.tasks import ship

with transaction.atomic():
    Order.objects.create(ref=sys.argv[1])
    ship.enqueue(sys.argv[1])
    os.kill(os.getpid(), signal.SIGKILL)  # before the database commits
"""


def _child(site: Site, code: str, *refs: str) -> None:
    prelude = "import django\ndjango.setup()\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + code, *refs],
        cwd=PROJECT,
        env=site.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_producer_killed_between_commit_and_send_delivers_exactly_once(site: Site) -> None:
    from shop.models import Order

    refs = [uuid.uuid4().hex[:10] for _ in range(3)]
    _child(site, KILLED_AT_SEND, *refs)
    assert Order.objects.filter(ref__in=refs).count() == 3  # all three committed
    assert sum(s.prepared for s in site.queue().stats().shards) == 1  # the last: not sent
    with site.worker():
        until(lambda: runs(site, "ship", refs[-1]) == 1)
        time.sleep(1.0)  # a second delivery would land here
    assert [runs(site, "ship", ref) for ref in refs] == [1, 1, 1]
    stats = site.queue().stats().shards
    assert sum(s.prepared for s in stats) == 0 and sum(s.committed for s in stats) == 3


def test_a_producer_killed_inside_its_transaction_sends_nothing(site: Site) -> None:
    from shop.models import Order

    ref = uuid.uuid4().hex[:10]
    _child(site, KILLED_IN_TRANSACTION, ref)
    assert not Order.objects.filter(ref=ref).exists()
    with site.worker():  # rolled back once no transaction can be open (2 s here)
        until(lambda: sum(s.prepared for s in site.queue().stats().shards) == 0)
    assert sum(s.rolled_back for s in site.queue().stats().shards) == 1
    assert runs(site, "ship", ref) == 0


# -- the worker -----------------------------------------------------------------------------


def test_the_worker_finishes_a_running_task_when_stopped(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import slow

    ref = uuid.uuid4().hex[:10]
    r = slow.enqueue(1.0, ref)
    with site.worker("--stop-timeout", "10") as w:
        until(lambda: slow.get_result(r.id).status == TaskResultStatus.RUNNING)
    assert "worker stopped: handled 1" in w.text()
    assert slow.get_result(r.id).status == TaskResultStatus.SUCCESSFUL
    assert runs(site, "slow", ref) == 1


def test_manage_py_dynoq_worker_runs_the_tasks(site: Site) -> None:
    from shop.tasks import add

    r = add.enqueue(20, 22)
    with site.worker("--concurrency", "1", manage=True) as w:
        assert result_of(add, r.id).return_value == 42
    assert "Django tasks of mysite.settings" in w.text()


def test_the_worker_refuses_a_backend_that_is_not_dynoqs(site: Site) -> None:
    command = [sys.executable, "-m", "dynoq", "worker", "--django", "mysite.settings"]
    proc = site.start([*command, "--backend", "nope"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 4 and "no task backend 'nope'" in out
    proc = site.start([*command, "--queue", "x"])
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--django SETTINGS" in out


# -- what Django's own tests expect of a backend (tests/tasks in Django's repository,
# there on its immediate backend), here through a real worker ---------------------------


def test_djangos_expectations_of_an_enqueued_task(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import anoop, noop

    sent = [noop.enqueue(1, two=3), anoop.enqueue()]
    with site.worker():
        done = [result_of(r.task, r.id) for r in sent]
    for r, d in zip(sent, done, strict=True):
        assert d.status == TaskResultStatus.SUCCESSFUL and d.is_finished
        assert None not in (d.started_at, d.last_attempted_at, d.finished_at)
        assert d.enqueued_at <= d.started_at <= d.finished_at
        assert d.return_value is None and d.task == r.task and d.attempts == 1
    assert (done[0].args, done[0].kwargs) == ([1], {"two": 3})
    assert (done[1].args, done[1].kwargs) == ([], {})


def test_djangos_expectations_of_failing_tasks(site: Site) -> None:
    from django.tasks import TaskResultStatus
    from shop.tasks import exits, fail, odd_return

    cases = [
        (fail.enqueue("This task failed"), ValueError, "ValueError: This task failed\n"),
        (exits.enqueue(), SystemExit, "SystemExit: the task called exit\n"),
        (odd_return.enqueue(), TypeError, None),
    ]
    with site.worker() as w:
        done = [result_of(r.task, r.id) for r, _, _ in cases]
        later = noop_after_exit(site)  # the worker survived the task's exit
    for (_, kind, tail), d in zip(cases, done, strict=True):
        assert d.status == TaskResultStatus.FAILED and d.is_finished
        assert None not in (d.started_at, d.last_attempted_at, d.finished_at)
        assert d.errors[0].exception_class is kind
        if tail is not None:
            assert d.errors[0].traceback.endswith(tail), d.errors[0].traceback
        with pytest.raises(ValueError, match="Task failed"):
            _ = d.return_value
    assert "Unsupported type" in done[2].errors[0].traceback
    assert later.status == TaskResultStatus.SUCCESSFUL
    assert "state=RUNNING" in w.text() and "state=FAILED" in w.text()


def noop_after_exit(site: Site) -> Any:
    from shop.tasks import noop

    r = noop.enqueue()
    return result_of(noop, r.id)


def test_djangos_expectations_of_context_and_validation(site: Site) -> None:
    from django.tasks.exceptions import InvalidTask
    from shop.tasks import noop, own_id

    r = own_id.enqueue()
    with site.worker():
        assert result_of(own_id, r.id).return_value == r.id
    with pytest.raises(InvalidTask, match="Queue 'unknown_queue' is not valid for backend"):
        noop.using(queue_name="unknown_queue")  # Django validates a task as it is made


def test_an_enqueue_is_logged_as_djangos_backends_log_it(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    from shop.tasks import noop

    with caplog.at_level("DEBUG", logger="django.tasks"):
        r = noop.enqueue()
    assert any("enqueued" in m and r.id in m for m in caplog.messages)


def test_a_message_never_makes_a_worker_import_a_module_outside_the_project(
    site: Site, tmp_path: Path
) -> None:
    """A message is data: a tenant who can push one must not pick what a worker imports."""
    from dynoq._core.tasks import call_payload

    mark = tmp_path / "mark"
    site.env["DJANGO_TEST_MARK"] = str(mark)
    q = site.queue()
    outside = q.push(call_payload("sideeffect.x", [], {}))
    not_a_task = q.push(call_payload("shop.tasks.Run", [], {}))
    with site.worker():
        until(lambda: len(q.dead()) == 2)
    reasons = {m.id: m.failure.error for m in q.dead()}
    assert "not in an installed app" in reasons[outside]
    assert "not a task" in reasons[not_a_task]
    assert not mark.exists()


def test_worker_processes_share_the_tasks(site: Site) -> None:
    from shop.tasks import slow

    tag = uuid.uuid4().hex[:8]
    sent = [slow.enqueue(0.05, f"{tag}-{i}") for i in range(30)]
    with site.worker("--processes", "2", "--concurrency", "1", "--batch-size", "1"):
        done = [result_of(slow, r.id) for r in sent]
    assert all(d.return_value == r.args[1] for r, d in zip(sent, done, strict=True))
    assert len({d.worker_ids[-1] for d in done}) == 2  # both processes ran some


def test_a_result_read_while_its_task_moves_on_is_read_again(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its state, then its message: a task acked between the two reads is read again."""
    from django.tasks import TaskResultStatus
    from shop.tasks import add

    from dynoq.queue import Queue

    r = add.enqueue(1, 2)
    real, calls = Queue.get, []

    def racing(self: Queue, id: str) -> Any:
        calls.append(id)
        return None if len(calls) == 1 else real(self, id)  # gone once, then there

    monkeypatch.setattr(Queue, "get", racing)
    assert add.get_result(r.id).status == TaskResultStatus.READY and len(calls) == 2


# -- the dashboard in the project's ASGI app, behind Django's login --------------------------


@pytest.fixture
def asgi_site(site: Site) -> Iterator[tuple[Site, str, dict[str, str]]]:
    """The project's ASGI app (Django + the dashboard at /ops/queues) under uvicorn; the
    session cookies of a staff user and of a customer."""
    import socket

    from django.contrib.auth.models import User
    from django.test import Client

    cookies = {}
    for name, is_staff in (("ops", True), ("customer", False)):
        user = User.objects.create_user(f"{name}-{uuid.uuid4().hex[:6]}", is_staff=is_staff)
        browser = Client()
        browser.force_login(user)
        cookies[name] = browser.cookies["sessionid"].value
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = site.start(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "mysite.asgi:application",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        import urllib.request

        try:
            return urllib.request.urlopen(base + "/", timeout=1).status == 200
        except OSError:
            return proc.poll() is not None

    until(up)
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
    yield site, base, cookies


def _get(url: str, session: str | None = None) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    headers = {"Cookie": f"sessionid={session}"} if session else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_dashboard_mounts_in_the_project_for_staff_only(
    asgi_site: tuple[Site, str, dict[str, str]],
) -> None:
    import re

    from shop.tasks import add

    _site, base, cookies = asgi_site
    add.enqueue(1, 2)
    assert _get(base + "/ops/queues/")[0] == 403  # anonymous
    assert _get(base + "/ops/queues/", cookies["customer"])[0] == 403  # not staff
    status, html = _get(base + "/ops/queues/queue?q=default", cookies["ops"])
    assert status == 200 and "default" in html
    urls = re.findall(r'(?:href|src|action|data-api)="(/[^"]*)"', html)
    assert urls and all(u.startswith("/ops/queues/") for u in urls), urls
    status, home = _get(base + "/", cookies["customer"])
    assert status == 200 and "shop home, user customer-" in home  # the rest is Django's


def test_a_staff_browser_opens_the_mounted_dashboard(
    asgi_site: tuple[Site, str, dict[str, str]],
) -> None:
    import shutil

    from playwright.sync_api import sync_playwright
    from shop.tasks import add

    _site, base, cookies = asgi_site
    add.enqueue(1, 2)
    chromium = shutil.which("chromium")
    assert chromium, "the Django suite needs Debian's Chromium (apt-get install chromium)"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(15_000)
        assert page.goto(base + "/ops/queues/").status == 403
        context.add_cookies([{"name": "sessionid", "value": cookies["ops"], "url": base}])
        page.goto(base + "/ops/queues/")
        page.locator("a", has_text="default").first.click()
        page.wait_for_url("**/ops/queues/queue?q=default**")
        assert "default" in page.locator("h1").inner_text()
        browser.close()
