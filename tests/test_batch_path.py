"""How a batch ran, as typed values (pipeline/batch_path.py): the lists are an interface (dashboards
alert on them), the metrics line carries them as plain strings, the pipeline's state keeps them
for `icetide status`, and Prometheus counts them. Pure Python, no Spark."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter
from dataclasses import replace

from icetide.commit.pipeline_state import PipelineState
from icetide.ops.prometheus import PipelineMetrics, scrape_lines
from icetide.pipeline.batch_path import BatchPath, FallbackReason
from icetide.pipeline.batches import BatchMetrics, batch_metrics
from icetide.pipeline.staged import Fallback


def test_the_values_are_the_documented_lists() -> None:
    assert [p.value for p in BatchPath] == [
        "json_fast",
        "debezium_fast",
        "avro_fast",
        "sync_fast",
        "sync_avro_fast",
        "spark",
        "sync_spark",
    ]
    assert [p for p in BatchPath if not p.fast] == [BatchPath.SPARK, BatchPath.SYNC_SPARK]
    assert [r.value for r in FallbackReason] == [
        "fast_path_off",
        "two_stage",
        "format",
        "files_format",
        "source",
        "order_by_source_ts",
        "column_types",
        "session_time_zone",
        "partition_transform",
        "partition_spec",
        "order_by_column",
        "data_losses",
        "change_ops",
        "schema_evolution",
        "new_tables",
        "record_for_spark",
        "decoder_failed",
        "write_failed",
        "table_fed_by_two_tasks",
    ]


def _metrics(**batch: object) -> BatchMetrics:
    values: dict[str, object] = {"records_in": 10, "bad_records": 0, "read_decode_seconds": 0.5, "source_lag": 0}
    return batch_metrics(BatchMetrics, "p", 4, {}, **{**values, **batch})


def test_the_metrics_line_carries_path_fallback_and_flags_as_strings() -> None:
    fallback = Fallback(FallbackReason.FAST_PATH_OFF, "fast_path: off")
    spark = json.loads(
        _metrics(path=BatchPath.SPARK, fallback=fallback.reason, fallback_detail=fallback.detail).to_json()
    )
    assert (spark["path"], spark["fallback"], spark["fallback_detail"]) == ("spark", "fast_path_off", "fast_path: off")
    assert (spark["overlapped"], spark["columnar"]) == (False, False)
    fast = json.loads(replace(_metrics(path=BatchPath.AVRO_FAST, records_as_columns=7), overlapped=True).to_json())
    assert (fast["path"], fast["fallback"], fast["fallback_detail"]) == ("avro_fast", None, None)
    assert (fast["overlapped"], fast["columnar"], fast["records_as_columns"]) == (True, True, 7)
    assert fast["path"] == BatchPath.AVRO_FAST  # a line read back compares equal to the enum


def test_the_pipeline_state_keeps_how_the_batch_ran_and_reads_states_without_it() -> None:
    state = PipelineState("p", 3, {"0": 9}, "t", batch_path=BatchPath.SPARK, fallback=FallbackReason.CHANGE_OPS)
    text = state.to_json()
    assert (json.loads(text)["batch_path"], json.loads(text)["fallback"]) == ("spark", "change_ops")
    assert PipelineState.from_json("p", text) == state
    plain = PipelineState("p", 3, {"0": 9}, "t")  # UpsertSink.write by a user's job: the layout as before
    assert set(json.loads(plain.to_json())) == {"version", "batch_id", "source_position", "committed_at"}
    again = PipelineState.from_json("p", plain.to_json())
    assert (again.batch_path, again.fallback) == (None, None)


def test_prometheus_counts_each_path_and_fallback_and_the_flags() -> None:
    metrics = PipelineMetrics("pathcount", "lake.db.t", source="kafka")
    port = metrics.serve("127.0.0.1", 0)
    ran = [
        _metrics(path=BatchPath.JSON_FAST),
        replace(_metrics(path=BatchPath.JSON_FAST), overlapped=True),
        _metrics(path=BatchPath.SPARK, fallback=FallbackReason.CHANGE_OPS, fallback_detail="records carry _op changes"),
        _metrics(path=BatchPath.DEBEZIUM_FAST, records_as_columns=5),
    ]
    for m in ran:
        metrics.record_path(m)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    got = {
        (name, labels.get("path"), labels.get("fallback")): value
        for name, labels, value in scrape_lines(text)
        if labels.get("pipeline") == "pathcount"
    }
    assert {k: v for k, v in got.items() if k[0] == "icetide_batch_paths_total"} == {
        ("icetide_batch_paths_total", "json_fast", "none"): 2,
        ("icetide_batch_paths_total", "spark", "change_ops"): 1,
        ("icetide_batch_paths_total", "debezium_fast", "none"): 1,
    }
    assert got[("icetide_overlapped_commits_total", None, None)] == 1
    assert got[("icetide_records_as_columns_total", None, None)] == 5
    assert Counter(m.path for m in ran)[BatchPath.JSON_FAST] == 2
