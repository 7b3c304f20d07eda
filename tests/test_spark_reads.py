"""Typed reads: ``spark.read.format("dynoq").schema(...)`` decodes payloads with the exact
inverse of the writers' forms (dynoq/spark/decode.py, inverse.py, metadata.py). The
decoders without Spark first, then real Spark and a real server (fixtures:
tests/sparkkit.py)."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import pickle
import re
from decimal import Decimal
from typing import Any

import pytest
from sparkframes import EVERY_TYPE, WRITERS, write_with

import dynoq
from dynoq._core.scan import Found
from dynoq.errors import PayloadMismatch
from dynoq.message import Failure
from dynoq.spark import decode, export, inverse, metadata, source_options, types
from dynoq.spark.export import COLUMNS, SCHEMA

UTC = dt.timezone.utc


def roundtrip(t: Any, value: Any) -> Any:
    """``value`` stored as the writers store type ``t``, and read back."""
    stored = (types.converter(t) or (lambda v: v))(value)
    return inverse.decoder(t, "c")(stored)


# -- the decoders, without Spark ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "value"),
    [
        ("string", "ünï€ødé 🎉"),
        ("string", ""),
        ("boolean", False),
        ("byte", -128),
        ("short", 32767),
        ("integer", -(2**31)),
        ("long", 2**63 - 1),
        ("float", 1.5),
        ("double", -0.0),
        ("double", math.inf),
        ("decimal(10,2)", Decimal("12.30")),
        ("decimal(10,2)", Decimal("-99999999.99")),
        ("decimal(38,18)", Decimal("0E-18")),
        ("decimal(38,18)", Decimal("-12345678901234567890.123456789012345678")),
        ("decimal(20,10)", Decimal("-1.00E-10")),
        ("decimal(38,0)", Decimal("12345678901234567890123456789012345678")),
        ("decimal(38,18)", Decimal("99999999999999999999.999999999999999999")),
        ("decimal(5,5)", Decimal("0.00001")),
        ("binary", b""),
        ("binary", b"\x00\xff"),
        ("date", dt.date(1, 1, 1)),
        ("date", dt.date(9999, 12, 31)),
        (
            "timestamp",
            dt.datetime(2024, 3, 31, 2, 30, 0, 123456, dt.timezone(dt.timedelta(hours=5.5))),
        ),
        ("timestamp", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, UTC)),
        ("timestamp_ntz", dt.datetime(9999, 12, 31, 23, 59, 59, 999999)),
        ("time(6)", dt.time(23, 59, 59, 999999)),
        ("interval day to second", dt.timedelta(days=-3, seconds=14706, microseconds=789000)),
        ("interval hour to minute", dt.timedelta(hours=5, minutes=7)),
        ("interval day", dt.timedelta(days=1000)),
        ({"type": "array", "elementType": "integer", "containsNull": True}, [1, None]),
        ({"type": "array", "elementType": "integer", "containsNull": True}, []),
        (
            {
                "type": "map",
                "keyType": "date",
                "valueType": "decimal(4,1)",
                "valueContainsNull": True,
            },
            {dt.date(2024, 5, 1): Decimal("1.5"), dt.date(2024, 5, 2): None},
        ),
        (
            {"type": "map", "keyType": "binary", "valueType": "string", "valueContainsNull": True},
            {},
        ),
        (
            {
                "type": "map",
                "keyType": "decimal(4,2)",
                "valueType": "long",
                "valueContainsNull": True,
            },
            {Decimal("0.10"): 1},
        ),
        (
            {
                "type": "struct",
                "fields": [
                    {"name": "n", "type": "integer", "nullable": False},
                    {
                        "name": "xs",
                        "type": {"type": "array", "elementType": "timestamp", "containsNull": True},
                        "nullable": True,
                    },
                ],
            },
            {"n": 1, "xs": [dt.datetime(1970, 1, 1, tzinfo=UTC), None]},
        ),
    ],
)
def test_a_value_stored_by_its_type_reads_back_as_it_was(t: Any, value: Any) -> None:
    """Each type's decoder is the inverse of its writers' converter (types.py): Python
    values in, the payload form, the same values out."""
    back = roundtrip(t, value)
    assert back == value and type(back) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, back) == math.copysign(1, value)  # -0.0 stays -0.0
    if isinstance(value, Decimal):
        assert back.as_tuple().exponent == -int(t.split(",")[1].rstrip(")"))  # its scale


def test_nan_and_nulls_read_back() -> None:
    assert math.isnan(roundtrip("float", math.nan))
    for t in (
        "string",
        "decimal(10,2)",
        "timestamp",
        "void",
        {"type": "array", "elementType": "integer"},
    ):
        assert roundtrip(t, None) is None


def test_every_atomic_kind_has_a_decoder() -> None:
    """Every type a writer stores is one a typed read decodes (one classifier,
    types.atomic_kind, for both directions)."""
    names = {
        "string": "string",
        "integral": "long",
        "fractional": "double",
        "decimal": "decimal(3,1)",
        "time": "time(6)",
        "interval": "interval minute to second",
    }
    for kind in types.KINDS:
        t = names.get(kind, kind)
        assert types.atomic_kind(t) == kind
        inverse.decoder(t, "c")(None)


@pytest.mark.parametrize(
    ("t", "stored", "reason"),
    [
        ("string", 5, "is a int, not a str (string)"),
        ("boolean", 1, "is a int, not a bool"),
        ("integer", True, "is a bool, not an integer (integer)"),
        ("integer", 1.0, "is a float, not an integer"),
        ("byte", 128, "out of the range of byte"),
        ("long", 2**63, "out of the range of long"),
        ("float", 1e39, "out of the range of float"),
        ("double", "1.5", "is a str, not a number (double)"),
        ("decimal(4,2)", "1.234", "more decimals than a decimal(4,2) holds"),
        ("decimal(4,2)", "123.4", "more digits than a decimal(4,2) holds"),
        ("decimal(4,2)", "NaN", "which a decimal(4,2) cannot hold"),
        ("decimal(4,2)", "abc", "is a str that is no number"),
        ("decimal(4,2)", 1.5, "is a float, not a decimal(4,2)"),
        ("binary", "AAE=", "is a str, not bytes"),
        ("date", "2024-13-01", "is a str that is not a date"),
        ("timestamp", "2024-05-01T10:00:00", "has no UTC offset"),
        ("timestamp", "0001-01-01T00:00:00+05:00", "is a str that is not a timestamp"),
        ("timestamp_ntz", "2024-05-01T10:00:00+00:00", "has a UTC offset"),
        ("time(6)", 3600, "is a int, not a time"),
        ("interval day to second", math.nan, "which no day-time interval holds"),
        ("interval day to second", "90", "is a str, not seconds"),
        ("void", 0, "a void column holds only nulls"),
        (
            {"type": "array", "elementType": "integer", "containsNull": False},
            [1, None],
            "c[] is null",
        ),
        ({"type": "array", "elementType": "integer"}, {"a": 1}, "is a dict, not a list"),
        (
            {"type": "map", "keyType": "integer", "valueType": "string"},
            {"1": "x"},
            "c (a key) is a str",
        ),
        (
            {"type": "struct", "fields": [{"name": "n", "type": "integer", "nullable": False}]},
            {"m": 1},
            "c.n is null, and the schema says NOT NULL",
        ),
    ],
)
def test_a_value_of_another_form_is_a_misfit_naming_where(t: Any, stored: Any, reason: str) -> None:
    with pytest.raises(inverse.Misfit) as info:
        inverse.decoder(t, "c")(stored)
    assert reason in str(info.value)


def _schema(ddl: str) -> dict[str, Any]:
    """A StructType's jsonValue() from "name type, ..." with atomic types (no Spark)."""
    fields = []
    for part in ddl.split(", "):
        name, t = part.split(" ", 1)
        fields.append({"name": name, "type": t, "nullable": True, "metadata": {}})
    return {"type": "struct", "fields": fields}


