"""Row -> message conversion and the picklable settings of the Spark sinks (no Spark, no
server)."""

from __future__ import annotations

import datetime as dt
import pickle
import re
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
from dynoq.spark.types import converters, plan
from dynoq.spark.writer import RowWriter

UTC = dt.timezone.utc


def never() -> float:
    raise AssertionError("server time asked for without a timestamp delay")


def test_plain_makes_values_msgpack_safe() -> None:
    aware = dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    naive = dt.datetime(2024, 5, 1, 12, 0, 0)
    row = {
        "ts": aware,
        "naive": naive,
        "day": dt.date(2024, 5, 1),
        "price": Decimal("12.30"),
        "dur": dt.timedelta(seconds=90),
        "blob": bytearray(b"\x00\x01"),
        "nested": {"xs": (1, 2), "t": dt.time(8, 30)},
        "n": None,
    }
    out = plain(row)
    assert out == {
        "ts": "2024-05-01T10:00:00.123000+00:00",
        "naive": naive.astimezone(UTC).isoformat(),
        "day": "2024-05-01",
        "price": "12.30",
        "dur": 90.0,
        "blob": b"\x00\x01",
        "nested": {"xs": [1, 2], "t": "08:30:00"},
        "n": None,
    }
    msgpack.packb(out, use_bin_type=True)


def test_decimals_are_plain_digits_with_exactly_their_scale() -> None:
    """The same number comes with other exponents from Arrow and from Rows: its stored
    text is one, plain digits with exactly the column's scale (by Python type, without a
    schema: with the value's own); a value with more decimals than its scale is refused
    with its row, never rounded."""
    T = pytest.importorskip("pyspark.sql.types")
    fields = [
        ("zero", T.DecimalType(38, 18)),
        ("tiny", T.DecimalType(20, 10)),
        ("neg", T.DecimalType(20, 10)),
        ("big", T.DecimalType(38, 0)),
    ]
    conv = converters(
        plan(
            _schema(
                [T.StructField("id", T.StringType())] + [T.StructField(n, t) for n, t in fields]
            ),
            [n for n, _ in fields],
            id_col="id",
        )
    )
    digits = "12345678901234567890123456789012345678"  # 38
    want = {
        "zero": "0.000000000000000000",
        "tiny": "0.0000001000",
        "neg": "-0.0000000001",
        "big": digits,
    }
    for given in (
        {
            "zero": Decimal("0E-18"),
            "tiny": Decimal("1.000E-7"),
            "neg": Decimal("-1E-10"),
            "big": Decimal(f"{digits[0]}.{digits[1:]}E+37"),
        },
        {
            "zero": Decimal("-0"),
            "tiny": Decimal("0.0000001"),
            "neg": Decimal("-1.00E-10"),
            "big": Decimal(digits),
        },
    ):
        assert {c: f(given[c]) for c, f in conv.items() if f is not None} == want
    assert plain({"a": Decimal("0E-18"), "b": Decimal("1.000E-7"), "c": Decimal("-0.0")}) == {
        "a": "0.000000000000000000",
        "b": "0.0000001000",
        "c": "0.0",
    }
    made = to_messages(
        RowSpec.of("id"),
        [{"id": "r", "tiny": Decimal("1E-11")}],
        never,
        plan=plan(
            _schema(
                [T.StructField("id", T.StringType()), T.StructField("tiny", T.DecimalType(20, 10))]
            ),
            ["tiny"],
            id_col="id",
        ),
    )
    assert not made.messages and "cannot be stored" in made.rejected[0].reason


def messages(
    spec: RowSpec, rows: list[dict[str, Any]], now: Any = never, **options: Any
) -> list[dynoq.Message]:
    made = to_messages(spec, rows, now, **options)
    assert not made.rejected, made.rejected
    return [m for _, m in made.messages]


def test_to_messages_maps_columns() -> None:
    spec = RowSpec.of("id", key_col="k", priority_col="p", payload_cols=["a"])
    [m] = messages(spec, [{"id": 7, "k": "cust", "p": 3, "a": Decimal("1.5"), "b": 1}])
    assert (m.id, m.key, m.priority, m.delay, m.payload) == ("7", "cust", 3, 0.0, {"a": "1.5"})


