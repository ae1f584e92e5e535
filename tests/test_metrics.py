"""Executor-side file metrics agree with what Iceberg itself reads from the Parquet footers."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Any

import icetide

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


def test_metrics_match_icebergs_footer_reader(spark: Any, table_name: str) -> None:
    icetide.create_table(spark, table_name, schema=SCHEMA, key=["id", "day"], partition_by=["day"])
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
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table_name)
    config = jvm.org.apache.iceberg.MetricsConfig.forTable(table)
    checked = 0
    for files in (
        table.currentSnapshot().addedDataFiles(table.io()),
        table.currentSnapshot().addedDeleteFiles(table.io()),
    ):
        for f in files:
            truth = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
                table.io().newInputFile(f.location()), config
            )
            assert f.recordCount() == truth.recordCount()
            assert as_dict(f.valueCounts()) == as_dict(truth.valueCounts())
            assert as_dict(f.nullValueCounts()) == as_dict(truth.nullValueCounts())
            for ours, theirs in ((f.lowerBounds(), truth.lowerBounds()), (f.upperBounds(), truth.upperBounds())):
                mine, real = as_dict(ours), as_dict(theirs)
                assert mine, "no bounds recorded"
                for fid, value in mine.items():
                    assert real[fid] == value, f"field {fid}"
            checked += 1
    assert checked == 4  # two partitions, a data and a delete file each
    got = spark.table(table_name).where("amount < 0 AND short = 's5'").count()
    assert got == sum(1 for r in rows if r[5] < 0 and r[8] == "s5")
