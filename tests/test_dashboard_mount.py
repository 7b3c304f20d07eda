"""The dashboard mounted in another ASGI app (FastAPI here, and a bare ASGI router) under
a path, behind the host's own login (``create_app(..., authorize=...)``): over real HTTP
and in headless Chromium, every link, form and asset stays under the mount, the host
decides who gets in, the live numbers run (with no lifespan of their own, or the host's),
and the actions keep their CSRF check."""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from dashboard_kit import BROWSER_ARGS, Served, chromium, http, scene
from fastapi import FastAPI
from helpers import delete_prefix, wait_for
from starlette.applications import Starlette

import dynoq
from dynoq.dashboard import DashboardConfig, create_app
from dynoq.dashboard.data import Reader
from dynoq.dashboard.sampler import Sampler

MOUNT = "/ops/queues"
SESSION = "operator-" + uuid.uuid4().hex
ME = {"Cookie": f"session={SESSION}"}
TOKEN = "mounted-token-" + "z" * 16


def allowed(scope: dict[str, Any]) -> bool:
    """The host's login, as a cookie a host's session middleware would check."""
    cookies = dict(scope["headers"]).get(b"cookie", b"").decode()
    return f"session={SESSION}" in cookies


async def allowed_async(scope: dict[str, Any]) -> bool:
    return allowed(scope)


@pytest.fixture
def client(real_url: str, prefix: str) -> Iterator[dynoq.Client]:
    with dynoq.connect(real_url, prefix=prefix) as c:
        yield c
    delete_prefix(real_url, prefix)


MADE: list[Starlette] = []


@pytest.fixture(autouse=True)
def _samplers_stopped() -> Iterator[None]:
    """A mounted dashboard's sampler would pause a minute after its last request: stop
    the test's now, before its client closes."""
    yield
    while MADE:
        MADE.pop().state.dash.sampler.stop()


def shop(dashboard: Starlette, *, own_lifespan: bool = False, at: str = MOUNT) -> FastAPI:
    """The host: a FastAPI app of its own with the dashboard mounted at ``at``; with
    ``own_lifespan``, the host runs the dashboard's lifespan in its own."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with dashboard.router.lifespan_context(dashboard):
            yield

    app = FastAPI(lifespan=lifespan if own_lifespan else None)

    @app.get("/")
    def home() -> dict[str, str]:
        return {"app": "shop"}

    app.mount(at, dashboard)
    return app


def dashboard_of(client: dynoq.Client, check: Any = allowed, **config: Any) -> Starlette:
    config = {"allow_actions": True, "interval": 0.2, **config}
    made = create_app(client, DashboardConfig(**config), authorize=check)
    MADE.append(made)
    return made


def _urls(html: str) -> list[str]:
    return re.findall(r'(?:href|src|action|data-api)="([^"]*)"', html)


def assert_all_under(html: str, where: str, root: str = MOUNT) -> None:
    urls = [u for u in _urls(html) if not u.startswith(("data:", "#"))]
    assert urls and all(u.startswith(root + "/") for u in urls), (where, urls)


def pages(s: Any) -> list[str]:
    """Every page of the dashboard, on the scene's queues and topic."""
    return [
        "/",
        "/queue?q=orders",
        "/queue?q=events",
        "/queue/list?q=orders&kind=delayed",
        "/queue/list?q=orders&kind=in_flight&shard=0",
        "/queue/dead?q=orders",
        f"/queue/dead?q=orders&id={s.dead_id}",
        f"/queue/message?q=orders&id={s.dead_id}",
        "/queue/groups?q=orders",
        "/queue/dead/confirm?q=orders&action=purge",
        "/topic?t=payments",
        "/queue?q=nothing-here",  # the error page, under the mount too
    ]


@pytest.mark.parametrize("check", [allowed, allowed_async], ids=["sync", "async"])
def test_mounted_pages_stay_under_the_mount_behind_the_hosts_login(
    client: dynoq.Client, check: Any
) -> None:
    s = scene(client)
    with Served(shop(dashboard_of(client, check))) as host:
        assert http(host.url + MOUNT + "/").status == 403  # no session: the host says no
        assert http(host.url + MOUNT + "/static/dashboard.css").status == 403
        wrong = {"Cookie": "session=wrong"}
        assert http(host.url + MOUNT + "/queue?q=orders", headers=wrong).status == 403
        assert http(host.url + "/").status == 200  # the host's own pages are its own
        for path in pages(s):
            page = http(host.url + MOUNT + path, headers=ME)
            assert page.status == (404 if "nothing" in path else 200), (path, page.text[:300])
            assert_all_under(page.text, path)
        css = http(host.url + MOUNT + "/static/dashboard.css", headers=ME)
        assert css.status == 200 and "text/css" in css.headers["content-type"]
        api = http(host.url + MOUNT + "/api/overview", headers=ME)
        assert api.status == 200
        assert "orders" in [row["name"] for row in json.loads(api.text)["queues"]]
        home = http(host.url + MOUNT, headers=ME)  # no trailing slash: sent to the mount
        assert home.status in (301, 307) and home.headers["location"].endswith(MOUNT + "/")


