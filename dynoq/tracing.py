"""OpenTelemetry spans around push, pop, handle and ack (the optional ``tracing`` extra).

With ``opentelemetry-api`` installed, dynoq opens a span per operation (attributes:
``messaging.system`` = dynoq, ``messaging.destination.name`` = the queue or topic,
``messaging.message.id``, ``messaging.batch.message_count``) and carries the trace
context from producer to consumer in the message's headers (``traceparent``,
``tracestate``: W3C), so a handler's span continues the producer's trace. Configure an
SDK and exporter as usual; without one, the API's spans cost next to nothing. Without
the package installed, every function here is a no-op that costs one check.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from .message import Message

try:
    from opentelemetry import context as _context
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # the optional extra is not installed
    ENABLED = False
else:
    ENABLED = True
    _tracer = _trace.get_tracer("dynoq")

_configured = False  # a tracer provider was set (until then the API's spans do nothing)


# get_tracer_provider() reads os.environ on every call until a provider is set, and
# active() runs once per handled message: look at the API's global slot first (when this
# version of the API has it) and ask only once something could be there.
_SLOT = ENABLED and hasattr(_trace, "_TRACER_PROVIDER")
_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def active() -> bool:
    """Whether spans are recorded: the extra is installed and a provider was set. Until
    then (and for good without the extra) every function here is a no-op."""
    global _configured
    if _configured:  # a provider, once set, stays: stop asking then
        return True
    if not ENABLED or (_SLOT and _trace._TRACER_PROVIDER is None and not _FROM_ENV):
        return False
    _configured = not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
    return _configured


HEADERS = ("traceparent", "tracestate")  # where the trace context travels
_NOTHING = nullcontext()  # reusable: entering it does nothing


def inject(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """``headers`` with the current trace context added (a copy), when there is one (and
    when they are a dict: anything else is left for the codec to refuse)."""
    if not active() or not (headers is None or isinstance(headers, dict)):
        return headers
    carrier: dict[str, str] = {}
    _propagate.inject(carrier)
    if not carrier:
        return headers
    return {**(headers or {}), **carrier}


def traced(item: Any) -> Any:
    """A payload or Message to push, carrying the current trace context."""
    if not active():
        return item
    msg = item if isinstance(item, Message) else Message(item)
    headers = inject(msg.headers)
    return msg if headers is msg.headers else dataclasses.replace(msg, headers=headers)


@contextmanager
def _span(
    name: str, kind: Any, destination: str, ids: list[str], parent: Mapping[str, Any] | None
) -> Iterator[None]:
    attributes: dict[str, Any] = {
        "messaging.system": "dynoq",
        "messaging.destination.name": destination,
        "messaging.operation.name": name,
    }
    if len(ids) == 1:
        attributes["messaging.message.id"] = ids[0]
    elif ids:
        attributes["messaging.batch.message_count"] = len(ids)
    ctx = None
    if parent:
        ctx = _propagate.extract({k: str(v) for k, v in parent.items() if k in HEADERS})
    token = _context.attach(ctx) if ctx is not None else None
    try:
        with _tracer.start_as_current_span(
            f"{name} {destination}", kind=kind, attributes=attributes
        ):
            yield
    finally:
        if token is not None:
            _context.detach(token)


def span(
    name: str,
    destination: str,
    *,
    ids: list[str] | None = None,
    parent: Mapping[str, Any] | None = None,
    producer: bool = False,
    consumer: bool = False,
) -> Any:
    """A span named ``<name> <destination>`` (a context manager), continuing the trace in
    ``parent`` (a message's headers) when given."""
    if not active():
        return _NOTHING
    kind = (
        _trace.SpanKind.PRODUCER
        if producer
        else _trace.SpanKind.CONSUMER
        if consumer
        else _trace.SpanKind.INTERNAL
    )
    return _span(name, kind, destination, ids or [], parent)
