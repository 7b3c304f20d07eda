"""Quick start: a delay queue, an ordered queue and a consumer group.

    python examples/quickstart.py      # a private server, or the one in $DYNOQ_URL
"""

import os
import time

import dynoq

with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="shop") as client:
    orders = client.queue("orders", shards=4, unack_timeout=30, max_retries=5)

    orders.push({"order": 42}, id="cancel-42", delay=1.0)  # due in a second
    orders.push({"order": 8}, priority=5)                   # priority 0..99, default 0
    orders.push({"order": 7, "vip": True}, priority=1)      # lower value first: 7, then 8
    orders.ensure({"order": 9}, id="order-9", priority=9)   # push only if absent

    for msg in orders.pop(count=10, wait=5.0):  # claimed for unack_timeout seconds
        print("got", msg.payload)
        orders.ack(msg)  # a stale delivery's ack returns False; nack() retries it
    for msg in orders.pop(wait=5.0):  # none ready: waits until the delayed one is due
        print("got", msg.payload, "after its delay")
        orders.ack(msg)

    # Ordered queue: the key picks the shard, a shard delivers strictly in push order.
    events = client.queue("order-events", shards=8, ordered=True)
    for step in ("created", "paid", "shipped"):
        events.push({"order": 42, "event": step}, key="order-42")

    def handle(msg: dynoq.Message) -> None:  # returning acks; raising retries, then dead-letters
        print("event", msg.payload["event"], "of order", msg.payload["order"])

    with client.consumer(events, handle, group="billing", concurrency=2):
        time.sleep(1.0)  # the consumer's threads handle the events in order meanwhile
    print("left:", events.size(), "events,", orders.size(), "orders")
