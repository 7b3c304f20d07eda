"""Who may see the dashboard and what a browser may do there.

:class:`Guard` wraps the whole app (pages, API and static files alike):

- The host app's ``authorize`` (a dashboard mounted in another app): called with the
  request's ASGI scope on every request; False answers 403. The host app decides who
  and where, so the loopback host check is off then (a token, if set too, still counts).
- Host check (loopback only): a dashboard bound to loopback answers only requests whose
  ``Host`` is a loopback name, so a web page cannot reach it by DNS rebinding.
- Token: when one is set, every request carries it, as ``Authorization: Bearer <token>``
  or as the password of HTTP basic auth (any user name: browsers ask for it). Compared in
  constant time; never logged, never rendered.
- Cross-site writes: a POST must come from the dashboard's own origin (``Origin`` and
  ``Sec-Fetch-Site``, when the browser sends them), and carry the CSRF token of its
  form: a signed random value, also set as a ``SameSite=Strict`` cookie (double submit;
  the signature stops a cookie planted by a sibling site).
- Headers on every response: a Content-Security-Policy with no inline script, no
  framing, no referrer, no sniffing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import inspect
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from .config import DashboardConfig, is_loopback

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
# The host app's check of a request when the dashboard is mounted in it: given the
# request's ASGI scope (any mapping: typed Any so that a ``dict`` parameter fits too),
# True or False, or an awaitable of it.
Authorize = Callable[[Any], "bool | Awaitable[bool]"]

CSRF_COOKIE = "dynoq_csrf"
CSRF_FIELD = "csrf"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
REALM = "dynoq dashboard"
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Origin "null"
    (b"cache-control", b"no-store"),
]


class Csrf:
    """Signed CSRF tokens: ``<nonce>.<HMAC-SHA256(process secret, nonce)>``. The secret is
    made at start, so a restart invalidates open forms (reload the page)."""

    def __init__(self) -> None:
        self._secret = secrets.token_bytes(32)

    def new(self) -> str:
        nonce = secrets.token_hex(16)
        return f"{nonce}.{self._sign(nonce)}"

    def valid(self, token: str | None) -> bool:
        if not token or token.count(".") != 1:
            return False
        nonce, sig = token.split(".")
        return hmac.compare_digest(sig, self._sign(nonce))

    def matches(self, cookie: str | None, field: str | None) -> bool:
        """A form's token is good when it is signed by this process and equals the
        cookie the browser sent with it."""
        return (
            self.valid(cookie)
            and field is not None
            and hmac.compare_digest(str(cookie), str(field))
        )

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None


def _host_name(host: str) -> str:
    """The name of a Host header without its port ("[::1]:8080" -> "::1")."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


class Guard:
    """The ASGI middleware described in the module docstring."""

    def __init__(
        self, app: ASGIApp, config: DashboardConfig, csrf: Csrf, authorize: Authorize | None = None
    ) -> None:
        self.app = app
        self.token = config.token.encode() if config.token else None
        self.loopback = config.loopback
        self.csrf = csrf
        self.authorize = authorize

    async def admitted(self, scope: Scope, headers: dict[str, str], send: Send) -> bool:
        """Whether the request may go on (else its refusal is sent). Mounted behind the
        host app's ``authorize``: its verdict, then the token if one is set too (the host
        decides where it listens: no loopback rule). Else the loopback host and the
        token, when set."""
        if self.authorize is not None:
            verdict = self.authorize(scope)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if not isinstance(verdict, bool):
                raise TypeError(
                    f"the dashboard's authorize({self.authorize!r}) must return True or "
                    f"False (or an awaitable of it), got {type(verdict).__name__}"
                )
            if not verdict:
                await _plain(send, 403, "Not allowed: this dashboard is for its app's operators.")
                return False
        elif self.loopback and not is_loopback(_host_name(headers.get("host", ""))):
            await _plain(
                send,
                421,
                "This dashboard answers only on a loopback address (localhost, 127.0.0.1, [::1]).",
            )
            return False
        if not self.authorized(headers.get("authorization")):
            await _plain(
                send,
                401,
                "This dashboard needs its token (basic auth: any user "
                "name, the token as password; or Authorization: Bearer).",
                [(b"www-authenticate", f'Basic realm="{REALM}"'.encode())],
            )
            return False
        return True

    def authorized(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries the token (Bearer, or basic auth
        with the token as the password)."""
        if self.token is None:
            return True
        if not header:
            return False
        kind, _, value = header.partition(" ")
        given: bytes | None = None
        if kind.lower() == "bearer":
            given = value.strip().encode()
        elif kind.lower() == "basic":
            try:
                given = base64.b64decode(value.strip(), validate=True).partition(b":")[2]
            except (binascii.Error, ValueError):
                return False
        return given is not None and hmac.compare_digest(given, self.token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if not await self.admitted(scope, headers, send):
            return
        if scope["method"] not in SAFE_METHODS and not _same_origin(scope, headers):
            await _plain(send, 403, "Refused: a change must come from the dashboard's own pages.")
            return
        cookie = _cookie(headers.get("cookie", ""), CSRF_COOKIE)
        fresh = None if self.csrf.valid(cookie) else self.csrf.new()
        scope.setdefault("state", {})["csrf"] = fresh or cookie
        scope["state"]["csrf_cookie"] = cookie
        secure = "; Secure" if scope.get("scheme") == "https" else ""

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = list(SECURITY_HEADERS)
                if fresh:
                    extra.append(
                        (
                            b"set-cookie",
                            f"{CSRF_COOKIE}={fresh}; Path={scope.get('root_path') or '/'}; "
                            "HttpOnly; "
                            f"SameSite=Strict{secure}".encode(),
                        )
                    )
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def route_path(scope: Scope) -> str:
    """The request's path within the dashboard (a mounted one's, without its mount)."""
    path, root = str(scope.get("path", "")), str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


def _same_origin(scope: Scope, headers: dict[str, str]) -> bool:
    """Whether a write comes from the dashboard's own pages, as far as the browser says."""
    site = headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:  # not a browser (or an old one): the CSRF token still decides
        return True
    return origin == f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"


async def _plain(
    send: Send, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *SECURITY_HEADERS,
                *(extra or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
