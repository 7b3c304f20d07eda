"""Row -> message conversion and the picklable settings of the Spark sinks (no Spark, no
server)."""

from __future__ import annotations

import datetime as dt
import pickle
import subprocess
import sys
import threading
from decimal import Decimal
from typing import Any

import msgpack
import pytest

import dynoq
from dynoq.spark import QueueSink, Target
from dynoq.spark.export import to_json
from dynoq.spark.rows import RowSpec, plain, to_messages
from dynoq.spark.writer import RowWriter

UTC = dt.timezone.utc


def never() -> float:
    raise AssertionError("server time asked for without a timestamp delay")


def test_plain_makes_values_msgpack_safe() -> None:
    aware = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    naive = dt.datetime(2024, 5, 1, 12, 0, 0)
    row = {"ts": aware, "naive": naive, "day": dt.date(2024, 5, 1), "price": Decimal("12.30"),
           "dur": dt.timedelta(seconds=90), "blob": bytearray(b"\x00\x01"),
           "nested": {"xs": (1, 2), "t": dt.time(8, 30)}, "n": None}
    out = plain(row)
    assert out == {"ts": "2024-05-01T10:00:00.123000+00:00",
                   "naive": naive.astimezone(UTC).isoformat(), "day": "2024-05-01",
                   "price": "12.30", "dur": 90.0, "blob": b"\x00\x01",
                   "nested": {"xs": [1, 2], "t": "08:30:00"}, "n": None}
    msgpack.packb(out, use_bin_type=True)


def test_to_messages_maps_columns() -> None:
    spec = RowSpec.of("id", key_col="k", priority_col="p", payload_cols=["a"])
    [m] = to_messages(spec, [{"id": 7, "k": "cust", "p": 3, "a": Decimal("1.5"), "b": 1}],
                      never)
    assert (m.id, m.key, m.priority, m.delay, m.payload) == ("7", "cust", 3, 0.0, {"a": "1.5"})


def test_delay_seconds_and_timestamps_use_the_server_clock() -> None:
    spec = RowSpec.of("id", delay_col="d")
    now = 1_700_000_000.0
    calls: list[int] = []

    def server_now() -> float:
        calls.append(1)
        return now

    rows: list[dict[str, Any]] = [
        {"id": "a", "d": 2.5}, {"id": "b", "d": None}, {"id": "c", "d": Decimal("1")},
        {"id": "e", "d": dt.datetime.fromtimestamp(now + 30, UTC)},
        {"id": "f", "d": dt.datetime.fromtimestamp(now - 30, UTC)},  # overdue: due now
        {"id": "g", "d": dt.datetime.fromtimestamp(now + 10)},  # naive = local time
    ]
    delays = [m.delay for m in to_messages(spec, rows, server_now)]
    assert delays == pytest.approx([2.5, 0.0, 1.0, 30.0, 0.0, 10.0])
    assert len(calls) == 1  # once per batch, not per row


@pytest.mark.parametrize(("value", "error", "text"), [
    (None, dynoq.InvalidArgument, "is null"),
    ("", dynoq.InvalidArgument, "is empty"),
    ("  ", dynoq.InvalidArgument, "is empty"),
    (1.5, dynoq.InvalidType, "holds a float"),
    (True, dynoq.InvalidType, "holds a bool"),
    ("x" * 513, dynoq.InvalidArgument, "at most 512"),
])
def test_bad_ids_fail_the_whole_batch(value: object, error: type[Exception],
                                      text: str) -> None:
    rows = [{"id": "ok-1"}, {"id": value}, {"id": "ok-2"}]
    with pytest.raises(error, match=text) as info:
        to_messages(RowSpec.of("id"), rows, never)
    assert "row 1 of this batch" in str(info.value) and "'id'" in str(info.value)


def test_missing_columns_are_named() -> None:
    with pytest.raises(dynoq.InvalidArgument, match="id_col names column 'event_id'"):
        to_messages(RowSpec.of("event_id"), [{"id": 1}], never)
    with pytest.raises(dynoq.InvalidArgument, match="payload_cols names column 'x'"):
        to_messages(RowSpec.of("id", payload_cols=["x"]), [{"id": 1}], never)


def test_bad_delays_and_specs() -> None:
    for bad in (-1, float("nan"), "soon"):
        with pytest.raises(dynoq.DynoqError, match="delay column 'd'"):
            to_messages(RowSpec.of("id", delay_col="d"), [{"id": 1, "d": bad}], never)
    with pytest.raises(dynoq.InvalidType):
        RowSpec.of("")
    with pytest.raises(dynoq.InvalidType):
        RowSpec.of("id", payload_cols="a,b")


