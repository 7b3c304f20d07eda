"""Subprocess entry point for the topic tests: one consumer of a topic's group.

    python tests/topic_member.py URL PREFIX TOPIC GROUP MODE INSTANCE

Each handling is logged as ``instance|group|id|key|seq|tag`` with RPUSH to
``<prefix>:log``. Prints "started" once it consumes; runs until SIGTERM/SIGKILL.
"""

from __future__ import annotations

import sys

import dynoq


def main(url: str, prefix: str, topic: str, group: str, mode: str, instance: str) -> None:
    client = dynoq.connect(url, prefix=prefix)
    log = f"{prefix}:log"

    def handle(msg: dynoq.Message) -> None:
        p = msg.payload
        client.redis.rpush(log, f"{instance}|{group}|{msg.id}|{msg.key}|{p['seq']}|{msg.tag}")

    c = client.consumer(
        client.topic(topic),
        handle,
        group=group,
        mode=mode,
        instance_id=instance,
        lease_ttl=1.0,
        rebalance_interval=2.0,
        idle_wait=0.2,
        batch_size=10,
    ).start()
    print("started", flush=True)
    c.run()


if __name__ == "__main__":
    main(*sys.argv[1:7])
