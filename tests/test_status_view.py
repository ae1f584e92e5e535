"""The status views without Spark: the terminal table fits 80 columns with whole labels, snapshot
summaries become timeline events, the page is self-contained."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

from rich.console import Console

from icetide.cli.status import partitions_table, source_lag
from icetide.cli.status_page import PipelineRow, TableView, status_page
from icetide.maintenance.health import PartitionHealth, TableHealth
from icetide.maintenance.next_pass import NextPass, PlannedGroup, snapshots_due
from icetide.maintenance.planning import SkippedGroup
from icetide.maintenance.timeline import snapshot_event

LABELS = ["2026-01-01 05:00", "2026-01-01 04:00", "2025-12-31 23:00"]
LONG = "2026-01-01 05:00, bucket[16]=3, truncate[4]=abcd"


def partition(label: str, **overrides: int) -> PartitionHealth:
    values = dict(
        records=1_234_567,
        data_files=24,
        data_bytes=24 * 121 * 1024,
        small_files=24,
        equality_delete_files=23,
        equality_delete_rows=473_857,
        position_delete_files=0,
        position_delete_rows=0,
    )
    values.update(overrides)
    return PartitionHealth(label=label, values={"ts_hour": 490901}, spec_id=0, last_updated=None, **values)  # type: ignore[arg-type]


def health(labels: list[str], **overrides: int) -> TableHealth:
    return TableHealth(
        table="lake.demo.ad_events",
        target_file_size=128 << 20,
        snapshots=3,
        oldest_snapshot=None,
        newest_snapshot=None,
        partitions=[partition(label, **overrides) for label in labels],
        pipelines=[],
        partitioned_by="hours(event_time)",
        small_file_bytes=96 << 20,
    )


def render(h: TableHealth, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(partitions_table(console, h, 20))
    return console.export_text().splitlines()


def test_80_columns_show_whole_labels_and_drop_columns_first() -> None:
    lines = render(health([*LABELS, LONG]), 80)
    assert max(len(line) for line in lines) <= 80
    for label in [*LABELS, LONG]:
        assert any(label in line for line in lines), label  # whole, on one line
    assert not any("…" in line for line in lines)  # nothing cut
    assert "records" not in "\n".join(lines)  # the least needed column went first
    assert "473,857" in "\n".join(lines)  # the delete backlog stayed


def test_wide_console_keeps_every_column_and_deletion_vectors_appear_when_present() -> None:
    text = "\n".join(render(health(LABELS, deletion_vectors=2, deletion_vector_rows=7), 160))
    for heading in ("records", "data files", "small", "avg size", "deletion vectors"):
        assert heading in text
    assert "pos-delete" not in text  # no partition has position-delete files
    assert "1,234,567" in text


def test_a_label_wider_than_the_console_wraps_instead_of_being_cut() -> None:
    lines = render(health([LONG]), 30)
    assert not any("…" in line for line in lines)
    assert "truncate[4]=abcd" in "".join(lines).replace(" ", "").replace("│", "")


def test_snapshot_events_tell_stream_from_maintenance() -> None:
    stream = snapshot_event(
        1,
        "2026-01-01T05:00:00.000Z",
        "overwrite",
        {
            "icetide.pipeline-id": "demo",
            "icetide.batch-id": "7",
            "added-records": "20000",
            "added-data-files": "4",
            "added-delete-files": "4",
            "added-equality-deletes": "20000",
        },
    )
    assert (stream.kind, stream.writer, stream.batch_id, stream.rows_added, stream.equality_deletes_added) == (
        "stream",
        "demo",
        7,
        20000,
        20000,
    )
    compaction = snapshot_event(
        2,
        "2026-01-01T05:01:00.000Z",
        "replace",
        {
            "icetide.maintenance": "compaction",
            "deleted-data-files": "24",
            "added-data-files": "1",
            "removed-delete-files": "23",
        },
    )
    assert (compaction.kind, compaction.writer, compaction.data_files_removed, compaction.delete_files_removed) == (
        "maintenance",
        "compaction",
        24,
        23,
    )
    assert snapshot_event(3, "t", "replace", {}).kind == "maintenance"  # a manifest rewrite
    other = snapshot_event(4, "t", "delete", {"added-dvs": "2", "added-position-deletes": "5"})
    assert (other.kind, other.deletion_vectors_added, other.position_deletes_added) == ("other", 2, 5)


def test_expiry_never_counts_the_kept_snapshots() -> None:
    assert snapshots_due(100, 95, keep=10) == 90
    assert snapshots_due(100, 40, keep=10) == 40
    assert snapshots_due(5, 5, keep=10) == 0
    assert snapshots_due(5, 5, keep=0) == 4  # the current snapshot always stays


def test_next_pass_lines() -> None:
    groups = (PlannedGroup("2026-01-01 05:00", 4, 1000, 1, 3), PlannedGroup("2026-01-01 04:00", 8, 2000, 1, 7))
    plan = NextPass(due=("compact ...",), groups=groups, left_alone=(), snapshots_to_expire=3)
    assert plan.lines() == [
        "compact 2 group(s) (2026-01-01 05:00 .. 2026-01-01 04:00): 12 data files -> 2, folding 10 delete file(s)",
        "expire 3 snapshot(s)",
    ]
    assert NextPass((), (), (), 0).lines() == ["nothing due"]
    alone = (SkippedGroup("2026-01-01 06:00", 1, 10, "small", "1 small file(s)"),)
    assert NextPass((), (), alone, 0).lines() == [
        "leave 1 group(s) for a later pass (2026-01-01 06:00): too few small files yet"
    ]


def test_page_is_self_contained_and_lists_every_label() -> None:
    events = [
        snapshot_event(
            1, "2026-01-01T05:00:00.000Z", "overwrite", {"icetide.pipeline-id": "demo", "added-records": "5"}
        ),
        snapshot_event(2, "2026-01-01T05:01:00.000Z", "replace", {"icetide.maintenance": "compaction"}),
    ]
    row = PipelineRow("demo", "lake.demo.ad_events", 7, '{"batch": 7}', 12, "2026-01-01T05:00:00+00:00")
    view = TableView(health([*LABELS, "<script>alert(1)</script>"]), events, NextPass((), (), (), 0), [row])
    page = status_page([view], title="icetide status: lake.demo.ad_events")
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing loaded from anywhere
    assert "Plotly.newPlot" in page and page.count('class="plotly-graph-div"') == 3
    for label in LABELS:
        assert f"<td>{label}</td>" in page
    assert "<script>alert(1)</script>" not in page  # labels are escaped
    assert "lake.demo.ad_events" in page and "473,857" in page


def test_page_of_an_empty_table_still_renders() -> None:
    empty = TableView(health([]), [], None, [])
    page = status_page([empty, empty], title="two empty tables")
    assert page.count('class="plotly-graph-div"') == 6 and "<nav>" in page
    assert "No pipeline has committed to this table." in page and "Not planned." in page


def test_lag_of_the_pipeline_of_the_file_is_measured(tmp_path: Path) -> None:
    from icetide.config.pipeline import PipelineConfig
    from tests.test_runner_files import land_files, pipeline_doc

    landing = tmp_path / "landing"
    land_files(landing, 3, seed=1)
    config = PipelineConfig.from_dict(pipeline_doc("lagged", landing))
    time.sleep(0.01)  # the files source takes files older than min_age_seconds
    assert source_lag(config, "lagged", None) == 3  # nothing committed yet: every file is lag
    assert source_lag(config, "another", None) is None  # another pipeline's source is not in this file


def test_dangling_deletes_are_suspected_by_kind_and_by_count() -> None:
    """`maintain` runs the dangling-delete action only when this says so: equality deletes can
    dangle; DVs only when more are live than the data files they reference."""
    assert health(LABELS).may_have_dangling_deletes  # equality deletes (the helper's default)
    dvs = {"equality_delete_files": 0, "equality_delete_rows": 0, "deletion_vectors": 2}
    assert not health(LABELS, **dvs, vector_data_files=2).may_have_dangling_deletes
    assert health(LABELS, **dvs, vector_data_files=1).may_have_dangling_deletes
    assert not health(LABELS, equality_delete_files=0, equality_delete_rows=0).may_have_dangling_deletes
