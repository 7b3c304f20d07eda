"""The dashboard mounted in another ASGI app (FastAPI here) under a path, behind the host's
own login (``create_app(..., authorize=...)``): over real HTTP and in headless Chromium,
every link, form and asset stays under the mount, the host decides who gets in, the
live numbers run (no lifespan of its own), and its actions keep their CSRF check."""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from dashboard_kit import BROWSER_ARGS, chromium, http
from fastapi import FastAPI
from helpers import delete_prefix, wait_for

import dynoq
from dynoq.dashboard import DashboardConfig, create_app

MOUNT = "/ops/queues"
SESSION = "operator-" + uuid.uuid4().hex


def allowed(scope: dict[str, Any]) -> bool:
    """The host's login, as a cookie a host's session middleware would check."""
    cookies = dict(scope["headers"]).get(b"cookie", b"").decode()
    return f"session={SESSION}" in cookies


async def allowed_async(scope: dict[str, Any]) -> bool:
    return allowed(scope)


@pytest.fixture
def client(embedded_server: Any) -> Iterator[dynoq.Client]:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    with dynoq.connect(url, prefix=prefix) as c:
        yield c
    delete_prefix(url, prefix)


class Host:
    """A FastAPI app with the dashboard at MOUNT, served by uvicorn on a thread."""

    def __init__(self, client: dynoq.Client, check: Any) -> None:
        self.app = FastAPI()

        @self.app.get("/")
        def home() -> dict[str, str]:
            return {"app": "shop"}

        config = DashboardConfig(allow_actions=True, interval=0.2)
        self.app.mount(MOUNT, create_app(client, config, authorize=check))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, port=self.port, log_level="warning", lifespan="on")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Host:
        self.thread.start()
        wait_for(lambda: self.server.started, what="the host app")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _urls(html: str) -> list[str]:
    return re.findall(r'(?:href|src|action|data-api)="([^"]*)"', html)


@pytest.mark.parametrize("check", [allowed, allowed_async], ids=["sync", "async"])
def test_mounted_pages_stay_under_the_mount_behind_the_hosts_login(
    client: dynoq.Client, check: Any
) -> None:
    q = client.queue("orders", shards=2, max_retries=0)
    q.push({"n": 1}, id="o-1")
    with Host(client, check) as host:
        assert http(host.url + MOUNT + "/").status == 403  # no session: the host says no
        assert (
            http(host.url + MOUNT + "/queue?q=orders", headers={"Cookie": "session=wrong"}).status
            == 403
        )
        assert http(host.url + "/").status == 200  # the host's own pages are its own
        me = {"Cookie": f"session={SESSION}"}
        for path in (
            "/",
            "/queue?q=orders",
            "/queue/list?q=orders&kind=delayed",
            "/queue/dead?q=orders",
            "/queue/message?q=orders&id=o-1",
        ):
            page = http(host.url + MOUNT + path, headers=me)
            assert page.status == 200, (path, page.text[:300])
            urls = [u for u in _urls(page.text) if not u.startswith(("data:", "#"))]
            assert urls and all(u.startswith(MOUNT + "/") for u in urls), (path, urls)
        css = http(host.url + MOUNT + "/static/dashboard.css", headers=me)
        assert css.status == 200 and "text/css" in css.headers["content-type"]
        api = http(host.url + MOUNT + "/api/overview", headers=me)
        assert api.status == 200 and "orders" in api.text


def test_mounted_live_numbers_run_without_a_lifespan_of_their_own(client: dynoq.Client) -> None:
    import json

    q = client.queue("orders", shards=1)
    me = {"Cookie": f"session={SESSION}"}
    with Host(client, allowed) as host:
        q.push_many([dynoq.Message(i) for i in range(5)])

        def sampled() -> bool:  # the charts' history: the sampler's, not a live read
            got = json.loads(http(host.url + MOUNT + "/api/queue?q=orders", headers=me).text)
            return any(len(points) >= 2 for points in got["series"].values())

        wait_for(sampled, timeout=15, what="the mounted sampler")


def test_mounted_actions_need_their_csrf_token(client: dynoq.Client) -> None:
    q = client.queue("payments", shards=1, max_retries=0)
    q.push({"amount": 1}, id="p-1")
    for m in q.pop(1):
        q.nack(m)  # max_retries=0: dead-lettered
    assert q.stats().dead == 1
    me = {"Cookie": f"session={SESSION}"}
    with Host(client, allowed) as host:
        refused = http(
            host.url + MOUNT + "/queue/dead/replay?q=payments",
            method="POST",
            data={"id": "p-1", "csrf": "forged.token"},
            headers=me,
        )
        assert refused.status in (400, 403) and q.stats().dead == 1
        page = http(host.url + MOUNT + "/queue/dead?q=payments", headers=me)
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        cookie = re.search(r"dynoq_csrf=([^;]+); Path=/ops/queues;", page.headers["set-cookie"])
        assert token and cookie
        done = http(
            host.url + MOUNT + "/queue/dead/replay?q=payments",
            method="POST",
            data={"id": "p-1", "csrf": token[1]},
            headers={"Cookie": f"session={SESSION}; dynoq_csrf={cookie[1]}"},
        )
        assert done.status == 303 and done.headers["location"].startswith(MOUNT + "/queue/dead?")
        assert q.stats().dead == 0


@pytest.mark.skipif(chromium() is None, reason="no Chromium: apt-get install chromium")
def test_a_browser_walks_the_mounted_dashboard_and_replays_a_dead_letter(
    client: dynoq.Client,
) -> None:
    from playwright.sync_api import sync_playwright

    q = client.queue("payments", shards=1, max_retries=0)
    q.push({"amount": 42}, id="pay-42")
    for m in q.pop(1):
        q.nack(m)  # max_retries=0: dead-lettered
    with Host(client, allowed) as host, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), headless=True, args=BROWSER_ARGS)
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(15_000)
        seen: list[str] = []
        page.on("request", lambda r: seen.append(r.url))
        assert page.goto(host.url + MOUNT + "/").status == 403
        context.add_cookies([{"name": "session", "value": SESSION, "url": host.url}])
        page.goto(host.url + MOUNT + "/")
        page.locator("a", has_text="payments").first.click()
        page.wait_for_url(f"**{MOUNT}/queue?q=payments**")
        page.locator("a", has_text="Dead letters").click()
        page.wait_for_url(f"**{MOUNT}/queue/dead?**")
        page.locator('tr[data-id="pay-42"] button').click()  # replay it
        page.wait_for_selector("p.done")
        assert "replayed 1 dead letter" in page.locator("p.done").inner_text()
        time.sleep(0.5)  # the live updates' fetches
        assert q.stats().dead == 0 and q.stats().ready == 1
        paths = [u[len(host.url) :] for u in seen if u.startswith(host.url)]
        assert paths and all(p_.startswith(MOUNT + "/") for p_ in paths), paths
        assert any("/api/" in p_ for p_ in paths)  # the live numbers ran, under the mount
        browser.close()
