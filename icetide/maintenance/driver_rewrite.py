"""Small compaction units rewritten on the driver with Arrow instead of a Spark job.

A unit of a few megabytes (beside a stream: one small file per partition per commit, 40 partitions)
costs a Spark job about 1.5 s and 2-3 CPU s of scheduling, codegen and task start-up, more than
its bytes. Read with pyarrow on the driver, the same unit takes a fraction of that
(docs/design.md, "Small units on the driver"). This module does what `rewrite_files` does for
such a unit, and declines (returns None, and Spark does it) whatever it would not do exactly as
Spark's rewrite does:

- every input is a Parquet file of the table's current partition spec, and the table has no sort
  order (bin-pack keeps rows in file order; a sorted table's rewrite sorts);
- every column of the table's current schema is in every input, by field id, of the very type
  the table's writer writes (a file from before a schema change goes to Spark);
- equality deletes are matched exactly by value: none on float or nested columns or holding nulls
  (`equality_match.convertible`).

Each input's rows are read, the rows its deletes at the plan mark are dropped (deletion vectors
and position deletes by position, equality deletes by key: the FileScanTask lists exactly the
deletes that applied then), and what is left is written, in input order, into new files of the
same partition that no snapshot holds until the compaction commits. On format v3 the outputs
keep each row's lineage as Spark's rewrite does: `_row_id` (the file's value, else its
`first_row_id` + position) and `_last_updated_sequence_number` (the file's value, else its data
sequence number); maintenance/carry.py finds rows in the outputs by `_row_id`.
"""

from __future__ import annotations

import logging
import posixpath
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icetide.errors import one_line
from icetide.executor.file_metrics import FIELD_ID_KEY, content_file_json
from icetide.executor.writer import RollingFileWriter
from icetide.filesystems import filesystem_for
from icetide.maintenance.carry import ROW_ID_FIELD_ID
from icetide.maintenance.equality_match import convertible, deleted_positions
from icetide.maintenance.inventory import TableFiles
from icetide.maintenance.planning import DataFileRef, FileGroup, PartitionKey
from icetide.table.iceberg import arrow_schema, format_version, jvm, parquet_settings
from icetide.write.keys import columns_by_field_id, read_by_field_id
from icetide.write.vectors import marked_positions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LAST_UPDATED_FIELD_ID = 2147483539  # Iceberg's MetadataColumns.LAST_UPDATED_SEQUENCE_NUMBER
LINEAGE_FIELDS = (
    pa.field("_row_id", pa.int64(), metadata={FIELD_ID_KEY: str(ROW_ID_FIELD_ID).encode()}),
    pa.field("_last_updated_sequence_number", pa.int64(), metadata={FIELD_ID_KEY: str(LAST_UPDATED_FIELD_ID).encode()}),
)


class Declined(Exception):
    """This unit is not one the driver rewrites exactly as Spark would; Spark rewrites it."""


@dataclass(frozen=True)
class FileSettings:
    """Where and how the new files of one partition are written (`RollingFileWriter`)."""

    data_location: str
    target_file_size: int
    row_group_bytes: int
    compression: str
    compression_level: int | None


def _field_ids(schema: pa.Schema) -> dict[int, int]:
    """field id -> column index, for the top-level columns that carry one."""
    return {int(f.metadata[FIELD_ID_KEY]): i for i, f in enumerate(schema) if f.metadata and FIELD_ID_KEY in f.metadata}