def test_mounted_live_numbers_run_without_a_lifespan_of_their_own(client: dynoq.Client) -> None:
    q = client.queue("orders", shards=1)
    dashboard = dashboard_of(client)
    sampler = dashboard.state.dash.sampler
    with Served(shop(dashboard)) as host:
        assert http(host.url + MOUNT + "/").status == 403
        assert not sampler.running  # a refused request starts nothing
        assert http(host.url + MOUNT + "/", headers=ME).status == 200
        assert sampler.running
        q.push_many([dynoq.Message(i) for i in range(5)])

        def sampled() -> bool:  # the charts' history: the sampler's, not a live read
            got = json.loads(http(host.url + MOUNT + "/api/queue?q=orders", headers=ME).text)
            return any(len(points) >= 2 for points in got["series"].values())

        wait_for(sampled, timeout=15, what="the mounted sampler")
        before = json.loads(http(host.url + MOUNT + "/api/overview", headers=ME).text)
        q.push_many([dynoq.Message(i) for i in range(7)])

        def moved() -> bool:
            now = json.loads(http(host.url + MOUNT + "/api/overview", headers=ME).text)
            return bool(now["totals"]["ready"] == before["totals"]["ready"] + 7)

        wait_for(moved, timeout=15, what="the live numbers to change")


def test_a_host_may_run_the_dashboards_lifespan_in_its_own(client: dynoq.Client) -> None:
    client.queue("orders", shards=1).push({"n": 1})
    dashboard = dashboard_of(client)
    sampler = dashboard.state.dash.sampler
    with Served(shop(dashboard, own_lifespan=True)) as host:
        assert sampler.running  # from the host's start, before any request
        assert http(host.url + MOUNT + "/api/overview", headers=ME).status == 200
    assert not sampler.running  # and stopped with the host
    sampler.start(idle=60)  # a late request after the end starts nothing again
    assert not sampler.running


def test_a_lazily_started_sampler_pauses_when_nobody_looks(client: dynoq.Client) -> None:
    client.queue("orders", shards=1).push({"n": 1})
    sampler = Sampler(Reader(client), interval=0.05, window=10, limit=10)
    sampler.start(idle=0.3)
    assert sampler.running
    wait_for(lambda: not sampler.running, timeout=5, what="the idle pause")
    points = len(sampler.series()["t"])
    time.sleep(0.3)
    assert len(sampler.series()["t"]) == points  # paused: no sample taken
    client.queue("orders").push_many([dynoq.Message(i) for i in range(3)])
    assert sampler.latest().stats["orders"].ready == 1  # the last sample, from before
    sampler.start(idle=0.3)  # the next request: no old numbers for it
    assert sampler.latest().stats["orders"].ready == 4
    wait_for(lambda: len(sampler.series()["t"]) > points, what="sampling again")
    sampler.start()  # a lifespan takes it over: no pause any more
    time.sleep(0.6)
    assert sampler.running
    sampler.stop()
    assert not sampler.running


def test_mounted_actions_need_their_csrf_token(client: dynoq.Client) -> None:
    q = client.queue("payments", shards=1, max_retries=0)
    q.push({"amount": 1}, id="p-1")
    for m in q.pop(1):
        q.nack(m)  # max_retries=0: dead-lettered
    assert q.stats().dead == 1
    with Served(shop(dashboard_of(client))) as host:
        replay = host.url + MOUNT + "/queue/dead/replay?q=payments"
        refused = http(
            replay, method="POST", data={"id": "p-1", "csrf": "forged.token"}, headers=ME
        )
        assert refused.status == 403 and "CSRF" in refused.text and q.stats().dead == 1
        page = http(host.url + MOUNT + "/queue/dead?q=payments", headers=ME)
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        cookie = re.search(r"dynoq_csrf=([^;]+); Path=/ops/queues;", page.headers["set-cookie"])
        assert token and cookie
        with_cookie = {"Cookie": f"session={SESSION}; dynoq_csrf={cookie[1]}"}
        assert http(replay, method="POST", data={"id": "p-1"}, headers=with_cookie).status == 403
        stranger = {"Cookie": f"dynoq_csrf={cookie[1]}"}  # the token, but not logged in
        gone = http(replay, method="POST", data={"id": "p-1", "csrf": token[1]}, headers=stranger)
        assert gone.status == 403 and q.stats().dead == 1
        cross = {**with_cookie, "Origin": "http://evil.example"}
        assert (
            http(replay, method="POST", data={"id": "p-1", "csrf": token[1]}, headers=cross).status
            == 403
        )
        done = http(
            replay, method="POST", data={"id": "p-1", "csrf": token[1]}, headers=with_cookie
        )
        assert done.status == 303 and done.headers["location"].startswith(MOUNT + "/queue/dead?")
        assert q.stats().dead == 0
        back = http(host.url + done.headers["location"], headers=with_cookie)
        assert back.status == 200 and "replayed 1 dead letter" in back.text


