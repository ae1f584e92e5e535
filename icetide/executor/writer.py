"""The executor side of the sink: collapse one task's rows, write data and equality-delete files.

Runs inside Spark's Python workers through `mapInArrow`. No row leaves the executor: the task
yields one small metadata row per file it wrote, which is all the driver ever sees.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Protocol
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icetide.errors import BadOperationError, WriteError
from icetide.executor.file_metrics import FileStats, content_file_json, partition_json_value
from icetide.filesystems import filesystem_for, make_parent
from icetide.spark.worker_imports import keep_zip_directories
from icetide.table.spec import PartitionTransform
from icetide.write.arrow_sort import sort_indices
from icetide.write.collapse import ARRIVAL_COLUMN, collapse
from icetide.write.transforms import arrow_partition_values

log = logging.getLogger(__name__)

WRITER_ID = f"{socket.gethostname()}:{os.getpid()}"  # which process wrote a file, for debugging
DATA, EQUALITY_DELETES = "data", "equality_deletes"

WRITTEN_FILE_SCHEMA = pa.schema(
    [
        pa.field("content", pa.string()),
        pa.field("path", pa.string()),
        pa.field("partition", pa.list_(pa.string())),
        pa.field("record_count", pa.int64()),
        pa.field("file_size", pa.int64()),
        pa.field("writer", pa.string()),
        pa.field("metadata_json", pa.string()),
    ]
)
WRITTEN_FILE_DDL = (
    "content string, path string, partition array<string>, record_count long, file_size long, writer string, "
    "metadata_json string"
)


@dataclass(frozen=True)
class SpecLayout:
    """An earlier partition spec that still has live data files, and the batch columns holding its values."""

    spec_id: int
    columns: tuple[str, ...]  # batch columns holding this spec's partition values, spec order
    names: tuple[str, ...]
    types: tuple[str, ...]
    field_ids: tuple[int, ...]


@dataclass(frozen=True)
class WriterConfig:
    """Everything a writer task needs, computed once on the driver; plain picklable values."""

    table_schema: pa.Schema  # Arrow schema with Parquet field ids, in table column order
    key: tuple[str, ...]
    partition_columns: tuple[str, ...]  # batch columns holding partition values, spec order
    partition_names: tuple[str, ...]  # the spec's field names, for folder names
    partition_types: tuple[str, ...]  # Iceberg result types of the partition fields
    partition_field_ids: tuple[int, ...]
    spec_id: int
    equality_ids: tuple[int, ...]  # field ids of the key columns
    data_location: str
    pipeline_id: str
    batch_id: int
    order_by: str | None
    changelog: bool
    target_file_size: int
    row_group_bytes: int
    compression: str
    compression_level: int | None
    keep_inserts: bool = False  # append mode: a key's repeated INSERTs all stay (changelog.collapse)
    # Iceberg applies an equality delete only to data files of its own spec and partition (or
    # globally from an unpartitioned spec), so after a partition spec change every batch's deletes
    # are also written under each earlier spec that still has live data files.
    delete_specs: tuple[SpecLayout, ...] = ()

    def key_schema(self) -> pa.Schema:
        """Schema of the equality-delete files: the key columns with their field ids."""
        return pa.schema([self.table_schema.field(k) for k in self.key])


def file_prefix(pipeline_id: str, batch_id: int) -> str:
    """Start of every file name a batch writes; lets a crashed batch's files be found again."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", pipeline_id)
    return f"icetide-{safe}-b{batch_id:012d}-"


def partition_value_text(value: object, result_type: str) -> str | None:
    """A partition value in the form Iceberg's `Conversions.fromPartitionString` parses."""
    if value is None:
        return None
    if result_type == "boolean":
        return "true" if value else "false"
    if result_type == "date" and isinstance(value, date):
        return value.isoformat()
    if result_type in ("float", "double"):
        return repr(float(value))  # type: ignore[arg-type]
    return str(value)


def partition_folder(names: tuple[str, ...], texts: list[str | None]) -> str:
    """Hive-style folder for a partition; only a name, Iceberg reads values from metadata."""
    return "/".join(f"{n}={quote(t if t is not None else 'null', safe='')}" for n, t in zip(names, texts, strict=True))


class FileSettings(Protocol):
    """What `RollingFileWriter` needs of its configuration (a WriterConfig has it)."""

    @property
    def data_location(self) -> str: ...
    @property
    def target_file_size(self) -> int: ...
    @property
    def row_group_bytes(self) -> int: ...
    @property
    def compression(self) -> str: ...
    @property
    def compression_level(self) -> int | None: ...


