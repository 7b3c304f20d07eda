"""Where a Spark job writes or reads: a server, a key prefix, connection options, a queue.

A :class:`Target` is what travels to the executors (pickled with a sink, or as data
source options): it carries everything :func:`dynoq.connect` needs to reach the same
server the same way as the driver's client (its prefix, TLS and auth options, payload
limit), prints no secret, and opens the queue without ever creating it, so a sink can
only write to a queue whose settings someone chose.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core import codec, validate
from ..backend import redact
from ..client import Client, connect
from ..errors import InvalidArgument, InvalidType
from ..queue import Queue

_cache: dict[str, tuple[Client, dict[str, Queue]]] = {}
_cache_lock = threading.Lock()


def check_url(url: object) -> str:
    """``url`` if every Spark executor can reach it (so not memory:// nor embedded://)."""
    if not isinstance(url, str):
        raise InvalidType(f"url must be a str or a dynoq.Client, got {type(url).__name__}")
    if url.split("://", 1)[0] in ("memory", "embedded"):
        raise InvalidArgument(
            f"Spark executors need a server they can all reach, not {url.split('://')[0]}://:"
            " pass a connected dynoq.Client (its url) or a redis:// URL"
        )
    return url


@dataclass(frozen=True, repr=False)
class Target:
    """A queue on a server, as executors reach it. Picklable; its repr hides secrets."""

    url: str
    queue: str
    prefix: str = "dq"
    options: Mapping[str, Any] = field(default_factory=dict)  # redis-py keyword options
    max_payload_bytes: int = codec.DEFAULT_MAX_PAYLOAD_BYTES

    def __post_init__(self) -> None:
        check_url(self.url)
        validate.check_name(self.queue, "queue name")
        validate.check_name(self.prefix, "prefix")
        if not isinstance(self.options, Mapping):
            raise InvalidType("connection options must be a mapping of redis-py options")
        try:
            pickle.dumps(dict(self.options))
        except Exception as exc:  # noqa: BLE001 - any pickling failure means the same
            raise InvalidArgument(
                f"connection options {sorted(self.options)} cannot be sent to Spark "
                f"executors ({type(exc).__name__}); pass plain values"
            ) from None

    @classmethod
    def of(
        cls, where: str | Client, queue: str, options: Mapping[str, Any] | None = None
    ) -> Target:
        """The target for ``queue`` on a connected client (its URL, prefix, connection
        options and payload limit), or on a URL with ``options`` (``prefix=``,
        ``max_payload_bytes=`` and redis-py options, as :func:`dynoq.connect` takes)."""
        extra = dict(options or {})
        if isinstance(where, Client):
            if extra:
                raise InvalidArgument(
                    f"a sink given a dynoq.Client takes its connection from it; pass "
                    f"{sorted(extra)} to dynoq.connect() instead"
                )
            return cls(
                check_url(where.url),
                queue,
                where.prefix,
                dict(where.backend.connect_options),
                where.max_payload_bytes,
            )
        prefix = extra.pop("prefix", "dq")
        limit = extra.pop("max_payload_bytes", codec.DEFAULT_MAX_PAYLOAD_BYTES)
        return cls(check_url(where), queue, prefix, extra, limit)

    def __repr__(self) -> str:
        hidden = f", options={sorted(self.options)}" if self.options else ""
        return (
            f"Target(queue={self.queue!r}, prefix={self.prefix!r}, "
            f"url={redact(self.url)!r}{hidden})"
        )

    @property
    def where(self) -> str:
        """The queue and server, for messages (no secret)."""
        return f"queue {self.queue!r} under prefix {self.prefix!r} at {redact(self.url)}"

    # -- connecting (once per process) ----------------------------------------------------

    def _key(self) -> str:
        return repr((self.url, self.prefix, sorted(self.options.items()), self.max_payload_bytes))

    def client(self) -> Client:
        """A client for this target, made on first use and shared by every later task of
        this Python process."""
        key = self._key()
        with _cache_lock:
            hit = _cache.get(key)
        if hit is not None:
            return hit[0]
        made = connect(
            self.url,
            prefix=self.prefix,
            max_payload_bytes=self.max_payload_bytes,
            **dict(self.options),
        )
        with _cache_lock:
            hit = _cache.setdefault(key, (made, {}))
        if hit[0] is not made:
            made.close()
        return hit[0]

    def open(self) -> Queue:
        """The queue, which must exist: a sink never creates one (its settings would be
        defaults nobody chose). Raises InvalidArgument if it is not registered."""
        client = self.client()
        with _cache_lock:
            entry = _cache.get(self._key())
            q = entry[1].get(self.queue) if entry is not None else None
        if q is None:
            q = client.open_existing(self.queue)
            if q is None:
                raise InvalidArgument(
                    f"there is no {self.where}: open it on the driver first, choosing its "
                    "settings, e.g. client.queue(name, shards=8, ordered=True)"
                )
            with _cache_lock:
                entry = _cache.get(self._key())
                if entry is not None and entry[0] is client:
                    entry[1][self.queue] = q
        return q

    def forget_queue(self) -> None:
        """Drop this process's copy of the queue (after QueueGone: the queue vanished or
        was created anew, maybe with other shards; the retried task reads it again, and
        never writes with the old settings)."""
        with _cache_lock:
            entry = _cache.get(self._key())
            if entry is not None:
                entry[1].pop(self.queue, None)

    def forget(self) -> None:
        """Drop this process's client (after a dropped connection: the retry reconnects)."""
        with _cache_lock:
            hit = _cache.pop(self._key(), None)
        if hit is not None:
            hit[0].close()

    # -- as Spark data source options ----------------------------------------------------

    def spark_options(self) -> dict[str, str]:
        """Options for ``format("dynoq")`` (url, prefix, queue, connectOptions as JSON)."""
        try:
            text = json.dumps(dict(self.options), sort_keys=True)
        except (TypeError, ValueError):
            raise InvalidArgument(
                f"connection options {sorted(self.options)} are not all plain JSON values, "
                "so the data source cannot carry them: use partition_sink / batch_sink, "
                "which take any picklable option"
            ) from None
        out = {"url": self.url, "prefix": self.prefix, "queue": self.queue}
        if self.options:
            out["connectOptions"] = text
        if self.max_payload_bytes != codec.DEFAULT_MAX_PAYLOAD_BYTES:
            out["maxPayloadBytes"] = str(self.max_payload_bytes)
        return out

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> Target:
        """The target named by data source options (keys case-insensitive)."""
        opts = {k.lower(): v for k, v in options.items()}
        if "url" not in opts or "queue" not in opts:
            raise InvalidArgument(
                'format("dynoq") needs the options "url" and "queue" '
                "(dynoq.spark.source_options(client) gives url, prefix "
                "and connection options)"
            )
        raw = opts.get("connectoptions")
        try:
            extra = {} if raw is None else json.loads(raw)
        except ValueError:
            raise InvalidArgument(
                'option "connectOptions" must be a JSON object of redis-py options'
            ) from None
        if not isinstance(extra, dict):
            raise InvalidArgument(
                'option "connectOptions" must be a JSON object of redis-py options'
            )
        limit = opts.get("maxpayloadbytes")
        return cls(
            opts["url"],
            opts["queue"],
            opts.get("prefix", "dq"),
            extra,
            codec.DEFAULT_MAX_PAYLOAD_BYTES
            if limit is None
            else int_option("maxPayloadBytes", limit),
        )


def int_option(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(f'option "{name}" must be an integer, got {text!r}') from None


def source_options(client: Client, queue: str) -> dict[str, str]:
    """The options that point ``format("dynoq")`` at ``queue`` through ``client``'s
    server, prefix and connection options (TLS, auth)::

        df.write.format("dynoq").options(**source_options(client, "orders"))
            .option("idCol", "event_id").mode("append").save()

    The URL may hold a password: Spark redacts options named like "url" in plans and
    logs (``spark.sql.redaction.options.regex``); do not print the dict yourself."""
    return Target.of(client, queue).spark_options()
