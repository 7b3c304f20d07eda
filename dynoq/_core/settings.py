"""Settings as frozen dataclasses whose fields carry the defaults (pure: no I/O).

:class:`QueueSettings` are fixed when a queue is first opened and stored in Redis; later
opens are checked against them. :class:`ConsumerSettings` carry every consumer option;
``client.consumer(q, handler, settings=ConsumerSettings(...))`` is the same as naming the
options one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ..errors import InvalidArgument, InvalidType, QueueConfigError
from . import validate
from .retry import RetryPolicy
from .sizing import AUTO, AUTO_MAX

SCHEMA_VERSION = 1


def _stored(settings: Any) -> dict[str, str]:
    """Queue or topic settings as their metadata hash stores them."""
    out = {f.name: repr(getattr(settings, f.name)) for f in fields(settings)}
    out["ordered"] = "key" if settings.ordered == "key" else "1" if settings.ordered else "0"
    out["schema"] = str(SCHEMA_VERSION)
    return out


MAX_KEY_CONCURRENCY = 1000
MAX_RETRIES = 1_000_000
MAX_RATE = 10**9  # the most permits a rate limit grants in one period
MAX_RUNNING = 1_000_000  # a queue's max_running at most (lua/slots-2.lua)


def check_rate(value: object, what: str) -> tuple[int, float]:
    """A rate limit: (count 1..MAX_RATE, period seconds >= 0.001), as a tuple."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise InvalidType(f"{what} must be (count, period_seconds) or None, got {value!r}")
    count = validate.check_count(value[0], f"{what} count", high=MAX_RATE)
    return count, float(validate.check_seconds(value[1], f"{what} period", minimum=0.001))


def parse_rate(raw: str) -> tuple[int, float] | None:
    """A stored rate limit (its repr: "None" or "(10, 1.0)")."""
    if raw == "None":
        return None
    count, period = raw.strip("()[] ").split(",")
    return int(count), float(period)


def _optional_int(raw: Mapping[str, str], name: str) -> int | None:
    """A stored setting that may be None (absent from queues stored before it existed)."""
    value = raw.get(name, "None")
    return None if value == "None" else int(value)


def check_ordered(ordered: object, key_concurrency: object) -> tuple[bool | str, int | None]:
    """``ordered`` as stored (False, True for shard order, "key") and the key concurrency
    (1 by default on ordered="key"; refused on other queues)."""
    if ordered == "shard" and type(ordered) is str:
        ordered = True
    if not (type(ordered) is bool or ordered == "key"):
        raise InvalidType(f'ordered must be False, True (or "shard") or "key", got {ordered!r}')
    if ordered != "key":
        if key_concurrency is not None:
            raise QueueConfigError(
                'key_concurrency is for message groups: open the queue with ordered="key"'
            )
        return ordered, None
    if key_concurrency is None:
        return ordered, 1
    return ordered, validate.check_int(
        key_concurrency, "key_concurrency", low=1, high=MAX_KEY_CONCURRENCY
    )


