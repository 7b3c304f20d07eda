"""A web dashboard of queues, topics, consumer groups and dead letters (extra ``dashboard``).

    dynoq dashboard [--host 127.0.0.1] [--port 8080] [--allow-actions] [--token ...]

or from Python::

    from dynoq.dashboard import DashboardConfig, Running
    with Running(client, DashboardConfig(port=0)) as dash:
        print(dash.url)

Read-only unless ``allow_actions``; loopback only unless a token is set (see
docs/dashboard.md). Modules: ``config`` (settings, where it may listen), ``auth`` (token,
host check, CSRF, headers), ``data`` (bounded reads), ``sampler`` (the live numbers),
``views`` and ``actions`` (the pages and the writes), ``app`` (assembly), ``server``.
"""

from .app import create_app
from .config import DashboardConfig, check_bind, is_loopback
from .server import Running, serve

__all__ = ["DashboardConfig", "Running", "check_bind", "create_app", "is_loopback", "serve"]