def test_delay_seconds_and_timestamps_use_the_server_clock() -> None:
    spec = RowSpec.of("id", delay_col="d")
    now = 1_700_000_000.0
    calls: list[int] = []

    def server_now() -> float:
        calls.append(1)
        return now

    rows: list[dict[str, Any]] = [
        {"id": "a", "d": 2.5},
        {"id": "b", "d": 0},
        {"id": "c", "d": Decimal("1")},
        {"id": "e", "d": dt.datetime.fromtimestamp(now + 30, UTC)},
        {"id": "f", "d": dt.datetime.fromtimestamp(now - 30, UTC)},  # overdue: due now
        {"id": "g", "d": dt.datetime.fromtimestamp(now + 10)},  # naive = local time
        {"id": "h", "d": dt.timedelta(minutes=2)},  # a day-time interval
    ]
    delays = [m.delay for m in messages(spec, rows, server_now)]
    assert delays == pytest.approx([2.5, 0.0, 1.0, 30.0, 0.0, 10.0, 120.0])
    assert len(calls) == 1  # once per batch, not per row


def test_an_expiry_column_gives_each_message_its_expiry() -> None:
    spec = RowSpec.of("id", expires_col="x")
    rows: list[dict[str, Any]] = [
        {"id": "a", "x": 2.5},
        {"id": "b", "x": None},  # null: no expiry
        {"id": "c", "x": Decimal("60")},
        {"id": "d", "x": dt.timedelta(minutes=2)},  # a day-time interval
    ]
    assert [m.expires for m in messages(spec, rows)] == [2.5, None, 60.0, 120.0]
    for bad, text in (
        (0, "the expiry is 0"),
        (-1, "the expiry is -1"),
        (float("inf"), "the expiry is inf"),
        ("soon", "the expiry is a str"),
        (True, "the expiry is a bool"),
    ):
        made = to_messages(spec, [{"id": "r", "x": bad}], lambda: 0.0)
        [refused] = made.rejected
        assert refused.column == "x" and text in refused.reason
    with pytest.raises(dynoq.InvalidType, match="expires column 'x'"):
        plan(
            {"fields": [{"name": "id", "type": "string"}, {"name": "x", "type": "string"}]},
            ["id"],
            id_col="id",
            expires_col="x",
        )


@pytest.mark.parametrize(
    ("row", "column", "text"),
    [
        ({"id": None}, "id", "the id is null"),
        ({"id": ""}, "id", "the id is empty"),
        ({"id": "  "}, "id", "the id is empty"),
        ({"id": 1.5}, "id", "the id is a float"),
        ({"id": True}, "id", "the id is a bool"),
        ({"id": "x" * 513}, "id", "at most 512"),
        ({"id": "r", "k": None}, "k", "the key is null: an ordered queue"),
        ({"id": "r", "d": None}, "d", "the delay is null"),
        ({"id": "r", "d": float("nan")}, "d", "the delay is nan"),
        ({"id": "r", "d": float("inf")}, "d", "the delay is inf"),
        ({"id": "r", "d": -1}, "d", "the delay is -1"),
        ({"id": "r", "d": Decimal("NaN")}, "d", "the delay is NaN"),
        ({"id": "r", "d": Decimal("sNaN")}, "d", "the delay is sNaN"),
        ({"id": "r", "d": Decimal("Infinity")}, "d", "the delay is Infinity"),
        ({"id": "r", "d": Decimal("-Infinity")}, "d", "the delay is -Infinity"),
        ({"id": "r", "d": "soon"}, "d", "the delay is a str"),
        ({"id": "r", "p": 100}, "p", "the priority is 100: priorities are 0..99"),
        ({"id": "r", "p": 1.5}, "p", "the priority is a float"),
    ],
)
def test_a_bad_row_is_refused_with_its_position_and_column(
    row: dict[str, Any], column: str, text: str
) -> None:
    """A row that makes no valid message is refused, with where and why; the others are
    made (the same in every writer: they all run this)."""
    spec = RowSpec.of(
        "id",
        key_col="k" if "k" in row else None,
        delay_col="d" if "d" in row else None,
        priority_col="p" if "p" in row else None,
    )
    good = {"id": "ok-1", "k": "key", "d": 0, "p": 5}
    rows = [{c: good[c] for c in row}, row, {**{c: good[c] for c in row}, "id": "ok-2"}]
    made = to_messages(spec, rows, never, ordered=True, start=700)
    assert [(i, m.id) for i, m in made.messages] == [(700, "ok-1"), (702, "ok-2")]
    [bad] = made.rejected
    assert (bad.row, bad.column) == (701, column) and text in bad.reason
    assert str(bad).startswith(f"row 701, column {column!r}: ")


def test_a_null_key_is_fine_on_a_queue_that_is_not_ordered() -> None:
    spec = RowSpec.of("id", key_col="k")
    made = to_messages(spec, [{"id": 1, "k": None}], never, ordered=False)
    assert not made.rejected and made.messages[0][1].key is None


