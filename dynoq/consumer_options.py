"""A consumer's options, validated once at construction (pure: no I/O)."""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import allocation
from .codec import check_positive_int
from .errors import InvalidArgument, InvalidType
from .hooks import CallableHooks, Middleware
from .keys import check_name
from .message import Message
from .retry import RetryPolicy

MODES = ("clustering",)  # "broadcasting" is planned: every member gets every message


def _seconds(value: object, what: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"{what} must be a number of seconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise InvalidArgument(f"{what} must be a finite number of seconds "
                              f"{'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def default_instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class ConsumerOptions:
    """See :class:`dynoq.Consumer` for what each option means."""

    group: str
    concurrency: int
    batch_size: int
    strategy: allocation.Strategy
    strategy_options: Mapping[str, Any]
    retry: RetryPolicy
    lease_ttl: float
    rebalance_interval: float
    instance_id: str
    batch_handler: bool
    max_in_flight: int
    max_continuous_time: float
    idle_wait: float
    visibility: float | None
    middleware: tuple[Middleware, ...] = field(default=())

    @property
    def heartbeat_interval(self) -> float:
        # A third of the lease: two renewals may fail before it is lost.
        return self.lease_ttl / 3


def make_options(*, ordered: bool, shards: int, group: str = "default", concurrency: int = 4,
                 batch_size: int = 1, strategy: str | Callable[..., list[int]] = "averagely",
                 strategy_options: Mapping[str, Any] | None = None,
                 retry_delays: Sequence[float] | None = None, lease_ttl: float = 30.0,
                 rebalance_interval: float = 20.0, instance_id: str | None = None,
                 mode: str = "clustering", batch_handler: bool = False,
                 max_in_flight: int | None = None, max_continuous_time: float = 60.0,
                 idle_wait: float = 1.0, visibility: float | None = None,
                 before: Callable[[Message], Any] | None = None,
                 after: Callable[[Message, BaseException | None], Any] | None = None,
                 middleware: Sequence[Middleware] = ()) -> ConsumerOptions:
    if mode not in MODES:
        raise InvalidArgument(f"mode {mode!r} is not supported: only 'clustering' (each "
                              "message to one member of the group); broadcasting is planned")
    check_name(group, "group")
    concurrency = check_positive_int(concurrency, "concurrency")
    batch_size = check_positive_int(batch_size, "batch_size")
    in_flight = concurrency * batch_size if max_in_flight is None else check_positive_int(
        max_in_flight, "max_in_flight")
    if in_flight < batch_size:
        raise InvalidArgument(f"max_in_flight ({in_flight}) must be >= batch_size "
                              f"({batch_size})")
    fn = allocation.resolve(strategy)
    opts = dict(strategy_options or {})
    me = default_instance_id() if instance_id is None else check_name(instance_id,
                                                                        "instance_id")
    fn(list(range(shards)), [me], me, **opts)  # unknown options fail now, not at rebalance
    for name, value in (("before", before), ("after", after)):
        if value is not None and not callable(value):
            raise InvalidType(f"{name} must be callable, got {type(value).__name__}")
    hooks = list(middleware)
    for m in hooks:
        if not isinstance(m, Middleware):
            raise InvalidType(f"middleware must be dynoq Middleware objects, got "
                              f"{type(m).__name__}")
    if before is not None or after is not None:
        hooks.insert(0, CallableHooks(before, after))
    if not isinstance(batch_handler, bool):
        raise InvalidType("batch_handler must be a bool")
    return ConsumerOptions(
        group=group, concurrency=concurrency, batch_size=batch_size, strategy=fn,
        strategy_options=opts, retry=RetryPolicy.make(retry_delays, ordered=ordered),
        lease_ttl=_seconds(lease_ttl, "lease_ttl"),
        rebalance_interval=_seconds(rebalance_interval, "rebalance_interval"),
        instance_id=me, batch_handler=batch_handler, max_in_flight=in_flight,
        max_continuous_time=_seconds(max_continuous_time, "max_continuous_time"),
        idle_wait=_seconds(idle_wait, "idle_wait"),
        visibility=None if visibility is None else _seconds(visibility, "visibility"),
        middleware=tuple(hooks))