def _found(payload: Any, msg_id: str = "m1", **fields: Any) -> Found:
    m = dynoq.Message(payload, id=msg_id, priority=3, key="k", headers={"h": "v"})
    m.shard, m.attempts, m.enqueued_at = 1, 2, 1714557600.25
    for name, value in fields.items():
        setattr(m, name, value)
    return Found(m, "dead", 1714557601.5)


META = {
    "type": "struct",
    "fields": [
        {"name": n, "type": t, "nullable": True}
        for n, t in (
            ("id", "string"),
            ("state", "string"),
            ("shard", "integer"),
            ("enqueued_at", "timestamp"),
            ("dead_at", "timestamp"),
            ("error", "string"),
            ("headers", {"type": "map", "keyType": "string", "valueType": "string"}),
        )
    ],
}


def test_rows_permissive_failfast_dropmalformed() -> None:
    schema = _schema("n long, when timestamp, _corrupt string")
    schema["fields"].insert(0, {"name": "_metadata", "type": META, "nullable": True})
    good = _found({"n": 1, "when": "2024-05-01T10:00:00+00:00", "extra": 1}, "good")
    good.message.failure = Failure("ValueError", "boom", "", "c1", 1.0, 1.0)
    bad = _found({"n": "one"}, "bad")
    missing = _found({}, "missing")
    flat = _found("just text", "flat")
    messages = [good, bad, missing, flat]

    cols = decode.rows_plan(schema).columns(messages)
    assert list(cols) == ["_metadata", "n", "when", "_corrupt"]
    assert cols["n"] == [1, None, None, None]  # a missing column is null, not a misfit
    assert cols["when"][0] == dt.datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert cols["_corrupt"] == [None, '{"n": "one"}', None, '"just text"']
    meta = cols["_metadata"][0]
    assert meta == {
        "id": "good",
        "state": "dead",
        "shard": 1,
        "enqueued_at": dt.datetime(2024, 5, 1, 10, 0, 0, 250000, tzinfo=UTC),
        "dead_at": dt.datetime(2024, 5, 1, 10, 0, 1, 500000, tzinfo=UTC),
        "error": "boom",
        "headers": {"h": "v"},
    }
    assert [m["id"] for m in cols["_metadata"]] == ["good", "bad", "missing", "flat"]

    dropped = decode.rows_plan(schema, mode="dropmalformed").columns(messages)
    assert [m["id"] for m in dropped["_metadata"]] == ["good", "missing"]

    with pytest.raises(
        PayloadMismatch,
        match=r"message 'bad' does not fit .*column 'n' is a str, not an integer \(long\)",
    ):
        decode.rows_plan(schema, mode="FAILFAST").columns(messages)
    with pytest.raises(PayloadMismatch, match=r"message 'flat' .*its payload is a str, not a dict"):
        decode.rows_plan(schema, mode="FAILFAST").columns([good, flat])

    renamed = _schema("n long, bad_rows string")
    got = decode.rows_plan(renamed, corrupt="bad_rows").columns([bad])
    assert got == {"n": [None], "bad_rows": ['{"n": "one"}']}
    # without a corrupt-record column the row is all nulls, as in Spark
    assert decode.rows_plan(_schema("n long")).columns([bad]) == {"n": [None]}


