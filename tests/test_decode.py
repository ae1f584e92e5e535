"""decode_json and decode_debezium: typed good rows, every bad-record kind in `bad` with its payload."""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql import types as T

from icetide.decode import BAD_COLUMNS, decode_debezium, decode_json
from icetide.errors import ConfigError

KAFKA_POSITION = ["topic", "partition", "offset"]
MAY_1 = datetime.fromisoformat("2024-05-01T10:00:00+00:00")
MAY_1_MS = int(MAY_1.timestamp() * 1000)

ADS = T.StructType(
    [
        T.StructField("ad_id", T.LongType(), nullable=False),
        T.StructField("clicks", T.IntegerType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField("price", T.DecimalType(10, 2)),
        T.StructField("ok", T.BooleanType()),
        T.StructField("day", T.DateType()),
        T.StructField("name", T.StringType(), nullable=False),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("blob", T.BinaryType()),
    ]
)


def kafka_frame(spark: Any, values: list[str | None]) -> Any:
    rows = [("ads", 0, i, None if v is None else v.encode()) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "topic STRING, partition INT, offset BIGINT, value BINARY")


def epoch_ms(value: datetime) -> int:
    return round(value.timestamp() * 1000)  # collected timestamps are naive local time


def bad_rows(bad: Any) -> dict[str, tuple[str, str]]:
    """source_position -> (error, payload)"""
    assert tuple(bad.columns) == BAD_COLUMNS
    return {r.source_position: (r.error, r.payload) for r in bad.collect()}


# Payloads of every column type into ADS (tests/test_decoder_golden_conversions.py freezes them too).
TYPED_VALUES: list[str | None] = [
    json.dumps(
        {
            "ad_id": 1,
            "clicks": "12",
            "ts": "2024-05-01T12:00:00+02:00",
            "price": 1.5,
            "ok": True,
            "day": "2024-05-01",
            "name": "a",
            "tags": ["x", "y"],
            "blob": "aGk=",
            "unknown": {"ignored": 1},
        }
    ),
    json.dumps({"ad_id": "2", "clicks": 3, "ts": MAY_1_MS, "price": "2.345", "day": 19844, "name": 42}),
    json.dumps({"ad_id": 3, "_op": " delete"}),
    json.dumps({"ad_id": 4, "name": "n", "_op": "INSERT", "ts": "2024-05-01 10:00:00"}),
    None,  # a tombstone: skipped
]


def test_json_good_rows_are_typed(spark: Any) -> None:
    # ad 2 again as ad 5, its price with no digit beyond the column's scale but a zero
    exact = json.dumps({"ad_id": "5", "clicks": 3, "ts": MAY_1_MS, "price": "2.340", "day": 19844, "name": 42})
    values = [*TYPED_VALUES, exact]
    good, bad = decode_json(kafka_frame(spark, values), "value", ADS, ["ad_id"], "upsert", KAFKA_POSITION)
    assert [f.name for f in good.schema.fields] == [*ADS.names, "_op"]
    assert [f.dataType for f in good.schema.fields][: len(ADS.fields)] == [f.dataType for f in ADS.fields]
    # a DECIMAL is never rounded (issue 49): 2.345 into DECIMAL(10,2) is a dead letter
    assert bad_rows(bad) == {"ads/0@1": ("column price: '2.345' is not a DECIMAL(10,2)", TYPED_VALUES[1])}
    rows = {r.ad_id: r for r in good.collect()}
    assert sorted(rows) == [1, 3, 4, 5]
    one, two, three, four = rows[1], rows[5], rows[3], rows[4]
    assert (one.clicks, one.price, one.ok, one.day, one.name, one.tags, bytes(one.blob), one._op) == (
        12,
        Decimal("1.50"),
        True,
        date(2024, 5, 1),
        "a",
        ["x", "y"],
        b"hi",
        "UPSERT",
    )
    assert epoch_ms(one.ts) == MAY_1_MS  # the offset is honoured
    assert epoch_ms(two.ts) == MAY_1_MS  # integers are epoch milliseconds
    assert (two.clicks, two.price, two.day, two.name) == (3, Decimal("2.34"), date(2024, 5, 1), "42")
    assert (three._op, three.name) == ("DELETE", None)  # a delete needs only its key
    assert four._op == "INSERT" and epoch_ms(four.ts) == MAY_1_MS  # no zone: the session's (UTC here)

    appended, _ = decode_json(kafka_frame(spark, [values[0], exact]), "value", ADS, ["ad_id"], "append", KAFKA_POSITION)
    assert [r._op for r in appended.collect()] == ["INSERT", "INSERT"]


# Bad payloads into ADS -> the error each gets.
BAD_CASES: dict[str, str] = {
    '{"ad_id": 5, "clicks": "abc", "name": "x"}': "column clicks: 'abc' is not an INT",
    '{"ad_id": 5, "clicks": 99999999999, "name": "x"}': "column clicks: '99999999999' is not an INT",
    '{"ad_id": 5, "clicks": 1.5, "name": "x"}': "column clicks: '1.5' is not an INT",
    '{"clicks": 1, "name": "x"}': "key column ad_id is missing or null",
    '{"ad_id": null, "name": "x"}': "key column ad_id is missing or null",
    '{"ad_id": "x1", "name": "x"}': "column ad_id: 'x1' is not a BIGINT",
    '{"ad_id": 5}': "column name is missing or null (NOT NULL)",
    '{"ad_id": 5, "name": "x", "ts": "yesterday"}': "column ts: 'yesterday' is not a TIMESTAMP",
    '{"ad_id": 5, "name": "x", "day": "2024-13-45"}': "column day: '2024-13-45' is not a DATE",
    # Spark hands over a JSON number's text normalized
    '{"ad_id": 5, "name": "x", "price": 123456789012.5}': ("column price: '1.234567890125E11' is not a DECIMAL(10,2)"),
    '{"ad_id": 5, "name": "x", "ok": "maybe"}': "column ok: 'maybe' is not a BOOLEAN",
    '{"ad_id": 5, "name": "x", "tags": "solo"}': "column tags: 'solo' is not an array<string>",
    '{"ad_id": 5, "name": "x", "blob": "!!"}': "column blob: '!!' is not a BINARY",
    '{"ad_id": 5, "name": "x", "_op": "x"}': "unknown op 'x'",
    '{"ad_id": 5, "name": "x", ': "malformed JSON",
    "not json": "malformed JSON: not an object",
    "[1, 2]": "malformed JSON: not an object",
    "  ": "malformed JSON: empty payload",
    '{"ad_id": 5, "name": "' + "z" * 20 + '", "clicks": "' + "9" * 70 + '"}': (
        "column clicks: '" + "9" * 60 + "...' is not an INT"
    ),
}


def test_json_bad_records_name_the_problem(spark: Any) -> None:
    cases = BAD_CASES
    payloads = list(cases)
    good, bad = decode_json(kafka_frame(spark, payloads), "value", ADS, ["ad_id"], "upsert", KAFKA_POSITION)
    assert good.count() == 0
    found = bad_rows(bad)
    assert found == {f"ads/0@{i}": (cases[p], p) for i, p in enumerate(payloads)}


def test_json_from_files_keeps_the_line_and_extra_columns(spark: Any) -> None:
    lines = spark.createDataFrame(
        [('{"ad_id": 1, "name": "a"}', "in/a.json", 1), ('{"ad_id": 1, "name": 7, "clicks": "x"}', "in/a.json", 17)],
        "value STRING, source_file STRING, line BIGINT",
    )
    good, bad = decode_json(lines, "value", ADS, ["ad_id"], "append", ["source_file", "line"], extra_cols=["line"])
    assert [(r.ad_id, r.name, r._op, r.line) for r in good.collect()] == [(1, "a", "INSERT", 1)]
    assert bad_rows(bad) == {
        "in/a.json:17": ("column clicks: 'x' is not an INT", '{"ad_id": 1, "name": 7, "clicks": "x"}')
    }


_BASE = {"ad_id": 1, "name": "a"}
# Good payloads with keys the table lacks, and bad ones (whose keys are not counted).
LACKING_VALUES: list[str | None] = [
    json.dumps({**_BASE, "color": "red", "size": 3, "_op": "upsert"}),
    json.dumps({**_BASE, "ad_id": 2, "color": None, "meta": {"inner": 1}}),
    json.dumps({**_BASE, "ad_id": 3, "tags": ["x"]}),
    json.dumps({"ad_id": "x", "name": "bad", "color": "blue"}),  # bad: not counted
    "not json",
    "[1, 2]",
]


def test_json_fields_the_table_lacks_are_counted_never_dropped_silently(spark: Any, caplog: Any) -> None:
    """Keys that are no column (nor `_op`) are counted per field over the good records, and named
    in one warning; the rows are written without them. Nested keys are not fields."""
    values = LACKING_VALUES
    unknown: dict[str, int] = {}
    keep: list[Any] = []
    with caplog.at_level("WARNING", logger="icetide.decode.json"):
        good, bad = decode_json(
            kafka_frame(spark, values),
            "value",
            ADS,
            ["ad_id"],
            "upsert",
            KAFKA_POSITION,
            keep=keep,
            unknown_fields=unknown,
        )
    assert unknown == {"color": 2, "meta": 1, "size": 1}
    assert good.columns == [f.name for f in ADS.fields] + ["_op"]
    assert sorted(r["ad_id"] for r in good.collect()) == [1, 2, 3] and bad.count() == 3
    assert [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()] == [
        "the table lacks field(s) the source sends, not written: color (2 records), meta (1 records), size (1 records)"
    ]
    for df in keep:
        df.unpersist()


def test_decode_arguments_are_checked(spark: Any) -> None:
    frame = kafka_frame(spark, ["{}"])
    with pytest.raises(ConfigError, match="key column 'nope'"):
        decode_json(frame, "value", ADS, ["nope"], "upsert", KAFKA_POSITION)
    with pytest.raises(ConfigError, match="op_mode 'merge'"):
        decode_json(frame, "value", ADS, ["ad_id"], "merge", KAFKA_POSITION)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="value column 'payload'"):
        decode_json(frame, "payload", ADS, ["ad_id"], "upsert", KAFKA_POSITION)
    with pytest.raises(ConfigError, match="column 'source_file' is not in the input"):
        decode_json(frame, "value", ADS, ["ad_id"], "upsert", ["source_file", "line"])


