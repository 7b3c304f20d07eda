"""Make the dashboard screenshots in docs/screenshots/ (a shop under load for a minute).

    python docs/make_screenshots.py      # needs the dashboard and embedded extras,
                                         # playwright, and Debian's chromium

A private embedded server; a producer pushes orders at a steady rate (some delayed),
a group of two consumers handles them (a few fail, are retried and dead-lettered), an
ordered queue is consumed by a group of two, a topic has two groups. Then headless
Chromium opens the main pages and saves a PNG of each.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from pathlib import Path

import dynoq
from dynoq.dashboard import DashboardConfig, Running

OUT = Path(__file__).parent / "screenshots"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WARM = 60.0  # seconds of traffic before the pictures


class PaymentDeclined(Exception):
    pass


def handle(msg: dynoq.Message) -> None:
    time.sleep(random.uniform(0.002, 0.01))
    if msg.payload.get("card") == "expired":
        raise PaymentDeclined(f"card of order {msg.payload['order']} expired")


def main() -> None:
    random.seed(7)
    OUT.mkdir(exist_ok=True)
    with dynoq.connect("embedded://", prefix="shop") as client:
        orders = client.queue("orders", shards=4, max_retries=2)
        events = client.queue("order-events", shards=6, ordered=True)
        client.queue("emails", shards=2).push_many(
            [dynoq.Message({"to": f"user{i}@example.com"}, delay=300 + 30 * i)
             for i in range(40)])
        payments = client.topic("payments", shards=2)
        payments.subscribe("ledger")
        payments.subscribe("fraud", tags="refund")
        fast = {"lease_ttl": 5.0, "idle_wait": 0.2, "retry_delays": [0.5, 1.0]}
        consumers = [client.consumer(orders, handle, group="billing", concurrency=2,
                                     instance_id=f"billing-{i}", **fast) for i in (1, 2)]
        consumers += [client.consumer(events, lambda m: time.sleep(0.003), group="tracking",
                                      instance_id=f"tracker-{i}", **fast) for i in (1, 2)]
        for c in consumers:
            c.start()
        stop = threading.Event()

        def produce() -> None:
            n = 0
            while not stop.is_set():
                burst = random.randint(20, 60) if int(time.time()) % 20 < 12 else 5
                orders.push_many([{"order": n + i, "card": "expired" if random.random() < 0.02
                                   else "ok", "total": round(random.uniform(5, 400), 2)}
                                  for i in range(burst)])
                orders.push_many([dynoq.Message({"order": n, "reminder": True},
                                                delay=random.uniform(60, 900))])
                for i in range(burst // 4):
                    events.push({"order": n + i, "event": "paid"}, key=f"order-{n + i}")
                payments.publish({"order": n, "amount": 12.5},
                                 tag="refund" if n % 7 == 0 else "charge")
                n += burst
                stop.wait(0.5)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        with Running(client, DashboardConfig(port=0, interval=1.0, allow_actions=True)) as d:
            time.sleep(WARM)
            held = orders.pop(5, visibility=600)  # a few long-running deliveries
            dead = orders.dead(1)
            shoot(d.url, [
                ("overview", "/", False),
                ("queue", "/queue?q=orders", True),
                ("ordered-queue", "/queue?q=order-events", False),
                ("groups", "/queue/groups?q=order-events", True),
                ("dead-letters", "/queue/dead?q=orders", False),
                ("message", f"/queue/message?q=orders&id={dead[0].id}" if dead else "/", True),
                ("topic", "/topic?t=payments", False),
            ])
            del held
        stop.set()
        producer.join()
        for c in consumers:
            c.stop(timeout=10)


def shoot(url: str, pages: list[tuple[str, str, bool]]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name, path, full in pages:
            page.goto(url.rstrip("/") + path)
            page.wait_for_timeout(2500)  # a live update or two
            height = min(page.evaluate("document.body.scrollHeight"), 1500) if full else 900
            page.screenshot(path=str(OUT / f"dashboard-{name}.png"), full_page=full,
                            clip={"x": 0, "y": 0, "width": 1280, "height": height})
            print("saved", OUT / f"dashboard-{name}.png", file=sys.stderr)
        browser.close()


if __name__ == "__main__":
    main()