def test_a_not_null_column_has_no_null_row() -> None:
    """Spark would take a null in a NOT NULL column (as df.schema often has) for a crash
    in the JVM: such a misfit fails, saying what to do, in PERMISSIVE mode too."""
    schema = _schema("n long, s string")
    schema["fields"][0]["nullable"] = False
    plan = decode.rows_plan(schema)
    assert plan.columns([_found({"n": 1})]) == {"n": [1], "s": [None]}
    with pytest.raises(PayloadMismatch, match="column 'n' is null, and the schema says NOT NULL"):
        plan.columns([_found({"s": "x"})])
    with pytest.raises(
        PayloadMismatch, match="'n' are NOT NULL in the schema: fix the schema, make them nullable"
    ):
        plan.columns([_found({"n": "x"})])
    assert decode.rows_plan(schema, mode="DROPMALFORMED").columns([_found({"s": "x"})]) == {
        "n": [],
        "s": [],
    }


def test_popped_messages_and_unreadable_records() -> None:
    """The streaming source hands popped Messages (no scan state); a record that cannot
    be read is a misfit like any other."""
    schema = _schema("n long, _corrupt string")
    schema["fields"].append({"name": "_metadata", "type": META, "nullable": True})
    popped = dynoq.Message({"n": 7}, id="p")
    unreadable = dynoq.Message(None, id="u", unreadable="bad record")
    cols = decode.rows_plan(schema).columns([popped, unreadable])
    assert cols["n"] == [7, None] and cols["_corrupt"] == [None, "null"]
    assert cols["_metadata"][0]["state"] is None and cols["_metadata"][1]["id"] == "u"
    with pytest.raises(PayloadMismatch, match=r"message 'u' .*its payload cannot be read"):
        decode.rows_plan(schema, mode="FAILFAST").columns([unreadable])


