"""A table's health at a glance: files per partition, deletes waiting, snapshots, pipelines.

Everything comes from Iceberg's metadata tables and the pipelines' state properties; no data
file is read. `suggestions` turns the numbers into what maintenance should do next, by the
thresholds of a `HealthThresholds` (Amoro-style triggers: small files, delete files, delete
rows per partition, snapshot count).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.commit.pipeline_state import PipelineState, all_pipeline_states
from icetide.maintenance.inventory import TableFiles
from icetide.maintenance.planning import DataFileRef, DeleteRef, PartitionKey
from icetide.spark.py4j_collections import java_list
from icetide.table.iceberg import load_table, spec_transforms, target_file_size
from icetide.table.partition_labels import label_of_values, partition_title

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HealthThresholds:
    """When a partition or table needs maintenance."""

    small_file_ratio: float = 0.75  # a data file below this share of the target size is small
    max_small_files: int = 4  # per partition, before it wants compaction
    max_delete_files: int = 2  # equality/position delete files per partition, before folding
    max_delete_rows: int = 100_000  # delete rows per partition, before folding
    max_snapshots: int = 100  # before expiry
    # Deletion vectors: compact a partition's files with a DV once they hold this many rows (PyIceberg
    # pays ~0.25 s per million such rows per scan), or once their DVs mark this share of their rows
    # on average (every engine reads the marked rows and drops them); None: off.
    max_vector_file_rows: int | None = 1_000_000
    max_vector_deleted_share: float | None = 0.1


@dataclass(frozen=True)
class PartitionHealth:
    """One partition's files. `label` is what people read (`2026-01-01 05:00`, `bucket[16]=3`);
    `values` are the partition's stored values by field name, as Iceberg keeps them."""

    label: str
    values: dict[str, Any]
    spec_id: int
    records: int
    data_files: int
    data_bytes: int
    small_files: int
    equality_delete_files: int
    equality_delete_rows: int
    position_delete_files: int
    position_delete_rows: int
    last_updated: str | None
    deletion_vectors: int = 0  # position deletes kept as deletion vectors (format v3: Puffin files)
    deletion_vector_rows: int = 0
    vector_file_rows: int = 0  # rows of the data files a DV or file-scoped position delete applies to
    vector_data_files: int = 0  # the data files a DV or file-scoped position delete applies to

    @property
    def avg_data_file_bytes(self) -> int:
        """Average data file size."""
        return self.data_bytes // self.data_files if self.data_files else 0

    @property
    def delete_files(self) -> int:
        """Delete files of every kind: equality, position, deletion vectors."""
        return self.equality_delete_files + self.position_delete_files + self.deletion_vectors


@dataclass(frozen=True)
class TableHealth:
    """The whole report; partitions newest first (by label, descending, for time transforms)."""

    table: str
    target_file_size: int
    snapshots: int
    oldest_snapshot: str | None
    newest_snapshot: str | None
    partitions: list[PartitionHealth]
    pipelines: list[PipelineState]
    suggestions: list[str] = field(default_factory=list)
    partitioned_by: str = "partition"  # what the labels are made of, e.g. "hours(event_time)"
    small_file_bytes: int = 0  # a data file below this size is small
    # delete files that apply to no live data file, when known (`planned_health`); None: unknown
    dangling_delete_files: int | None = None

    @property
    def data_files(self) -> int:
        """Data files in the current snapshot."""
        return sum(p.data_files for p in self.partitions)

    @property
    def delete_files(self) -> int:
        """Delete files (equality, position, deletion vectors) in the current snapshot."""
        return sum(p.delete_files for p in self.partitions)

    @property
    def equality_delete_rows(self) -> int:
        """Equality-delete rows readers must still apply."""
        return sum(p.equality_delete_rows for p in self.partitions)

    @property
    def deletion_vectors(self) -> int:
        """Deletion vectors (format v3) in the current snapshot."""
        return sum(p.deletion_vectors for p in self.partitions)

    @property
    def may_have_dangling_deletes(self) -> bool:
        """Could some delete file apply to no live data file? Equality and position-delete files
        can, by sequence numbers; a DV only when more DVs are live than data files they reference
        (a live data file has at most one). Iceberg drops a DV in the commit that removes its data
        file (compaction, engines' overwrites); the count catches any writer that did not. A
        health from the planner's scan knows: the delete files no scan task applies."""
        if self.dangling_delete_files is not None:
            return self.dangling_delete_files > 0
        referenced = sum(p.vector_data_files for p in self.partitions)
        return self.delete_files > self.deletion_vectors or self.deletion_vectors > referenced

    def to_json(self) -> str:
        """The report as JSON: each partition's label beside its stored values."""
        doc = asdict(self)
        doc.update(
            data_files=self.data_files,
            delete_files=self.delete_files,
            equality_delete_rows=self.equality_delete_rows,
            deletion_vectors=self.deletion_vectors,
        )
        return json.dumps(doc, default=str, indent=2)