class RollingFileWriter:
    """Writes one partition's rows of one kind into Parquet files rolled at the target size."""

    def __init__(self, config: FileSettings, schema: pa.Schema, folder: str, name_prefix: str) -> None:
        self.config = config
        self.schema = schema
        self.fs, base = filesystem_for(config.data_location)
        self.base_uri = config.data_location.rstrip("/")
        self.base_path = base.rstrip("/")
        self.folder = folder
        self.name_prefix = name_prefix
        self.written: list[tuple[str, int, FileStats]] = []  # (uri, bytes, statistics)
        self._sequence = 0

    def _open(self) -> tuple[str, pa.NativeFile, pq.ParquetWriter]:
        self._sequence += 1
        name = f"{self.name_prefix}{self._sequence:05d}.parquet"
        rel = f"{self.folder}/{name}" if self.folder else name
        path = f"{self.base_path}/{rel}"
        make_parent(self.fs, path)
        sink = self.fs.open_output_stream(path)
        writer = pq.ParquetWriter(
            sink,
            self.schema,
            compression=self.config.compression,
            compression_level=self.config.compression_level,
            write_statistics=True,
            # As the Iceberg spec maps decimal(P,S) and Iceberg's writers write it: INT32 up to
            # precision 9, INT64 up to 18, fixed bytes beyond (pyarrow writes fixed bytes for all).
            store_decimal_as_integer=True,
        )
        return f"{self.base_uri}/{rel}", sink, writer

    def write(self, table: pa.Table) -> None:
        """Write all rows, rolling to a new file whenever the current one reaches the target size."""
        if table.num_rows == 0:
            return
        bytes_per_row = max(1, table.nbytes // table.num_rows)
        group_bytes = min(self.config.row_group_bytes, self.config.target_file_size)
        chunk = int(min(1_000_000, max(1024, group_bytes // bytes_per_row)))
        uri, sink, writer = self._open()
        stats = FileStats(self.schema)
        for start in range(0, table.num_rows, chunk):
            if stats.records and sink.tell() >= self.config.target_file_size:
                writer.close()
                self.written.append((uri, sink.tell(), stats))
                sink.close()
                uri, sink, writer = self._open()
                stats = FileStats(self.schema)
            part = table.slice(start, chunk)
            writer.write_table(part, row_group_size=part.num_rows)
            stats.add(part)
        writer.close()
        self.written.append((uri, sink.tell(), stats))
        sink.close()


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rows in the table's column order and Arrow types, refusing nulls in required columns."""
    columns = []
    for field in schema:
        column = rows[field.name]
        if not field.nullable and column.null_count:
            raise WriteError(f"column {field.name!r} is NOT NULL in the table but {column.null_count} row(s) have null")
        columns.append(column.cast(field.type) if column.type != field.type else column)
    return pa.Table.from_arrays(columns, schema=schema)


def _groups(table: pa.Table, columns: tuple[str, ...]) -> Iterator[tuple[list[object], pa.Table]]:
    """Split a table by the values of `columns` (one group if there are none).

    One sort by the partition columns, then zero-copy slices of its runs: much cheaper than a
    hash group-by with list aggregation (1.6 s -> about 0.2 s for 1M rows in 48 partitions).
    """
    if table.num_rows == 0:
        return
    if not columns:
        yield [], table
        return
    order = sort_indices(table, columns, "at_end")
    ordered = table.take(order)
    changed = np.zeros(ordered.num_rows, dtype=bool)
    changed[0] = True
    for c in columns:
        col = ordered[c]
        head, tail = col.slice(0, len(col) - 1), col.slice(1)
        differs = pc.fill_null(pc.not_equal(head, tail), True)
        both_null = pc.and_(pc.is_null(head), pc.is_null(tail))
        differs = pc.and_(differs, pc.invert(both_null))
        changed[1:] |= differs.to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(changed)
    ends = np.append(starts[1:], ordered.num_rows)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        group = ordered.slice(start, end - start)
        yield [group[c][0].as_py() for c in columns], group


def write_task(batches: Iterator[pa.RecordBatch], config: WriterConfig, task_tag: str) -> pa.RecordBatch:
    """Collapse and write one task's rows; returns the metadata of every file written."""
    received = [b for b in batches if b.num_rows]
    out: dict[str, list[object]] = {f.name: [] for f in WRITTEN_FILE_SCHEMA}
    if not received:
        return pa.RecordBatch.from_pydict(out, schema=WRITTEN_FILE_SCHEMA)
    table = pa.Table.from_batches(received)
    try:
        collapsed = collapse(
            table,
            key=list(config.key),
            order_by=config.order_by,
            changelog=config.changelog,
            keep_inserts=config.keep_inserts,
        )
    except BadOperationError as exc:
        raise WriteError(str(exc)) from exc
    prefix = file_prefix(config.pipeline_id, config.batch_id) + task_tag
    keep = [*config.table_schema.names, *config.partition_columns]
    _write_groups(out, config, DATA, collapsed.rows.select(keep), config.table_schema, f"{prefix}-data-")
    deletes = collapsed.deletes.select([*config.key, *config.partition_columns])
    _write_groups(out, config, EQUALITY_DELETES, deletes, config.key_schema(), f"{prefix}-eqdel-")
    for layout in config.delete_specs:
        spec_config = dataclasses.replace(
            config,
            partition_columns=layout.columns,
            partition_names=layout.names,
            partition_types=layout.types,
            partition_field_ids=layout.field_ids,
            spec_id=layout.spec_id,
        )
        old = collapsed.deletes.select([*config.key, *layout.columns])
        _write_groups(
            out, spec_config, EQUALITY_DELETES, old, config.key_schema(), f"{prefix}-eqdel-s{layout.spec_id}-"
        )
    return pa.RecordBatch.from_pydict(out, schema=WRITTEN_FILE_SCHEMA)


def _write_groups(
    out: dict[str, list[object]], config: WriterConfig, content: str, rows: pa.Table, schema: pa.Schema, prefix: str
) -> None:
    """Write `rows` one partition at a time, rolling files at the target size; record each file in `out`."""
    iceberg_content = "DATA" if content == DATA else "EQUALITY_DELETES"
    equality_ids = None if content == DATA else list(config.equality_ids)
    for values, group in _groups(rows, config.partition_columns):
        texts = [partition_value_text(v, t) for v, t in zip(values, config.partition_types, strict=True)]
        partition = {
            fid: partition_json_value(v, t)
            for fid, v, t in zip(config.partition_field_ids, values, config.partition_types, strict=True)
        }
        folder = partition_folder(config.partition_names, texts)
        writer = RollingFileWriter(config, schema, folder, prefix)
        writer.write(_conform(group, schema))
        for uri, size, stats in writer.written:
            out["content"].append(content)
            out["path"].append(uri)
            out["partition"].append(texts)
            out["record_count"].append(stats.records)
            out["file_size"].append(size)
            out["writer"].append(WRITER_ID)
            out["metadata_json"].append(
                content_file_json(
                    content=iceberg_content,
                    path=uri,
                    spec_id=config.spec_id,
                    partition=partition,
                    file_size=size,
                    stats=stats,
                    equality_ids=equality_ids,
                )
            )


def write_appends(table: pa.Table, config: WriterConfig, task_tag: str) -> list[dict[str, object]]:
    """Write rows as data files only (no collapse, no deletes): an append's files, one dict each.

    `table` holds the table's columns and `config.partition_columns`; the dicts have the fields
    of WRITTEN_FILE_SCHEMA. Files are named like the sink's, so a crashed batch's are found again.
    """
    out: dict[str, list[object]] = {f.name: [] for f in WRITTEN_FILE_SCHEMA}
    if table.num_rows:
        prefix = file_prefix(config.pipeline_id, config.batch_id) + task_tag
        keep = [*config.table_schema.names, *config.partition_columns]
        _write_groups(out, config, DATA, table.select(keep), config.table_schema, f"{prefix}-data-")
    names = list(out)
    return [dict(zip(names, row, strict=True)) for row in zip(*out.values(), strict=True)]


def with_partition_values(rows: pa.Table, partitions: tuple[tuple[str, PartitionTransform | None], ...]) -> pa.Table:
    """`rows` with a column of partition values per (batch column, transform), computed in pyarrow."""
    for column, transform in partitions:
        source = rows[transform.column] if transform is not None else rows.column(0)
        rows = rows.append_column(column, arrow_partition_values(source, transform))
    return rows


def write_changes(
    changes: pa.Table,
    config: WriterConfig,
    partitions: tuple[tuple[str, PartitionTransform | None], ...],
    task_tag: str,
) -> list[dict[str, object]]:
    """Collapse one task's changes (table columns and `_op`, in arrival order) by key and write
    their data and equality-delete files, as the sink's writer tasks do; one dict per file, with
    the fields of WRITTEN_FILE_SCHEMA. Every change of a key in the batch must be in `changes`:
    an equality delete does not apply to the data files of its own commit."""
    if changes.num_rows == 0:
        return []
    changes = changes.append_column(ARRIVAL_COLUMN, pa.array(np.arange(changes.num_rows, dtype=np.int64)))
    out = write_task(iter(with_partition_values(changes, partitions).to_batches()), config, task_tag)
    names = out.schema.names
    return [dict(zip(names, row, strict=True)) for row in zip(*out.to_pydict().values(), strict=True)]


def writer_function(config: WriterConfig) -> object:
    """The function `mapInArrow` runs on each task."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        keep_zip_directories()
        ctx = TaskContext.get()
        tag = f"t{ctx.partitionId():05d}-a{ctx.attemptNumber()}" if ctx else "t00000-a0"
        yield write_task(batches, config, f"{tag}-{uuid.uuid4().hex[:8]}")

    return run


def remove_files(location: str, doomed: Callable[[str], bool]) -> int:
    """Delete the files under `location` whose names `doomed` picks; returns how many."""

    fs, base = filesystem_for(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except OSError as exc:  # the files stay behind, as orphans (maintenance/orphans.py)
        log.warning(
            "could not list %s to delete uncommitted files (%s); orphan removal deletes them once they are old",
            base,
            exc,
        )
        log.debug("listing %s failed", base, exc_info=True)
        return 0
    paths = [i.path for i in infos if i.type == pafs.FileType.File and doomed(i.base_name)]
    for path in paths:
        fs.delete_file(path)
    return len(paths)
