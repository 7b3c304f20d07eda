"""Run in its own process by test_tracing.py (the OpenTelemetry provider is process-wide):
push inside a span, consume, print what the spans were as JSON.

    python tests/traced_run.py URL PREFIX [sync|async]
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import dynoq
import dynoq.asyncio


def spans_of(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "trace": s.context.trace_id,
            "kind": s.kind.name,
            "attributes": dict(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ]


async def async_main(url: str, prefix: str, exporter: InMemorySpanExporter) -> None:
    async with dynoq.asyncio.connect(url, prefix=prefix) as client:
        q = await client.queue("traced", shards=2)
        with trace.get_tracer("test").start_as_current_span("checkout") as parent:
            msg_id = await q.push({"order": 1}, id="o1")
        seen: list[int] = []
        done = asyncio.Event()

        async def handle(msg: dynoq.Message) -> None:
            seen.append(trace.get_current_span().get_span_context().trace_id)
            done.set()

        async with client.consumer(q, handle, idle_wait=0.1, lease_ttl=2):
            await asyncio.wait_for(done.wait(), 10)
        print(
            json.dumps(
                {
                    "trace": parent.get_span_context().trace_id,
                    "seen": seen,
                    "id": msg_id,
                    "spans": spans_of(exporter),
                    "left": await q.size(),
                }
            )
        )


def main(url: str, prefix: str, flavor: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if flavor == "async":
        asyncio.run(async_main(url, prefix, exporter))
        return
    with dynoq.connect(url, prefix=prefix) as client:
        q = client.queue("traced", shards=2)
        with trace.get_tracer("test").start_as_current_span("checkout") as parent:
            msg_id = q.push({"order": 1}, id="o1")
        seen: list[int] = []
        done = threading.Event()

        def handle(msg: dynoq.Message) -> None:
            seen.append(trace.get_current_span().get_span_context().trace_id)
            done.set()

        with client.consumer(q, handle, idle_wait=0.1, lease_ttl=2):
            done.wait(10)
        print(
            json.dumps(
                {
                    "trace": parent.get_span_context().trace_id,
                    "seen": seen,
                    "id": msg_id,
                    "spans": spans_of(exporter),
                    "left": q.size(),
                }
            )
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "sync")
