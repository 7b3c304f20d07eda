"""Queue settings: validated, stored in Redis on first open, compared on later opens."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from .errors import InvalidType, QueueConfigError

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class QueueSettings:
    """Settings fixed when a queue is first opened (stored in its metadata hash)."""

    shards: int = 4
    ordered: bool = False
    unack_timeout: float = 60.0
    max_retries: int = 16
    dedupe_window: float = 0.0
    # Replica durability (Dynomite DC_QUORUM analog): pushes WAIT for this many replicas
    # to confirm, up to replica_timeout seconds, else ReplicationError. 0 = no WAIT.
    min_replicas: int = 0
    replica_timeout: float = 1.0

    def __post_init__(self) -> None:
        for name, kind in (("shards", int), ("max_retries", int), ("min_replicas", int)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise InvalidType(f"{name} must be an int, got {type(value).__name__}")
        if not 1 <= self.shards <= 16384:
            raise QueueConfigError(f"shards must be in 1..16384, got {self.shards}")
        if self.max_retries < 0:
            raise QueueConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.min_replicas < 0:
            raise QueueConfigError(f"min_replicas must be >= 0, got {self.min_replicas}")
        if not isinstance(self.ordered, bool):
            raise InvalidType(f"ordered must be a bool, got {type(self.ordered).__name__}")
        for name in ("unack_timeout", "dedupe_window", "replica_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidType(f"{name} must be a number of seconds")
            positive = name != "dedupe_window"
            if not math.isfinite(value) or value < 0 or (positive and value == 0):
                raise QueueConfigError(f"{name} must be a finite number of seconds "
                                       f"({'> 0' if positive else '>= 0'}), got {value!r}")

    def to_hash(self) -> dict[str, str]:
        out = {f.name: repr(getattr(self, f.name)) for f in fields(self)}
        out["ordered"] = "1" if self.ordered else "0"
        out["schema"] = str(SCHEMA_VERSION)
        return out

    @classmethod
    def from_hash(cls, raw: dict[str, str]) -> QueueSettings:
        return cls(
            shards=int(raw["shards"]),
            ordered=raw["ordered"] == "1",
            unack_timeout=float(raw["unack_timeout"]),
            max_retries=int(raw["max_retries"]),
            dedupe_window=float(raw["dedupe_window"]),
            # Absent from queues stored before replica durability existed.
            min_replicas=int(raw.get("min_replicas", 0)),
            replica_timeout=float(raw.get("replica_timeout", 1.0)),
        )


def merge(stored: QueueSettings | None, asked: dict[str, Any], queue: str) -> QueueSettings:
    """The settings to use: the stored ones, checked against what the caller asked for.

    Raises QueueConfigError when an asked-for value differs from the stored one.
    """
    given = {k: v for k, v in asked.items() if v is not None}
    if stored is None:
        return QueueSettings(**given)
    QueueSettings(**given)  # validate what was asked even when it is not used
    conflicts = [f"{k}={v!r} (stored: {getattr(stored, k)!r})"
                 for k, v in given.items() if getattr(stored, k) != v]
    if conflicts:
        raise QueueConfigError(
            f"queue {queue!r} already exists with other settings: {', '.join(conflicts)}; "
            "open it without those arguments, or use another queue name"
        )
    return stored