def _when(value: Any) -> str | None:
    """A metadata table's timestamp (UTC: icetide's sessions run in UTC) to the second."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def _utc(millis: int) -> datetime:
    """Epoch milliseconds as the naive UTC time Spark's metadata tables give (sessions run in UTC)."""
    return datetime.fromtimestamp(millis / 1000, UTC).replace(tzinfo=None)


def _values(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return dict(value.asDict()) if hasattr(value, "asDict") else dict(value)


def partition_labeller(jtable: Any) -> Callable[[int, dict[str, Any]], str]:
    """A function from (spec id, stored values by field name) to the partition's label; a partition
    of an earlier spec than the current one says so (`2026-01-01 [spec 0]`)."""
    specs = spec_transforms(jtable)
    current = int(jtable.spec().specId())

    def label(spec_id: int, values: dict[str, Any]) -> str:
        fields = specs.get(spec_id, [])
        text = label_of_values([t for _, t in fields], [values.get(name) for name, _ in fields])
        return text if spec_id == current else f"{text} [spec {spec_id}]"

    return label


@dataclass
class _Counts:
    """One partition's files by kind as the gatherers find them: (files, rows, bytes, small files)
    per kind ("data", "eq", "pos", "dv"), and the rows and files of data files a DV or file-scoped
    position delete applies to."""

    values: dict[str, Any]
    kinds: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    held: int = 0
    held_files: int = 0

    def add(self, kind: str, records: int, size: int, small: int) -> None:
        n, r, b, sm = self.kinds.get(kind, (0, 0, 0, 0))
        self.kinds[kind] = (n + 1, r + records, b + size, sm + small)


def table_health(
    spark: SparkSession,
    table: str,
    thresholds: HealthThresholds | None = None,
    *,
    partition_times: bool = True,
) -> TableHealth:
    """Read the table's metadata into a TableHealth, with maintenance suggestions.

    Only metadata is read (the `files`, `delete_files` and `partitions` tables; the snapshots
    through the Java API), never a data file. Deletion vectors are the position-delete files in
    Puffin format (content 1). Every live file is counted, a delete file that applies to no live
    data file too (`planned_health` leaves those out).
    `partition_times=False` leaves each partition's `last_updated` unset and skips the query
    behind it (a pass saves about 0.1 s).
    """
    t = thresholds or HealthThresholds()
    jtable = load_table(spark, table)
    specs = spec_transforms(jtable)
    partitioned = any(specs.values())
    label = partition_labeller(jtable)
    small_limit = int(target_file_size(jtable) * t.small_file_ratio)
    part_expr = "partition" if partitioned else "NULL"
    # One query: per partition and kind, the files, and the rows of data files a DV (or a
    # file-scoped position delete) applies to, found by joining the delete files' references.
    rows = spark.sql(
        f"SELECT f.spec_id, {part_expr.replace('partition', 'f.partition')} AS p, f.content, "
        f"upper(f.file_format) = 'PUFFIN' AS dv, count(*) AS n, "
        f"sum(f.record_count) AS records, sum(f.file_size_in_bytes) AS bytes, "
        f"sum(CASE WHEN f.content = 0 AND f.file_size_in_bytes < {small_limit} THEN 1 ELSE 0 END) AS small, "
        f"sum(CASE WHEN d.referenced_data_file IS NOT NULL THEN f.record_count ELSE 0 END) AS held, "
        f"sum(CASE WHEN d.referenced_data_file IS NOT NULL THEN 1 ELSE 0 END) AS held_files "
        f"FROM {table}.files f LEFT JOIN (SELECT DISTINCT referenced_data_file FROM {table}.delete_files "
        f"WHERE content = 1 AND referenced_data_file IS NOT NULL) d "
        f"ON f.content = 0 AND f.file_path = d.referenced_data_file GROUP BY 1, 2, 3, 4"
    ).collect()
    groups: dict[tuple[int, str], _Counts] = {}
    for r in rows:
        values = _values(r["p"])
        key = (int(r["spec_id"]), label(int(r["spec_id"]), values))
        g = groups.setdefault(key, _Counts(values))
        kind = {0: "data", 2: "eq"}.get(int(r["content"]), "dv" if r["dv"] else "pos")
        g.kinds[kind] = (int(r["n"]), int(r["records"] or 0), int(r["bytes"] or 0), int(r["small"] or 0))
        g.held += int(r["held"] or 0)
        g.held_files += int(r["held_files"] or 0)
    updated: dict[tuple[int, str], str] = {}
    if partitioned and partition_times:
        for r in spark.sql(f"SELECT spec_id, partition AS p, last_updated_at FROM {table}.partitions").collect():
            key = (int(r["spec_id"]), label(int(r["spec_id"]), _values(r["p"])))
            updated[key] = _when(r["last_updated_at"]) or ""
    return _health(table, jtable, t, groups, updated)


def planned_health(
    files: TableFiles, refs: Sequence[DataFileRef], deletes: Sequence[DeleteRef], thresholds: HealthThresholds
) -> TableHealth:
    """The TableHealth of a snapshot from the compaction planner's scan of it (`TableFiles.scan`:
    each live data file with the delete files that apply to it) and its live delete files
    (`TableFiles.live_deletes`), without a Spark job: what maintenance decides by.

    The counts are `table_health`'s. `dangling_delete_files` is known: the live delete files that
    apply to no live data file's scan task (by sequence number, partition or key bounds).
    Partition values are Iceberg's JSON of them (an hour's number, a day's date as text), and
    partitions' `last_updated` is not read."""
    jtable = files.table
    small_limit = int(target_file_size(jtable) * thresholds.small_file_ratio)
    groups: dict[tuple[int, str], _Counts] = {}

    def counts(partition: PartitionKey, path: str) -> _Counts:
        key = (partition[0], files.label_of(partition))
        if key not in groups:
            groups[key] = _Counts(files.partition_values(partition[0], files.facts[path]["partition"]))
        return groups[key]

    applying: set[str] = set()
    for f in refs:
        g = counts(f.partition, f.path)
        g.add("data", f.record_count, f.size, int(f.size < small_limit))
        if any(d.referenced_data_file == f.path for d in f.deletes):
            g.held += f.record_count
            g.held_files += 1
        applying.update(d.path for d in f.deletes)
    for d in deletes:
        kind = "eq" if d.kind == "equality" else ("dv" if "#" in d.path else "pos")
        scope = d.scope or (int(files.facts[d.path]["spec-id"]), "")  # a global equality delete
        counts(scope, d.path).add(kind, d.record_count, d.size, 0)
    dangling = sum(1 for d in deletes if d.path not in applying)
    return _health(files.table_name, jtable, thresholds, groups, {}, dangling=dangling)


def _health(
    table: str,
    jtable: Any,
    t: HealthThresholds,
    groups: dict[tuple[int, str], _Counts],
    updated: dict[tuple[int, str], str],
    *,
    dangling: int | None = None,
) -> TableHealth:
    specs = spec_transforms(jtable)
    partitions = []
    for key in sorted(groups, key=lambda k: (k[1], k[0]), reverse=True):
        g = groups[key]
        data, eq, pos, dv = (g.kinds.get(k, (0, 0, 0, 0)) for k in ("data", "eq", "pos", "dv"))
        partitions.append(
            PartitionHealth(
                label=key[1],
                values=g.values,
                spec_id=key[0],
                records=data[1],
                data_files=data[0],
                data_bytes=data[2],
                small_files=data[3],
                equality_delete_files=eq[0],
                equality_delete_rows=eq[1],
                position_delete_files=pos[0],
                position_delete_rows=pos[1],
                last_updated=updated.get(key) or None,
                deletion_vectors=dv[0],
                deletion_vector_rows=dv[1],
                vector_file_rows=g.held,
                vector_data_files=g.held_files,
            )
        )
    # The snapshots through the Java API: the metadata holds them, a Spark job would only list them.
    committed = [int(s.timestampMillis()) for s in java_list(jtable.snapshots())]
    current = [tr for _, tr in specs.get(int(jtable.spec().specId()), [])]
    target = target_file_size(jtable)
    health = TableHealth(
        table=table,
        target_file_size=target,
        snapshots=len(committed),
        oldest_snapshot=_when(_utc(min(committed))) if committed else None,
        newest_snapshot=_when(_utc(max(committed))) if committed else None,
        partitions=partitions,
        pipelines=all_pipeline_states(jtable),
        partitioned_by=partition_title(current),
        small_file_bytes=int(target * t.small_file_ratio),
        dangling_delete_files=dangling,
    )
    return replace(health, suggestions=suggestions(health, t))


def vectors_due(p: PartitionHealth, thresholds: HealthThresholds) -> bool:
    """Do the partition's files with a DV call for compaction (`HealthThresholds`)?"""
    if not p.vector_file_rows:
        return False
    rows, share = thresholds.max_vector_file_rows, thresholds.max_vector_deleted_share
    return (rows is not None and p.vector_file_rows >= rows) or (
        share is not None and p.deletion_vector_rows + p.position_delete_rows >= share * p.vector_file_rows
    )


def suggestions(health: TableHealth, thresholds: HealthThresholds) -> list[str]:
    """What maintenance would do next, newest partitions first."""
    out = []
    for p in health.partitions:  # newest first: partition labels sort by time for time transforms
        if p.small_files > thresholds.max_small_files:
            out.append(f"compact {p.label}: {p.small_files} small data files")
        deletes = p.delete_files
        if deletes > thresholds.max_delete_files or p.equality_delete_rows > thresholds.max_delete_rows:
            out.append(f"fold deletes in {p.label}: {deletes} delete files, {p.equality_delete_rows:,} equality rows")
        if vectors_due(p, thresholds):
            marked = p.deletion_vector_rows + p.position_delete_rows
            out.append(
                f"compact deletion vectors in {p.label}: {p.vector_file_rows:,} rows in files with a deletion "
                f"vector, {marked / p.vector_file_rows:.0%} of them deleted"
            )
    if health.snapshots > thresholds.max_snapshots:
        out.append(f"expire snapshots: {health.snapshots} > {thresholds.max_snapshots}")
    return out
