"""A consumer group over several processes: RocketMQ's clustering consumption.

Three worker processes join the group "billing"; the queue's 8 shards are split among
them (strategy "averagely") and rebalanced when one leaves. Every message is handled once.

    python examples/consumer_group.py
"""

import multiprocessing
import os
import time

import dynoq


def worker(url: str, name: str, handled: "multiprocessing.Queue[str]") -> None:
    with dynoq.connect(url, prefix="group-demo") as client:

        def handle(msg: dynoq.Message) -> None:
            handled.put(f"{name}:{msg.payload}")

        consumer = client.consumer(
            "invoices",
            handle,
            group="billing",
            instance_id=name,
            batch_size=10,
            lease_ttl=3,
            idle_wait=0.2,
        )
        with consumer:
            time.sleep(3)  # serve for a while, then leave the group cleanly
            print(name, "held shards", sorted(consumer.assignment))


if __name__ == "__main__":
    with dynoq.connect(os.environ.get("DYNOQ_URL", "embedded://"), prefix="group-demo") as client:
        invoices = client.queue("invoices", shards=8)
        invoices.push_many(range(300))
        handled: "multiprocessing.Queue[str]" = multiprocessing.Queue()
        procs = [
            multiprocessing.Process(target=worker, args=(client.url, f"w{i}", handled))
            for i in range(3)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        results = [handled.get(timeout=10) for _ in range(300)]
        per_worker = {w: sum(r.startswith(w + ":") for r in results) for w in ("w0", "w1", "w2")}
        print("handled per worker:", per_worker)
        assert sorted(int(r.split(":")[1]) for r in results) == list(range(300))
        invoices.clear()