@pytest.mark.parametrize("bad", [Decimal("sNaN"), Decimal("NaN"), Decimal("Infinity"),
                                 Decimal("-Infinity")])
def test_decimal_delays_that_are_no_seconds(bad: Decimal) -> None:
    with pytest.raises(dynoq.InvalidArgument, match="delay column 'd' holds Decimal") as info:
        to_messages(RowSpec.of("id", delay_col="d"), [{"id": 1, "d": bad}], never)
    assert "row 0 of this batch" in str(info.value)


class _Struct(tuple):  # what pyspark gives for a struct value: a Row, a tuple with asDict
    def asDict(self) -> dict[str, Any]:
        return {"x": self[0]}


def test_a_map_keyed_by_structs_is_refused_naming_its_column() -> None:
    rows = [{"id": 1, "ok": {"a": 1}, "m": {"k": 1}},
            {"id": 2, "ok": {"b": 2}, "m": {_Struct((1,)): "one"}}]
    with pytest.raises(dynoq.PayloadTypeError, match="column 'm' in row 1 of this batch: "
                       "a map keyed by structs") as info:
        to_messages(RowSpec.of("id"), rows, never)
    assert isinstance(info.value, TypeError)
    # A struct as a value, and keys of other kinds, are fine.
    [m] = to_messages(RowSpec.of("id"), [{"id": 3, "m": {1: _Struct((2,)), b"k": None}}],
                      never)
    assert m.payload == {"id": 3, "m": {1: {"x": 2}, b"k": None}}


def test_repeated_id_keeps_its_first_row() -> None:
    msgs = to_messages(RowSpec.of("id"), [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}], never)
    assert [m.payload["v"] for m in msgs] == ["a"]


def test_sink_settings_are_picklable_and_hide_secrets() -> None:
    target = Target.of("redis://u:pw-secret@h:6379/0", "q",
                       {"prefix": "p", "ssl_ca_certs": "/ca.pem", "password": "pw-secret"})
    writer = RowWriter(target, RowSpec.of("id"), batch_size=10)
    again = pickle.loads(pickle.dumps(QueueSink(writer)))
    assert again.writer == writer and again.writer.target.prefix == "p"
    assert again.writer.target.options == {"ssl_ca_certs": "/ca.pem", "password": "pw-secret"}
    shown = repr(again) + repr(target) + target.where
    assert "pw-secret" not in shown and "'password'" in shown  # names, never values
    opts = target.spark_options()
    assert Target.from_spark_options({k.upper(): v for k, v in opts.items()}) == target
    for url in ("embedded://", "memory://x"):
        with pytest.raises(dynoq.InvalidArgument, match="executors need a server"):
            Target.of(url, "q")
    with pytest.raises(dynoq.InvalidArgument, match="batch_size"):
        RowWriter(target, RowSpec.of("id"), batch_size=0)
    with pytest.raises(dynoq.InvalidArgument, match="cannot be sent to Spark executors"):
        Target.of("redis://h", "q", {"socket_keepalive_options": threading.Lock()})
    with pytest.raises(dynoq.InvalidArgument, match="not all plain JSON values"):
        Target.of("redis://h", "q", {"retry": object}).spark_options()


def test_a_wrapped_tls_client_keeps_its_auth_and_tls_options() -> None:
    import redis

    r = redis.Redis(host="h", port=6380, password="pw", ssl=True, ssl_ca_certs="/ca.pem")
    client = dynoq.Client(r, prefix="tenant")
    target = Target.of(client, "q")
    assert target.url == "rediss://h:6380/0" and target.prefix == "tenant"
    assert target.options["password"] == "pw" and target.options["ssl_ca_certs"] == "/ca.pem"
    assert "pw" not in repr(target).replace("'password'", "")


def test_spark_module_imports_without_pyspark() -> None:
    code = ("import sys; sys.modules['pyspark'] = None; sys.modules['pyarrow'] = None\n"
            "import dynoq.spark, dynoq.spark.export, dynoq.cli.demo\n"
            "assert 'pyspark' not in [m for m in sys.modules if sys.modules[m]]\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_export_json_of_payloads() -> None:
    assert to_json({"b": b"\x00", "a": [1, None]}) == '{"a": [1, null], "b": {"$base64": "AA=="}}'
    # Every valid payload exports: bytes keys, and keys of mixed types (sorted as text).
    assert to_json({b"k": 1, 2: "two", "a": [{b"\x00": b"\x01"}]}) == (
        '{"$base64:aw==": 1, "2": "two", "a": [{"$base64:AA==": {"$base64": "AQ=="}}]}')
    assert to_json(None) is None
