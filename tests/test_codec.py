"""Pure encoding and validation (no server)."""

from __future__ import annotations

import pytest

from dynoq._core import codec
from dynoq._core.keys import QueueKeys, shard_of
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
    s = QueueSettings(shards=3, ordered=True, unack_timeout=1.5, max_retries=0,
                      dedupe_window=10)
    assert QueueSettings.from_hash(s.to_hash()) == s
    assert merge(s, {"shards": 3, "ordered": None}, "q") is s
    with pytest.raises(ValueError, match="already exists"):
        merge(s, {"max_retries": 1}, "q")
