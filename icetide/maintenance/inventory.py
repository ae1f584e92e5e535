"""A table's files as plain values, read through Iceberg's Java API on the driver.

`TableFiles` turns a snapshot's FileScanTasks into `DataFileRef`/`DeleteRef` values for the
planner and keeps the Java objects a later commit needs (the tasks to rewrite, the delete files
to drop). `changes_since` tells what later snapshots did to the files of an earlier one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, SnapshotGoneError, one_line
from icetide.maintenance.deletes import LiveDataFile
from icetide.maintenance.planning import DataFileRef, DeleteRef, PartitionKey
from icetide.spark.py4j_collections import java_iter, java_list
from icetide.table.iceberg import SpecTransforms, jvm, key_columns, spec_transforms
from icetide.table.partition_labels import label_of_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SNAPSHOT_WALK_LIMIT = 10_000


def delete_key(delete_file: Any) -> str:
    """What identifies a Java DeleteFile: its location, or `location#offset` for a deletion vector
    (a Puffin file holds the DVs of many data files, each a blob at its own offset)."""
    offset = delete_file.contentOffset()
    location = str(delete_file.location())
    return location if offset is None else f"{location}#{int(offset)}"


@dataclass
class SnapshotChanges:
    """What the snapshots after a given one did to data and delete files."""

    snapshots: list[int] = field(default_factory=list)
    removed_data: dict[str, int] = field(default_factory=dict)  # path -> snapshot that removed it
    removed_deletes: set[str] = field(default_factory=set)
    added_data: list[LiveDataFile] = field(default_factory=list)


class TableFiles:
    """Reads one table's files as plain values; remembers the Java objects behind them."""

    def __init__(self, spark: SparkSession, table_name: str, jtable: Any) -> None:
        self.spark = spark
        self.table_name = table_name
        self.table = jtable
        self.tasks: dict[str, Any] = {}  # data file path -> FileScanTask
        self.delete_files: dict[str, Any] = {}  # delete file path -> Java DeleteFile
        self._delete_refs: dict[str, DeleteRef] = {}
        # data file path, or delete key (`delete_key`) -> Iceberg's JSON of the file (ContentFileParser)
        self.facts: dict[str, dict[str, Any]] = {}
        self._specs: dict[int, Any] = {}
        self._fields: dict[int, list[tuple[int, str]]] = {}
        self._partition_keys: dict[tuple[int, str], PartitionKey] = {}
        self._parser = jvm(spark).org.apache.iceberg.ContentFileParser
        self._transforms: dict[int, SpecTransforms] | None = None
        self._current_spec = 0

    def scan(self, snapshot_id: int, *, predicate: str | None = None, keep_tasks: bool = True) -> list[DataFileRef]:
        """Every live data file of the snapshot (those that may match `predicate`, a SQL filter).

        Rows are never filtered (residuals are ignored): a task covers its whole file. The key
        columns' bounds are kept on the files, so a commit replacing them can be validated
        against later deletes precisely.
        """
        scan = self.table.newScan().useSnapshot(snapshot_id).ignoreResiduals()
        key = key_columns(self.table)
        if key:
            names = jvm(self.spark).java.util.ArrayList()
            for name in key:
                names.add(name)
            scan = scan.includeColumnStats(names)
        if predicate is not None:
            scan = scan.filter(self.iceberg_filter(predicate))
        refs = []
        tasks = scan.planFiles()
        try:
            for task in java_iter(tasks):
                data_file = task.file()
                # One call for what the planner needs of the file, not one per field.
                fields = json.loads(str(self._parser.toJson(data_file, task.spec())))
                path = fields["file-path"]
                sequence = fields.get("data-sequence-number")  # written for v3 data files only
                if sequence is None:
                    sequence = data_file.dataSequenceNumber()
                partition = self._partition_of(fields, data_file)
                refs.append(
                    DataFileRef(
                        path=path,
                        size=int(fields["file-size-in-bytes"]),
                        record_count=int(fields["record-count"]),
                        sequence_number=int(sequence) if sequence is not None else 0,
                        partition=partition,
                        deletes=tuple(self._delete_ref(d) for d in java_list(task.deletes())),
                        partition_label=self.label_of(partition),
                    )
                )
                self.facts[path] = fields
                if keep_tasks:
                    self.tasks[path] = task
        finally:
            tasks.close()
        return refs

    def live_deletes(self, snapshot_id: int, *, equality_only: bool = False) -> list[DeleteRef]:
        """Every delete file live in the snapshot (or only the equality deletes), whether or not it
        applies to a data file (reads the delete manifests only)."""
        snapshot = self.table.snapshot(snapshot_id)
        reader = jvm(self.spark).org.apache.iceberg.ManifestFiles
        refs = []
        for manifest in java_iter(snapshot.deleteManifests(self.table.io())):
            files = reader.readDeleteManifest(manifest, self.table.io(), self.table.specs())
            try:
                for f in java_iter(files):
                    if not equality_only or f.content().toString() == "EQUALITY_DELETES":
                        refs.append(self._delete_ref(f.copy()))
            finally:
                files.close()
        return refs

    def keep_only(self, data_paths: Iterable[str], delete_paths: Iterable[str]) -> None:
        """Forget the Java objects of every other file (they pin JVM memory through py4j)."""
        data, deletes = set(data_paths), set(delete_paths)
        self.tasks = {p: t for p, t in self.tasks.items() if p in data}
        self.delete_files = {p: d for p, d in self.delete_files.items() if p in deletes}
        self.facts = {p: f for p, f in self.facts.items() if p in data or p in deletes}

    def iceberg_filter(self, predicate: str) -> Any:
        """An Iceberg expression for a Spark SQL predicate on the table's columns."""
        package = jvm(self.spark).org.apache.spark.sql.execution.datasources
        module = getattr(getattr(package, "SparkExpressionConverter$"), "MODULE$")
        try:
            expression = module.collectResolvedSparkExpression(self.spark._jsparkSession, self.table_name, predicate)
            return module.convertToIcebergExpression(expression)
        except Exception as exc:
            log.debug("partition_filter %r", predicate, exc_info=True)
            raise ConfigError(f"partition_filter: {predicate!r} is not a usable filter: {one_line(exc)}") from exc

    def partition_key(self, content_file: Any) -> PartitionKey:
        """(spec id, partition path) of a data or delete file."""
        spec_id = int(content_file.specId())
        spec = self.spec(spec_id)
        return (spec_id, "" if spec.isUnpartitioned() else str(spec.partitionToPath(content_file.partition())))

    def _partition_of(self, fields: dict[str, Any], content_file: Any) -> PartitionKey:
        """`partition_key` of a file whose ContentFileParser JSON is `fields`: Iceberg's partition
        path is asked for once per distinct partition value, not once per file."""
        seen = (int(fields["spec-id"]), json.dumps(fields.get("partition")))
        known = self._partition_keys.get(seen)
        if known is None:
            known = self._partition_keys[seen] = self.partition_key(content_file)
        return known

    def label_of(self, partition: PartitionKey) -> str:
        """A partition as people read it (`2026-01-01 05:00`, `bucket[16]=3`); a partition of an
        earlier spec than the current one says so (`... [spec 0]`)."""
        spec_id, path = partition
        if self._transforms is None:
            self._transforms = spec_transforms(self.table)
            self._current_spec = int(self.table.spec().specId())
        fields = self._transforms.get(spec_id, [])
        text = label_of_path([t for _, t in fields], path)
        return text if spec_id == self._current_spec else f"{text} [spec {spec_id}]"

    def spec(self, spec_id: int) -> Any:
        """The table's Java PartitionSpec of this id (asked once)."""
        if spec_id not in self._specs:
            self._specs[spec_id] = self.table.specs().get(spec_id)
        return self._specs[spec_id]

    def partition_fields(self, spec_id: int) -> list[tuple[int, str]]:
        """The (field id, name) of a spec's partition fields, in spec order (asked once)."""
        known = self._fields.get(spec_id)
        if known is None:
            fields = java_list(self.spec(spec_id).fields())
            known = self._fields[spec_id] = [(int(pf.fieldId()), str(pf.name())) for pf in fields]
        return known

    def partition_values(self, spec_id: int, stored: Any) -> dict[str, Any]:
        """A partition's values by field name, from Iceberg's JSON of a file's partition: the
        values in spec order (Iceberg 1.11 and later), or by field id (before)."""
        fields = self.partition_fields(spec_id)
        if isinstance(stored, list):
            return {name: v for (_, name), v in zip(fields, stored, strict=True)}
        names = dict(fields)
        return {names[int(k)]: v for k, v in (stored or {}).items()}

    def _delete_ref(self, delete_file: Any) -> DeleteRef:
        spec = self.spec(int(delete_file.specId()))
        fields = json.loads(str(self._parser.toJson(delete_file, spec)))
        offset = fields.get("content-offset")
        path = fields["file-path"] if offset is None else f"{fields['file-path']}#{int(offset)}"  # as delete_key
        known = self._delete_refs.get(path)
        if known is not None:
            return known
        equality = fields["content"] in ("equality-deletes", "EQUALITY_DELETES")  # 1.11+, and before
        ref = DeleteRef(
            path=path,
            kind="equality" if equality else "position",
            sequence_number=int(delete_file.dataSequenceNumber()),
            scope=None if equality and spec.isUnpartitioned() else self._partition_of(fields, delete_file),
            record_count=int(fields["record-count"]),
            size=int(fields["file-size-in-bytes"]),
            referenced_data_file=None if equality else fields.get("referenced-data-file"),
        )
        self._delete_refs[path] = ref
        self.delete_files[path] = delete_file
        self.facts[path] = fields
        return ref

    def changes_since(self, snapshot_id: int, *, with_deletes: bool) -> SnapshotChanges:
        """What every snapshot after `snapshot_id` (up to the current one) did to the files.

        Removed data files always; removed delete files and added data files (with their data
        sequence numbers) only `with_deletes`. Raises SnapshotGoneError if `snapshot_id` is not
        an ancestor of the current snapshot. Call `table.refresh()` first.
        """
        chain = []
        snapshot = self.table.currentSnapshot()
        while snapshot is not None and int(snapshot.snapshotId()) != snapshot_id:
            chain.append(snapshot)
            if len(chain) > SNAPSHOT_WALK_LIMIT:
                snapshot = None
                break
            parent = snapshot.parentId()
            snapshot = self.table.snapshot(parent) if parent is not None else None
        if snapshot is None:
            raise SnapshotGoneError(
                f"snapshot {snapshot_id} is no longer an ancestor of the current one (rolled back or expired)"
            )
        changes = SnapshotChanges()
        io = self.table.io()
        for s in reversed(chain):
            sid = int(s.snapshotId())
            changes.snapshots.append(sid)
            for f in java_iter(s.removedDataFiles(io)):
                changes.removed_data[str(f.location())] = sid
            if not with_deletes:
                continue
            for f in java_iter(s.removedDeleteFiles(io)):
                changes.removed_deletes.add(delete_key(f))
            for f in java_iter(s.addedDataFiles(io)):
                sequence = f.dataSequenceNumber()
                seq = int(sequence) if sequence is not None else 0  # unknown: treat as the oldest
                changes.added_data.append(LiveDataFile(str(f.location()), seq, self.partition_key(f)))
        return changes

    def find_snapshot(self, summary_key: str, value: str) -> int | None:
        """The newest snapshot whose summary has `summary_key` = `value`, or None."""
        snapshot = self.table.currentSnapshot()
        for _ in range(SNAPSHOT_WALK_LIMIT):
            if snapshot is None:
                break
            if snapshot.summary().get(summary_key) == value:
                return int(snapshot.snapshotId())
            parent = snapshot.parentId()
            snapshot = self.table.snapshot(parent) if parent is not None else None
        return None


Scanned = tuple[int, TableFiles, list[DataFileRef]]  # a snapshot id, and the planner's scan of it
