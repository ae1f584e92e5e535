"""A table's health at a glance: files per partition, deletes waiting, snapshots, pipelines.

Everything comes from Iceberg's metadata tables and the pipelines' state properties; no data
file is read. `suggestions` turns the numbers into what maintenance should do next, by the
thresholds of a `HealthThresholds` (Amoro-style triggers: small files, delete files, delete
rows per partition, snapshot count).
"""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from icetide.sink.committer import PipelineState, all_pipeline_states
from icetide.table.iceberg import load_table, partition_fields, table_property

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024


@dataclass(frozen=True)
class HealthThresholds:
    """When a partition or table needs maintenance."""

    small_file_ratio: float = 0.75  # a data file below this share of the target size is small
    max_small_files: int = 4  # per partition, before it wants compaction
    max_delete_files: int = 2  # equality/position delete files per partition, before folding
    max_delete_rows: int = 100_000  # delete rows per partition, before folding
    max_snapshots: int = 100  # before expiry


@dataclass(frozen=True)
class PartitionHealth:
    """One partition's files."""

    partition: str
    records: int
    data_files: int
    data_bytes: int
    small_files: int
    equality_delete_files: int
    equality_delete_rows: int
    position_delete_files: int
    position_delete_rows: int
    last_updated: str | None

    @property
    def avg_data_file_bytes(self) -> int:
        """Average data file size."""
        return self.data_bytes // self.data_files if self.data_files else 0


@dataclass(frozen=True)
class TableHealth:
    """The whole report."""

    table: str
    target_file_size: int
    snapshots: int
    oldest_snapshot: str | None
    newest_snapshot: str | None
    partitions: list[PartitionHealth]
    pipelines: list[PipelineState]
    suggestions: list[str] = field(default_factory=list)

    @property
    def data_files(self) -> int:
        """Data files in the current snapshot."""
        return sum(p.data_files for p in self.partitions)

    @property
    def delete_files(self) -> int:
        """Delete files (equality and position) in the current snapshot."""
        return sum(p.equality_delete_files + p.position_delete_files for p in self.partitions)

    @property
    def equality_delete_rows(self) -> int:
        """Equality-delete rows readers must still apply."""
        return sum(p.equality_delete_rows for p in self.partitions)

    def to_json(self) -> str:
        """The report as JSON."""
        doc = asdict(self)
        doc.update(
            data_files=self.data_files, delete_files=self.delete_files, equality_delete_rows=self.equality_delete_rows
        )
        return json.dumps(doc, default=str, indent=2)


def _label(value: Any, names: list[str]) -> str:
    if value is None:
        return "(unpartitioned)"
    data = value.asDict() if hasattr(value, "asDict") else dict(value)
    return "/".join(f"{n}={data.get(n)}" for n in names) or "(unpartitioned)"


def table_health(spark: SparkSession, table: str, thresholds: HealthThresholds | None = None) -> TableHealth:
    """Read the table's metadata into a TableHealth, with maintenance suggestions."""
    t = thresholds or HealthThresholds()
    jtable = load_table(spark, table)
    target = int(table_property(jtable, "write.target-file-size-bytes", str(DEFAULT_TARGET_FILE_SIZE)))
    names = [pf.name for pf in partition_fields(jtable)]
    small_limit = int(target * t.small_file_ratio)
    part_expr = "partition" if names else "NULL"
    small = {
        _label(r["p"], names): int(r["n"])
        for r in spark.sql(
            f"SELECT {part_expr} AS p, count(*) AS n FROM {table}.files "
            f"WHERE content = 0 AND file_size_in_bytes < {small_limit} GROUP BY 1"
        ).collect()
    }
    deletes = {
        (_label(r["p"], names), int(r["content"])): (int(r["n"]), int(r["rows"] or 0))
        for r in spark.sql(
            f"SELECT {part_expr} AS p, content, count(*) AS n, sum(record_count) AS rows FROM {table}.files "
            "WHERE content > 0 GROUP BY 1, 2"
        ).collect()
    }
    data = spark.sql(
        f"SELECT {part_expr} AS p, count(*) AS n, sum(record_count) AS records, sum(file_size_in_bytes) AS bytes "
        f"FROM {table}.files WHERE content = 0 GROUP BY 1"
    ).collect()
    labels = {_label(r["p"], names) for r in data} | {k[0] for k in deletes}
    by_label = {_label(r["p"], names): r for r in data}
    updated: dict[str, str] = {}
    if names:
        for r in spark.sql(f"SELECT partition AS p, last_updated_at FROM {table}.partitions").collect():
            updated[_label(r["p"], names)] = str(r["last_updated_at"]) if r["last_updated_at"] else ""
    partitions = []
    for label in sorted(labels, reverse=True):
        row = by_label.get(label)
        eq = deletes.get((label, 2), (0, 0))
        pos = deletes.get((label, 1), (0, 0))
        partitions.append(
            PartitionHealth(
                partition=label,
                records=int(row["records"]) if row else 0,
                data_files=int(row["n"]) if row else 0,
                data_bytes=int(row["bytes"] or 0) if row else 0,
                small_files=small.get(label, 0),
                equality_delete_files=eq[0],
                equality_delete_rows=eq[1],
                position_delete_files=pos[0],
                position_delete_rows=pos[1],
                last_updated=updated.get(label) or None,
            )
        )
    snaps = spark.sql(f"SELECT count(*) AS n, min(committed_at) AS lo, max(committed_at) AS hi FROM {table}.snapshots")
    s = snaps.first()
    health = TableHealth(
        table=table,
        target_file_size=target,
        snapshots=int(s["n"]) if s else 0,  # type: ignore[index]
        oldest_snapshot=str(s["lo"]) if s and s["lo"] else None,  # type: ignore[index]
        newest_snapshot=str(s["hi"]) if s and s["hi"] else None,  # type: ignore[index]
        partitions=partitions,
        pipelines=all_pipeline_states(jtable),
    )
    return replace(health, suggestions=suggestions(health, t))


