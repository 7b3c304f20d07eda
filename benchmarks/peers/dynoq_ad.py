"""dynoq adapter for the peer benchmark harness (/work/shared/peers-bench).

Copy into <harness>/adapters/ and run e.g.
    ONLY=raw,huey,bullmq,dramatiq ADD=dynoq:dynoq_ad SKIP_RB=1 REPS=3 bash run.sh
(dynoq must be installed in the harness venv: pip install -e /path/to/dynoq).

enqueue = q.push(p) (one EVALSHA) / q.push_many(chunk) (one script per shard, pipelined);
consumer = dynoq.Consumer in-process: `concurrency` worker threads, each popping
`batch` messages per script call (default 100) and acking them with one ack_many; the
handler still gets one message at a time. At-least-once, with visibility timeouts.
Options (--opt): batch=100, shards=4.
"""

from common import URL

import dynoq

ASYNC = False


class Adapter:
    LABEL = f"dynoq {dynoq.__version__}"
    HAS_BULK = True
    BULK_DELAY = True
    DUE_EXTRA_S = 0.0

    def __init__(self, concurrency=1, batch="100", shards="4", **opts):
        self.concurrency = concurrency
        self.batch = int(batch)
        self.shards = int(shards)
        self.consumer = None

    def setup(self):
        self.client = dynoq.connect(URL, prefix="dqbench")
        self.q = self.client.queue("bench", shards=self.shards)

    def enqueue_single(self, payloads, delay=None):
        push = self.q.push
        for p in payloads:
            push(p, delay=delay or 0.0)

    def enqueue_bulk(self, payloads, delay=None):
        self.q.push_many([dynoq.Message(p, delay=delay or 0.0) for p in payloads])

    def start_consumer(self, counter):
        hit = counter.hit
        self.consumer = self.client.consumer(
            self.q,
            lambda msg: hit(),
            concurrency=self.concurrency,
            batch_size=self.batch,
            idle_wait=0.5,
        )
        self.consumer.start()

    def stop_consumer(self):
        if self.consumer is not None:
            self.consumer.stop(timeout=10)

    def pending(self):
        st = self.q.stats()
        return st.ready + st.delayed + st.unacked

    def teardown(self):
        self.client.close()
