"""One checker per kind of value a caller hands to dynoq (pure: no I/O).

Each returns the value in its canonical form or raises a typed error (``InvalidType`` for a
wrong type, ``InvalidArgument`` for a bad value) whose message names the argument. Nothing
else in dynoq validates these kinds by hand.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidArgument, InvalidType

MAX_PRIORITY = 99
MAX_ID_LENGTH = 512
MAX_NAME_LENGTH = 200
# Longest delay or timeout: 100 years. Scores are milliseconds in doubles (exact to 2^53),
# so anything longer would lose precision or overflow in the scripts.
MAX_SECONDS = 100 * 365 * 24 * 3600.0
# Counts: most messages one pop, peek or dead-letter listing returns (a consumer's
# batch_size too), and most items one push_many, ensure_many, ack_many or replay takes.
MAX_BATCH = 1000
MAX_ITEMS = 100_000
MAX_SHARDS = 16384

_NAME_RE = re.compile(rf"[^{{}}:\s\x00-\x1f\x7f]{{1,{MAX_NAME_LENGTH}}}")


def _utf8(text: str, what: str) -> str:
    """``text`` if it can be written as UTF-8 (Redis keys and values are bytes): a lone
    surrogate (from ``errors="surrogateescape"`` decoding, say) cannot."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise InvalidArgument(
                f"{what} holds a lone surrogate ({text[exc.start]!r} at "
                f"position {exc.start}), which UTF-8 cannot encode: "
                "pass valid Unicode text"
            ) from None
    return text


def check_name(value: object, what: str) -> str:
    """A prefix, queue, group or topic name: 1-200 characters without whitespace, control
    characters, ':' or braces. ':' separates the parts of a key and braces are Redis Cluster
    hash tags, so refusing them keeps the key scheme injective (see ``keys``)."""
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be a str, got {type(value).__name__}")
    if not _NAME_RE.fullmatch(value):
        raise InvalidArgument(
            f"{what} {value!r} is invalid: use 1-{MAX_NAME_LENGTH} characters without "
            "whitespace, ':', '{' or '}' (':' separates the parts of a key: a name holding "
            "one could share keys with another queue or tenant)"
        )
    return _utf8(value, what)


def check_id(value: object, what: str = "message id") -> str:
    """A message id: a str or int, 1-512 characters once written as text."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidType(f"{what} must be a str or int, got {type(value).__name__}")
    text = str(value)
    if not text or len(text) > MAX_ID_LENGTH:
        raise InvalidArgument(f"{what} must be 1-{MAX_ID_LENGTH} characters long")
    return _utf8(text, what)


def check_key(value: object) -> str | None:
    """An ordering key (None for none): a str or int."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidType(f"key must be a str or int, got {type(value).__name__}")
    return _utf8(str(value), "key")


def check_int(value: object, what: str, *, low: int | None = None, high: int | None = None) -> int:
    """An int (never a bool) within ``low``..``high`` (either bound may be open)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"{what} must be an int, got {type(value).__name__}")
    if (low is not None and value < low) or (high is not None and value > high):
        span = (
            f"in {low}..{high}"
            if low is not None and high is not None
            else f">= {low}"
            if low is not None
            else f"<= {high}"
        )
        raise InvalidArgument(f"{what} must be {span}, got {value}")
    return value


def check_count(value: object, what: str = "count", *, high: int | None = None) -> int:
    """A positive count, at most ``high`` when given."""
    return check_int(value, what, low=1, high=high)


def check_priority(value: object) -> int:
    """A priority: 0..99, lower goes first (Dyno-queues' convention)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidType(f"priority must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_PRIORITY:
        raise InvalidArgument(
            f"priority must be in 0..{MAX_PRIORITY} (lower goes first), got {value}"
        )
    return value


def check_seconds(value: object, what: str, *, minimum: float = 0.0) -> float:
    """A finite number of seconds, at least ``minimum`` (default 0) and at most 100 years."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not (math.isfinite(value) and minimum <= value <= MAX_SECONDS):
        raise InvalidArgument(
            f"{what} must be a finite number of seconds from {minimum:g} "
            f"to {MAX_SECONDS:g}, got {value!r}"
        )
    return float(value)


def check_text(value: object, what: str, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """A non-empty str of at most ``max_length`` characters, without control characters
    (instance ids, tags: values stored in Redis, never part of a key)."""
    if not isinstance(value, str):
        raise InvalidType(f"{what} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= max_length or not value.isprintable():
        raise InvalidArgument(f"{what} must be 1-{max_length} printable characters, got {value!r}")
    return _utf8(value, what)


MAX_TAG_LENGTH = 128  # characters of a message tag
MAX_TAGS = 64  # tags of one subscription
_TAG_RE = re.compile(rf"[^|\s\x00-\x1f\x7f]{{1,{MAX_TAG_LENGTH}}}")


def check_tag(value: object) -> str:
    """A message tag (RocketMQ's): 1-128 characters without whitespace or '|' (the tag
    expressions' separator)."""
    if not isinstance(value, str):
        raise InvalidType(f"tag must be a str, got {type(value).__name__}")
    if not _TAG_RE.fullmatch(value):
        raise InvalidArgument(
            f"tag {value!r} is invalid: use 1-{MAX_TAG_LENGTH} characters without whitespace or '|'"
        )
    return _utf8(value, "tag")


def check_tags(value: object) -> tuple[str, ...]:
    """A subscription's tag expression (RocketMQ's syntax): "*" for every message, or
    tags joined by "||" ("paid || refunded"). Returns the tags, () for "*"."""
    if not isinstance(value, str):
        raise InvalidType(f"tags must be a str expression, got {type(value).__name__}")
    if value.strip() == "*":
        return ()
    tags = tuple(t.strip() for t in value.split("||"))
    if not tags or any(not t for t in tags):
        raise InvalidArgument(f"tags {value!r} is invalid: use '*' or tags joined by '||'")
    for t in tags:
        check_tag(t)
    if len(tags) > MAX_TAGS:
        raise InvalidArgument(f"a subscription may name at most {MAX_TAGS} tags")
    return tuple(sorted(set(tags)))


def check_items(value: object, what: str) -> list[Any]:
    """The items of a list argument (any iterable but a str, bytes or dict), at most
    MAX_ITEMS: an iterator is read no further than one item past that."""
    if isinstance(value, (str, bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise InvalidType(
            f"{what} takes a list (or another iterable) of items, got {type(value).__name__}"
        )
    items = list(itertools.islice(value, MAX_ITEMS + 1))
    if len(items) > MAX_ITEMS:
        raise InvalidArgument(
            f"{what} takes at most {MAX_ITEMS} items per call: split them into several calls"
        )
    return items


def check_bool(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidType(f"{what} must be a bool, got {type(value).__name__}")
    return value


def to_ms(seconds: float) -> int:
    """Seconds as whole milliseconds (the unit of every score and TTL in Redis)."""
    return round(seconds * 1000)
