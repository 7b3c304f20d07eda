"""Enqueues that follow the database transaction (DESIGN.md §3.6 and §3.10).

Inside ``transaction.atomic()`` an enqueue prepares a half message in Redis and writes an
outbox row in the same transaction; when the transaction commits the half is committed
(``on_commit``), when it rolls back the row never existed. A row whose half is committed
is deleted by the thread's next transactional enqueue. Rows of a half committed by a
checker, or of a thread's last enqueues before its process ended, stay: a few bytes
each, one per crash or thread, that no check reads again. A producer that dies between
the database commit and the half's commit leaves a prepared message whose row exists:
the worker's checker asks the database and commits it, so the task is sent exactly once,
and a rolled-back one never."""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any

from django.db import close_old_connections, transaction

from ..errors import DynoqError
from ..message import Message
from ..queue import Queue
from ..transactions import Half
from .config import BackendConfig

log = logging.getLogger("dynoq.django")
# The rows of tasks sent at their commit, per database: deleted in this thread's next
# transactional enqueue (a delete of their own would be a commit, an fsync, per task).
_sent = threading.local()
MAX_SENT = 1000


def _sent_ids(database: str) -> list[str]:
    by_database: dict[str, list[str]] | None = getattr(_sent, "ids", None)
    if by_database is None:
        by_database = _sent.ids = {}
    return by_database.setdefault(database, [])


def installed() -> bool:
    """Whether the outbox table is there to write: the ``dynoq.django`` app installed."""
    from django.apps import apps

    return bool(apps.is_installed("dynoq.django"))


def kept(config: BackendConfig) -> bool:
    """Whether this config's enqueues keep outbox rows (a database to follow, and the
    table), so that its worker runs their checker."""
    return config.database is not None and installed()


def in_transaction(config: BackendConfig) -> bool:
    """Whether an enqueue now follows a transaction of the backend's database."""
    if config.database is None:
        return False
    return bool(transaction.get_connection(config.database).in_atomic_block)


def send_on_commit(
    q: Queue, msg_id: str, payload: Any, delay: float, priority: int, config: BackendConfig
) -> None:
    """Prepare the task's message, write its outbox row in the open transaction, and
    commit the message when the transaction commits. Without the ``dynoq.django`` app
    (no outbox table: the backend's system check warns) the push waits for the commit,
    and a process that dies between the two loses it."""
    assert config.database is not None
    if not installed():
        push = functools.partial(q.push, payload, id=msg_id, delay=delay, priority=priority)
        transaction.on_commit(push, using=config.database)
        return
    from .models import Outbox  # models load once the apps are ready

    half = q.prepare(
        payload, id=msg_id, delay=delay, priority=priority, check_after=config.check_after
    )
    rows = Outbox.objects.using(config.database)
    rows.create(id=msg_id, queue=q.name)
    sent = _sent_ids(config.database)
    if sent:  # rows no check needs any more, gone with this transaction
        rows.filter(id__in=sent).delete()
        sent.clear()
    send = functools.partial(_commit, q, half, payload, delay, priority, config.database)
    transaction.on_commit(send, using=config.database, robust=True)


def _commit(q: Queue, half: Half, payload: Any, delay: float, priority: int, database: str) -> None:
    from .models import Outbox

    try:
        committed = half.commit()
    except DynoqError as exc:  # Redis unreachable: the row stays, the checker sends it
        log.warning("task %s not sent at commit (%s): the worker's checker will", half.id, exc)
        return
    if not committed:
        # A checker rolled it back: its transaction outlived transaction_timeout.
        log.warning(
            "task %s was rolled back while its transaction was open (longer than "
            "transaction_timeout): sent now",
            half.id,
        )
        q.ensure(payload, id=half.id, delay=delay, priority=priority)
    sent = _sent_ids(database)
    sent.append(half.id)
    if len(sent) >= MAX_SENT:  # a thread that commits without enqueueing again
        Outbox.objects.using(database).filter(id__in=sent).delete()
        sent.clear()


def checker(config: BackendConfig) -> Any:
    """The check of the worker's checker: commit a prepared task whose row exists; roll
    back one without a row once no transaction can still be open (older than
    ``transaction_timeout``); else ask again later."""
    from .models import Outbox

    assert config.database is not None
    database = config.database

    def check(msg: Message) -> str:
        close_old_connections()
        # The row stays: the claim may be lost before the commit is settled, and the
        # next checker must find it again.
        if Outbox.objects.using(database).filter(id=msg.id).exists():
            return "commit"
        age = time.time() - (msg.enqueued_at or 0.0)
        return "rollback" if age > config.transaction_timeout else "unknown"

    return check
