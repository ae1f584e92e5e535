"""The key index of `deletes="vectors"`: where each live row of a table is, by key.

Maps every live key to (data file, row position), at one snapshot of the table, so a batch finds
the rows it replaces by looking its keys up, not by reading the table. It is derived from the
table only, and always rebuildable from it:

- `build` reads the key columns of every live data file at the current snapshot with pyarrow,
  less its DV's positions (through Spark, which applies them, when equality deletes apply): the
  one step whose cost follows the table, run when a process starts writing without a usable
  persisted copy (`key_index_copy.py`) and whenever catching up cannot (an equality delete from
  another writer, the snapshot it was at expired or rolled back).
- `catch_up` walks the snapshots committed since, oldest first, whoever made them (this
  stream's own batches, compaction, delete folding, Spark's DELETE): removed data files drop
  their rows, added data files add theirs (key columns read with pyarrow, row i at position i),
  added DVs drop the positions they mark. Its cost follows what those commits added.

It also knows each live data file's Java DataFile and current DV, which a new DV needs (its
spec and partition; the earlier DV it merges and removes). Memory: the key columns plus 8 bytes
of position and a file path reference per row (docs/design.md).
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from icetide.errors import ConfigError
from icetide.spark.py4j_collections import java_iter
from icetide.table.iceberg import iceberg_catalog, jvm, key_field_ids, split_name
from icetide.write.key_runs import KeyRuns, file_and_position, where_of
from icetide.write.keys import read_by_field_id
from icetide.write.vectors import earlier_positions, is_vector

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SNAPSHOT_WALK_LIMIT = 10_000
# How Spark gives each supported key type in the index's form: integers and dates as int64,
# timestamps as microseconds since the epoch (what `keys.canonical` makes of a file's column).
_SPARK_FORMS = {
    "INTEGER": "CAST(`{c}` AS BIGINT)",
    "LONG": "CAST(`{c}` AS BIGINT)",
    "DATE": "CAST(unix_date(`{c}`) AS BIGINT)",
    "STRING": "`{c}`",
}


class IndexOutOfDate(Exception):
    """Catching up cannot follow a commit (or the snapshot is gone): build the index again."""


def _same_blob(a: Any, b: Any) -> bool:
    """Are two Java DeleteFiles the same DV (one Puffin file holds many, at different offsets)?"""
    return str(a.location()) == str(b.location()) and a.contentOffset() == b.contentOffset()


def index_form(keys: pa.Table) -> pa.Table:
    """Canonical key columns (`keys.columns_by_field_id`) in the index's form: integers and dates
    as int64, timestamps (already int64 microseconds) and strings as they are."""
    columns = {}
    for name, column in zip(keys.column_names, keys.columns, strict=True):
        dtype = column.type
        if pa.types.is_date32(dtype):
            column = column.cast(pa.int32()).cast(pa.int64())
        elif pa.types.is_integer(dtype):
            column = column.cast(pa.int64())
        elif not pa.types.is_string(dtype):
            raise ConfigError(f"deletes: vectors needs key columns of integer, string, date or timestamp type ({name})")
        columns[name] = column
    return pa.table(columns)


def spark_form(field: Any) -> str:
    """The Spark SQL expression giving a key column (a Java NestedField) in the index's form;
    ConfigError for a type the index does not take."""
    type_id = field.type().typeId().toString()
    if type_id == "TIMESTAMP" and field.type().shouldAdjustToUTC():
        return f"unix_micros(`{field.name()}`)"
    if type_id in _SPARK_FORMS:
        return _SPARK_FORMS[type_id].format(c=field.name())
    raise ConfigError(
        f"deletes: vectors needs key columns of integer, string, date or timestamp type; "
        f"{field.name()} is {type_id.lower()}"
    )


class KeyIndex:
    """key -> (data file, position) of every live row of one table, at `snapshot_id`."""

    def __init__(self, field_ids: list[int], snapshot_id: int | None) -> None:
        self.field_ids = field_ids
        self.names = [f"f{i}" for i in field_ids]
        self.snapshot_id = snapshot_id
        self.runs = KeyRuns(self.names)
        self.paths: list[str] = []  # file id -> data file path
        self.ids: dict[str, int] = {}
        self.data_files: dict[str, Any] = {}  # path -> Java DataFile, every live data file
        self.vectors: dict[str, Any] = {}  # data file path -> its current DV (Java DeleteFile)
        # data file path -> the positions its current DV marks, for the DVs whose positions the
        # index has seen (read while catching up, or given by the stream that wrote them): the
        # next DV of the file merges them without reading the blob again
        self.vector_positions: dict[str, np.ndarray] = {}

    @property
    def rows(self) -> pa.Table:
        """Every live row as a table: the key columns, `file` (id, int32) and `pos` (int64)."""
        return self.runs.table()

    @rows.setter
    def rows(self, table: pa.Table) -> None:
        self.runs = KeyRuns(self.names)
        files = table["file"].to_numpy().astype(np.int64) if table.num_rows else np.zeros(0, np.int64)
        positions = table["pos"].to_numpy() if table.num_rows else np.zeros(0, np.int64)
        self.runs.add(table.select(self.names), where_of(files, positions))

    # -- building ---------------------------------------------------------------------------

    @classmethod
    def build(cls, spark: SparkSession, table_name: str, jtable: Any) -> KeyIndex:
        """Read the index from the table at its current snapshot (cost follows the table).

        Without equality deletes (a table the stream has always written with DVs), each live data
        file's key columns are read with pyarrow and its DV's positions dropped, as catching up
        does. With equality deletes, Spark applies them: it reads the key columns with `_pos` and
        a file id (the path joined to its id in Spark, so a row costs about 20 bytes of the
        driver's result, not its path's 100; a 10M-row table's paths passed the 1 GiB default
        of spark.driver.maxResultSize)."""
        ids = key_field_ids(jtable)
        schema = jtable.schema()
        snapshot = jtable.currentSnapshot()
        index = cls(ids, int(snapshot.snapshotId()) if snapshot is not None else None)
        if snapshot is None:
            return index
        exprs = [f"{spark_form(schema.findField(i))} AS {name}" for i, name in zip(ids, index.names, strict=True)]
        if index.resolve_files(table_name, jtable):
            index._read_through_spark(spark, table_name, exprs)
        else:
            index._read_files()
        log.info(
            "built the key index of %s at snapshot %s: %d keys", table_name, index.snapshot_id, index.runs.live_rows()
        )
        return index

    def _read_files(self) -> None:
        """The key columns of every live data file, less the positions of its DV."""
        parts = [self._file_rows(f) for f in self.data_files.values()]
        if parts:
            self.runs.add(pa.concat_tables([k for k, _ in parts]), np.concatenate([w for _, w in parts]))
        self.vector_positions = {path: earlier_positions(d, path) for path, d in self.vectors.items()}
        marked = [
            where_of(np.full(len(p), self.file_id(path), np.int64), p)
            for path, p in self.vector_positions.items()
            if len(p)
        ]
        if marked:
            self.runs.kill(np.concatenate(marked))

    def _read_through_spark(self, spark: SparkSession, table_name: str, exprs: list[str]) -> None:
        """The live rows' keys as Spark reads them at `snapshot_id`, every delete applied."""
        from pyspark.sql import functions as F

        catalog, identifier = split_name(table_name)  # Spark's cached table may not know the snapshot yet
        iceberg_catalog(spark, catalog).invalidateTable(
            jvm(spark).org.apache.iceberg.catalog.TableIdentifier.parse(identifier)
        )
        ids = spark.createDataFrame([(p, self.file_id(p)) for p in self.data_files], "path STRING, file INT")
        df = (
            spark.read.format("iceberg")
            .option("versionAsOf", str(self.snapshot_id))
            .load(table_name)
            .selectExpr(*exprs, "_file AS path", "_pos AS pos")
            .join(F.broadcast(ids), "path")
            .select(*self.names, "file", "pos")
        )
        rows = pa.Table.from_pandas(df.toPandas(), preserve_index=False)
        if rows.num_rows:
            where = where_of(rows["file"].to_numpy().astype(np.int64), rows["pos"].cast(pa.int64()).to_numpy())
            self.runs.add(index_form(rows.select(self.names)), where)

    def resolve_files(self, table_name: str, jtable: Any) -> bool:
        """Fill `data_files` and `vectors` from the manifests of `snapshot_id` (a scan plan: its
        cost follows the number of files, not of rows); True when equality deletes apply to some
        data file. ConfigError when a data file still has Parquet position deletes from before
        format v3."""
        self.data_files, self.vectors, self.vector_positions = {}, {}, {}
        equality = False
        tasks = jtable.newScan().useSnapshot(self.snapshot_id).planFiles()
        try:
            for task in java_iter(tasks):
                data_file = task.file().copy()
                path = str(data_file.location())
                self.data_files[path] = data_file
                for d in java_iter(task.deletes()):
                    if is_vector(d):
                        self.vectors[path] = d.copy()
                    elif d.content().toString() == "POSITION_DELETES":
                        raise ConfigError(
                            f"deletes: vectors: {table_name} still has position-delete files from before format v3; "
                            "compact it first (icetide maintain)"
                        )
                    else:
                        equality = True
        finally:
            tasks.close()
        return equality

    # -- following commits ------------------------------------------------------------------

    def catch_up(self, spark: SparkSession, jtable: Any, own: tuple[int, dict[str, np.ndarray]] | None = None) -> int:
        """Apply every snapshot after `snapshot_id` up to the table's current one; returns how many.
        Raises IndexOutOfDate when it cannot (then `build` again). `own`: a snapshot id this
        process committed and the positions of the DVs it added, by data file: those DVs are not
        read back."""
        chain = []
        snapshot = jtable.currentSnapshot()
        while snapshot is not None and (self.snapshot_id is None or int(snapshot.snapshotId()) != self.snapshot_id):
            chain.append(snapshot)
            if len(chain) > SNAPSHOT_WALK_LIMIT:
                raise IndexOutOfDate("too many snapshots to catch up")
            parent = snapshot.parentId()
            snapshot = jtable.snapshot(parent) if parent is not None else None
        if snapshot is None and self.snapshot_id is not None:
            raise IndexOutOfDate(f"snapshot {self.snapshot_id} is no longer an ancestor of the current one")
        io = jtable.io()
        for s in reversed(chain):
            added_deletes = [d.copy() for d in java_iter(s.addedDeleteFiles(io))]
            if any(not is_vector(d) for d in added_deletes):
                raise IndexOutOfDate(f"snapshot {s.snapshotId()} added equality or position-delete files")
            for d in java_iter(s.removedDeleteFiles(io)):  # a DV replaced or dropped: no longer the file's
                current = self.vectors.get(str(d.referencedDataFile())) if is_vector(d) else None
                if current is not None and _same_blob(current, d):
                    del self.vectors[str(d.referencedDataFile())]
                    self.vector_positions.pop(str(d.referencedDataFile()), None)
            self._drop_files({str(f.location()) for f in java_iter(s.removedDataFiles(io))})
            added = [self._file_rows(f.copy()) for f in java_iter(s.addedDataFiles(io))]
            if added:
                self.runs.add(pa.concat_tables([k for k, _ in added]), np.concatenate([w for _, w in added]))
            marked = []
            known = own[1] if own is not None and own[0] == int(s.snapshotId()) else {}
            for d in added_deletes:
                referenced = str(d.referencedDataFile())
                self.vectors[referenced] = d
                positions = known.get(referenced)
                if positions is None:
                    positions = earlier_positions(d, referenced)
                self.vector_positions[referenced] = positions
                marked.append(where_of(np.full(len(positions), self.file_id(referenced), np.int64), positions))
            if marked:
                self.runs.kill(np.concatenate(marked))
            self.snapshot_id = int(s.snapshotId())
        return len(chain)

    def file_id(self, path: str) -> int:
        """The id rows of data file `path` carry in the index (assigned on first sight)."""
        known = self.ids.get(path)
        if known is None:
            known = self.ids[path] = len(self.paths)
            self.paths.append(path)
        return known

    def _drop_files(self, paths: set[str]) -> None:
        self.runs.kill_files([self.ids[p] for p in paths if p in self.ids])
        for path in paths:
            self.data_files.pop(path, None)
            self.vectors.pop(path, None)
            self.vector_positions.pop(path, None)

    def _file_rows(self, data_file: Any) -> tuple[pa.Table, np.ndarray]:
        """A data file's keys (index form; row i at position i) and their `where`."""
        path = str(data_file.location())
        self.data_files[path] = data_file
        keys = index_form(read_by_field_id(path, self.field_ids))
        n = keys.num_rows
        return keys, where_of(np.full(n, self.file_id(path), np.int64), np.arange(n, dtype=np.int64))

    # -- size -------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """The bytes this index holds in Python: its rows' Arrow buffers (each buffer once, as
        allocated, not as sliced), its file paths and the DV positions it knows. The Java
        DataFiles and DVs live in the JVM (one of each per live data file) and are not counted."""
        paths = sys.getsizeof(self.paths) + sys.getsizeof(self.ids) + sum(sys.getsizeof(p) for p in self.paths)
        return self.runs.nbytes() + paths + sum(p.nbytes for p in self.vector_positions.values())

    # -- lookups ----------------------------------------------------------------------------

    def locate(self, keys: pa.Table) -> dict[str, np.ndarray]:
        """data file path -> sorted positions of the live rows holding any of `keys` (index form)."""
        files, positions = file_and_position(self.runs.find(keys))  # sorted by file, then position
        if not len(files):
            return {}
        ids, starts = np.unique(files, return_index=True)
        ends = [*starts[1:].tolist(), len(files)]
        return {self.paths[int(i)]: positions[a:b] for i, a, b in zip(ids.tolist(), starts.tolist(), ends, strict=True)}
