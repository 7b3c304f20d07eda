"""dynoq.asyncio adapter for the peer benchmark harness (/work/shared/peers-bench).

Copy into <harness>/adapters/ and run e.g.
    ONLY=saq-c10,arq-c10-poll1ms ADD=dynoqasync:dynoq_async_ad SKIP_RB=1 REPS=3 bash run.sh
(dynoq must be installed in the harness venv: pip install -e /path/to/dynoq).

enqueue = await q.push(p) / await q.push_many(chunk); consumer = dynoq.asyncio.Consumer
in the harness's event loop: `concurrency` worker tasks, each popping `batch` messages
per script call (default 100) and acking them with one call; the async handler still
gets one message at a time. At-least-once, with visibility timeouts.
Options (--opt): batch=100, shards=4.
"""

from common import URL

import dynoq
import dynoq.asyncio

ASYNC = True


class Adapter:
    LABEL = f"dynoq.asyncio {dynoq.__version__}"
    HAS_BULK = True
    BULK_DELAY = True
    DUE_EXTRA_S = 0.0

    def __init__(self, concurrency=1, batch="100", shards="4", **opts):
        self.concurrency = concurrency
        self.batch = int(batch)
        self.shards = int(shards)
        self.consumer = None

    async def setup(self):
        self.client = dynoq.asyncio.connect(URL, prefix="dqbench")
        self.q = await self.client.queue("bench", shards=self.shards)

    async def enqueue_single(self, payloads, delay=None):
        push = self.q.push
        for p in payloads:
            await push(p, delay=delay or 0.0)

    async def enqueue_bulk(self, payloads, delay=None):
        await self.q.push_many([dynoq.Message(p, delay=delay or 0.0) for p in payloads])

    async def start_consumer(self, counter):
        hit = counter.hit

        async def handler(msg):
            hit()

        self.consumer = self.client.consumer(
            self.q, handler, concurrency=self.concurrency, batch_size=self.batch, idle_wait=0.5
        )
        await self.consumer.start()

    async def stop_consumer(self):
        if self.consumer is not None:
            await self.consumer.stop(timeout=10)

    async def pending(self):
        st = await self.q.stats()
        return st.ready + st.delayed + st.unacked

    async def teardown(self):
        await self.client.close()