@pytest.mark.parametrize(
    ("ddl_or_schema", "options", "error"),
    [
        (
            "ym interval year to month",
            {},
            "column 'ym' is interval year to month, which has no payload form",
        ),
        ("v variant", {}, "column 'v' is variant"),
        (
            {
                "type": "map",
                "keyType": {"type": "array", "elementType": "integer"},
                "valueType": "string",
            },
            {},
            "column 'c' is a map keyed by array",
        ),
        ("s varchar(3)", {}, "column 's' is (or holds) varchar(3), which PySpark cannot read"),
        ("_corrupt long", {}, "column '_corrupt' holds the JSON text of payloads"),
        ("bad long", {"columnnameofcorruptrecord": "bad"}, "column 'bad' holds the JSON text"),
        ("_metadata string", {}, "column '_metadata' is the message's metadata: a nullable struct"),
        ("n long", {"mode": "LENIENT"}, "option \"mode\" is 'LENIENT': choose from PERMISSIVE"),
    ],
)
def test_a_schema_no_writer_stores_is_refused_naming_the_column(
    ddl_or_schema: Any, options: dict[str, str], error: str
) -> None:
    if isinstance(ddl_or_schema, str):
        schema = _schema(ddl_or_schema)
    else:
        schema = {
            "type": "struct",
            "fields": [{"name": "c", "type": ddl_or_schema, "nullable": True}],
        }
    with pytest.raises((dynoq.InvalidType, dynoq.InvalidArgument)) as info:
        decode.read_plan(schema, options)
    assert error in str(info.value)


def test_metadata_fields_are_the_export_columns_and_checked() -> None:
    assert set(metadata.META_TYPES) | {"payload"} == set(COLUMNS)
    for fields, error in (
        ([("offset", "long")], "_metadata.offset is no metadata field: choose from id, state"),
        ([("shard", "long")], "_metadata.shard is long: declare it integer"),
    ):
        meta = {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True} for n, t in fields],
        }
        schema = {
            "type": "struct",
            "fields": [{"name": "_metadata", "type": meta, "nullable": True}],
        }
        with pytest.raises((dynoq.InvalidType, dynoq.InvalidArgument), match=re.escape(error)):
            decode.rows_plan(schema)


def test_the_export_schema_reads_as_json_text_and_refuses_typed_options() -> None:
    export = {
        "type": "struct",
        "fields": [
            {"name": c.split()[0], "type": {"int": "integer"}.get(c.split()[1], c.split()[1])}
            for c in SCHEMA.split(", ")
        ],
    }
    assert decode.read_plan(export, {"states": "ready"}) is None
    with pytest.raises(dynoq.InvalidArgument, match=r"\['mode'\] apply to typed reads"):
        decode.read_plan(export, {"mode": "FAILFAST"})


