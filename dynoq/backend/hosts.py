"""What a URL names: its hosts, its user and password, and how to show it safely."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote, urlsplit

from ..errors import InvalidArgument


def redact(url: str) -> str:
    """``url`` with its password hidden: ``redis://user:***@host`` (safe to print or log)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:***@{hosts}" if colon else f"***@{hosts}"
    path = re.sub(r"(?<=[?&])password=[^&]*", "password=***", path)
    return f"{scheme}://{netloc}{slash}{path}"


def host_list(url: str, what: str) -> list[tuple[str, int]]:
    """The ``host:port[,host:port...]`` of a cluster or sentinel URL."""
    netloc = urlsplit(url).netloc
    out = []
    for part in filter(None, netloc.rsplit("@", 1)[-1].split(",")):
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidArgument(f"{what} {part!r} in {redact(url)!r} is not host:port")
        out.append((host, int(port)))
    if not out:
        raise InvalidArgument(f"{redact(url)!r} names no {what}: give host:port")
    return out


def sentinel_service(url: str) -> tuple[str, int]:
    """The service name and db of ``redis+sentinel://host:port[,host:port]/service[/db]``."""
    path = [p for p in urlsplit(url).path.split("/") if p]
    if not path or len(path) > 2 or (len(path) == 2 and not path[1].isdigit()):
        raise InvalidArgument(
            f"{redact(url)!r}: name the service, as "
            "redis+sentinel://host:port[,host:port]/service[/db]"
        )
    return path[0], int(path[1]) if len(path) == 2 else 0


def credentials(url: str, options: dict[str, Any]) -> None:
    """Put the URL's user and password (percent-decoded) into a client's ``options``,
    unless given there."""
    userinfo = urlsplit(url).netloc.rpartition("@")[0]
    if userinfo:
        user, _, password = userinfo.partition(":")
        options.setdefault("username", unquote(user) or None)
        options.setdefault("password", unquote(password) or None)