class DriverRewrite:
    """One unit's rewrite on the driver; `run()` returns the staged Java DataFiles by partition.

    The inputs are described by the planner's facts (`TableFiles.facts`: Iceberg's JSON of each
    data and delete file), so the rewrite makes a handful of JVM calls per partition, not one per
    field of every file (a py4j call costs about 0.2 ms)."""

    def __init__(
        self, spark: SparkSession, table: Any, files: TableFiles, groups: Sequence[FileGroup], target: int
    ) -> None:
        self.spark = spark
        self.table = table
        self.files = files
        self.groups = groups
        self.target = target
        self.schema = arrow_schema(table.schema())
        self.lineage = format_version(table) >= 3
        self.out_schema = pa.schema([*self.schema, *LINEAGE_FIELDS]) if self.lineage else self.schema
        self._keys: dict[str, tuple[tuple[int, ...], pa.Table]] = {}  # equality delete -> (field ids, keys)
        self._written: list[str] = []  # every new file, to delete should the unit fail
        self._provider: Any = None  # the table's LocationProvider, asked for once
        self._parquet = parquet_settings(table)

    def _facts(self, path: str) -> dict[str, Any]:
        fields = self.files.facts.get(path)
        if fields is None:
            raise Declined(f"{path} is not among the planned files")
        return fields

    def check(self) -> None:
        """Raise Declined when Spark should rewrite this unit (module docstring)."""
        if not self.table.sortOrder().isUnsorted():
            raise Declined("the table has a sort order")
        current = int(self.table.spec().specId())
        for f in (f for g in self.groups for f in g.files):
            fields = self._facts(f.path)
            if int(fields["spec-id"]) != current or str(fields["file-format"]).lower() != "parquet":
                raise Declined(f"{f.path} is not a Parquet file of the current spec")
            for d in f.deletes:
                if d.kind == "equality":
                    self._equality_keys(d.path)

    def _equality_keys(self, path: str) -> tuple[tuple[int, ...], pa.Table]:
        known = self._keys.get(path)
        if known is None:
            fields = self._facts(path)
            ids = tuple(int(i) for i in fields["equality-ids"])
            keys = read_by_field_id(fields["file-path"], ids)
            why = convertible(keys)
            if why is not None:
                raise Declined(f"equality delete {path}: {why}")
            known = self._keys[path] = (ids, keys)
        return known

    def run(self) -> dict[PartitionKey, list[Any]]:
        """Write every partition's rows into new files; the staged Java DataFiles by partition.
        On any failure the files written so far are deleted and the error raised."""
        self.check()
        try:
            written = {g.partition: self._rewrite_group(g) for g in self.groups}
            files = iter(self._data_files([doc for docs in written.values() for doc in docs]))
            return {key: [next(files) for _ in docs] for key, docs in written.items()}
        except BaseException:
            io = self.table.io()
            for location in self._written:
                try:
                    io.deleteFile(location)
                except Exception:
                    log.debug("could not delete %s", location, exc_info=True)
            raise

    def _rewrite_group(self, group: FileGroup) -> list[str]:
        """Write the group's live rows into new files; Iceberg's JSON of each (ContentFileParser)."""
        rows = pa.concat_tables([self._live_rows(f) for f in group.files])
        first = self._facts(group.files[0].path)
        spec = self.files.spec(int(first["spec-id"]))
        name = f"icetide-compaction-{uuid.uuid4().hex}-"
        java_partition = self.files.tasks[group.files[0].path].file().partition()
        folder = posixpath.dirname(str(self._locations().newDataLocation(spec, java_partition, name)))
        p = self._parquet
        settings = FileSettings(folder, self.target, p.row_group_bytes, p.compression, p.compression_level)
        writer = RollingFileWriter(settings, self.out_schema, "", name)
        try:
            writer.write(rows)
        finally:
            self._written.extend(uri for uri, _, _ in writer.written)
        spec_id = int(first["spec-id"])
        ids = dict((name, i) for i, name in self.files.partition_fields(spec_id))
        values = self.files.partition_values(spec_id, first["partition"])
        log.debug("driver rewrite: %d rows into %d file(s) in %s", rows.num_rows, len(writer.written), folder)
        return [
            content_file_json(
                content="data",
                path=uri,
                spec_id=spec_id,
                partition={ids[name]: v for name, v in values.items()},
                file_size=size,
                stats=stats,
            )
            for uri, size, stats in writer.written
        ]

    def _locations(self) -> Any:
        if self._provider is None:
            self._provider = self.table.locationProvider()
        return self._provider

    def _data_files(self, docs: list[str]) -> list[Any]:
        """The Java DataFiles of Iceberg's JSON of files: one parse, then one call a file."""
        j = jvm(self.spark)
        nodes = j.org.apache.iceberg.util.JsonUtil.mapper().readTree("[" + ",".join(docs) + "]")
        parser, specs = j.org.apache.iceberg.ContentFileParser, self.table.specs()
        return [parser.fromJson(nodes.get(i), specs) for i in range(len(docs))]

    def _live_rows(self, f: DataFileRef) -> pa.Table:
        """The file's rows in the output schema, with the rows its deletes at the plan mark dropped."""
        fs, path = filesystem_for(f.path)
        with fs.open_input_file(path) as handle:
            rows = pq.ParquetFile(handle).read()
        by_id = _field_ids(rows.schema)
        columns = []
        for field in self.schema:
            at = by_id.get(int(field.metadata[FIELD_ID_KEY]))
            if at is None or rows.schema.field(at).type != field.type:
                raise Declined(f"{f.path} does not hold column {field.name} as {field.type}")
            columns.append(rows.column(at).cast(field.type))
        if self.lineage:
            columns.extend(self._lineage(f, rows, by_id))
        out = pa.Table.from_arrays(columns, schema=self.out_schema)
        dropped = self._deleted(f, rows)
        if not len(dropped):
            return out
        keep = np.ones(out.num_rows, dtype=bool)
        keep[dropped] = False
        return out.filter(pa.array(keep))

    def _lineage(self, f: DataFileRef, rows: pa.Table, by_id: dict[int, int]) -> list[pa.Array]:
        """`_row_id` and `_last_updated_sequence_number` of every row of the file, as Spark's
        reader gives them: the file's value, else what the file's metadata says for it."""
        n = rows.num_rows
        first = self._facts(f.path).get("first-row-id")
        inherited = (
            pa.array(np.arange(n, dtype=np.int64) + int(first)) if first is not None else pa.nulls(n, pa.int64())
        )
        fallback = pa.array(np.full(n, f.sequence_number, dtype=np.int64))
        out = []
        for field_id, default in ((ROW_ID_FIELD_ID, inherited), (LAST_UPDATED_FIELD_ID, fallback)):
            at = by_id.get(field_id)
            stored = rows.column(at).combine_chunks().cast(pa.int64()) if at is not None else None
            out.append(default if stored is None else pc.coalesce(stored, default))
        return out

    def _deleted(self, f: DataFileRef, rows: pa.Table) -> np.ndarray:
        """Sorted positions of the file that its deletes at the plan mark."""
        marked: list[np.ndarray] = []
        by_ids: dict[tuple[int, ...], list[pa.Table]] = {}
        for d in f.deletes:
            if d.kind == "position":
                fields = self._facts(d.path)
                offset, size = fields.get("content-offset"), fields.get("content-size-in-bytes")
                marked.append(marked_positions(fields["file-path"], f.path, offset=offset, size=size))
            else:
                ids, keys = self._equality_keys(d.path)
                by_ids.setdefault(ids, []).append(keys)
        for ids, keys in by_ids.items():
            data_keys = columns_by_field_id(rows, ids)
            marked.append(np.asarray(deleted_positions(data_keys, keys).to_numpy(zero_copy_only=False), np.int64))
        if not marked:
            return np.zeros(0, np.int64)
        positions = np.unique(np.concatenate(marked))
        return positions[positions < rows.num_rows]


def rewrite_on_driver(
    spark: SparkSession, table: Any, groups: Sequence[FileGroup], files: TableFiles, *, limit: int
) -> dict[PartitionKey, list[Any]] | None:
    """The new files (staged Java DataFiles) of a unit of compaction groups, by partition, written
    on the driver; `files` is the planner's view of the table (its FileScanTasks and facts). None
    when Spark is to rewrite the unit: its input (data and delete files) is above `limit` bytes,
    or the driver declines it (module docstring) or fails (what it wrote is deleted); the reason
    is logged."""
    weight = sum(f.size + sum(d.size for d in f.deletes) for g in groups for f in g.files)
    if not groups or weight > limit:
        return None
    target = max(g.write_max_file_size for g in groups)
    try:
        return DriverRewrite(spark, table, files, groups, target).run()
    except Declined as why:
        log.debug("a compaction unit left to Spark: %s", why)
    except Exception as exc:
        log.info("compaction of %s: the driver's rewrite failed (%s); a Spark job does it", table.name(), one_line(exc))
        log.debug("driver rewrite failed", exc_info=True)
    return None
