"""Executor-side file metrics agree with what Iceberg itself reads from the Parquet footers."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

import icetide
from icetide.executor.file_metrics import FIELD_ID_KEY, measured_fields, serialize_bound

SCHEMA = (
    "id BIGINT NOT NULL, day DATE NOT NULL, n INT, flag BOOLEAN, ts TIMESTAMP, amount DECIMAL(12, 3), "
    "small DECIMAL(4, 1), score DOUBLE, short STRING, long_text STRING, blob BINARY"
)


def as_dict(jmap: Any) -> dict[int, Any]:
    out = {}
    for entry in jmap.entrySet():
        value = entry.getValue()
        if not isinstance(value, int):  # a ByteBuffer: compare its bytes
            dup = value.duplicate()
            value = bytes(dup.get(i) & 0xFF for i in range(dup.position(), dup.limit()))
        out[int(entry.getKey())] = value
    return out


def check_metrics_against_footers(
    spark: Any, table_name: str, *, data_files: int | None, delete_files: int = 0, exact: bool = False
) -> None:
    """The metrics of every file the table's snapshots added against what Iceberg's footer reader
    (`ParquetUtil.fileMetrics`) finds in them. Every count and bound icetide reported must be
    Iceberg's; with `exact` it must report every count Iceberg does (no nested columns), else
    it may leave out only the fields inside lists and maps (executor/file_metrics.py says why)."""
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table_name)
    config = jvm.org.apache.iceberg.MetricsConfig.forTable(table)
    schema = table.schema()
    type_util = jvm.org.apache.iceberg.types.TypeUtil
    parents = {int(e.getKey()): int(e.getValue()) for e in type_util.indexParents(schema.asStruct()).entrySet()}

    def in_list_or_map(fid: int) -> bool:
        parent = parents.get(fid)
        while parent is not None:
            if schema.findType(parent).isListType() or schema.findType(parent).isMapType():
                return True
            parent = parents.get(parent)
        return False

    repeated = {fid for fid in parents if in_list_or_map(fid)}  # fields inside a list or map
    counted = {"data": 0, "deletes": 0}
    every = [
        (kind, f)
        for snapshot in table.snapshots()
        for kind, files in (
            ("data", snapshot.addedDataFiles(table.io())),
            ("deletes", snapshot.addedDeleteFiles(table.io())),
        )
        for f in files
    ]
    for kind, f in every:
        truth = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(table.io().newInputFile(f.location()), config)
        assert f.recordCount() == truth.recordCount()
        for ours, theirs in (
            (f.valueCounts(), truth.valueCounts()),
            (f.nullValueCounts(), truth.nullValueCounts()),
        ):
            mine, real = as_dict(ours), as_dict(theirs)
            assert mine == (real if exact else {k: v for k, v in real.items() if k not in repeated})
        for ours, theirs in ((f.lowerBounds(), truth.lowerBounds()), (f.upperBounds(), truth.upperBounds())):
            mine, real = as_dict(ours), as_dict(theirs)
            assert mine, "no bounds recorded"
            for fid, value in mine.items():
                assert real[fid] == value, f"field {fid}"
        counted[kind] += 1
    assert counted["data"] == data_files if data_files is not None else counted["data"] > 0
    assert counted["deletes"] == delete_files


def test_metrics_match_icebergs_footer_reader(spark: Any, table_name: str) -> None:
    # v2: the batch's equality-delete files are committed, and their footers checked too
    icetide.create_table(spark, table_name, schema=SCHEMA, key=["id", "day"], partition_by=["day"], format_version=2)
    rows = [
        (
            i,
            date(2026, 1, 1 + i % 2),
            i - 5 if i % 4 else None,
            i % 3 == 0,
            datetime(2026, 1, 1, i % 24, 7),
            Decimal(f"{i * 123}.456") * (-1 if i % 5 == 0 else 1),
            Decimal(f"{i % 99}.5"),
            i / 7.0,
            f"s{i % 10}",
            "x" * 20 + str(i),
            bytes([i % 256]) * (i % 30),
        )
        for i in range(1, 200)
    ]
    df = spark.createDataFrame(rows, SCHEMA.replace(" NOT NULL", ""))
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="m")
    result = sink.write(df, batch_id=1)
    phases = [result.plan_seconds, result.write_seconds, result.refresh_seconds, result.commit_seconds]
    assert all(p > 0 for p in phases), phases  # each phase timed, none inside another
    assert abs(result.total_seconds - sum(phases)) < 1e-9
    check_metrics_against_footers(spark, table_name, data_files=2, delete_files=2, exact=True)
    got = spark.table(table_name).where("amount < 0 AND short = 's5'").count()
    assert got == sum(1 for r in rows if r[5] < 0 and r[8] == "s5")


def _field(name: str, dtype: pa.DataType, fid: int) -> pa.Field:
    return pa.field(name, dtype, metadata={FIELD_ID_KEY: str(fid).encode()})


def test_measured_fields_are_those_iceberg_measures() -> None:
    """Struct fields are measured, fields inside lists and maps are not; a table of more than 100
    columns has its first 100 top-level primitive columns measured, as Iceberg 1.10's
    MetricsConfig.forTable gives them (seen: a struct before 101 INT columns, its field `none`,
    c0-c99 truncate(16), c100 `none`)."""
    inner = pa.struct([_field("z", pa.string(), 6)])
    element = _field("element", pa.int32(), 9)
    struct = pa.struct([_field("a", pa.int32(), 5), _field("t", inner, 7), _field("l", pa.list_(element), 8)])
    narrow = pa.schema([_field("s", struct, 1), _field("c", pa.int32(), 2)])
    assert [path for path, _ in measured_fields(narrow)] == [("s", "a"), ("s", "t", "z"), ("c",)]
    wide = pa.schema([_field("s", pa.struct([_field("a", pa.int32(), 500)]), 1)])
    wide = pa.schema([*wide, *(_field(f"c{i}", pa.int32(), i + 2) for i in range(101))])
    assert [path for path, _ in measured_fields(wide)] == [(f"c{i}",) for i in range(100)]


def test_decimal_bounds_are_javas_shortest_bytes() -> None:
    """BigInteger.toByteArray, as Iceberg serializes a decimal bound: -1.28 (unscaled -128) is 0x80."""
    dtype = pa.decimal128(10, 2)
    cases = {
        "-1.28": b"\x80",
        "-1.29": b"\xff\x7f",
        "1.27": b"\x7f",
        "1.28": b"\x00\x80",
        "0": b"\x00",
        "-0.01": b"\xff",
    }
    for text, raw in cases.items():
        assert serialize_bound(dtype, Decimal(text), upper=False) == raw, text


def test_decimal_bounds_keep_every_digit() -> None:
    """A DECIMAL(38, 2) bound of 35 digits is its exact unscaled value: Python's default decimal
    context keeps 28 digits, and a rounded lower bound above the file's minimum would let a reader
    skip a file it needs (a review finding)."""
    dtype = pa.decimal128(38, 2)
    for text in ("123456789012345678901234567890123.45", "-99999999999999999999999999999999999.99"):
        unscaled = int(text.replace(".", ""))
        raw = serialize_bound(dtype, Decimal(text), upper=False)
        assert raw is not None and int.from_bytes(raw, "big", signed=True) == unscaled, text
