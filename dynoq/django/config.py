"""A backend's OPTIONS, read and checked once (pure: no Django, no I/O), so that a typo
in settings fails when the backend is made, not on the first enqueue."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._core import validate
from .._core.retry import check_delays
from ..errors import InvalidArgument, InvalidType

DEFAULT_KEEP_RESULT = 86400.0  # a day: get_result() must find what a worker finished
DEFAULT_TRANSACTION_TIMEOUT = 300.0


@dataclass(frozen=True)
class BackendConfig:
    """``url``/``prefix``: where the queues are (default $DYNOQ_URL and $DYNOQ_PREFIX, else
    redis://localhost:6379/0 and "dq"); ``keep_result``: seconds a finished task's result
    is kept for ``get_result`` (0: none); ``max_retries`` / ``retry_delays``: runs after a
    failure (Django's tasks fail at once: 0); ``database``: the alias whose transactions an
    enqueue follows (None: enqueue at once, always); ``transaction_timeout``: the longest
    transaction, after which a prepared task whose outbox row is missing is rolled back;
    ``check_after``: seconds before the worker's checker asks about a task whose producer
    did not send it at its commit (and between checks); ``queue_settings``: per queue,
    what ``client.queue(name, ...)`` takes (shards, ...); ``redis_options``: what
    ``dynoq.connect`` takes."""

    queues: tuple[str, ...]
    url: str | None = None
    prefix: str = "dq"
    keep_result: float = DEFAULT_KEEP_RESULT
    max_retries: int = 0
    retry_delays: tuple[float, ...] | None = None
    database: str | None = "default"
    transaction_timeout: float = DEFAULT_TRANSACTION_TIMEOUT
    check_after: float = 60.0
    queue_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    redis_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def keep_ms(self) -> int:
        return validate.to_ms(self.keep_result)

    def consumer_options(self) -> dict[str, Any]:
        """What each queue's consumer takes, beyond the worker's own options."""
        out: dict[str, Any] = {"max_retries": self.max_retries}
        if self.retry_delays is not None:
            out["retry_delays"] = self.retry_delays
        return out


KNOWN = {
    "url",
    "prefix",
    "keep_result",
    "max_retries",
    "retry_delays",
    "database",
    "transaction_timeout",
    "check_after",
    "queue_settings",
    "redis_options",
}


def read(alias: str, queues: Iterable[str], options: Mapping[str, Any]) -> BackendConfig:
    """The config of backend ``alias`` from its QUEUES and OPTIONS; InvalidArgument or
    InvalidType naming the option for anything that cannot be used."""
    where = f"TASKS[{alias!r}]"
    if not isinstance(options, Mapping):
        raise InvalidType(f"{where}['OPTIONS'] must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - KNOWN)
    if unknown:
        raise InvalidArgument(
            f"{where}['OPTIONS'] has unknown option(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(KNOWN))}"
        )
    names = tuple(sorted(validate.check_name(q, f"{where} queue name") for q in queues))
    if not names:
        raise InvalidArgument(f"{where}['QUEUES'] names no queue")
    url = options.get("url", os.environ.get("DYNOQ_URL"))
    if url is not None and not isinstance(url, str):
        raise InvalidType(f"{where} url must be a string")
    prefix = validate.check_name(
        options.get("prefix", os.environ.get("DYNOQ_PREFIX", "dq")), f"{where} prefix"
    )
    keep = validate.check_seconds(options.get("keep_result", DEFAULT_KEEP_RESULT), "keep_result")
    retries = validate.check_int(
        options.get("max_retries", 0), "max_retries", low=0, high=1_000_000
    )
    delays = options.get("retry_delays")
    if delays is not None:
        delays = check_delays(delays, "retry_delays")
    database = options.get("database", "default")
    if database is not None and not isinstance(database, str):
        raise InvalidType(f"{where} database must be a database alias (a string) or None")
    timeout = validate.check_seconds(
        options.get("transaction_timeout", DEFAULT_TRANSACTION_TIMEOUT), "transaction_timeout"
    )
    check_after = validate.check_seconds(options.get("check_after", 60.0), "check_after")
    per_queue = options.get("queue_settings", {})
    if not isinstance(per_queue, Mapping) or not all(
        isinstance(v, Mapping) for v in per_queue.values()
    ):
        raise InvalidType(f"{where} queue_settings must map queue names to dicts")
    stray = sorted(set(per_queue) - set(names))
    if stray:
        raise InvalidArgument(f"{where} queue_settings names queues not in QUEUES: {stray}")
    redis_options = options.get("redis_options", {})
    if not isinstance(redis_options, Mapping):
        raise InvalidType(f"{where} redis_options must be a dict")
    return BackendConfig(
        queues=names,
        url=url,
        prefix=prefix,
        keep_result=keep,
        max_retries=retries,
        retry_delays=delays,
        database=database,
        transaction_timeout=timeout,
        check_after=check_after,
        queue_settings=dict(per_queue),
        redis_options=dict(redis_options),
    )