def test_a_deep_payload_costs_what_the_schema_nests() -> None:
    """Decoders recurse only where the schema nests: a payload nested 1,000 levels deep
    (as deep as msgpack stores, past what json encodes) is a misfit of a flat column,
    read PERMISSIVE with its JSON text cut where the JSON views cut it (the export's
    JSON text too), without a RecursionError."""
    deep: Any = "x"
    for _ in range(1000):
        deep = [deep]
    assert export.to_json({"n": deep}).startswith('{"n": [[[')
    plan = decode.rows_plan(_schema("n long, _corrupt string"))
    cols = plan.columns([_found({"n": deep})])
    assert cols["n"] == [None] and cols["_corrupt"][0].startswith('{"n": [[[')
    with pytest.raises(PayloadMismatch, match="column 'n' is a list, not an integer"):
        decode.rows_plan(_schema("n long"), mode="FAILFAST").columns([_found({"n": deep})])


def test_a_plan_is_picklable_and_its_decoders_are_built_once() -> None:
    plan = decode.rows_plan(json.dumps(_schema("n long, d date")))
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan and decode.compiled(again) is decode.compiled(plan)
    assert plan.names == ("n", "d")


# -- real Spark: every writer, read back typed --------------------------------------------------

# Edge values in the columns of EVERY_TYPE (rows e1, e2; cast to its columns' types).
EDGES = {
    "id": ("'e1'", "'e2'"),
    "i8": ("-128", "127"),
    "i16": ("-32768", "32767"),
    "i32": ("-2147483648", "2147483647"),
    "i64": ("-9223372036854775808", "9223372036854775807"),
    "f32": ("'NaN'", "'-Infinity'"),
    "f64": ("-0.0D", "'Infinity'"),
    "dec": ("'-99999999.99'", "'0.01'"),
    "s": ("'ünï€ødé 🎉 \"q\"'", "''"),
    "bin": ("X''", "X'FF00'"),
    "flag": ("false", "true"),
    "day": ("DATE'0001-01-01'", "DATE'9999-12-31'"),
    "ts": (
        "TIMESTAMP'2024-03-31 02:30:00.123456+05:30'",
        "TIMESTAMP'1969-12-31 15:59:59.999999-08:00'",
    ),
    "ntz": ("TIMESTAMP_NTZ'9999-12-31 23:59:59.999999'", "TIMESTAMP_NTZ'0001-01-01 00:00:00'"),
    "dur": (
        "INTERVAL '-3 04:05:06.789' DAY TO SECOND",
        "INTERVAL '1000 0:0:0.000001' DAY TO SECOND",
    ),
    "arr": ("array()", "array(NULL)"),
    "m": ("map()", "map('ключ', NULL)"),
    "st": ("named_struct('n', NULL, 'due', map())", "NULL"),
    "nested": ("array()", "array(map(), NULL, map('', named_struct('t', NULL)))"),
    "nothing": ("NULL", "NULL"),
    "zero": (
        "'-12345678901234567890.123456789012345678'",
        "'99999999999999999999.999999999999999999'",
    ),
    "tiny": ("'9999999999.9999999999'", "'-0.0'"),
    "negative": ("'0.0000000001'", "NULL"),
}
# Types EVERY_TYPE has no column of: (type, value in r1, e1, e2; r2 is null).
MORE = {
    "clock": ("time(6)", "TIME'08:30:00.123456'", "TIME'23:59:59.999999'", "TIME'00:00:00'"),
    "hm": (
        "interval hour to minute",
        "INTERVAL '5:07' HOUR TO MINUTE",
        "INTERVAL '-0:01' HOUR TO MINUTE",
        "NULL",
    ),
    "days": ("interval day", "INTERVAL '1000' DAY", "INTERVAL '-1' DAY", "NULL"),
    "d38": ("decimal(38,0)", "'12345678901234567890123456789012345678'", "'-1'", "'0'"),
    "frac": ("decimal(5,5)", "'0.00001'", "'-0.99999'", "NULL"),
    "words": ("array<string>", "array('a', '', NULL)", "array('日本語')", "NULL"),
    "by_day": ("map<date, decimal(4,1)>", "map(DATE'2024-05-01', 1.5)", "map()", "NULL"),
}


