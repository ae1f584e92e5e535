"""The append fast path on the column types its decoder reads record by record (issue 23):
DECIMAL, BINARY, TIMESTAMP_NTZ, ARRAY, ARRAY of STRUCT, MAP and nested STRUCT, partitioned by a
day of the TIMESTAMP_NTZ column.

The same topic runs on the fast path and with `fast_path: off` (the Spark path); the tables and
the dead letters must agree row for row. The fast path's table is then read by PyIceberg and by
DuckDB, which find columns by the Parquet field ids (list elements, map keys and values and
struct fields carry their own), and its file metrics are checked against Iceberg's own footer
reader.

Test data: the records are written here. Their shapes are taken from the values the decoder's
nested rules were measured on against Spark 3.5.7's from_json (tests/test_arrow_json_nested.py:
empty arrays and maps, null elements, null map values, a struct's missing fields; a struct
field's mistyped value, which Spark keeps as null, is a dead letter, issue 49) and from the decimal
and binary cases of tests/test_arrow_json_values.py (zeros beyond the scale, a digit beyond it or
out of precision: a dead letter, invalid base64).
"""

from __future__ import annotations

import base64
import json
import re
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from icetide.pipeline.table_runner import RunSummary
from icetide.table.iceberg import load_table
from icetide.table.spec import PartitionTransform
from icetide.write.transforms import computable
from tests.kafka_broker import create_topic, produce
from tests.lake_readers import duckdb_with_iceberg
from tests.test_fast_append import run_pipeline
from tests.test_metrics import check_metrics_against_footers

SCHEMA = (
    "id STRING NOT NULL, amount DECIMAL(10,2), raw BINARY, seen TIMESTAMP_NTZ NOT NULL, tags ARRAY<INT>, "
    "items ARRAY<STRUCT<sku: STRING, qty: INT>>, counts MAP<STRING, BIGINT>, "
    "buyer STRUCT<name: STRING, age: INT, address: STRUCT<city: STRING, zip: STRING>>"
)
COLUMNS = ["id", "amount", "raw", "seen", "tags", "items", "counts", "buyer"]


def good(i: int) -> dict[str, Any]:
    """Shapes both paths read: decimals as text and numbers (zeros beyond the scale), base64,
    NTZ as text (without a zone: one would be dropped, a dead letter since issue 49) or epoch
    milliseconds, empty and null-holding nested values."""
    shapes: list[dict[str, Any]] = [
        {
            "amount": f"{i}.5",
            "raw": base64.b64encode(f"r{i}".encode()).decode(),
            "seen": "2026-01-01T10:00:00",
            "tags": [i, i + 1],
            "items": [{"sku": f"s{i}", "qty": i % 7}],
            "counts": {"a": i, "b": -i},
            "buyer": {"name": f"n{i}", "age": i % 90, "address": {"city": "Oslo", "zip": "0150"}},
        },
        {"amount": "1.550", "seen": 1_767_225_600_000 + i, "tags": [], "items": [], "counts": {}, "buyer": {}},
        {
            "amount": -1.28,  # unscaled -128: one byte in Iceberg's bound
            "seen": "2026-01-02 03:04:05.123456",
            "tags": [None, 3],
            "items": [None, {"sku": "y"}],
            "counts": {"k": None},
            "buyer": None,
        },
        {"seen": "2026-01-03T10:00:00", "buyer": {"address": {"zip": 12345}}, "raw": "aG k="},
        {"seen": "2026-01-04T00:00", "items": [{"qty": 4}], "buyer": {"age": 40}, "tags": "[1]"},
        {
            "seen": 1_767_225_600_000 + 4 * 86_400_000,
            "amount": "99999999.99",
            "raw": base64.b64encode(bytes(range(40))).decode(),
            "buyer": {"name": "x" * 30},
        },
        {"seen": "2026-01-05"},  # only the key: every other column null
    ]
    return {"id": f"r{i}", **shapes[i % len(shapes)]}


