"""Why a message failed (pure: no I/O): the reason a consumer records with it, and the
stored reason read back as a :class:`~dynoq.message.Failure` (lua/lib/why.lua)."""

from __future__ import annotations

import traceback

import msgpack

from ..errors import RecordError
from ..message import Failure
from . import logs
from .codec import MAX_MS, unpack

MAX_ERROR_TEXT, MAX_TRACEBACK = 1000, 4000  # characters kept of a failure

# The reasons a script records without a consumer's words: kind -> (type, message)
_FIXED = {
    b"x": (
        "VisibilityTimeout",
        "its deliveries were not acked within the visibility timeout (a consumer crashed "
        "or hung) until its retries were spent",
    ),
    b"r": (  # lua/lib/ktake.lua
        "RecordError",
        "its record does not name the key it waited in (not written by dynoq)",
    ),
    b"l": (  # lua/lib/lapse.lua
        "Expired",
        "it was not delivered before its expiry (push(..., expires=...))",
    ),
}


def why(error: BaseException, consumer: str) -> bytes:
    """The reason a consumer records with a failed message: msgpack [error type, message,
    traceback, consumer], each bounded. The message names the error it was raised from
    (``raise Retry()`` in an ``except``: the error is the cause, the one worth reading;
    the traceback keeps its end, which a long chain's cause may not be part of)."""
    text = str(error)
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None:
        named = f"cause: {logs.describe(cause)}"
        text = f"{text}; {named}" if text else named
    text = text[:MAX_ERROR_TEXT]
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    packed: bytes = msgpack.packb(
        [type(error).__name__, text, trace[-MAX_TRACEBACK:], consumer], use_bin_type=True
    )
    return packed


def failure(raw: bytes | None) -> Failure | None:
    """A stored reason (``"<first ms>,<last ms>,<kind>,<detail>"``) as a Failure."""
    if not raw:
        return None
    try:
        first, last, kind, detail = raw.split(b",", 3)
        times = _failed_at(first), _failed_at(last)
        fixed = _FIXED.get(kind)
        if fixed is not None:
            return Failure(*fixed, "", "", *times)
        if kind == b"t":  # lua/lib/transaction.lua bury_half(): detail is the checks made
            return Failure(
                "TransactionUnresolved",
                f"transaction unresolved: still undecided after {int(detail)} "
                "checks, so it was rolled back (replaying it delivers it)",
                "",
                "",
                *times,
            )
        texts = unpack(detail, 64 * 1024)
        if type(texts) is not list or len(texts) != 4 or any(type(t) is not str for t in texts):
            raise ValueError("not four strings")
        error_type, error, trace, consumer = texts
        return Failure(error_type, error, trace, consumer, *times)
    except (ValueError, RecordError):
        return Failure("Unknown", "the stored reason is unreadable", "", "", 0.0, 0.0)


def _failed_at(field: bytes) -> float:
    if not (field.isdigit() and len(field) <= 16 and int(field) <= MAX_MS):
        raise ValueError("not a time")
    return int(field) / 1000