USERS = T.StructType(
    [
        T.StructField("id", T.IntegerType(), nullable=False),
        T.StructField("name", T.StringType()),
        T.StructField("updated", T.TimestampType()),
    ]
)


def change(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {"before": before, "after": after, "op": op, **extra}


def wrapped(event: dict[str, Any]) -> str:
    return json.dumps({"schema": {"type": "struct", "optional": False}, "payload": event})


def test_debezium_changes(spark: Any) -> None:
    source = {"ts_ms": MAY_1_MS + 123, "db": "shop"}
    events: list[str | None] = [
        wrapped(change("c", None, {"id": 1, "name": "a", "updated": MAY_1_MS}, source=source, ts_ms=MAY_1_MS + 999)),
        json.dumps(change("r", None, {"id": 2, "name": "b"}, ts_ms=MAY_1_MS + 1000)),
        json.dumps(change("u", {"id": 2, "name": "b"}, {"id": 2, "name": "B", "updated": "2024-05-01T10:00:00Z"})),
        wrapped(change("d", {"id": 1, "name": "a", "updated": MAY_1_MS}, None, source=source)),
        None,  # the tombstone after a delete
        json.dumps({"schema": None, "payload": None}),  # a tombstone rendered by the JSON converter
    ]
    decoded = decode_debezium(kafka_frame(spark, events), "value", USERS, ["id"], "upsert", KAFKA_POSITION)
    good, bad = decoded.good, decoded.bad
    assert bad.count() == 0
    assert [f.name for f in good.schema.fields] == ["id", "name", "updated", "_op", "_source_ts", "_source_order"]
    assert good.schema["_source_ts"].dataType == T.TimestampType()
    rows = [
        (
            r.id,
            r.name,
            r.updated and epoch_ms(r.updated),
            r._op,
            r._source_ts and epoch_ms(r._source_ts),
        )
        for r in good.collect()
    ]
    assert rows == [
        (1, "a", MAY_1_MS, "UPSERT", MAY_1_MS + 123),  # source.ts_ms wins over ts_ms
        (2, "b", None, "UPSERT", MAY_1_MS + 1000),
        (2, "B", MAY_1_MS, "UPSERT", None),
        (1, "a", MAY_1_MS, "DELETE", MAY_1_MS + 123),  # from `before`
    ]
    appended = decode_debezium(kafka_frame(spark, events), "value", USERS, ["id"], "append", KAFKA_POSITION).good
    assert [r._op for r in appended.collect()] == ["INSERT", "INSERT", "INSERT", "DELETE"]


def test_debezium_bad_events(spark: Any) -> None:
    cases = {
        json.dumps(change("t", None, None)): "truncate event (on_truncate: dead_letter keeps the table as it is)",
        json.dumps(change("m", None, None)): "unsupported op 'm' (message)",
        json.dumps(change("x", None, {"id": 1})): "unknown op 'x'",
        json.dumps(change("c", None, None)): "after is missing for op 'c'",
        wrapped(change("d", None, None)): "before is missing for op 'd' (a delete needs the key)",
        json.dumps(change("u", None, {"id": "abc"})): "column id: 'abc' is not an INT",
        json.dumps(change("c", None, {"name": "n"})): "key column id is missing or null",
        json.dumps(change("c", None, {"id": 1, "updated": "soon"})): "column updated: 'soon' is not a TIMESTAMP",
        json.dumps({"after": {"id": 1}}): "not a Debezium change event: op is missing",
        '{"op": "c", "after": {"id": 1}': "malformed JSON: cut short: the text ends at character 30, inside the JSON",
        # An empty or blank value is no tombstone (that is a null value): it once vanished here.
        # Found by tests/test_poison.py (a payload of one carriage return).
        "": "malformed JSON: empty payload",
        "  ": "malformed JSON: empty payload",
        "\r": "not a Debezium change event: op is missing",
    }
    payloads = list(cases)
    decoded = decode_debezium(
        kafka_frame(spark, payloads), "value", USERS, ["id"], "upsert", KAFKA_POSITION, on_truncate="dead_letter"
    )
    good, bad = decoded.good, decoded.bad
    assert good.count() == 0
    assert bad_rows(bad) == {f"ads/0@{i}": (cases[p], p) for i, p in enumerate(payloads)}


def test_a_delete_needs_only_its_key_on_both_paths(spark: Any) -> None:
    """A DELETE whose other values are missing or do not convert is a delete on the Spark path
    (decode_json checks them only for other ops); the pyarrow decoder of the fast path agrees."""
    import pyarrow as pa

    from icetide.decode.json.records import ArrowJsonDecoder

    schema = T.StructType(
        [
            T.StructField("ad_id", T.LongType(), nullable=False),
            T.StructField("clicks", T.IntegerType(), nullable=False),
            T.StructField("name", T.StringType()),
        ]
    )
    values = [
        '{"ad_id": 1, "clicks": "many", "_op": "DELETE"}',
        '{"ad_id": 2, "_op": " delete"}',
        '{"ad_id": 3, "clicks": "many"}',
    ]
    good, bad = decode_json(kafka_frame(spark, values), "value", schema, ["ad_id"], "upsert", KAFKA_POSITION)
    spark_good = sorted((r["ad_id"], r["clicks"], r["_op"]) for r in good.collect())
    spark_bad = [r["error"] for r in bad.collect()]
    assert spark_good == [(1, None, "DELETE"), (2, None, "DELETE")] and spark_bad == [
        "column clicks: 'many' is not an INT"
    ]

    arrow = pa.schema(
        [pa.field("ad_id", pa.int64(), False), pa.field("clicks", pa.int32(), False), pa.field("name", pa.string())]
    )
    decoder = ArrowJsonDecoder(arrow, ["ad_id"])
    records = [decoder.record(v) for v in values]
    assert [(row, op) for row, error, op in records[:2]] == [([1, None, None], "DELETE"), ([2, None, None], "DELETE")]
    assert [error for _, error, _ in records] == [None, None, spark_bad[0]]
