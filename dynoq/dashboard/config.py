"""The dashboard's settings and the rule on where it may listen (pure: no I/O)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..errors import InvalidArgument

MIN_TOKEN_LENGTH = 16
LOOPBACK_NAMES = ("localhost", "ip6-localhost")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, IPv6 with or without brackets) is a
    loopback address: only this machine can reach a server bound there."""
    host = host.strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class DashboardConfig:
    """How a dashboard runs.

    host/port: where it listens (default loopback only). token: the secret every request
    must carry (``Authorization: Bearer <token>``, or basic auth with the token as the
    password); required when ``host`` is not a loopback address. allow_actions: replay
    and purge dead letters (default: read-only). interval: seconds between two samples of
    the live charts; window: seconds of history they show. max_sampled: queues (and
    topic group queues) sampled for the overview and charts."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    allow_actions: bool = False
    interval: float = 2.0
    window: float = 600.0
    max_sampled: int = 200

    def __post_init__(self) -> None:
        check_bind(self.host, self.token)
        if not 0.05 <= self.interval <= 3600:
            raise InvalidArgument(f"interval must be 0.05..3600 seconds, got {self.interval}")
        if not self.interval <= self.window <= 24 * 3600:
            raise InvalidArgument(f"window must be interval..86400 seconds, got {self.window}")
        if not 1 <= self.max_sampled <= 1000:
            raise InvalidArgument(f"max_sampled must be 1..1000, got {self.max_sampled}")

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __repr__(self) -> str:  # never the token
        return (
            f"DashboardConfig(host={self.host!r}, port={self.port}, "
            f"token={'set' if self.token else None}, allow_actions={self.allow_actions})"
        )


def check_bind(host: str, token: str | None) -> None:
    """Refuse a dashboard that anyone on the network could open: a host that is not a
    loopback address needs a token of at least MIN_TOKEN_LENGTH characters."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise InvalidArgument(
            f"the dashboard token must have at least {MIN_TOKEN_LENGTH} characters; make one "
            "with: python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )
    if not token and not is_loopback(host):
        raise InvalidArgument(
            f"the dashboard would listen on {host}, beyond this machine, without a token: "
            "give --token (better: set DYNOQ_DASHBOARD_TOKEN) or listen on 127.0.0.1"
        )