def test_a_token_set_too_is_still_required_and_a_bad_verdict_fails_loudly(
    client: dynoq.Client,
) -> None:
    client.queue("orders", shards=1).push({"n": 1})
    both = dashboard_of(client, token=TOKEN)
    odd = dashboard_of(client, check=lambda scope: "yes")  # not a bool: a host's bug
    app = shop(both)
    app.mount("/odd", odd)
    with Served(app) as host:
        assert http(host.url + MOUNT + "/", headers=ME).status == 401
        bearer = {**ME, "Authorization": f"Bearer {TOKEN}"}
        assert http(host.url + MOUNT + "/", headers=bearer).status == 200
        assert (
            http(host.url + MOUNT + "/", headers={"Authorization": f"Bearer {TOKEN}"}).status == 403
        )
        assert http(host.url + "/odd/").status == 500


def test_any_asgi_app_may_route_to_it_by_path(client: dynoq.Client) -> None:
    """No Starlette in the host: a bare ASGI router that sets ``root_path`` (the ASGI
    convention, as dynoq.django.dashboard.mount does for Django)."""
    s = scene(client)
    dashboard = dashboard_of(client)
    root = "/admin/dynoq"

    async def host(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "lifespan":  # the host starts nothing else
            await dashboard(scope, receive, send)
        elif path == root or path.startswith(root + "/"):
            await dashboard({**scope, "root_path": root}, receive, send)
        else:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"the host's 404"})

    sampler = dashboard.state.dash.sampler
    with Served(host) as served:
        assert sampler.running  # the lifespan, passed on
        assert http(served.url + "/elsewhere", headers=ME).text == "the host's 404"
        assert http(served.url + root + "/").status == 403
        for path in pages(s):
            page = http(served.url + root + path, headers=ME)
            assert page.status == (404 if "nothing" in path else 200), (path, page.text[:300])
            assert_all_under(page.text, path, root)
        assert http(served.url + root + "/static/dashboard.js", headers=ME).status == 200
        page = http(served.url + root + "/queue/dead?q=orders", headers=ME)
        token = re.search(r'name="csrf" value="([^"]+)"', page.text)
        cookie = re.search(r"dynoq_csrf=([^;]+); Path=/admin/dynoq;", page.headers["set-cookie"])
        assert token and cookie
        done = http(
            served.url + root + "/queue/dead/replay?q=orders",
            method="POST",
            data={"id": s.dead_id, "csrf": token[1]},
            headers={"Cookie": f"session={SESSION}; dynoq_csrf={cookie[1]}"},
        )
        assert done.status == 303 and done.headers["location"].startswith(root + "/queue/dead?")
    assert not sampler.running


@pytest.mark.skipif(chromium() is None, reason="no Chromium: apt-get install chromium")
def test_a_browser_walks_the_mounted_dashboard_and_replays_a_dead_letter(
    client: dynoq.Client,
) -> None:
    from playwright.sync_api import sync_playwright

    q = client.queue("payments", shards=1, max_retries=0)
    q.push({"amount": 42}, id="pay-42")
    for m in q.pop(1):
        q.nack(m)  # max_retries=0: dead-lettered
    dashboard = dashboard_of(client)
    with Served(shop(dashboard)) as host, sync_playwright() as p:
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
        assert page.url.startswith(host.url + MOUNT + "/queue/dead?")
        page.locator("a.brand").click()  # home, through the header's link
        page.wait_for_url(f"**{MOUNT}/")
        page.wait_for_function(  # the live numbers ran, under the mount
            # (a function, not an expression: Playwright evals a polled expression in
            # the page, which the dashboard's CSP refuses once it polls twice)
            "() => document.querySelector('canvas.chart') !== null && "
            "Number(document.querySelector('canvas.chart').dataset.points) >= 1"
        )
        assert q.stats().dead == 0 and q.stats().ready == 1
        paths = [u[len(host.url) :] for u in seen if u.startswith(host.url)]
        assert paths and all(p_.startswith(MOUNT + "/") for p_ in paths), paths
        assert any(p_.startswith(MOUNT + "/api/") for p_ in paths)
        assert any(p_.startswith(MOUNT + "/static/") for p_ in paths)
        browser.close()
