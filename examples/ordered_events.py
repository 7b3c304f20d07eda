"""Ordered consumption (RocketMQ's partition order): per-key order with a retry in place.

Events of one order share a key, so they share a shard, and a shard is handled by one
consumer at a time, strictly in push order. A failing event blocks its shard and is
retried in place, so "shipped" is never handled before "paid".

    python examples/ordered_events.py
"""

import os
import threading

import dynoq

seen: list[str] = []
done = threading.Event()
failed_once = False


def handle(msg: dynoq.Message) -> None:
    global failed_once
    event = msg.payload["event"]
    if event == "paid" and not failed_once:  # a transient failure: retried in place
        failed_once = True
        raise RuntimeError("payment service timed out")
    seen.append(event)
    if event == "shipped":
        done.set()


with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="ordered") as client:
    events = client.queue("order-events", shards=4, ordered=True)
    for event in ("created", "paid", "shipped"):
        events.push({"order": 7, "event": event}, key="order-7")
    consumer = client.consumer(events, handle, retry_delays=[0.2], idle_wait=0.2)
    with consumer:
        done.wait(10)
    print("handled in order:", seen)  # ['created', 'paid', 'shipped']
    assert seen == ["created", "paid", "shipped"]
    print("stats:", consumer.stats())
