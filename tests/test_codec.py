"""Pure encoding and validation (no server)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
from helpers import nested
from hypothesis import given, settings
from hypothesis import strategies as st

from dynoq._core import codec, delivered, jsontext, reasons, validate
from dynoq._core.keys import QueueKeys, shard_of
from dynoq.dashboard import format as dash
from dynoq.errors import RecordError
from dynoq.message import Message
from dynoq.settings import QueueSettings, merge


def test_record_roundtrip_with_header() -> None:
    body = codec.encode_body({"a": [1, b"x"]}, "k", {"h": 1}, 1000)
    rec = b"1700000000000,250,7," + body
    m = codec.decode("id1", rec, shard=3, attempts=2, token="t")
    assert (m.payload, m.key, m.headers, m.priority) == ({"a": [1, b"x"]}, "k", {"h": 1}, 7)
    assert (m.enqueued_at, m.deliver_at, m.delay) == (1700000000.0, 1700000000.25, 0.25)
    assert (m.shard, m.attempts, m.token) == (3, 2, "t")


def test_trailing_defaults_are_not_stored() -> None:
    assert len(codec.encode_body("x" * 100, None, None, 1000)) == 103  # array + str header
    assert codec.decode("i", b"1,0,0," + codec.encode_body(None, None, None, 10)).payload is None


def test_prepare_routes_by_key_only_on_ordered_queues() -> None:
    out = codec.prepare(Message("x", id="abc", key="k"), ordered=True, limit=100)
    assert out.routing == "k"
    out = codec.prepare(Message("x", id="abc", key="k"), ordered=False, limit=100)
    assert out.routing == "abc"
    assert codec.prepare(Message("x", id=12), ordered=False, limit=100).id == "12"


def test_new_ids_are_short_and_unique() -> None:
    ids = {codec.new_id() for _ in range(10_000)}
    assert len(ids) == 10_000 and all(len(i) == 16 for i in ids)


def test_shard_hash_is_stable() -> None:
    # crc32 is the same on every host and Python version (no PYTHONHASHSEED).
    assert shard_of("order-1", 8) == 7
    assert [shard_of(f"id{i}", 4) for i in range(6)] == [2, 0, 2, 0, 3, 1]
    assert shard_of("abc", 1) == 0


def test_all_shard_keys_share_one_hash_tag() -> None:
    keys = QueueKeys("dq", "orders").shard(3)
    assert all("{orders:3}" in k for k in [*keys.data(), keys.lease])
    assert QueueKeys("dq", "orders").meta == "dq:queue:orders"


def test_settings_roundtrip_and_merge() -> None:
    s = QueueSettings(shards=3, ordered=True, unack_timeout=1.5, max_retries=0, dedupe_window=10)
    assert QueueSettings.from_hash(s.to_hash()) == s
    assert merge(s, {"shards": 3, "ordered": None}, "q") is s
    with pytest.raises(ValueError, match="already exists"):
        merge(s, {"max_retries": 1}, "q")


# -- any bytes in a record: a message dynoq could have written, or a RecordError -----------


def _packed(value: Any) -> bytes:
    return bytes(msgpack.packb(value, use_bin_type=True))


_JUNK = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=4))
    | st.builds(msgpack.Timestamp, st.integers(0, 2**34 - 1), st.integers(0, 999_999_999)),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=4) | st.integers(-(2**63), 2**63 - 1), inner, max_size=4)
    ),
    max_leaves=12,
)
_ODD = st.sampled_from(
    [
        b"",
        b"-1",
        b"1_0",
        b" 1",
        b"+5",
        b"1e3",
        b"NaN",
        b"100",
        b"abc",
        b"9" * 16,
        b"9" * 400,
        b"zzzzzzzzzzz",
        b"\xff",
        b"0x10",
    ]
) | st.binary(max_size=6)
_HEADER = st.tuples(
    st.sampled_from([b"lwz4k2hm", b"1700000000000", b"0"]) | _ODD,
    st.sampled_from([b"0", b"250", b"-250"]) | _ODD,
    st.sampled_from([b"0", b"7", b"99"]) | _ODD,
)
_FIELDS = st.lists(_JUNK, max_size=6) | st.tuples(
    _JUNK,
    st.none() | st.text(max_size=4) | _JUNK,
    st.none() | st.dictionaries(st.text(max_size=4), _JUNK, max_size=3) | _JUNK,
    st.none() | st.sampled_from(["paid", "a b", "", "x|y"]) | _JUNK,
).map(list)
_BODY = st.one_of(
    _FIELDS.map(_packed),  # wrong types, missing and extra fields, nested junk
    _JUNK.map(_packed),  # bytes that decode to something not a list
    st.binary(max_size=40),  # not msgpack
    _FIELDS.map(_packed).flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),
    st.tuples(st.text(max_size=5), st.binary(max_size=3), _FIELDS.map(_packed)).map(
        lambda t: b"K%d:" % len(t[0].encode()) + t[0].encode() + t[1] + t[2]
    ),
)


@settings(max_examples=700, deadline=None)
@given(
    header=_HEADER, body=_BODY, attempts=st.sampled_from([0, 1, 2]) | st.integers(-(2**64), 2**70)
)
def test_any_record_decodes_to_what_dynoq_writes_or_to_a_record_error(
    header: tuple[bytes, bytes, bytes], body: bytes, attempts: int
) -> None:
    """Every field malformed in every way (hypothesis): decode raises RecordError and
    nothing else, or gives a message a handler and every view can rely on; readable()
    and the views (JSON, the dashboard's filters) never raise."""
    record = b",".join(header) + b"," + body
    try:
        m: Message | None = codec.decode("id", record, 0, attempts)
    except RecordError:
        m = None
    if m is not None:
        assert m.key is None or type(m.key) is str
        assert m.headers is None or type(m.headers) is dict
        assert m.tag is None or validate.check_tag(m.tag) == m.tag
        assert type(m.priority) is int and 0 <= m.priority <= validate.MAX_PRIORITY
        assert 0 <= m.attempts <= codec.MAX_ATTEMPTS
        for at in (m.enqueued_at, m.deliver_at):
            assert at is not None and 0 <= at <= codec.MAX_MS / 1000
            assert dash.clock(at)
        json.loads(dash.pretty(m.headers))
    shown = codec.readable("id", record, 0, attempts)
    assert (shown.unreadable is None) == (m is not None)
    # A pop reads its records in one loop, the common ones inline: as readable() does
    [popped] = delivered.messages([b"id"], [record], [attempts], ["t"], 0, "l", 1 << 20)
    assert repr(vars(popped)) == repr(vars(codec.readable("id", record, 0, attempts, "t", "l")))
    assert shown.unreadable is None or shown.payload is None
    json.loads(jsontext.to_json(jsontext.message_json(shown)))
    assert dash.payload(shown)


@settings(max_examples=500, deadline=None)
@given(
    raw=st.binary(max_size=30)
    | st.tuples(
        _ODD,
        _ODD,
        st.sampled_from([b"e", b"x", b"t", b"r", b"?"]),
        _JUNK.map(_packed) | _FIELDS.map(_packed),
    ).map(lambda t: b",".join(t))
)
def test_any_stored_reason_or_delivery_state_reads_without_an_error(raw: bytes) -> None:
    f = reasons.failure(raw)
    assert f is None or all(
        type(t) is str for t in (f.error_type, f.error, f.traceback, f.consumer)
    )
    assert f is None or dash.clock(f.last_failed_at)
    assert 0 <= delivered.attempts_of(raw) <= codec.MAX_ATTEMPTS


@settings(max_examples=700, deadline=None)
@given(body=_BODY | _JUNK.map(lambda v: _packed([v])))
def test_msgspec_reads_a_body_as_msgpack_does_or_leaves_it_to_msgpack(body: bytes) -> None:
    """codec.read_common (msgspec) gives what msgpack gives, or None (msgpack reads it):
    never a datetime for a Timestamp, an Ext for an ExtType, or its own error. An
    array as a map key is the one difference, where msgpack cannot make a dict."""
    fields = codec.read_common(body)
    if fields is None:
        return
    try:
        expected = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except TypeError:  # unhashable: an array as a map key (msgspec reads a tuple)
        assert "(" in repr(fields)
        return
    assert repr(fields) == repr(expected)


def test_a_record_holding_an_extension_reads_as_msgpack_reads_it() -> None:
    """Bodies that msgspec would read otherwise (a Timestamp as a datetime) or not at
    all (its other extensions, nesting past its depth) are msgpack's, in a pop's loop
    as anywhere."""
    values = [
        msgpack.Timestamp(5, 1),
        {"at": [msgpack.Timestamp(2**33, 999)]},
        msgpack.ExtType(3, b"x"),
        nested(1000),
        255,  # a 0xff byte: read by msgpack, the same
    ]
    records = [b"lwz4k2hm,0,0," + _packed([v]) for v in values]
    got = delivered.messages([b"a"] * 5, records, [1] * 5, ["t"] * 5, 0, None, 1 << 20)
    assert all(m.unreadable is None for m in got)
    assert [m.payload for m in got[:3]] == values[:3] and got[4].payload == 255
    deep, levels = got[3].payload, 0
    while type(deep) is list:
        deep, levels = deep[0], levels + 1
    assert levels == 1000


@pytest.mark.parametrize(
    ("record", "attempts"),
    [
        (b"lwz4k2hm,0,0," + _packed([{"order": 1, "user": "alice"}]), 1),
        (b"lwz4k2hm,0,0," + _packed(["x" * 2000]), 7),  # over the limit below: unreadable
        (b"lwz4k2hm,0,0,K5:alice" + b"c00a" + _packed([[1, 2]]), 1),  # a message group's
        (b"lwz4k2hm,0,0,K9:alice" + b"c00a" + _packed([1]), 1),  # its key header broken
        (b"lwz4k2hm,250,0," + _packed([1]), 2),  # delayed: readable's
        (b"lwz4k2hm,0,0," + _packed([1, "k", {"h": 1}]), 1),  # headers: readable's
        (b"lwz4k2hm,0,0," + _packed([1]), -1),  # attempts out of range
        (b"1717428451738,0,0," + _packed([1]), 1),  # an older, decimal, enqueued time
    ],
)
def test_a_pop_reads_each_record_as_readable_does(record: bytes, attempts: int) -> None:
    """The common record is read inline (delivered.messages), the rest by readable():
    each to the same message, its times, token and lease included."""
    [popped] = delivered.messages([b"id"], [record], [attempts], ["t"], 3, "l", 1000)
    shown = codec.readable("id", record, 3, attempts, "t", "l", 1000)
    assert repr(vars(popped)) == repr(vars(shown))