def every_type_frame(spark: Any) -> Any:
    """EVERY_TYPE (the writers' frame) with two rows of edge values and columns of the
    types it lacks: nulls, NaN, -0.0, infinities, empty arrays and maps, nested structs,
    unicode, decimals of several scales, timestamps in several zones."""
    from pyspark.sql import functions as F

    base = spark.sql(EVERY_TYPE)
    edges = spark.sql(
        "SELECT * FROM VALUES "
        + ", ".join(
            "("
            + ", ".join(
                f"CAST({EDGES[f.name][row]} AS {f.dataType.simpleString()})" for f in base.schema
            )
            + ")"
            for row in range(2)
        )
        + f" AS t({', '.join(base.columns)})"
    )
    df = base.unionByName(edges)
    for name, (kind, r1, e1, e2) in MORE.items():
        value = f"CASE id WHEN 'r1' THEN {r1} WHEN 'e1' THEN {e1} WHEN 'e2' THEN {e2} END"
        df = df.withColumn(name, F.expr(f"CAST({value} AS {kind})"))
    return df.coalesce(1)  # 4 rows: one task a job


def comparable(df: Any) -> Any:
    """``df`` with every map (at any depth) as its sorted entries: Spark's set operations
    (exceptAll) refuse map columns."""
    from pyspark.sql import functions as F

    return df.select(
        *[F.expr(_comparable(f.dataType, f"`{f.name}`", 0)).alias(f.name) for f in df.schema]
    )


def _comparable(t: Any, x: str, depth: int) -> str:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if "map<" not in t.simpleString():
        return x
    v = f"v{depth}"
    if isinstance(t, MapType):
        key = _comparable(t.keyType, f"{v}.key", depth + 1)
        value = _comparable(t.valueType, f"{v}.value", depth + 1)
        entry = f"named_struct('k', {key}, 'v', {value})"
        return f"array_sort(transform(map_entries({x}), {v} -> {entry}))"
    if isinstance(t, ArrayType):
        return f"transform({x}, {v} -> {_comparable(t.elementType, v, depth + 1)})"
    assert isinstance(t, StructType)
    fields = ", ".join(
        f"'{f.name}', {_comparable(f.dataType, f'{x}.`{f.name}`', depth + 1)}" for f in t
    )
    return f"IF({x} IS NULL, NULL, named_struct({fields}))"


def _jobs(spark: Any) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup())


