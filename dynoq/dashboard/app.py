"""The dashboard as an ASGI app: routes, templates, static files, the guard, the sampler."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ExceptionHandler

from ..backend import redact
from ..client import Client
from ..errors import (
    ConnectionFailed,
    DynoqError,
    InvalidArgument,
    InvalidType,
    LayoutError,
    PoolExhausted,
)
from . import actions, views
from .auth import ASGIApp, Authorize, Csrf, Guard, Receive, Scope, Send, route_path
from .config import DashboardConfig
from .data import Reader
from .format import FILTERS, link
from .sampler import Sampler

IDLE = 60.0  # seconds without a request before a mounted dashboard's sampler pauses


def create_app(
    client: Client, config: DashboardConfig | None = None, *, authorize: Authorize | None = None
) -> Starlette:
    """The dashboard of every queue and topic under ``client``'s prefix, as an ASGI app
    (serve it with :func:`dynoq.dashboard.serve`, or any ASGI server), which may be
    mounted under a path of another ASGI app (``app.mount("/ops/queues", ...)``: every
    link, form and asset follows the mount's ``root_path``).

    ``authorize(scope)`` puts it behind the host app's own login: called with the ASGI
    scope of every request (pages, JSON, static files, actions), sync or async, it
    returns True or False; False answers 403. The dashboard's loopback rule is the
    host's business then, its token is optional (still required when set) and its forms
    stay CSRF-protected.

    Its lifespan starts the live numbers' sampler and stops it; a mounted app gets none
    from its host (Starlette and FastAPI do not pass it on), so the first admitted
    request starts it, and it pauses after a minute without one. A host may run the
    lifespan in its own (``async with dashboard.router.lifespan_context(dashboard):``)
    to sample from its start until its end. The client stays the caller's to close.
    Raises InvalidArgument for a config that would listen beyond loopback without a
    token."""
    config = config or DashboardConfig()
    reader = Reader(client)
    sampler = Sampler(
        reader, interval=config.interval, window=config.window, limit=config.max_sampled
    )
    dash = views.Dash(config, reader, sampler, _templates(), Csrf())

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()

    app = Starlette(
        routes=_routes(), lifespan=lifespan, exception_handlers=_exception_handlers(client)
    )
    app.state.dash = dash
    # the last added is the outermost: a refused request does not start the sampler
    app.add_middleware(StartSampler, sampler=sampler, idle=max(IDLE, 10 * config.interval))
    app.add_middleware(Guard, config=config, csrf=dash.csrf, authorize=authorize)
    return app


class StartSampler:
    """Starts the sampler at an admitted request, to pause after ``idle`` seconds without
    one: a dashboard mounted in another app gets no lifespan events (served alone or
    given its host's lifespan, the sampler already runs and this changes nothing)."""

    def __init__(self, app: ASGIApp, sampler: Sampler, idle: float) -> None:
        self.app = app
        self.sampler = sampler
        self.idle = idle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if self.sampler.running:
                self.sampler.touch()
            else:
                self.sampler.start(idle=self.idle)
        await self.app(scope, receive, send)


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dynoq.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(FILTERS)
    env.globals["link"] = _link
    return Jinja2Templates(env=env)


@jinja2.pass_context
def _link(context: Any, path: str, **params: Any) -> str:
    """A link under the dashboard's mount point (``base``: the request's root path)."""
    return str(context.get("base", "")) + link(path, **params)


def _routes() -> list[BaseRoute]:
    return [
        Route("/", views.overview),
        Route("/api/overview", views.api_overview),
        Route("/api/queue", views.api_queue),
        Route("/queue", views.queue_page),
        Route("/queue/list", views.list_page),
        Route("/queue/dead", views.dead_page),
        Route("/queue/message", views.message_page),
        Route("/queue/groups", views.groups_page),
        Route("/queue/dead/confirm", views.confirm_page),
        Route("/queue/dead/replay", actions.replay, methods=["POST"]),
        Route("/queue/dead/purge", actions.purge, methods=["POST"]),
        Route("/queue/pause", actions.pause, methods=["POST"]),
        Route("/queue/cancel", actions.cancel, methods=["POST"]),
        Route("/topic", views.topic_page),
        Route("/flow", views.flow_page),
        Route("/api/flow", views.api_flow),
        Mount("/static", StaticFiles(packages=[("dynoq.dashboard", "static")]), name="static"),
    ]


def _failed(request: Request, status: int, text: str) -> Response:
    """An error as a page, or as plain text for the API, static files and when the page
    cannot be drawn."""
    if route_path(request.scope).startswith(("/api/", "/static/")):
        return PlainTextResponse(text, status_code=status)
    try:
        return views.render(
            request, "error.html", status=status, status_code=status, message=text, now=0.0
        )
    except DynoqError:  # the server is away: the page frame needs it too
        return PlainTextResponse(text, status_code=status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _failed(request, exc.status_code, str(exc.detail))


async def _bad_input(request: Request, exc: Exception) -> Response:
    return _failed(request, 400, str(exc))


async def _dynoq_error(request: Request, exc: Exception) -> Response:
    return _failed(request, 500, f"{type(exc).__name__}: {exc}")


async def _unreadable(request: Request, exc: Exception) -> Response:
    # Stored by another dynoq version: the message says what to run or upgrade.
    return _failed(request, 409, str(exc))


async def _busy(request: Request, exc: Exception) -> Response:
    # Every connection in use: load, not an outage; the browser may ask again.
    reply = _failed(request, 503, f"{type(exc).__name__}: {exc}")
    reply.headers["Retry-After"] = "1"
    return reply


def _exception_handlers(client: Client) -> dict[Any, ExceptionHandler]:
    """Each error as the status it means; Redis unreachable names the (redacted) URL."""

    async def unreachable(request: Request, exc: Exception) -> Response:
        return PlainTextResponse(
            f"cannot reach Redis at {redact(client.url)}: {exc}", status_code=503
        )

    return {
        HTTPException: _http_error,
        InvalidArgument: _bad_input,
        InvalidType: _bad_input,
        ConnectionFailed: unreachable,
        LayoutError: _unreadable,
        PoolExhausted: _busy,
        DynoqError: _dynoq_error,
    }
