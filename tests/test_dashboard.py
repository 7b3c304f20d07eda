"""The dashboard over HTTP (a real uvicorn on a free port, no browser): every page on every
backend, the live JSON, and the guard: token, host check, read-only by default, CSRF,
confirmation, no secret in any reply. The browser tests are in test_dashboard_browser.py."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from dashboard_kit import LEASE_TOKEN, Reply, http, scene
from helpers import dead_letter, delete_prefix, wait_for

import dynoq
from dynoq._core import reasons
from dynoq.cli import cli
from dynoq.dashboard import DashboardConfig, Running
from dynoq.errors import InvalidArgument

TOKEN = "t0ken-" + "x" * 20


def _csrf(reply: Reply) -> tuple[str, str]:
    """(cookie header, form token) of a page that carries a form."""
    cookie = reply.headers["set-cookie"].split(";")[0]
    field = re.search(r'name="csrf" value="([^"]+)"', reply.text)
    assert field, "no CSRF field on the page"
    return cookie, field.group(1)


@pytest.fixture
def embedded_client(embedded_server: Any) -> Iterator[dynoq.Client]:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    with dynoq.connect(url, prefix=prefix) as c:
        yield c
    delete_prefix(url, prefix)


def test_every_page_on_every_backend(client: dynoq.Client) -> None:
    s = scene(client)
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        base = dash.url.rstrip("/")

        def page(path: str, status: int = 200) -> str:
            r = http(base + path)
            assert r.status == status, (path, r.status, r.text[:300])
            return r.text

        home = page("/")
        assert all(n in home for n in ("orders", "events", "payments:audit", "ordered"))
        queue = page("/queue?q=orders")
        assert "ready-0" in queue and "later-0" in queue  # next messages, delayed by due
        assert all(i in queue for i in s.in_flight)
        assert "Nothing prepared." in queue
        s.orders.prepare({"order": 5}, id="half-1", check_after=3600)
        queue = page("/queue?q=orders")
        assert "Prepared (1)" in queue and "half-1" in queue
        page("/queue/message?q=orders&id=half-1")  # stored: its page opens
        assert s.orders.half("half-1").rollback()
        events = page("/queue?q=events")
        assert "worker-9:leasehost" in events and "5ecre7random" not in events
        assert re.search(r'class="n fence">1<', events)
        for kind, wanted in (("in_flight", s.in_flight[0]), ("delayed", "later-2")):
            assert wanted in page(f"/queue/list?q=orders&kind={kind}")
        one = page(
            "/queue/list?q=orders&kind=delayed&shard="
            f"{s.orders.shard_for('later-1')}&offset=0&count=1"
        )
        assert one.count("later-") >= 1
        dead = page("/queue/dead?q=orders")
        assert "doomed" in dead and "ValueError" in dead and "card declined" in dead
        assert "billing-worker-1" in dead
        assert 'method="post"' not in dead  # read-only: no action at all
        found = page("/queue/dead?q=orders&id=ready-3")
        assert re.search(r"ready-3</code></a> is <b>ready", found)
        msg = page("/queue/message?q=orders&id=doomed")
        assert "Traceback (most recent call last)" in msg and "card declined" in msg
        assert 'id="replay"' not in msg
        groups = page("/queue/groups?q=orders")
        assert "billing-a" in groups and "billing-b" in groups and "2, 3" in groups
        assert "Rebalance history" in groups
        assert "worker-9:leasehost" in page("/queue/groups?q=events")
        assert "audit" in page("/topic?t=payments")
        assert "pay-1" in page(f"/queue?q={quote('payments:audit')}")
        page("/queue?q=nothing", 404)
        page("/queue?q=payments:nobody", 404)
        page("/topic?t=nothing", 404)
        page("/queue?q=bad%20name", 400)
        page("/queue/list?q=orders&kind=ready", 400)
        page("/queue/list?q=orders&offset=10", 400)  # paging needs one shard
        page("/queue/list?q=orders&shard=4", 400)
        page("/queue/dead/confirm?q=orders&action=purge", 403)  # read-only

        data = json.loads(page("/api/overview"))
        rows = {q["name"]: q for q in data["queues"]}
        assert rows["orders"]["dead"] == 1 and rows["orders"]["in_flight"] == 2
        assert rows["payments:audit"]["ready"] == 1
        before = rows["orders"]["ready"]
        s.orders.push_many(list(range(7)))

        def live() -> bool:
            d = json.loads(page("/api/overview"))
            row = next(q for q in d["queues"] if q["name"] == "orders")
            return bool(
                row["ready"] == before + 7
                and d["series"]["pushed"]
                and max(d["series"]["pushed"]) > 0
            )

        wait_for(live, what="the sampler to see the pushes")
        queue_json = json.loads(page("/api/queue?q=orders"))
        assert queue_json["ready"] == before + 7 and len(queue_json["per_shard"]) == 4


def test_read_only_by_default(embedded_client: dynoq.Client) -> None:
    s = scene(embedded_client)
    with Running(embedded_client, DashboardConfig(port=0)) as dash:
        page = http(dash.url + "queue?q=orders")
        cookie, token = _csrf_of_any(page)
        r = http(
            dash.url + "queue/dead/replay?q=orders",
            method="POST",
            data={"csrf": token, "id": "doomed"},
            headers={"Cookie": cookie},
        )
        assert r.status == 403 and "--allow-actions" in r.text
        r = http(
            dash.url + "queue/dead/purge?q=orders",
            method="POST",
            data={"csrf": token, "confirm": "orders"},
            headers={"Cookie": cookie},
        )
        assert r.status == 403
        s.orders.push("stays", id="stays", delay=60)
        r = http(
            dash.url + "queue/cancel?q=orders",
            method="POST",
            data={"csrf": token, "id": "stays"},
            headers={"Cookie": cookie},
        )
        assert r.status == 403
    assert s.orders.stats().dead == 1 and s.orders.get("stays") is not None


def _csrf_of_any(reply: Reply) -> tuple[str, str]:
    """A read-only page has no form: its cookie is the token (double submit)."""
    cookie = reply.headers["set-cookie"].split(";")[0]
    return cookie, cookie.split("=", 1)[1]


def test_actions_need_a_valid_csrf_token_and_a_confirmation(embedded_client: dynoq.Client) -> None:
    s = scene(embedded_client)
    q = s.orders
    with (
        Running(embedded_client, DashboardConfig(port=0, allow_actions=True)) as dash,
        Running(embedded_client, DashboardConfig(port=0, allow_actions=True)) as other,
    ):
        page = http(dash.url + "queue/dead?q=orders")
        assert page.status == 200
        assert "HttpOnly" in page.headers["set-cookie"]
        assert "SameSite=Strict" in page.headers["set-cookie"]
        cookie, token = _csrf(page)
        replay = dash.url + "queue/dead/replay?q=orders"
        _, foreign = _csrf(http(other.url + "queue/dead?q=orders"))  # another process's
        # One hex digit changed (a fixed "0" left a token ending in 0 valid: 1 run in 16).
        altered = token[:-1] + ("1" if token.endswith("0") else "0")
        for data, headers in [
            ({"id": "doomed"}, {"Cookie": cookie}),  # no token
            ({"id": "doomed", "csrf": token}, {}),  # no cookie
            ({"id": "doomed", "csrf": altered}, {"Cookie": cookie}),
            ({"id": "doomed", "csrf": foreign}, {"Cookie": f"dynoq_csrf={foreign}"}),
            (
                {"id": "doomed", "csrf": token},
                {"Cookie": cookie, "Origin": "http://evil.example"},
            ),  # another site's page
            ({"id": "doomed", "csrf": token}, {"Cookie": cookie, "Sec-Fetch-Site": "cross-site"}),
        ]:
            r = http(replay, method="POST", data=data, headers=headers)
            assert r.status == 403, (data, headers, r.status)
        assert q.stats().dead == 1
        q.push("stays", id="stays", delay=60)
        cancel = dash.url + "queue/cancel?q=orders"
        for data, headers in [
            ({"id": "stays"}, {"Cookie": cookie}),  # no token
            ({"id": "stays", "csrf": altered}, {"Cookie": cookie}),
        ]:
            assert http(cancel, method="POST", data=data, headers=headers).status == 403
        assert q.get("stays") is not None
        r = http(
            cancel, method="POST", data={"csrf": token, "id": "stays"}, headers={"Cookie": cookie}
        )
        assert r.status == 303 and "cancelled+stays" in r.headers["location"]
        assert q.get("stays") is None
        r = http(
            cancel, method="POST", data={"csrf": token, "id": "stays"}, headers={"Cookie": cookie}
        )
        assert r.status == 303 and "nothing+was+cancelled" in r.headers["location"]
        r = http(
            dash.url + "queue/dead/purge?q=orders",
            method="POST",
            data={"csrf": token, "confirm": "order"},
            headers={"Cookie": cookie},
        )
        assert r.status == 400 and q.stats().dead == 1  # not confirmed
        confirm = http(
            dash.url + "queue/dead/confirm?q=orders&action=purge", headers={"Cookie": cookie}
        )
        assert "Type the queue" in confirm.text
        r = http(
            replay,
            method="POST",
            data={"id": "doomed", "csrf": token},
            headers={"Cookie": cookie, "Origin": dash.url.rstrip("/")},
        )
        assert r.status == 303 and "replayed+1" in r.headers["location"]
        assert q.stats().dead == 0 and q.get("doomed").attempts == 0  # type: ignore[union-attr]
        # purge, confirmed
        [m] = q.backend.drive(q.planner.pop(1, shards=[q.shard_for("doomed")]))
        assert m.id == "doomed" and dead_letter(q, m)
        r = http(
            dash.url + "queue/dead/purge?q=orders",
            method="POST",
            data={"csrf": token, "confirm": "orders"},
            headers={"Cookie": cookie},
        )
        assert r.status == 303 and "purged+1" in r.headers["location"]
        assert q.stats().dead == 0 and not q.contains(m.id)  # type: ignore[arg-type]


def test_token_required_beyond_loopback(embedded_client: dynoq.Client) -> None:
    for host, token in (("0.0.0.0", None), ("::", None), ("192.0.2.7", None), ("0.0.0.0", "short")):
        with pytest.raises(InvalidArgument):
            DashboardConfig(host=host, token=token)
    scene(embedded_client)
    with Running(embedded_client, DashboardConfig(host="0.0.0.0", port=0, token=TOKEN)) as d:
        url = d.url.replace("0.0.0.0", "127.0.0.1")
        bare = http(url)
        assert bare.status == 401 and bare.headers["www-authenticate"].startswith("Basic")
        for auth in (
            "Bearer wrong-token-wrong-token",
            "Basic " + base64.b64encode(b"admin:wrong-token-wrong").decode(),
            "Basic !!!",
            "Digest x",
        ):
            assert http(url, headers={"Authorization": auth}).status == 401
        for path in ("", "api/overview", "static/dashboard.js", "queue?q=orders"):
            assert http(url + path).status == 401
        ok = http(url, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status == 200 and "orders" in ok.text
        basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
        assert (
            http(url + "queue/dead?q=orders", headers={"Authorization": f"Basic {basic}"}).status
            == 200
        )
        assert TOKEN not in ok.text
        # bound beyond loopback, any Host is fine (the token protects it)
        assert (
            http(
                url, headers={"Authorization": f"Bearer {TOKEN}", "Host": "dash.example:8080"}
            ).status
            == 200
        )


def test_loopback_dashboard_answers_only_loopback_hosts(embedded_client: dynoq.Client) -> None:
    with Running(embedded_client, DashboardConfig(port=0)) as dash:
        port = dash.url.rsplit(":", 1)[1].strip("/")
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert http(dash.url, headers={"Host": host}).status == 200, host
        for host in (f"evil.example:{port}", "attacker.example", f"10.0.0.1:{port}"):
            assert http(dash.url, headers={"Host": host}).status == 421, host


def test_headers_and_no_secret_in_any_reply(embedded_server: Any) -> None:
    """A client whose URL holds a password (an ACL user): no page, JSON or error shows it,
    nor the dashboard token, nor a lease token's fencing part."""
    import redis

    admin = redis.Redis(host=embedded_server.host, port=embedded_server.port)
    user, password = f"dash-{uuid.uuid4().hex[:6]}", "pw-" + uuid.uuid4().hex
    admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    url = f"redis://{user}:{password}@{embedded_server.host}:{embedded_server.port}/0"
    try:
        with dynoq.connect(url, prefix=prefix) as client:
            scene(client)
            with Running(client, DashboardConfig(port=0, token=TOKEN, allow_actions=True)) as dash:
                auth = {"Authorization": f"Bearer {TOKEN}"}
                seen = []
                for path in (
                    "",
                    "api/overview",
                    "queue?q=orders",
                    "queue?q=events",
                    "queue/dead?q=orders",
                    "queue/message?q=orders&id=doomed",
                    "queue/groups?q=events",
                    "topic?t=payments",
                    "queue?q=none",
                    "queue/list?q=orders&kind=bad",
                    "api/queue?q=orders",
                    "queue/dead/confirm?q=orders&action=replay",
                ):
                    r = http(dash.url + path, headers=auth)
                    seen.append(r.text + json.dumps(r.headers))
                    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
                    assert "script-src 'self'" in r.headers["content-security-policy"]
                    assert r.headers["x-frame-options"] == "DENY"
                text = "\n".join(seen)
                assert password not in text and TOKEN not in text
                assert LEASE_TOKEN not in text and "5ecre7random" not in text
                assert f"redis://{user}:***@{embedded_server.host}" in text
                assert repr(DashboardConfig(token=TOKEN)).count(TOKEN) == 0
    finally:
        admin.execute_command("ACL", "DELUSER", user)
        delete_prefix(f"redis://{embedded_server.host}:{embedded_server.port}/0", prefix)
        admin.close()