@dataclass(frozen=True)
class QueueSettings:
    """Settings fixed when a queue is first opened (stored in its metadata hash).

    shards: shards of the queue (1..16384); ordered: True (or "shard") for strict
    per-shard order (RocketMQ partition order), "key" for order per message key with no
    head-of-line blocking (message groups, DESIGN §3.5), at most key_concurrency (default
    1) of a key in flight at once; unack_timeout: seconds a popped message stays
    invisible before it is delivered again; max_retries: deliveries beyond the first
    before it is dead-lettered; dedupe_window: seconds an acked id is remembered, so
    ``ensure`` skips it (0 = off);
    min_replicas / replica_timeout: pushes WAIT for that many replicas, up to that many
    seconds, else ReplicationError (0 = no WAIT; Dynomite's DC_QUORUM);
    key_rate_limit (ordered="key" only): (count, period seconds), the deliveries of each
    key, one every period / count at most (lua/lib/krate.lua); max_running: the
    deliveries the queue's consumers have in flight at once, all together (None: no
    cap; lua/slots-2.lua)."""

    shards: int = 4
    ordered: bool | str = False
    unack_timeout: float = 60.0
    max_retries: int = 16
    dedupe_window: float = 0.0
    min_replicas: int = 0
    replica_timeout: float = 1.0
    key_concurrency: int | None = None  # ordered="key" only; 1 there when not given
    key_rate_limit: tuple[int, float] | None = None  # ordered="key" only
    max_running: int | None = None

    def __post_init__(self) -> None:
        try:
            validate.check_int(self.shards, "shards", low=1, high=validate.MAX_SHARDS)
            validate.check_int(self.max_retries, "max_retries", low=0, high=MAX_RETRIES)
            validate.check_int(self.min_replicas, "min_replicas", low=0, high=100)
            ordered, concurrency = check_ordered(self.ordered, self.key_concurrency)
            object.__setattr__(self, "ordered", ordered)
            object.__setattr__(self, "key_concurrency", concurrency)
            # At least a millisecond: scores and timeouts are whole milliseconds.
            validate.check_seconds(self.unack_timeout, "unack_timeout", minimum=0.001)
            validate.check_seconds(self.dedupe_window, "dedupe_window")
            validate.check_seconds(self.replica_timeout, "replica_timeout", minimum=0.001)
            if self.key_rate_limit is not None:
                if not self.keyed:
                    raise QueueConfigError(
                        'key_rate_limit is for message groups: open the queue with ordered="key"'
                    )
                rate = check_rate(self.key_rate_limit, "key_rate_limit")
                object.__setattr__(self, "key_rate_limit", rate)
            if self.max_running is not None:
                validate.check_int(self.max_running, "max_running", low=1, high=MAX_RUNNING)
        except InvalidArgument as exc:
            raise QueueConfigError(str(exc)) from None

    @property
    def keyed(self) -> bool:
        """Whether this is a message-group queue (ordered="key")."""
        return self.ordered == "key"

    @property
    def by_shard(self) -> bool:
        """Whether this queue is in RocketMQ's shard order (ordered=True): leased shards."""
        return self.ordered is True

    def to_hash(self) -> dict[str, str]:
        return _stored(self)

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> QueueSettings:
        """Settings from a stored hash; raises QueueConfigError when it is unreadable."""
        try:
            return cls(
                shards=int(raw["shards"]),
                ordered="key" if raw["ordered"] == "key" else raw["ordered"] == "1",
                unack_timeout=float(raw["unack_timeout"]),
                max_retries=int(raw["max_retries"]),
                dedupe_window=float(raw["dedupe_window"]),
                # Absent from queues stored before replica durability existed.
                min_replicas=int(raw.get("min_replicas", 0)),
                replica_timeout=float(raw.get("replica_timeout", 1.0)),
                key_concurrency=_optional_int(raw, "key_concurrency"),
                key_rate_limit=parse_rate(raw.get("key_rate_limit", "None")),
                max_running=_optional_int(raw, "max_running"),
            )
        except (KeyError, ValueError, TypeError) as exc:
            raise QueueConfigError(f"stored queue settings are unreadable: {exc!r}") from None