BAD = [
    b'{"id": "b", "amount": "abc"}',
    b'{"id": "b", "raw": "!!"}',
    b'{"id": "b", "tags": ["x"]}',
    b'{"id": "b", "counts": {"a": "x"}}',
    b'{"id": "b", "seen": "abc"}',
    b'{"id": "b", "amount": 123456789012}',
    b'{"amount": 1}',
    b'{"id": "b"}',  # no seen: a key column
    b'{"id": "b", "items": ',
    # read exactly (issue 49), where Spark rounds, keeps a null field or a struct of nulls
    b'{"id": "b", "seen": "2026-01-06", "amount": 1.555}',
    b'{"id": "b", "seen": "2026-01-06", "items": [{"qty": "many"}]}',
    b'{"id": "b", "seen": "2026-01-06", "buyer": {"age": "old"}}',
    b'{"id": "b", "seen": "2026-01-06", "buyer": "someone"}',
    b'{"id": "b", "seen": "2026-01-06", "buyer": {"name": {"first": "x"}}}',
    b'{"id": "b", "seen": "2026-01-06"} {"id": "c"}',
]


def records(count: int) -> list[tuple[int, bytes, bytes | None, None]]:
    out: list[tuple[int, bytes, bytes | None, None]] = []
    for i in range(count):
        value = BAD[(i // 13) % len(BAD)] if i % 13 == 12 else json.dumps(good(i)).encode()
        out.append((i % 2, f"k{i}".encode(), value, None))
    return out


def doc(name: str, bootstrap: str, topic: str, **extra: Any) -> dict[str, Any]:
    table = {"name": f"lake.types.{name}", "schema": SCHEMA, "key": ["id", "seen"], "partition_by": ["days(seen)"]}
    table.update(extra.pop("table", {}))
    return {
        "pipeline": name,
        "source": {"kafka": {"bootstrap_servers": bootstrap, "topic": topic}},
        "table": table,
        "mode": "append",
        "trigger": {"interval": "1s", "max_records": 1000},
        "dead_letter": f"lake.types.{name}_dead_letter",
        **extra,
    }


def plain(value: Any) -> Any:
    """A value as plain Python, the same from every reader: Spark's Rows become dicts, bytearrays bytes."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def keyed(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        row = {c: plain(r[c]) for c in COLUMNS}
        assert row["id"] not in out, f"duplicate id {row['id']}"
        out[row["id"]] = row
    return out


def arrow_rows(table: pa.Table) -> dict[str, dict[str, Any]]:
    """Rows as pyarrow gives them, the map column's (key, value) pairs as a dict (pyarrow 17
    has no `maps_as_pydicts`)."""
    rows = table.select(COLUMNS).to_pylist()
    for r in rows:
        r["counts"] = None if r["counts"] is None else dict(r["counts"])
    return keyed(rows)


_PARQUET_FIELD = re.compile(
    r"^\s*(required|optional|repeated) (\S+) (?:field_id=(-?\d+) )?([^\s;{]+)(?: \(.*\))?(?: = (\d+))?\s*([{;])\s*$"
)


def parquet_fields(text: str) -> list[tuple[str, str, str, int | None]]:
    """(path, repetition, physical type, field id) of every field of a Parquet schema as text:
    pyarrow's (`field_id=N name`) or parquet-java's (`name ... = N`); no id is None."""
    out: list[tuple[str, str, str, int | None]] = []
    path: list[str] = []
    for line in text.splitlines():
        match = _PARQUET_FIELD.match(line)
        if match is None:
            if line.strip() == "}" and path:
                path.pop()
            continue
        repetition, physical, pyarrow_id, name, java_id, opens = match.groups()
        if name in ("schema", "table") and opens == "{" and not path and repetition == "required":
            continue  # the message itself (pyarrow writes it as a required group)
        found = pyarrow_id if pyarrow_id is not None else java_id
        fid = int(found) if found is not None and int(found) >= 0 else None
        out.append((".".join([*path, name]), repetition, physical, fid))
        if opens == "{":
            path.append(name)
    return out


def test_transforms_on_the_record_by_record_types() -> None:
    """What the fast path computes in pyarrow on such columns, and what it leaves to the JVM."""
    ntz, dec = pa.timestamp("us"), pa.decimal128(10, 2)
    assert all(computable(PartitionTransform.parse(f"{t}(seen)"), ntz) for t in ("hours", "days", "months", "years"))
    assert computable(PartitionTransform.parse("identity(amount)"), dec)
    for spec in ("bucket(4, amount)", "truncate(10, amount)"):
        assert not computable(PartitionTransform.parse(spec), dec)
    for spec in ("bucket(4, raw)", "truncate(4, raw)"):
        assert not computable(PartitionTransform.parse(spec), pa.binary())


def test_fast_path_takes_decimal_binary_ntz_and_nested_columns(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=2)
    recs = records(300)
    produce(kafka_broker, topic, recs)
    summaries: list[RunSummary] = []
    fast = run_pipeline(spark, doc("nested_fast", kafka_broker, topic), summaries)
    slow = run_pipeline(spark, doc("nested_slow", kafka_broker, topic, fast_path="off"), summaries)
    assert [b.path for b in summaries[0].batches] == ["json_fast"]
    assert fast.fast is not None and fast.sink.last_plan is None  # the fast path wrote it
    assert slow.fast is None and slow.sink.last_plan is not None

    # The same rows on both paths, and in the same partitions.
    def spark_rows(name: str) -> dict[str, dict[str, Any]]:
        return keyed([r.asDict() for r in spark.table(f"lake.types.{name}").select(*COLUMNS).collect()])

    fast_rows = spark_rows("nested_fast")
    assert fast_rows == spark_rows("nested_slow")
    good_ids = {f"r{i}" for i, (_, _, v, _) in enumerate(recs) if v not in BAD}
    assert set(fast_rows) == good_ids
    assert fast_rows["r0"]["amount"] == Decimal("0.50") and fast_rows["r0"]["raw"] == b"r0"
    assert fast_rows["r0"]["counts"] == {"a": 0, "b": 0} and fast_rows["r0"]["buyer"]["address"]["zip"] == "0150"
    assert fast_rows["r2"]["items"] == [None, {"sku": "y", "qty": None}] and fast_rows["r2"]["counts"] == {"k": None}
    partitions = "SELECT partition.seen_day AS d, record_count FROM lake.types.{}.partitions ORDER BY d"
    fast_partitions = spark.sql(partitions.format("nested_fast")).collect()
    assert len(fast_partitions) > 2 and fast_partitions == spark.sql(partitions.format("nested_slow")).collect()
    dead = "SELECT source_position, payload, error FROM lake.types.{}_dead_letter ORDER BY source_position"
    fast_dead = spark.sql(dead.format("nested_fast")).collect()
    assert fast_dead == spark.sql(dead.format("nested_slow")).collect()
    assert len(fast_dead) == sum(1 for _, _, v, _ in recs if v in BAD)
    errors = {r["payload"]: r["error"] for r in fast_dead}
    assert [errors[p.decode()] for p in BAD[-6:]] == [
        "column amount: '1.555' is not a DECIMAL(10,2)",
        "column items[0].qty: 'many' is not an INT",
        "column buyer.age: 'old' is not an INT",
        "column buyer: 'someone' is not a struct<name:string,age:int,address:struct<city:string,zip:string>>",
        'column buyer.name: object \'{"first":"x"}\' is not a STRING',
        "malformed JSON: text after the object, at character 34",
    ]

    # Other engines read the fast path's files by their field ids.
    from pyiceberg.table import StaticTable

    jtable = load_table(spark, "lake.types.nested_fast")
    metadata = str(jtable.operations().current().metadataFileLocation())
    # PyIceberg reads a null ARRAY<STRUCT> as an empty list, whatever the file holds (its open
    # bug apache/iceberg-python#3833, first #251); Spark and DuckDB read the null from the same file.
    pyiceberg_view = {k: {**r, "items": [] if r["items"] is None else r["items"]} for k, r in fast_rows.items()}
    assert arrow_rows(StaticTable.from_metadata(metadata).scan().to_arrow()) == pyiceberg_view
    with duckdb_with_iceberg() as con:
        assert arrow_rows(con.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table()) == fast_rows
    # A filter on a struct field prunes by the bounds the fast path reported, and misses nothing.
    assert spark.table("lake.types.nested_fast").where("buyer.age = 3").count() == sum(
        1 for r in fast_rows.values() if r["buyer"] and r["buyer"]["age"] == 3
    )
    # Each file's Parquet schema is the one Iceberg's own writers write for the table: list
    # elements, map keys and values and struct fields with their field ids, the same physical types.
    iceberg_parquet = spark._jvm.org.apache.iceberg.parquet.ParquetSchemaUtil.convert(jtable.schema(), "table")
    want = parquet_fields(str(iceberg_parquet.toString()))
    assert len(want) == 22 and all((fid is None) == (rep == "repeated") for _, rep, _, fid in want)
    files = [r[0] for r in spark.sql("SELECT file_path FROM lake.types.nested_fast.files").collect()]
    for path in files:
        assert parquet_fields(str(pq.ParquetFile(path.removeprefix("file:")).schema)) == want, path
    check_metrics_against_footers(spark, "lake.types.nested_fast", data_files=len(fast_partitions))
    age = int(jtable.schema().findField("buyer.age").fieldId())  # a struct's field has bounds of its own
    bounded = spark.sql("SELECT map_keys(lower_bounds) AS ids FROM lake.types.nested_fast.files").collect()
    assert any(age in r["ids"] for r in bounded)  # in the files where some age is not null


def test_a_batch_of_only_bad_records_commits_only_dead_letters(spark: Any, kafka_broker: str) -> None:
    topic = create_topic(kafka_broker, partitions=1)
    produce(kafka_broker, topic, [(0, f"k{i}".encode(), bad, None) for i, bad in enumerate(BAD[:3])])
    summaries: list[RunSummary] = []
    run_pipeline(spark, doc("nested_bad", kafka_broker, topic), summaries)
    assert [b.path for b in summaries[0].batches] == ["json_fast"]
    assert spark.table("lake.types.nested_bad").count() == 0
    assert spark.table("lake.types.nested_bad_dead_letter").count() == 3


def test_identity_of_a_decimal_partitions_alike_on_both_paths(spark: Any, kafka_broker: str) -> None:
    """A decimal's identity partition is computed in pyarrow; its values (text and JSON, with
    the scale's digits) are those the Spark path commits."""
    topic = create_topic(kafka_broker, partitions=1)
    amounts = ["1.5", -1.28, 0, "99999999.99", "7.010", "-0.01"]
    recs = [
        (
            0,
            f"k{i}".encode(),
            json.dumps({"id": f"d{i}", "amount": amounts[i % len(amounts)], "tags": [i]}).encode(),
            None,
        )
        for i in range(30)
    ]
    produce(kafka_broker, topic, recs)
    table = {"schema": "id STRING NOT NULL, amount DECIMAL(10,2) NOT NULL, tags ARRAY<INT>", "key": ["id", "amount"]}
    summaries: list[RunSummary] = []
    for name, extra in (("dec_fast", {}), ("dec_slow", {"fast_path": "off"})):
        run_pipeline(
            spark, doc(name, kafka_broker, topic, table={**table, "partition_by": ["amount"]}, **extra), summaries
        )
    assert [b.path for b in summaries[0].batches] == ["json_fast"]
    partitions = "SELECT partition.amount AS a, record_count FROM lake.types.{}.partitions ORDER BY a"
    fast_partitions = spark.sql(partitions.format("dec_fast")).collect()
    assert (
        len(fast_partitions) == len(amounts) and fast_partitions == spark.sql(partitions.format("dec_slow")).collect()
    )
    rows = "SELECT id, amount, tags FROM lake.types.{} ORDER BY id"
    assert spark.sql(rows.format("dec_fast")).collect() == spark.sql(rows.format("dec_slow")).collect()
    # Each file holds the rows of its partition (Spark reads them through the partition filter).
    assert spark.table("lake.types.dec_fast").where("amount = 7.01").count() == 5
