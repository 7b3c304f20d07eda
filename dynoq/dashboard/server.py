"""Serving the dashboard with uvicorn: in the foreground (the ``dynoq dashboard`` command)
or on a background thread (tests, notebooks, an app that embeds it)."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Callable

import uvicorn

from ..client import Client
from ..errors import DynoqError
from .app import create_app
from .config import DashboardConfig, check_bind


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise DynoqError(f"cannot listen on {host}:{port}: {exc}") from None


def _server(client: Client, config: DashboardConfig) -> uvicorn.Server:
    app = create_app(client, config)
    return uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            server_header=False,
            proxy_headers=False,
            lifespan="on",
        )
    )


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(
    client: Client, config: DashboardConfig, ready: Callable[[str], None] | None = None
) -> None:
    """Serve the dashboard until SIGINT or SIGTERM. ``ready(url)`` is called once it
    listens (``config.port`` 0 takes a free port). Raises DynoqError when the address
    cannot be had, InvalidArgument for a host beyond loopback without a token."""
    check_bind(config.host, config.token)
    sock = _bind(config.host, config.port)
    server = _server(client, config)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        # A signal before uvicorn takes over (or re-raised by uvicorn once it stopped)
        # ends the serving, and then the process, normally (exit 0, no traceback).
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: setattr(server, "should_exit", True))
    if ready is not None:
        ready(url_of(sock))
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()


class Running:
    """A dashboard served on a background thread while the ``with`` block runs::

    with Running(client, DashboardConfig(port=0)) as dash:
        print(dash.url)
    """

    def __init__(self, client: Client, config: DashboardConfig) -> None:
        self.config = config
        self._sock = _bind(config.host, config.port)
        self.url = url_of(self._sock)
        self._server = _server(client, config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._sock]},
            daemon=True,
            name="dynoq-dashboard",
        )

    def __enter__(self) -> Running:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._sock.close()
                raise DynoqError("the dashboard did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)
        self._sock.close()
