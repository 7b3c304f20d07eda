"""Delayed messages: schedule, move and cancel them (Dyno-queues' setTimeout and remove).

python examples/delay_and_cancel.py
"""

import os

import dynoq

with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="timers") as client:
    timers = client.queue("payment-timeouts", shards=2)
    for order in (1, 2, 3):  # cancel each order if it is not paid within 0.3 s
        timers.push({"cancel_order": order}, id=f"timeout-{order}", delay=0.3)

    timers.remove("timeout-2")  # order 2 was paid: cancel its timer
    timers.reschedule("timeout-3", delay=60)  # order 3 got more time
    print("waiting:", timers.size(), "| first due:", timers.peek(1))  # nothing due yet

    fired = [m.payload["cancel_order"] for m in timers.pop(10, wait=2.0)]
    print("fired after its delay:", fired)  # [1], never before it was due
    assert fired == [1] and timers.contains("timeout-3") and not timers.contains("timeout-2")
    timers.ack_many(timers.pop(10))
    timers.clear()