def test_missing_columns_are_named() -> None:
    with pytest.raises(dynoq.InvalidArgument, match="id_col names column 'event_id'"):
        to_messages(RowSpec.of("event_id"), [{"id": 1}], never)
    with pytest.raises(dynoq.InvalidArgument, match="payload_cols names column 'x'"):
        to_messages(RowSpec.of("id", payload_cols=["x"]), [{"id": 1}], never)


def test_bad_specs() -> None:
    with pytest.raises(dynoq.InvalidType):
        RowSpec.of("")
    with pytest.raises(dynoq.InvalidType):
        RowSpec.of("id", payload_cols="a,b")


def test_repeated_id_keeps_its_first_row_and_counts_the_rest() -> None:
    made = to_messages(
        RowSpec.of("id"),
        [{"id": 1, "v": "a"}, {"id": 1, "v": "b"}, {"id": 2, "v": "c"}, {"id": 1, "v": "d"}],
        never,
    )
    assert [m.payload["v"] for _, m in made.messages] == ["a", "c"]
    assert made.repeated == 2 and not made.rejected


class _Struct(tuple):  # what pyspark gives for a struct value: a Row, a tuple with asDict
    def asDict(self) -> dict[str, Any]:
        return {"x": self[0]}


def test_a_map_keyed_by_structs_is_refused_naming_its_column() -> None:
    """Without a schema (partition_sink(schema=None)) the row is refused in the task; with
    one, on the driver (test_types_without_a_payload_form_are_refused_naming_the_column)."""
    rows = [
        {"id": 1, "ok": {"a": 1}, "m": {"k": 1}},
        {"id": 2, "ok": {"b": 2}, "m": {_Struct((1,)): "one"}},
    ]
    made = to_messages(RowSpec.of("id"), rows, never)
    assert [m.id for _, m in made.messages] == ["1"]
    [bad] = made.rejected
    assert (bad.row, bad.column) == (1, "m") and "a map keyed by structs" in bad.reason
    # A struct as a value, and keys of other kinds, are fine.
    [m] = messages(RowSpec.of("id"), [{"id": 3, "m": {1: _Struct((2,)), b"k": None}}])
    assert m.payload == {"id": 3, "m": {1: {"x": 2}, b"k": None}}


