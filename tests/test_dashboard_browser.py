"""The dashboard in a real headless Chromium (Debian's, driven by Playwright; one browser
for the module), on the embedded server: numbers and charts change without a reload,
a dead letter is opened, replayed and consumed, the token is asked for off loopback, and
actions are refused read-only, without a valid CSRF token and from another site."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_kit import BROWSER_ARGS, chromium, scene
from helpers import delete_prefix, wait_for

import dynoq
from dynoq._core import byid
from dynoq.consumer import Consumer
from dynoq.dashboard import DashboardConfig, Running
from dynoq.dashboard.data import FLOW_MEMBERS

pytestmark = pytest.mark.skipif(
    chromium() is None,
    reason="no Chromium found: apt-get install chromium (or set "
    "DYNOQ_CHROMIUM to a Chromium binary)",
)

TOKEN = "browser-token-" + "y" * 16
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), headless=True, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    p = context.new_page()
    p.set_default_timeout(WAIT_MS)
    yield p
    context.close()


@pytest.fixture
def client(embedded_server: Any) -> Iterator[dynoq.Client]:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"dqt-{uuid.uuid4().hex[:12]}"
    with dynoq.connect(url, prefix=prefix) as c:
        yield c
    delete_prefix(url, prefix)


def test_numbers_and_charts_change_without_a_reload(page: Any, client: dynoq.Client) -> None:
    s = scene(client)
    with Running(client, DashboardConfig(port=0, interval=0.2)) as dash:
        page.goto(dash.url)
        page.evaluate("window.loadedOnce = true")  # gone if the page reloads
        ready = page.locator('tr[data-q="orders"]:not([data-s]) > [data-f="ready"]')
        before = int(ready.inner_text())
        total = page.locator('[data-live="ready"]')
        total_before = int(total.inner_text())
        s.orders.push_many([{"n": i} for i in range(25)])
        page.wait_for_function(
            "([sel, want]) => document.querySelector(sel).textContent === want",
            arg=['tr[data-q="orders"]:not([data-s]) > [data-f="ready"]', str(before + 25)],
        )
        assert int(total.inner_text()) == total_before + 25
        page.wait_for_function(  # the rate chart drew the pushes
            "() => JSON.parse(document.querySelector('canvas#rates').dataset.peaks || '{}')"
            ".pushed > 0"
        )
        assert int(page.locator("canvas#rates").get_attribute("data-points")) >= 2
        assert page.evaluate("window.loadedOnce") is True
        # a shard's row follows too (the per-shard table of the overview)
        shard = s.orders.shard_for("late-push")
        page.locator('tr[data-q="orders"]:not([data-s]) + tr.shards summary').click()
        cell = page.locator(f'tr[data-q="orders"][data-s="{shard}"] [data-f="delayed"]')
        had = int(cell.inner_text())
        s.orders.push("x", id="late-push", delay=900)
        page.wait_for_function(
            "([sel, want]) => document.querySelector(sel).textContent === want",
            arg=[f'tr[data-q="orders"][data-s="{shard}"] [data-f="delayed"]', str(had + 1)],
        )
        # the queue's own page is live as well
        page.goto(dash.url + "queue?q=orders")
        dead = page.locator('[data-live="dead"]')
        assert dead.inner_text() == "1"
        [m] = s.orders.backend.drive(s.orders.planner.pop(1, shards=[shard]))
        s.orders.backend.drive(byid.nack(s.orders.ops, m, mode="dead"))
        page.wait_for_function(
            "() => document.querySelector('[data-live=dead]').textContent === '2'"
        )


def test_open_a_dead_letter_replay_it_and_see_it_consumed(page: Any, client: dynoq.Client) -> None:
    q = client.queue("payments", shards=2, max_retries=0)
    broken = threading.Event()
    broken.set()
    handled: list[str] = []

    def handle(msg: dynoq.Message) -> None:
        if broken.is_set():
            raise RuntimeError("payment gateway down")
        handled.append(str(msg.id))

    consumer: Consumer = client.consumer(q, handle, group="payers", idle_wait=0.1, lease_ttl=2.0)
    consumer.start()
    try:
        q.push({"amount": 42}, id="pay-42")
        wait_for(lambda: q.stats().dead == 1, what="the failed message to be dead-lettered")
        broken.clear()
        with Running(client, DashboardConfig(port=0, allow_actions=True, interval=0.2)) as d:
            page.goto(d.url + "queue/dead?q=payments")
            row = page.locator('tr[data-id="pay-42"]')
            assert "RuntimeError" in row.inner_text()
            assert "payment gateway down" in row.inner_text()
            row.locator("a").first.click()
            page.wait_for_url("**/queue/message?**")
            assert page.locator("#state").inner_text() == "dead"
            trace = page.locator("#traceback").inner_text()
            assert "Traceback (most recent call last)" in trace and "RuntimeError" in trace
            assert '"amount": 42' in page.locator("#payload").inner_text()
            page.locator("#replay").click()
            page.wait_for_url("**/queue/dead?**")
            page.wait_for_selector("p.done")
            assert "replayed 1 dead letter" in page.locator("p.done").inner_text()
            wait_for(lambda: handled == ["pay-42"], what="the replayed message consumed")
            page.goto(d.url + "queue/dead?q=payments")
            assert page.locator("#dead-count").inner_text() == "0"
            reply = page.goto(d.url + "queue/message?q=payments&id=pay-42")
            assert reply.status == 404  # acked: it is gone
            page.goto(d.url + "queue/groups?q=payments")
            assert consumer.instance_id in page.locator("section.group").inner_text()
    finally:
        consumer.stop(timeout=10)


def test_pause_a_queue_from_its_page_and_resume_it(page: Any, client: dynoq.Client) -> None:
    q = client.queue("mail", shards=2)
    handled: list[str] = []
    consumer: Consumer = client.consumer(q, lambda m: handled.append(str(m.payload)), idle_wait=0.1)
    consumer.start()
    try:
        with Running(client, DashboardConfig(port=0, allow_actions=True, interval=0.2)) as d:
            page.goto(d.url + "queue?q=mail")
            assert page.locator("#paused").count() == 0
            page.locator("#pause").click()
            page.wait_for_selector("p.done")
            assert page.locator("p.done").inner_text() == "paused"
            assert "Paused" in page.locator("#paused").inner_text()
            assert q.paused()

            def overview_marks_it() -> bool:  # at the sampler's next look
                page.goto(d.url)
                return "paused" in page.locator('tr[data-q="mail"]').first.inner_text()

            wait_for(overview_marks_it, what="the overview marking the queue paused")
            page.goto(d.url + "queue?q=mail")
            q.push("held")
            page.wait_for_timeout(500)
            assert handled == [] and q.size() == 1
            assert page.locator("#pause").inner_text() == "Resume deliveries"
            page.locator("#pause").click()
            page.wait_for_url("**done=resumed**")
            assert page.locator("#paused").count() == 0 and not q.paused()
            wait_for(lambda: handled == ["held"], what="the held message delivered on resume")
        with Running(client, DashboardConfig(port=0)) as read_only:  # no button without actions
            page.goto(read_only.url + "queue?q=mail")
            assert page.locator("#pause").count() == 0
    finally:
        consumer.stop(timeout=10)


def test_a_flow_is_a_live_tree_of_its_calls(page: Any, client: dynoq.Client) -> None:
    tasks = dynoq.Tasks(client, queue="flows")
    gate = threading.Event()

    @tasks.task(name="fetch")
    def fetch(n: int) -> int:
        gate.wait(30)
        return n * 10

    @tasks.task(name="total")
    def total(xs: list[int]) -> int:
        return sum(xs)

    h = (tasks.chord([fetch.s(i) for i in range(3)], total.s()) | total.si([1, 2])).delay()
    with (
        tasks.worker(idle_wait=0.05, concurrency=4),
        Running(client, DashboardConfig(port=0, interval=0.2)) as d,
    ):
        page.goto(d.url)
        page.fill('input[name="id"]', h.id)  # the header's "open a flow by id"
        page.press('input[name="id"]', "Enter")
        page.wait_for_url("**/flow?id=**")
        assert page.locator("#status").inner_text() == "running"
        rows = page.locator("#members tr[data-m]")
        assert rows.count() == 5
        first = rows.nth(0)
        assert "chain 0 / group 1" in first.inner_text() and "fetch" in first.inner_text()
        assert "chain 0" in rows.nth(3).inner_text() and "total" in rows.nth(3).inner_text()
        page.wait_for_function(  # the calls are taken: started, the rest pending
            "() => [...document.querySelectorAll('#members [data-f=state]')]"
            ".map((c) => c.textContent).join() === 'started,started,started,pending,pending'"
        )
        page.evaluate("window.loadedOnce = true")  # gone if the page reloads
        gate.set()
        page.wait_for_function(
            "() => document.querySelector('#status').textContent === 'succeeded'"
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('#members [data-f=state]')]"
            ".every((c) => c.textContent === 'succeeded')"
        )
        assert page.evaluate("window.loadedOnce") is True
        page.reload()
        assert page.locator("#result").inner_text().strip() == "3"
        assert page.goto(d.url + "flow?id=no-such-flow").status == 404
        # a larger flow (its calls on a queue no worker takes): the page lists the first
        # FLOW_MEMBERS and says so
        idle = dynoq.Tasks(client, queue="idle-flows")
        step = idle.task(name="step")(lambda n: n)
        big = idle.group([step.s(i) for i in range(FLOW_MEMBERS + 100)]).delay()
        page.goto(d.url + f"flow?id={big.id}")
        assert page.locator("#members tr[data-m]").count() == FLOW_MEMBERS
        shown = page.locator("#shown").inner_text()
        assert f"the first {FLOW_MEMBERS} of {FLOW_MEMBERS + 100} calls" in shown


def test_a_key_blocked_by_a_failing_message_shows_its_reason(
    page: Any, client: dynoq.Client
) -> None:
    q = client.queue("accounts", shards=2, ordered="key")

    def handle(msg: dynoq.Message) -> None:
        if msg.key == "acct-7":
            raise RuntimeError("ledger locked")

    consumer: Consumer = client.consumer(q, handle, idle_wait=0.1, retry_delays=(600,))
    consumer.start()
    try:
        q.push_many([dynoq.Message(i, key=k) for i in range(3) for k in ("acct-7", "acct-8")])
        wait_for(
            lambda: (
                q.key_state("acct-8").waiting + q.key_state("acct-8").in_flight == 0
                and q.keys(5)["blocked"]
            ),
            what="acct-8 consumed, acct-7 blocked",
        )
        with Running(client, DashboardConfig(port=0, interval=0.2)) as d:
            page.goto(d.url + "queue?q=accounts")
            row = page.locator("#blocked-keys tbody tr")
            assert row.count() == 1
            cells = [row.locator("td").nth(i).inner_text() for i in range(4)]
            assert cells[0] == "acct-7" and cells[2] == "1"
            assert cells[3] == "RuntimeError: ledger locked"
            busiest = page.locator("#keys tbody tr").first.inner_text()
            assert busiest.split() == ["acct-7", "2", "1"]  # two waiting behind the retry
            row.locator("a").click()
            page.wait_for_url("**/queue/message?**")
            assert "ledger locked" in page.content()
    finally:
        consumer.stop(timeout=10)


def test_the_token_is_asked_for_off_loopback(browser: Any, client: dynoq.Client) -> None:
    scene(client)
    config = DashboardConfig(host="0.0.0.0", port=0, token=TOKEN, interval=0.2)
    with Running(client, config) as dash:
        url = dash.url.replace("0.0.0.0", "127.0.0.1")
        from playwright.sync_api import Error as BrowserError

        for credentials in (None, {"username": "ops", "password": "not-the-token-at-all"}):
            refused = browser.new_context(http_credentials=credentials)
            try:  # Chromium gives up on the 401's challenge, or shows the 401
                reply = refused.new_page().goto(url)
            except BrowserError as exc:
                assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc)
            else:
                assert reply.status == 401 and "orders" not in reply.text()
            finally:
                refused.close()
        signed = browser.new_context(http_credentials={"username": "ops", "password": TOKEN})
        try:
            p = signed.new_page()
            p.set_default_timeout(WAIT_MS)
            assert p.goto(url).status == 200
            assert "orders" in p.locator("main").inner_text()
            at = p.locator('[data-live="at"]').inner_text()  # the live updates get in too
            p.wait_for_function(
                "(was) => document.querySelector('[data-live=at]').textContent !== was", arg=at
            )
            assert TOKEN not in p.content()
        finally:
            signed.close()


def test_actions_refused_read_only_without_csrf_and_cross_site(
    page: Any, client: dynoq.Client
) -> None:
    s = scene(client)
    with Running(client, DashboardConfig(port=0)) as read_only:
        page.goto(read_only.url + "queue/dead?q=orders")
        assert page.locator("form[method=post]").count() == 0
        status = page.evaluate("""async () => (await fetch('/queue/dead/replay?q=orders', {
            method: 'POST', body: new URLSearchParams({id: 'doomed'})})).status""")
        assert status == 403
    with Running(client, DashboardConfig(port=0, allow_actions=True)) as dash:
        page.goto(dash.url + "queue/dead?q=orders")
        form = page.locator('tr[data-id="doomed"] form')
        form.locator('input[name="csrf"]').evaluate("el => el.value = 'forged.token'")
        with page.expect_navigation() as nav:
            form.locator("button").click()
        assert nav.value.status == 403 and "CSRF" in page.content()
        # a page of another origin posting to the dashboard
        page.goto("about:blank")
        page.set_content(f"""<form method="post"
            action="{dash.url}queue/dead/replay?q=orders">
            <input name="id" value="doomed"><input name="csrf" value="x.y"></form>""")
        with page.expect_navigation() as nav:
            page.evaluate("document.forms[0].submit()")
        assert nav.value.status == 403
        # purge asks first, and a wrong name does nothing
        page.goto(dash.url + "queue/dead?q=orders")
        page.get_by_text("Purge…").click()
        page.fill('input[name="confirm"]', "order")
        page.locator("#confirm").click()
        assert "type the queue" in page.locator("#error").inner_text()
    assert s.orders.stats().dead == 1


def test_see_a_running_messages_progress_and_cancel_it_from_its_page(
    page: Any, client: dynoq.Client
) -> None:
    q = client.queue("exports", shards=1)
    heard = threading.Event()

    def handle(m: dynoq.Message) -> None:
        try:
            for i in range(3000):
                m.progress({"rows": i})
                time.sleep(0.02)
        except dynoq.Cancelled:
            heard.set()
            raise

    q.push("big", id="big")
    consumer: Consumer = client.consumer(q, handle, idle_wait=0.1)
    consumer.start()
    try:
        with Running(client, DashboardConfig(port=0, allow_actions=True, interval=0.2)) as d:

            def progress_shown() -> bool:
                page.goto(d.url + "queue/message?q=exports&id=big")
                return page.locator("#progress").count() == 1

            wait_for(progress_shown, what="the running message's progress on its page")
            assert '"rows"' in page.locator("#progress").inner_text()
            assert page.locator("#cancel").inner_text() == "Ask its handler to stop"
            page.locator("#cancel").click()
            page.wait_for_url("**done=cancelled**")
            assert heard.wait(5)
            wait_for(lambda: q.stats().total("cancelled") == 1, what="it ended cancelled")
            page.goto(d.url + "queue/message?q=exports&id=big")
            assert "no message" in page.content()  # gone: it ended
        with Running(client, DashboardConfig(port=0)) as read_only:  # no button without actions
            q.push("waits", id="waits", delay=60)
            page.goto(read_only.url + "queue/message?q=exports&id=waits")
            assert page.locator("#cancel").count() == 0 and page.locator("#progress").count() == 0
    finally:
        consumer.stop(timeout=10)
