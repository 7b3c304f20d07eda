"""dynoq's dashboard inside a Django project's ASGI app, behind Django's login.

``application = mount(get_asgi_application(), "/ops/queues")`` in the project's
``asgi.py``: requests under the path go to the dashboard of the backend's queues (its
prefix), the rest to Django. Who may open it is Django's session user: staff by default
(``allow=lambda user: user.has_perm(...)`` for another rule); anyone else gets 403.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http.cookies import SimpleCookie
from importlib import import_module
from types import SimpleNamespace
from typing import Any

from asgiref.sync import sync_to_async

from ..dashboard import DashboardConfig, create_app
from ..errors import InvalidArgument

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def staff(user: Any) -> bool:
    """The default rule: an active staff user."""
    return bool(user.is_active and user.is_staff)


def session_user(scope: Any) -> Any:
    """The Django user of the request's session cookie (AnonymousUser without one)."""
    from django.conf import settings
    from django.contrib.auth import get_user

    headers = dict(scope.get("headers") or [])
    cookie: SimpleCookie = SimpleCookie()
    cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
    morsel = cookie.get(settings.SESSION_COOKIE_NAME)
    store = import_module(settings.SESSION_ENGINE).SessionStore
    session = store(morsel.value if morsel is not None else None)
    return get_user(SimpleNamespace(session=session))


def mount(
    django_app: ASGIApp,
    path: str = "/dynoq",
    *,
    backend: str = "default",
    config: DashboardConfig | None = None,
    allow: Callable[[Any], bool] = staff,
) -> ASGIApp:
    """Django's ASGI app with the dashboard of TASKS[``backend``]'s queues at ``path``,
    for the users ``allow`` admits (staff by default)."""
    from django.tasks import task_backends

    from .backend import DynoqBackend

    found = task_backends[backend]
    if not isinstance(found, DynoqBackend):
        raise InvalidArgument(f"task backend {backend!r} is not a dynoq.django.DynoqBackend")
    prefix = "/" + path.strip("/")
    if prefix == "/":
        raise InvalidArgument("the dashboard needs a path of its own, not '/'")

    def admitted(scope: Any) -> bool:
        return bool(allow(session_user(scope)))

    async def authorize(scope: Any) -> bool:  # Django's ORM: from a sync thread
        allowed: bool = await sync_to_async(admitted, thread_sensitive=True)(scope)
        return allowed

    dashboard = create_app(found.client, config or DashboardConfig(), authorize=authorize)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        where = scope.get("path", "")
        if scope["type"] == "http" and (where == prefix or where.startswith(prefix + "/")):
            scope = {**scope, "root_path": scope.get("root_path", "") + prefix}
            await dashboard(scope, receive, send)
        else:
            await django_app(scope, receive, send)

    return app