def test_sink_settings_are_picklable_and_hide_secrets() -> None:
    target = Target.of(
        "redis://u:pw-secret@h:6379/0",
        "q",
        {"prefix": "p", "ssl_ca_certs": "/ca.pem", "password": "pw-secret"},
    )
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
    code = (
        "import sys; sys.modules['pyspark'] = None; sys.modules['pyarrow'] = None\n"
        "import dynoq.spark, dynoq.spark.export, dynoq.cli.demo\n"
        "assert 'pyspark' not in [m for m in sys.modules if sys.modules[m]]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_export_json_of_payloads() -> None:
    assert to_json({"b": b"\x00", "a": [1, None]}) == '{"a": [1, null], "b": {"$base64": "AA=="}}'
    # Every valid payload exports: bytes keys, and keys of mixed types (sorted as text).
    assert to_json({b"k": 1, 2: "two", "a": [{b"\x00": b"\x01"}]}) == (
        '{"$base64:aw==": 1, "2": "two", "a": [{"$base64:AA==": {"$base64": "AQ=="}}]}'
    )
    assert to_json(None) is None


# -- Spark types: checked on the driver, converted by type on the executors -----------------


def _schema(ddl_fields: list[Any]) -> dict[str, Any]:
    from pyspark.sql import types as T

    return T.StructType(ddl_fields).jsonValue()  # type: ignore[no-any-return]


def test_types_without_a_payload_form_are_refused_naming_the_column() -> None:
    T = pytest.importorskip("pyspark.sql.types")
    key = T.StructType([T.StructField("a", T.IntegerType())])
    cases = [
        (T.MapType(key, T.StringType()), "column 'c' is a map keyed by struct"),
        (T.MapType(T.ArrayType(T.IntegerType()), T.StringType()), "keyed by array"),
        (T.ArrayType(T.MapType(key, T.LongType())), "column 'c' (at c[]) is a map keyed"),
        (T.StructType([T.StructField("m", T.MapType(key, T.LongType()))]), "(at c.m)"),
        (T.VariantType(), "column 'c' is variant, which has no payload form"),
        (T.YearMonthIntervalType(), "interval year to month, which has no payload"),
        (T.CalendarIntervalType(), "column 'c' is interval, which has no payload form"),
    ]
    for t, text in cases:
        schema = _schema([T.StructField("id", T.StringType()), T.StructField("c", t)])
        with pytest.raises(dynoq.InvalidType, match=re.escape(text)):
            plan(schema, ["id", "c"], id_col="id")
        plan(schema, ["id"], id_col="id")  # a column left out of the payload is fine


@pytest.mark.parametrize(
    ("role", "spark_type", "text"),
    [
        ("id", "binary", "id column 'x' is binary: ids are strings or integers"),
        ("id", "double", "id column 'x' is double"),
        ("key", "double", "key column 'x' is double: keys are strings or integers"),
        ("delay", "string", "delay column 'x' is string: a delay is seconds"),
        ("delay", "date", "delay column 'x' is date"),
        ("delay", "timestamp_ntz", "a timestamp without time zone is no instant"),
        ("priority", "double", "priority column 'x' is double: priorities are integers"),
    ],
)
def test_routing_columns_of_the_wrong_type_are_refused(
    role: str, spark_type: str, text: str
) -> None:
    T = pytest.importorskip("pyspark.sql.types")
    t = T._parse_datatype_json_value(spark_type)
    schema = _schema([T.StructField("id", T.StringType()), T.StructField("x", t)])
    cols = {"id_col": "x" if role == "id" else "id", f"{role}_col": "x"}
    with pytest.raises(dynoq.InvalidType, match=re.escape(text)):
        plan(schema, ["id"], **cols)


def test_delay_and_routing_types_that_work() -> None:
    T = pytest.importorskip("pyspark.sql.types")
    for t in (
        T.LongType(),
        T.DecimalType(10, 3),
        T.DoubleType(),
        T.TimestampType(),
        T.DayTimeIntervalType(),
    ):
        schema = _schema(
            [
                T.StructField("id", T.LongType()),
                T.StructField("k", T.StringType()),
                T.StructField("p", T.ShortType()),
                T.StructField("d", t),
            ]
        )
        got = plan(schema, ["id", "d"], id_col="id", key_col="k", delay_col="d", priority_col="p")
        assert [c for c, _ in got.columns] == ["id", "d"]


def test_every_type_converts_the_same_from_rows_and_from_arrow() -> None:
    """A Row writer hands over naive local timestamps, dicts and Rows; Arrow aware
    timestamps, lists of pairs and dicts: the stored value is the same."""
    T = pytest.importorskip("pyspark.sql.types")
    from pyspark.sql import Row

    inner = T.StructType(
        [T.StructField("n", T.IntegerType()), T.StructField("at", T.TimestampType())]
    )
    fields = [
        ("s", T.StringType()),
        ("b", T.BinaryType()),
        ("dec", T.DecimalType(6, 2)),
        ("day", T.DateType()),
        ("ts", T.TimestampType()),
        ("ntz", T.TimestampNTZType()),
        ("dur", T.DayTimeIntervalType()),
        ("f", T.DoubleType()),
        ("m", T.MapType(T.DateType(), T.ArrayType(inner))),
        ("st", inner),
        ("none", T.NullType()),
    ]
    p = plan(_schema([T.StructField(n, t) for n, t in fields]), [n for n, _ in fields], id_col="s")
    conv = converters(p)
    instant = dt.datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=UTC)
    local = instant.astimezone().replace(tzinfo=None)  # what a Row holds
    wall = dt.datetime(2024, 5, 1, 12, 0)
    day = dt.date(2024, 5, 1)
    as_row = {
        "s": "x",
        "b": bytearray(b"\x00\x01"),
        "dec": Decimal("1.50"),
        "day": day,
        "ts": local,
        "ntz": wall,
        "dur": dt.timedelta(seconds=90.5),
        "f": 0.5,
        "m": {day: [Row(n=1, at=local), None]},
        "st": Row(n=None, at=None),
        "none": None,
    }
    as_arrow = {
        **as_row,
        "b": b"\x00\x01",
        "ts": instant,
        "m": [(day, [{"n": 1, "at": instant}, None])],
        "st": {"n": None, "at": None},
    }
    want = {
        "s": "x",
        "b": b"\x00\x01",
        "dec": "1.50",
        "day": "2024-05-01",
        "ts": "2024-05-01T10:00:00.250000+00:00",
        "ntz": "2024-05-01T12:00:00",
        "dur": 90.5,
        "f": 0.5,
        "m": {"2024-05-01": [{"n": 1, "at": "2024-05-01T10:00:00.250000+00:00"}, None]},
        "st": {"n": None, "at": None},
        "none": None,
    }
    for row in (as_row, as_arrow):
        got = {c: row[c] if f is None else f(row[c]) for c, f in conv.items()}
        assert got == want
        assert msgpack.unpackb(msgpack.packb(got, use_bin_type=True), raw=False) == want
    assert pickle.loads(pickle.dumps(p)) == p  # travels to the executors
