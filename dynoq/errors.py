"""The one error hierarchy of dynoq.

Every error dynoq raises is a :class:`DynoqError`. Errors in arguments are also
``ValueError`` (or ``TypeError`` for a wrong type), so callers may catch either. Nothing
from the Redis client library escapes dynoq untranslated.
"""

from __future__ import annotations

from typing import Any


class DynoqError(Exception):
    """Base class of every error dynoq raises."""


class InvalidArgument(DynoqError, ValueError):
    """An argument has the right type but a bad value (negative delay, bad name...)."""


class InvalidType(DynoqError, TypeError):
    """An argument has the wrong type."""


class AwaitableReturned(DynoqError, TypeError):
    """A handler, hook, check or task called where nothing awaits its result (the sync
    client, or a thread of the asyncio consumer) returned a coroutine or another
    awaitable: it did not run, so its message fails (never acked) or its check asks
    again. An ``async def`` is refused there when it is given (``InvalidType``)."""


class PayloadError(DynoqError):
    """A payload cannot be stored: see the two subclasses."""


class PayloadTypeError(PayloadError, TypeError):
    """A payload holds a value msgpack cannot encode (only bytes, str, numbers, bools,
    None, lists and dicts of those are allowed; never pickle)."""


class PayloadTooLarge(PayloadError, ValueError):
    """An encoded payload is larger than the client's ``max_payload_bytes``."""


class QueueConfigError(InvalidArgument):
    """Queue settings conflict with the ones stored in Redis, or are invalid."""


class OrderedQueueError(InvalidArgument):
    """An operation an ordered queue refuses (delay, priority, reschedule)."""


class GroupConflict(DynoqError):
    """A second consumer group tried to consume a plain queue whose first group is alive."""


class ConnectionFailed(DynoqError, ConnectionError):
    """The server could not be reached, or a URL names an unusable backend."""


class PoolExhausted(DynoqError):
    """Every connection of the client's pool stayed in use for ``pool_timeout`` seconds
    (a ``connect()`` option, default 10 s): the call was not sent. The message names the
    pool size and how to raise it (``max_connections``, ``pool_timeout``).

    Not a :class:`ConnectionFailed`: the server is fine, this client has more concurrent
    callers than connections, so code that treats ConnectionFailed as "Redis is down"
    (a circuit breaker, the CLI's exit code 3, the dashboard's 503) does not mistake
    load for an outage. Retrying later, or a bigger pool, helps; reconnecting does not."""


class PermissionDenied(DynoqError):
    """The server refused a command or key to this user (Redis ACL, or a bad password)."""


class ScriptsNotInstalled(PermissionDenied):
    """dynoq's scripts are not in the server's script cache (a restart, a failover, a
    fresh server) and this user may not load them (a least-privilege ACL role): an admin
    runs ``dynoq acl install`` (docs/security.md). Transient: consumers and the sweeper
    retry, and the next call works once the scripts are back."""


class RecordError(DynoqError):
    """A stored record cannot be read (corrupt, foreign, or over the decoding bounds).
    A pop quarantines such a record to the dead letters and delivers the rest."""


class PayloadMismatch(RecordError, ValueError):
    """A payload does not fit the schema a typed Spark read decodes it with (its mode
    FAILFAST; PERMISSIVE reads it as a row of nulls with its JSON text)."""


class ServerError(DynoqError):
    """The server answered with an error dynoq did not expect (a key of the wrong type,
    a script failure...)."""


class ServerFull(ServerError):
    """Redis is at its memory limit (``maxmemory``, no eviction) and refused to take new
    messages; nothing was written. Consumers still pop, ack and join their groups, so
    the queue can be drained; try again later or raise the limit."""


class LeaseLost(DynoqError):
    """The caller's lease on an ordered shard expired or was taken over (fencing)."""


class ConsumeTimeout(DynoqError):
    """A handler ran longer than the consumer's ``consume_timeout``: its message is treated
    as failed (retried or dead-lettered; on an ordered shard once the call has returned)."""


class Cancelled(DynoqError):
    """Raised in a handler by ``msg.progress()`` / ``msg.heartbeat()`` once its message was
    cancelled while it ran (``q.cancel(id)``, ``TaskHandle.cancel()``): stop and let it
    propagate (the message ends "cancelled", never retried; whatever the handler does
    after hearing it, it no longer runs again)."""


class ReplicationError(DynoqError):
    """Fewer replicas than asked for confirmed a write (``WAIT``)."""


