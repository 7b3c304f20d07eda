"""A web dashboard of queues, topics, consumer groups and dead letters (extra ``dashboard``).

    dynoq dashboard [--host 127.0.0.1] [--port 8080] [--allow-actions] [--token ...]

or from Python::

    from dynoq.dashboard import DashboardConfig, Running
    with Running(client, DashboardConfig(port=0)) as dash:
        print(dash.url)

or mounted in another ASGI app behind its login::

    app.mount("/ops/queues", create_app(client, authorize=operators_only))

Read-only unless ``allow_actions``; loopback only unless a token is set or the host app
authorizes (see docs/dashboard.md). Modules: ``config`` (settings, where it may listen),
``auth`` (the host's authorize, token, host check, CSRF, headers), ``data`` (bounded
reads), ``sampler`` (the live numbers), ``views`` and ``actions`` (the pages and the
writes), ``app`` (assembly, the sampler's start), ``server``.
"""

from .app import create_app
from .auth import Authorize
from .config import DashboardConfig, check_bind, is_loopback
from .server import Running, serve

__all__ = [
    "Authorize",
    "DashboardConfig",
    "Running",
    "check_bind",
    "create_app",
    "is_loopback",
    "serve",
]