def test_cli_refuses_an_open_bind_and_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, embedded_client: dynoq.Client
) -> None:
    runner = CliRunner()
    url = embedded_client.url
    r = runner.invoke(cli, ["--url", url, "dashboard", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "without a token" in r.output and "Traceback" not in r.output
    r = runner.invoke(cli, ["--url", url, "dashboard", "--token", "short"])
    assert r.exit_code == 2 and "at least 16" in r.output
    # the extra is missing: starlette cannot be imported, dynoq.dashboard not yet loaded
    for name in ["starlette", *(m for m in sys.modules if m.startswith("starlette."))]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m.startswith("dynoq.dashboard")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(dynoq, "dashboard", raising=False)
    r = runner.invoke(cli, ["--url", url, "dashboard"])
    assert r.exit_code == 1 and "pip install 'dynoq[dashboard]'" in r.output


def test_dashboard_command_serves_until_sigterm(embedded_client: dynoq.Client) -> None:
    scene(embedded_client)
    env = {**os.environ, "DYNOQ_DASHBOARD_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dynoq",
            "--url",
            embedded_client.url,
            "--prefix",
            embedded_client.prefix,
            "dashboard",
            "--port",
            "0",
            "--interval",
            "0.2",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/) \(read-only; prefix", line)
        assert m, line
        assert TOKEN not in line
        assert http(m.group(1)).status == 401
        r = http(m.group(1), headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status == 200 and "orders" in r.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_dashboard_acl_roles_are_enough(embedded_server: Any) -> None:
    """A Redis user with only ``dynoq acl dashboard`` rules renders every page and can
    change nothing; ``dashboard-actions`` can also replay (docs/dashboard.md)."""
    import redis

    from dynoq import acl

    admin = redis.Redis(host=embedded_server.host, port=embedded_server.port)
    plain = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    users = {}
    for role in ("dashboard", "dashboard-actions"):
        name, password = f"{role}-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
        admin.execute_command(
            "ACL", "SETUSER", name, "reset", "on", f">{password}", *acl.rules(prefix, role)
        )
        users[role] = (name, f"redis://{name}:{password}@{plain[8:]}")
    acl.install(admin)  # roles call dynoq's scripts but may not load them
    try:
        with dynoq.connect(plain, prefix=prefix) as owner:
            s = scene(owner)
        with (
            dynoq.connect(users["dashboard"][1], prefix=prefix) as reader,
            Running(reader, DashboardConfig(port=0)) as dash,
        ):
            for path in (
                "",
                "api/overview",
                "queue?q=orders",
                "queue?q=events",
                "queue/list?q=orders&kind=delayed",
                "queue/dead?q=orders&id=doomed",
                "queue/message?q=orders&id=doomed",
                "queue/groups?q=orders",
                "queue/groups?q=events",
                "topic?t=payments",
                "queue?q=payments:audit",
                "api/queue?q=orders",
            ):
                r = http(dash.url + path)
                assert r.status == 200, (path, r.status, r.text[:300])
                assert "Last sample failed" not in r.text, path
            assert json.loads(http(dash.url + "api/overview").text)["error"] is None
            q = reader.open_existing("orders")
            assert q is not None
            with pytest.raises(dynoq.PermissionDenied):
                q.replay_dead()
            with pytest.raises(dynoq.PermissionDenied):
                q.push("x")
        with (
            dynoq.connect(users["dashboard-actions"][1], prefix=prefix) as operator,
            Running(operator, DashboardConfig(port=0, allow_actions=True)) as dash,
        ):
            cookie, token = _csrf(http(dash.url + "queue/dead?q=orders"))
            r = http(
                dash.url + "queue/dead/replay?q=orders",
                method="POST",
                data={"csrf": token, "id": "doomed"},
                headers={"Cookie": cookie},
            )
            assert r.status == 303, r.text
        assert s.orders.stats().dead == 0
    finally:
        for name, _ in users.values():
            admin.execute_command("ACL", "DELUSER", name)
        admin.close()
        delete_prefix(plain, prefix)


def test_the_live_numbers_follow_a_queue_created_anew(
    client: dynoq.Client, make_client: Any
) -> None:
    from dynoq.dashboard.data import Reader
    from dynoq.dashboard.sampler import Sampler

    sampler = Sampler(Reader(client), interval=60, window=600, limit=50)
    client.queue("anew", shards=4).push("x")
    assert sampler.sample().stats["anew"].ready == 1
    for key in list(client.redis.scan_iter(match=f"{client.prefix}:*")):
        client.redis.unlink(key)
    make_client().queue("anew", shards=2).push_many(["a", "b", "c"])
    gone = sampler.sample()  # the copy it had is refused: it says so, and forgets it
    assert gone.error is not None and "is gone" in gone.error
    again = sampler.sample()
    assert again.error is None and again.stats["anew"].ready == 3
    assert len(again.stats["anew"].shards) == 2


def test_a_keyed_queue_page_shows_its_busiest_and_blocked_keys(client: dynoq.Client) -> None:
    q = client.queue("acct", shards=2, ordered="key")
    q.push_many(
        [dynoq.Message(i, key="busy") for i in range(5)]
        + [dynoq.Message(i, key="bad") for i in range(2)]
        + [dynoq.Message(0, key=f"k{i:02}") for i in range(30)]
    )
    got = q.pop(count=100)
    bad = next(m for m in got if m.key == "bad")
    # A consumer's failed handler, as settle records it (the public nack gives no reason)
    q.backend.run(
        q.ops.nack_call(
            bad, delay=600, mode="retry", why=reasons.why(ValueError("card <declined>"), "me")
        )
    )
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        r = http(dash.url.rstrip("/") + "/queue?q=acct")
        assert r.status == 200, r.text[:300]
        page = r.text
    assert "ordered by key" in page and "Keys (32)" in page
    assert "lease holder" not in page  # no shard leases on a keyed queue
    busiest = re.search(r'<table class="grid" id="keys">(.*?)</table>', page, re.S)
    assert busiest is not None
    rows = re.findall(
        r"<tr><td class=\"key\">([^<]*)</td><td class=\"n\">(\d+)</td>"
        r"<td class=\"n\">(\d+)</td></tr>",
        busiest.group(1),
    )
    assert rows[:2] == [("busy", "4", "1"), ("bad", "1", "1")]
    assert len(rows) == 20  # bounded: the busiest 20 of 32
    blocked = re.search(r'<table class="grid" id="blocked-keys">(.*?)</table>', page, re.S)
    assert blocked is not None
    assert ">bad<" in blocked.group(1) and bad.id in blocked.group(1)
    assert "ValueError: card &lt;declined&gt;" in blocked.group(1)  # escaped
    assert re.search(r'class="n">1</td><td class="reason">', blocked.group(1))  # attempts

    plain = client.queue("plain-q")
    plain.push(1)
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        page = http(dash.url.rstrip("/") + "/queue?q=plain-q").text
        assert 'id="keys"' not in page and "Blocked keys" not in page
        groups = http(dash.url.rstrip("/") + "/queue/groups?q=acct")
        assert groups.status == 200


def test_a_keyed_queue_shows_how_long_its_oldest_message_waits(client: dynoq.Client) -> None:
    # Before, "oldest waiting" was blank ("-") for an ordered="key" queue.
    q = client.queue("aged", shards=2, ordered="key")
    q.push_many([dynoq.Message(i, key=f"k{i % 3}") for i in range(6)])
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        base = dash.url.rstrip("/")

        def oldest() -> Any:
            data = json.loads(http(base + "/api/overview").text)
            return next(row for row in data["queues"] if row["name"] == "aged")["oldest"]

        wait_for(lambda: oldest() is not None, what="the sampler to see the queue")
        assert oldest() >= 0


def test_a_queue_stored_in_a_later_layout_is_named_not_a_server_error(
    embedded_client: dynoq.Client,
) -> None:
    """A queue a later dynoq wrote (a layout this version does not read): its page says
    so (409, naming the upgrade), and every other queue still shows on the home page."""
    from dynoq._core import layout
    from dynoq._core.keys import QueueKeys

    client = embedded_client
    client.queue("fine").push("x")
    client.queue("later").push("y")
    client.redis.hset(QueueKeys(client.prefix, "later").meta, "layout", layout.LAYOUT + 1)
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        base = dash.url.rstrip("/")
        r = http(base + "/queue?q=later")
        assert r.status == 409, (r.status, r.text[:300])
        assert "layout" in r.text and "upgrade dynoq" in r.text
        r = http(base + "/api/queue?q=later")
        assert r.status == 409 and "upgrade dynoq" in r.text
        home = http(base + "/")
        assert home.status == 200 and "fine" in home.text
        assert "later" in home.text  # listed, with what is wrong with it
        data = json.loads(http(base + "/api/overview").text)
        assert {q["name"] for q in data["queues"]} >= {"fine"}


def test_a_pool_run_dry_is_busy_not_broken(embedded_server: Any) -> None:
    """Every connection of the pool in use: the page says the server is busy (503 with
    Retry-After), not a server error."""
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    with dynoq.connect(url, prefix=prefix, max_connections=2, pool_timeout=0.2) as client:
        client.queue("orders").push("x")
        with Running(client, DashboardConfig(port=0, interval=300)) as dash:
            held = [client.redis.connection_pool.get_connection() for _ in range(2)]
            try:
                r = http(dash.url.rstrip("/") + "/queue?q=orders")
            finally:
                for c in held:
                    client.redis.connection_pool.release(c)
            assert r.status == 503, (r.status, r.text[:300])
            assert r.headers.get("retry-after") == "1"
            assert "PoolExhausted" in r.text or "connection" in r.text
    delete_prefix(url, prefix)


def test_the_pages_show_any_stored_record(client: dynoq.Client) -> None:
    """Records written raw (any role that writes records can): msgpack extensions,
    nesting deeper than JSON goes, unreadable records waiting, in flight, delayed and
    dead. Every page answers 200 and shows each one (an unreadable one as such)."""
    import html

    import msgpack
    from helpers import nested, rewrite_bodies

    q = client.queue("raw", shards=1)
    q.push("x", id="bad-flying")
    [m] = q.pop()  # in flight, its record broken after
    q.push_many([dynoq.Message(i, id=i) for i in ("ts", "ext", "deep", "bad")])
    q.push("x", id="bad-later", delay=3600)
    assert m.id is not None
    rewrite_bodies(
        client,
        q,
        {
            "ts": [{"at": msgpack.Timestamp(5, 1)}],
            "ext": [[msgpack.ExtType(3, b"x")]],
            "deep": [nested(1000)],
            "bad": [1, None, [1]],
            "bad-later": [1, 2],
            m.id: [1, None, None, 5],
        },
    )
    with Running(client, DashboardConfig(port=0, interval=0.1)) as dash:
        base = dash.url.rstrip("/")

        def page(path: str) -> str:
            r = http(base + path)
            assert r.status == 200, (path, r.status, r.text[:300])
            return html.unescape(r.text)

        queue = page("/queue?q=raw")
        assert '{"at": {"$timestamp": [5, 1]}}' in queue and "[[3, " in queue
        assert "(unreadable: record's headers are a list" in queue  # peeked
        assert "(unreadable: record's tag" in queue  # in flight
        assert "(unreadable: record's key is a int" in queue  # delayed
        assert "(unreadable: " in page("/queue/list?q=raw&kind=delayed")
        assert "(unreadable: " in page("/queue/list?q=raw&kind=in_flight")
        assert "$timestamp" in page("/queue/message?q=raw&id=ts")
        assert '"..."' in page("/queue/message?q=raw&id=deep")
        assert "cannot be read: record's headers" in page("/queue/message?q=raw&id=bad")
        got = q.pop(10)  # the unreadable one is dead-lettered, the others delivered
        assert sorted(x.id for x in got) == ["deep", "ext", "ts"]  # type: ignore[type-var]
        dead = page("/queue/dead?q=raw")
        assert 'data-id="bad"' in dead and "RecordError" in dead
        assert "RecordError" in page("/queue/message?q=raw&id=bad")