class QueueGone(DynoqError):
    """The queue (or topic) this object was opened for is gone: its keys vanished from
    the server (a restart without persistence, a flush, eviction) or it was deleted and
    created anew, maybe with other settings. Nothing was read or written.
    ``client.queue(name, ...)`` (``client.topic``) opens it again, creating it as a
    first open does when it no longer exists."""


class LayoutError(DynoqError):
    """A queue (or topic) is stored in a layout this version of dynoq cannot read: an
    older one (run ``dynoq migrate``, which upgrades it in place) or a newer one written
    by a later dynoq (upgrade dynoq). Nothing was read or written. ``found`` is the
    stored layout, ``reads`` the layouts this version reads (docs/compatibility.md)."""

    def __init__(self, message: str, found: int = 0, reads: tuple[int, int] = (0, 0)) -> None:
        super().__init__(message)
        self.found, self.reads = found, reads


class TaskArgumentError(PayloadTypeError):
    """A task's argument cannot be sent (msgpack cannot carry it; never pickle): refused
    by ``delay``/``apply`` with nothing pushed. ``argument`` names it (``"to"``, or
    ``"#2"`` for a positional one whose name is unknown)."""

    def __init__(self, message: str, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


class TaskFailed(DynoqError):
    """``TaskHandle.result()`` of a task that failed for good (dead-lettered): its last
    error's type and message (and traceback, when the worker recorded one)."""

    def __init__(
        self, message: str, error_type: str = "", error: str = "", traceback: str = ""
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.error = error
        self.traceback = traceback


class TaskCancelled(TaskFailed):
    """``TaskHandle.result()`` of a task that was cancelled (before it ran, or while it
    ran)."""


class ResultNotKept(DynoqError):
    """``TaskHandle.result()`` when there is no result to wait for: the task keeps none
    (``keep_result=0``, the default), its kept result expired, its return value could not
    be kept, or no task of that id is known."""


class ResultTimeout(DynoqError, TimeoutError):
    """``TaskHandle.result(timeout=...)``: the task had not ended within the timeout."""


# Refusals: a script refuses with a bare negative integer (lua/lib/refusal.lua); no normal
# reply is one. LEASED (another consumer leases the shard) is not an error for a pop that
# holds no lease: it skips the shard. Every other code maps to a typed error here.
FENCED, LEASED, STALE, CONFLICT, GONE, BOUNDS = -1, -2, -3, -4, -5, -6
_REFUSALS: dict[int, tuple[type[DynoqError], str]] = {
    FENCED: (
        LeaseLost,
        "the lease on this shard is gone (expired, or taken over by another "
        "consumer); stop using the shard",
    ),
    LEASED: (LeaseLost, "another consumer leases this shard"),
    STALE: (ServerError, "what the call was built from changed meanwhile"),
    CONFLICT: (
        GroupConflict,
        "another consumer group consumes this queue while its members "
        "are alive (two groups on one queue would split its messages); "
        "to give every group every message, publish to a topic "
        "(client.topic) and subscribe each group",
    ),
    GONE: (
        QueueGone,
        "it is gone: its keys vanished from the server (a restart without "
        "persistence, a flush, eviction) or it was created anew, maybe with "
        "other settings; nothing was done. Open it again with "
        "client.queue(name, ...) (client.topic for a topic), which creates it "
        "as a first open does if it no longer exists",
    ),
    # Never for a call dynoq makes: each script takes what one call of this version sends
    # (lua/lib/bounds.lua); a user that sends EVALSHA by hand may meet it.
    BOUNDS: (
        InvalidArgument,
        "the call carries more keys or arguments than one call of "
        "this dynoq version sends, a count or time out of its range, "
        "or meets a stored hash larger than dynoq writes "
        "(docs/security.md, Bounds); nothing was done",
    ),
}


def gone_error(what: str, context: str) -> QueueGone:
    """The QueueGone of ``what`` ("queue 'orders'", "topic 'news'") for the refused
    ``context`` ("push to shard 3 of 'orders'")."""
    kind = what.split(" ", 1)[0]
    return QueueGone(
        f"{what} is gone: its keys vanished from the server (a restart without "
        "persistence, a flush, eviction) or it was created anew, maybe with "
        f"other settings; {context} was refused and changed nothing. Open it "
        f"again with client.{kind}(name, ...): that creates it as a first open "
        "does if it no longer exists"
    )


def raise_for(reply: Any, context: str) -> None:
    """Raise the typed error a script's refusal code stands for, with ``context`` (what
    was refused) first; return quietly for any other reply."""
    if type(reply) is int and reply < 0:
        kind, why = _REFUSALS.get(reply, (ServerError, f"refused with unknown code {reply}"))
        raise kind(f"{context}: {why}")
