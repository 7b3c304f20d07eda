"""The one error hierarchy of dynoq.

Every error is a :class:`DynoqError`. Errors in arguments are also ``ValueError``
(or ``TypeError`` for a wrong type), so callers may catch either.
"""

from __future__ import annotations


class DynoqError(Exception):
    """Base class of every error dynoq raises."""


class InvalidArgument(DynoqError, ValueError):
    """An argument has the right type but a bad value (negative delay, bad name...)."""


class InvalidType(DynoqError, TypeError):
    """An argument has the wrong type."""


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


class ConnectionFailed(DynoqError, ConnectionError):
    """The server could not be reached, or a URL names an unusable backend."""


class LeaseLost(DynoqError):
    """The caller's lease on an ordered shard expired or was taken over (fencing)."""


class ReplicationError(DynoqError):
    """Fewer replicas than asked for confirmed a write (``WAIT``)."""
