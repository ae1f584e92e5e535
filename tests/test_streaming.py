"""Structured Streaming: a file-source stream through foreachBatch(sink), stopped and restarted."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import icetide
from tests.model import ReferenceModel, table_rows

COLUMNS = ["id", "ts", "v", "seq"]
KEY = ["id", "ts"]
T0 = datetime(2026, 1, 1, 10, tzinfo=UTC)


def land(folder: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """Write a JSON-lines file and rename it into place, so the stream never sees half a file."""
    tmp = folder.parent / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    n = int(name.split("-")[1].split(".")[0])
    os.utime(tmp, (1_767_225_600 + n, 1_767_225_600 + n))  # the file source reads oldest first
    os.replace(tmp, folder / name)


def rows_for(file_no: int) -> list[dict[str, Any]]:
    out = []
    for i in range(20):
        k = (file_no * 7 + i) % 15
        ts = T0 + timedelta(hours=k % 3)
        op = "DELETE" if (file_no + i) % 6 == 0 else "UPSERT"
        out.append({"id": k, "ts": ts.strftime("%Y-%m-%dT%H:%M:%S"), "v": f"f{file_no}", "seq": file_no, "_op": op})
    return out


def start(spark: Any, source: Path, checkpoint: Path, sink: icetide.UpsertSink, seen: list[int]) -> Any:
    def each_batch(df: Any, batch_id: int) -> None:
        seen.append(batch_id)
        sink(df, batch_id)

    stream = (
        spark.readStream.schema("id long, ts timestamp, v string, seq long, _op string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
    )
    return (
        stream.writeStream.foreachBatch(each_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_stream_stops_restarts_and_replays_once(spark: Any, table_name: str, tmp_path: Path) -> None:
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING, seq BIGINT",
        key=KEY,
        partition_by=["hours(ts)"],
    )
    source, checkpoint = tmp_path / "landing", tmp_path / "chk"
    source.mkdir()
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="stream", order_by="seq")
    model = ReferenceModel(KEY, COLUMNS, "seq")
    seen: list[int] = []

    def expect(files: range) -> dict[Any, Any]:
        for n in files:
            parsed = [{**r, "ts": datetime.fromisoformat(r["ts"])} for r in rows_for(n)]
            model.apply(n, parsed)
        return model.rows

    for n in range(3):
        land(source, f"part-{n:03d}.json", rows_for(n))
    start(spark, source, checkpoint, sink, seen).awaitTermination()
    assert table_rows(spark, table_name, COLUMNS, KEY) == expect(range(3))
    assert sink.last_committed().batch_id == 2  # type: ignore[union-attr]

    # The table is ahead of Spark's checkpoint (a crash after our commit, before Spark's):
    # Spark replays batch 2, and the sink must land it no second time.
    (checkpoint / "commits" / "2").unlink()
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    for n in range(3, 5):
        land(source, f"part-{n:03d}.json", rows_for(n))
    start(spark, source, checkpoint, sink, seen).awaitTermination()
    assert table_rows(spark, table_name, COLUMNS, KEY) == expect(range(3, 5))
    batches = [r[0] for r in spark.sql(f"SELECT summary['icetide.batch-id'] FROM {table_name}.snapshots").collect()]
    assert sorted(int(b) for b in batches) == [0, 1, 2, 3, 4]
    assert seen == [0, 1, 2, 2, 3, 4]  # Spark did deliver batch 2 twice