def typed_read(spark: Any, client: dynoq.Client, queue: str) -> Any:
    return spark.read.format("dynoq").options(**source_options(client, queue))


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_every_type_written_by_every_writer_reads_back_as_it_was(
    spark: Any, sclient: dynoq.Client
) -> None:
    """A frame of every storable type, written by each writer and read back with
    .schema(df.schema), is the frame: exceptAll both ways is empty (in a session whose
    time zone is not the Python workers'). Every writer writes into one queue (ids
    prefixed with the writer's name), read once."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    zone = spark.conf.get("spark.sql.session.timeZone")
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    spark.conf.set("spark.sql.timeType.enabled", "true")  # Spark 4.1+: off by default
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # 20 rows: one task a stage
    try:
        df = every_type_frame(spark)
        sclient.queue("typed", shards=2)
        frames = [df.withColumn("id", F.concat(F.lit(f"{how}:"), "id")) for how in WRITERS]
        for how, frame in zip(WRITERS, frames, strict=True):
            write_with(how, frame, sclient, "typed", id_col="id")
        back = comparable(typed_read(spark, sclient, "typed").schema(df.schema).load())
        want = comparable(functools.reduce(DataFrame.unionByName, frames))
        # both ways in one job (exceptAll keeps duplicates: equal multisets, counts too)
        extra = back.exceptAll(want).withColumn("side", F.lit("read, not written"))
        missing = want.exceptAll(back).withColumn("side", F.lit("written, not read"))
        assert extra.unionByName(missing).collect() == []
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
        spark.conf.unset("spark.sql.timeType.enabled")
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)


@pytest.mark.spark
def test_a_payload_that_does_not_fit_is_read_by_the_mode(spark: Any, sclient: dynoq.Client) -> None:
    """PERMISSIVE (default): a row of nulls with the payload's JSON text in _corrupt (or
    the column columnNameOfCorruptRecord names), _metadata filled; DROPMALFORMED leaves
    it out; FAILFAST fails the read naming the message and the column. The schema here
    is a DDL option."""
    q = sclient.queue("mixed", shards=2)
    q.push_many(
        [
            dynoq.Message(
                {"n": 1, "when": "2024-05-01T10:00:00+00:00"}, id="good", headers={"h": "v"}
            ),
            dynoq.Message({"n": "one", "when": None}, id="bad"),
        ]
    )
    meta = (
        "_metadata struct<id: string, state: string, shard: int, enqueued_at: timestamp, "
        "headers: map<string, string>>"
    )
    ddl = f"n long, when timestamp, _corrupt string, {meta}"
    rows = {
        r["_metadata"]["id"]: r
        for r in typed_read(spark, sclient, "mixed").option("schema", ddl).load().collect()
    }
    good, bad = rows["good"], rows["bad"]
    assert (good["n"], good["_corrupt"]) == (1, None)
    assert good["when"] == dt.datetime(
        2024, 5, 1, 10
    )  # a naive local (UTC here) time, as PySpark collects
    assert good["_metadata"]["state"] == "ready" and good["_metadata"]["headers"] == {"h": "v"}
    assert good["_metadata"]["shard"] == q.get("good").shard
    assert (bad["n"], bad["when"]) == (None, None)
    assert json.loads(bad["_corrupt"]) == {"n": "one", "when": None}

    renamed = (
        typed_read(spark, sclient, "mixed")
        .schema("n long, oops string")
        .option("columnNameOfCorruptRecord", "oops")
    )
    assert sorted(map(tuple, renamed.load().collect()), key=str) == [
        (1, None),
        (None, '{"n": "one", "when": null}'),
    ]
    dropped = typed_read(spark, sclient, "mixed").schema("n long").option("mode", "DROPMALFORMED")
    assert dropped.load().collect() == [(1,)]
    strict = typed_read(spark, sclient, "mixed").schema("n long").option("mode", "FAILFAST")
    with pytest.raises(
        Exception,
        match=r"PayloadMismatch: message 'bad' does not fit the read's schema: "
        r"column 'n' is a str, not an integer \(long\)",
    ):
        strict.load().collect()


@pytest.mark.spark
def test_a_schema_no_writer_stores_is_refused_on_the_driver(
    spark: Any, sclient: dynoq.Client
) -> None:
    """A column type no writer stores, a char/varchar, a corrupt-record column of another
    type, typed options without a schema: refused before any job runs, naming the column,
    through Spark (every refusal, without Spark: the unit tests above)."""
    sclient.queue("refused", shards=1)
    for schema, error in (
        ("n long, _corrupt int", "column '_corrupt' holds the JSON text of payloads"),
        ("s varchar(3)", "column 's' is (or holds) varchar(3)"),  # .schema() refuses it itself
    ):
        before = _jobs(spark)
        with pytest.raises(Exception, match=re.escape(error)):
            typed_read(spark, sclient, "refused").option("schema", schema).load().collect()
        assert _jobs(spark) == before, schema
    before = _jobs(spark)
    with pytest.raises(Exception, match="column 'ym' is interval year to month"):
        typed_read(spark, sclient, "refused").schema("ym interval year to month").load().collect()
    assert _jobs(spark) == before
    with pytest.raises(Exception, match=re.escape("option(s) ['mode'] apply to typed reads")):
        typed_read(spark, sclient, "refused").option("mode", "FAILFAST").load().collect()