def suggestions(health: TableHealth, thresholds: HealthThresholds) -> list[str]:
    """What maintenance would do next, newest partitions first."""
    out = []
    for p in health.partitions:  # newest first: partition labels sort by time for time transforms
        if p.small_files > thresholds.max_small_files:
            out.append(f"compact {p.partition}: {p.small_files} small data files")
        deletes = p.equality_delete_files + p.position_delete_files
        if deletes > thresholds.max_delete_files or p.equality_delete_rows > thresholds.max_delete_rows:
            out.append(f"fold deletes in {p.partition}: {deletes} delete files, {p.equality_delete_rows} equality rows")
    if health.snapshots > thresholds.max_snapshots:
        out.append(f"expire snapshots: {health.snapshots} > {thresholds.max_snapshots}")
    return out


def files_over_time_html(spark: SparkSession, table: str, *, snapshots: int = 20, partitions: int = 12) -> str:
    """A self-contained HTML page charting data files per partition over the last snapshots."""
    history = spark.sql(
        f"SELECT snapshot_id, committed_at FROM {table}.snapshots ORDER BY committed_at DESC LIMIT {snapshots}"
    ).collect()[::-1]
    jtable = load_table(spark, table)
    names = [pf.name for pf in partition_fields(jtable)]
    part_expr = "partition" if names else "NULL"
    series: dict[str, list[int]] = {}
    for i, snap in enumerate(history):
        rows = spark.sql(
            f"SELECT {part_expr} AS p, count(*) AS n FROM {table}.files VERSION AS OF {snap['snapshot_id']} "
            "WHERE content = 0 GROUP BY 1"
        ).collect()
        for r in rows:
            series.setdefault(_label(r["p"], names), [0] * len(history))[i] = int(r["n"])
    top = sorted(series, key=lambda k: max(series[k]), reverse=True)[:partitions]
    width, height, pad = 760, 360, 40
    peak = max([max(series[k]) for k in top] + [1])
    step = (width - 2 * pad) / max(1, len(history) - 1)
    colours = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#7f7f7f",
        "#bcbd22",
        "#17becf",
        "#393b79",
        "#637939",
    ]
    lines, legend = [], []
    for n, key in enumerate(top):
        pts = " ".join(
            f"{pad + i * step:.1f},{height - pad - v / peak * (height - 2 * pad):.1f}"
            for i, v in enumerate(series[key])
        )
        colour = colours[n % len(colours)]
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
        legend.append(f'<li style="color:{colour}">{html.escape(key)}</li>')
    first = history[0]["committed_at"] if history else datetime.now()
    last = history[-1]["committed_at"] if history else datetime.now()
    return (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(table)}: files per partition</title>"
        f"<h3>{html.escape(table)}: data files per partition, last {len(history)} snapshots</h3>"
        f"<svg width='{width}' height='{height}' style='border:1px solid #ccc'>"
        f"<text x='4' y='{pad - 8}' font-size='12'>{peak} files</text>"
        f"<text x='{pad}' y='{height - 8}' font-size='12'>{html.escape(str(first))}</text>"
        f"<text x='{width - 200}' y='{height - 8}' font-size='12'>{html.escape(str(last))}</text>"
        f"{''.join(lines)}</svg><ul>{''.join(legend)}</ul>"
    )
