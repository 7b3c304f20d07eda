"""Property tests on a real server: every input (payload, id, key, delay, priority,
headers, count, name) is either refused with a typed error and nothing changed, or round
trips exactly. The bad inputs tried are counted and printed (run with -s to see them)."""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import delete_prefix
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynoq

TRIED: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
payloads = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=4)
        | st.tuples(inner, inner)  # stored as a list
        | st.dictionaries(st.tuples(st.integers()), inner, max_size=2)
        | st.sets(st.integers(), max_size=3)
        | st.builds(object)
    ),
    max_leaves=12,
)
ids = (
    st.none()
    | st.text(max_size=600)
    | st.integers(-(2**70), 2**70)
    | st.booleans()
    | st.floats()
    | st.binary(max_size=4)
)
keys = st.none() | st.text(max_size=30) | st.integers() | st.floats() | st.booleans()
delays = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-(10**12), 10**12)
    | st.booleans()
    | st.text(max_size=3)
    | st.just(1e17)
)
priorities = st.integers(-5, 105) | st.booleans() | st.floats() | st.text(max_size=2)
headers = st.none() | st.dictionaries(st.text(max_size=5), scalars, max_size=3) | scalars
counts = st.integers(-5, 1200) | st.booleans() | st.floats() | st.text(max_size=2) | st.none()
names = st.text(max_size=210)


@pytest.fixture(scope="module")
def prop_client(embedded_server: Any) -> Iterator[dynoq.Client]:
    url = f"redis://{embedded_server.host}:{embedded_server.port}/0"
    prefix = f"prop-{uuid.uuid4().hex[:8]}"
    with dynoq.connect(url, prefix=prefix, max_payload_bytes=4096) as client:
        yield client
    delete_prefix(url, prefix)
    print(
        f"\nproperty tests: bad inputs refused by kind: {dict(TRIED)}; total {sum(TRIED.values())}"
    )


def _same(a: Any, b: Any) -> bool:
    """Equal as stored: tuples come back as lists, NaN equals NaN."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _refused(kind: str, exc: BaseException) -> None:
    assert isinstance(exc, dynoq.DynoqError), f"untyped {type(exc).__name__}: {exc}"
    assert isinstance(exc, (ValueError, TypeError)), f"{type(exc).__name__} is no arg error"
    TRIED[kind] += 1


@SETTINGS
@given(payload=payloads, msg_id=ids, key=keys, delay=delays, priority=priorities, hdrs=headers)
def test_push_refuses_or_round_trips(
    prop_client: dynoq.Client,
    payload: Any,
    msg_id: Any,
    key: Any,
    delay: Any,
    priority: Any,
    hdrs: Any,
) -> None:
    q = prop_client.queue("props", shards=3)
    before = q.stats()
    try:
        pushed = q.push(payload, id=msg_id, key=key, delay=delay, priority=priority, headers=hdrs)
    except Exception as exc:  # noqa: BLE001 - the property is about what is raised
        _refused("push", exc)
        after = q.stats()
        assert (after.ready, after.delayed, after.unacked) == (
            before.ready,
            before.delayed,
            before.unacked,
        )
        return
    got = q.get(pushed)
    assert got is not None
    assert _same(payload, got.payload) and got.priority == priority
    assert got.key == (None if key is None else str(key))
    assert _same(hdrs, got.headers) if hdrs is not None else got.headers is None
    assert got.delay == pytest.approx(round(delay * 1000) / 1000)
    assert pushed == (str(msg_id) if msg_id is not None else got.id)
    assert q.remove(pushed)


@SETTINGS
@given(count=counts, wait=delays)
def test_counts_and_waits_refuse_or_work(prop_client: dynoq.Client, count: Any, wait: Any) -> None:
    q = prop_client.queue("props-counts", shards=2)
    q.clear()
    q.push_many(range(3))
    for name, call in (
        (
            "pop",
            lambda: q.pop(count, wait=min(wait, 0.01) if isinstance(wait, (int, float)) else wait),
        ),
        ("peek", lambda: q.peek(count)),
        ("dead", lambda: q.dead(count)),
    ):
        try:
            got = call()
        except Exception as exc:  # noqa: BLE001
            _refused(name, exc)
            continue
        assert isinstance(count, int) and 1 <= count <= 1000 and len(got) <= min(count, 3)
    q.clear()


@SETTINGS
@given(name=names)
def test_names_refuse_or_work(prop_client: dynoq.Client, name: str) -> None:
    try:
        q = prop_client.queue(name, shards=1)
    except Exception as exc:  # noqa: BLE001
        _refused("queue name", exc)
        assert name not in prop_client.queue_names()
        return
    assert name in prop_client.queue_names() and ":" not in name
    q.push("x")
    assert [m.payload for m in q.pop()] == ["x"]


valid_payloads = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.binary(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=8) | st.integers(-9, 9), inner, max_size=5)
    ),
    max_leaves=20,
)


@SETTINGS
@given(
    payload=valid_payloads,
    msg_id=st.none() | st.text(min_size=1, max_size=80),
    key=st.none() | st.text(max_size=20),
    delay=st.floats(0, 3600),
    priority=st.integers(0, 99),
    hdrs=st.none() | st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
)
def test_valid_messages_round_trip_exactly(
    prop_client: dynoq.Client,
    payload: Any,
    msg_id: str | None,
    key: str | None,
    delay: float,
    priority: int,
    hdrs: dict[str, str] | None,
) -> None:
    q = prop_client.queue("props-valid", shards=3)
    try:
        pushed = q.push(payload, id=msg_id, key=key, delay=delay, priority=priority, headers=hdrs)
    except dynoq.PayloadTooLarge:
        TRIED["too large"] += 1
        return
    got = q.get(pushed)
    assert got is not None and _same(payload, got.payload)
    assert (got.key, got.headers, got.priority) == (key, hdrs, priority)
    assert got.delay == pytest.approx(round(delay * 1000) / 1000)
    assert q.remove(pushed)