@dataclass(frozen=True)
class TopicSettings:
    """Settings fixed when a topic is first opened. Each subscribed group's queue takes
    the queue settings (shards, ordered, unack_timeout, max_retries, dedupe_window);
    member_grace: seconds a broadcasting member that stopped heartbeating keeps its queue
    before the sweeper removes it, with its messages."""

    shards: int = 4
    ordered: bool | str = False
    unack_timeout: float = 60.0
    max_retries: int = 16
    dedupe_window: float = 0.0
    member_grace: float = 30.0
    key_concurrency: int | None = None

    def __post_init__(self) -> None:
        q = self.queue_settings()  # validates the queue part
        object.__setattr__(self, "ordered", q.ordered)
        object.__setattr__(self, "key_concurrency", q.key_concurrency)
        try:
            validate.check_seconds(self.member_grace, "member_grace", minimum=0.001)
        except InvalidArgument as exc:
            raise QueueConfigError(str(exc)) from None

    @property
    def keyed(self) -> bool:
        """Whether every group's queue is a message-group queue (ordered="key")."""
        return self.ordered == "key"

    def queue_settings(self) -> QueueSettings:
        """The settings of each group's queue."""
        return QueueSettings(
            shards=self.shards,
            ordered=self.ordered,
            unack_timeout=self.unack_timeout,
            max_retries=self.max_retries,
            dedupe_window=self.dedupe_window,
            key_concurrency=self.key_concurrency,
        )

    def to_hash(self) -> dict[str, str]:
        return _stored(self)

    @classmethod
    def from_hash(cls, raw: Mapping[str, str]) -> TopicSettings:
        try:
            q = QueueSettings.from_hash(raw)
            return cls(
                shards=q.shards,
                ordered=q.ordered,
                unack_timeout=q.unack_timeout,
                max_retries=q.max_retries,
                dedupe_window=q.dedupe_window,
                key_concurrency=q.key_concurrency,
                member_grace=float(raw.get("member_grace", 30.0)),
            )
        except (ValueError, TypeError) as exc:
            raise QueueConfigError(f"stored topic settings are unreadable: {exc!r}") from None


def merge(
    stored: Any,
    asked: Mapping[str, Any],
    queue: str,
    kind: type[Any] | None = None,
    what: str = "queue",
) -> Any:
    """The settings to use (a QueueSettings, or ``kind``): the stored ones, checked against
    what the caller asked for.

    Raises QueueConfigError when an asked-for value differs from the stored one.
    """
    given = {k: v for k, v in asked.items() if v is not None}
    check = dict(given)
    keyed_only = {"key_concurrency", "key_rate_limit"} & set(check)
    if stored is not None and keyed_only and "ordered" not in check:
        check["ordered"] = stored.ordered  # a later open may omit ordered="key"
    wanted = (kind or QueueSettings)(**check)  # validates what was asked even if unused
    if stored is None:
        return wanted
    # Compared as normalised (ordered="shard" is True): what was asked, validated.
    conflicts = [
        f"{k}={v!r} (stored: {getattr(stored, k)!r})"
        for k, v in given.items()
        if getattr(stored, k) != getattr(wanted, k)
    ]
    if conflicts:
        raise QueueConfigError(
            f"{what} {queue!r} already exists with other settings: {', '.join(conflicts)}; "
            f"open it without those arguments, or use another {what} name"
        )
    return stored


MODES = ("clustering", "broadcasting")


@dataclass(frozen=True)
class ConsumerSettings:
    """Every consumer option and its default.

    group: the consumer group (members share the queue's shards); concurrency: worker
    threads (asyncio: tasks); batch_size: messages per pop (1..1000), or "auto": as many
    as the handler finishes in about 50 ms at the speed seen so far, up to 100 (one at a
    time on ordered="key" queues; see ``_core/sizing.py``); batch_handler: the
    handler gets the popped list instead of one message; max_in_flight: popped and not yet
    finished messages per consumer (default concurrency * batch_size, 100 for "auto");
    strategy: a name in
    ``dynoq.allocation.STRATEGIES`` or a function, with strategy_options; retry_delays:
    seconds before each retry (default RocketMQ's levels from 10 s on concurrent queues,
    1 s on ordered ones; or a :class:`dynoq.retry.RetryPolicy`, whose ``of(msg)`` may pick
    a policy per message, as a task queue's does); lease_ttl: seconds a shard lease (and
    a heartbeat) lives, renewed every third of it; rebalance_interval: seconds between
    periodic rebalances (members joining or leaving trigger one at once); instance_id:
    this member's id (default host:pid:random); mode: for a topic, "clustering" or
    "broadcasting" (None: as the group is subscribed, else clustering; a mode that
    conflicts with the group's subscription raises GroupConflict at start);
    max_continuous_time: seconds a worker stays on one ordered shard while others wait;
    idle_wait: longest blocking pop, seconds (pushes wake a waiting consumer at once;
    stop() too);
    visibility: seconds a popped message stays invisible (default: the queue's
    unack_timeout); consume_timeout: seconds one handler call may take before its message
    is treated as failed (RocketMQ's consumeTimeout, 15 minutes; an ordered shard waits
    for the call to return first: docs/consumer.md);
    rate_limit: (count, period seconds): the whole group handles at most count messages
    per period, enforced in Redis across all members (None: no limit);
    before / after / middleware: hooks around each handler call; max_retries: retries
    after which a message this consumer fails is dead-lettered (RocketMQ's
    maxReconsumeTimes; None: the queue's max_retries, which always applies too: the
    smaller wins).
    """

    group: str = "default"
    concurrency: int = 4
    batch_size: int | str = AUTO
    batch_handler: bool = False
    max_in_flight: int | None = None
    strategy: str | Callable[..., list[int]] = "averagely"
    strategy_options: Mapping[str, Any] | None = None
    retry_delays: Sequence[float] | RetryPolicy | None = None
    max_retries: int | None = None
    lease_ttl: float = 30.0
    rebalance_interval: float = 20.0
    instance_id: str | None = None
    mode: str | None = None
    max_continuous_time: float = 60.0
    idle_wait: float = 5.0
    visibility: float | None = None
    consume_timeout: float = 900.0
    rate_limit: tuple[int, float] | None = None
    before: Callable[..., Any] | None = None
    after: Callable[..., Any] | None = None
    middleware: Sequence[Any] = ()

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise InvalidArgument(
                f"mode {self.mode!r} is not supported: use one of {MODES} "
                "(or None: as the group is subscribed)"
            )
        validate.check_name(self.group, "group")
        validate.check_count(self.concurrency, "concurrency", high=1024)
        self._check_batches()
        if not (isinstance(self.strategy, str) or callable(self.strategy)):
            raise InvalidType("strategy must be a strategy name or a function")
        if self.strategy_options is not None and not isinstance(self.strategy_options, Mapping):
            raise InvalidType("strategy_options must be a mapping of option names")
        if self.max_retries is not None:
            validate.check_int(self.max_retries, "max_retries", low=0, high=MAX_RETRIES)
        if self.instance_id is not None:
            validate.check_text(self.instance_id, "instance_id")
        for name in ("lease_ttl", "rebalance_interval", "max_continuous_time", "idle_wait"):
            validate.check_seconds(getattr(self, name), name, minimum=0.001)
        if self.visibility is not None:
            validate.check_seconds(self.visibility, "visibility", minimum=0.001)
        validate.check_seconds(self.consume_timeout, "consume_timeout", minimum=0.001)
        if self.rate_limit is not None:
            check_rate(self.rate_limit, "rate_limit")
        self._check_hooks()

    def _check_batches(self) -> None:
        """batch_size, batch_handler and max_in_flight, which holds at least one batch."""
        if isinstance(self.batch_size, str) and self.batch_size != AUTO:
            raise InvalidArgument(
                f"batch_size must be a count of messages or {AUTO!r}, got {self.batch_size!r}"
            )
        if self.batch_size != AUTO:
            validate.check_count(self.batch_size, "batch_size", high=validate.MAX_BATCH)
        validate.check_bool(self.batch_handler, "batch_handler")
        if self.max_in_flight is not None:
            validate.check_count(self.max_in_flight, "max_in_flight", high=1_000_000)
            if isinstance(self.batch_size, int) and self.max_in_flight < self.batch_size:
                raise InvalidArgument(
                    f"max_in_flight ({self.max_in_flight}) must be >= "
                    f"batch_size ({self.batch_size})"
                )

    def _check_hooks(self) -> None:
        """before, after and middleware: what runs around each handler call."""
        for name in ("before", "after"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise InvalidType(f"{name} must be callable, got {type(value).__name__}")
        if isinstance(self.middleware, (str, bytes)) or not isinstance(self.middleware, Sequence):
            raise InvalidType("middleware must be a sequence of middleware objects")

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats and lease renewals: a third of the lease, so two
        renewals may fail before it is lost."""
        return self.lease_ttl / 3

    @property
    def in_flight_limit(self) -> int:
        per_worker = AUTO_MAX if isinstance(self.batch_size, str) else self.batch_size
        return self.max_in_flight or self.concurrency * per_worker
