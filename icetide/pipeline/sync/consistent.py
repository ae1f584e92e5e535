"""Reading a database sync's tables as one consistent state: each as of the same batch.

Every commit of a pipeline carries its batch id in the snapshot summary (`icetide.batch-id`,
commit/committer.py) and in the table's pipeline-state property. With whole transactions
(pipeline/sync/transactions.py) every table commits every batch, and a batch holds whole source
transactions only, so the tables as of one batch id show every source transaction whole or not
at all. The batch read is the latest that every table has committed: the lowest of the tables'
last batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from icetide.commit.committer import SUMMARY_BATCH, SUMMARY_PIPELINE
from icetide.commit.pipeline_state import read_pipeline_state
from icetide.config.pipeline import PipelineConfig, load_config
from icetide.errors import ConfigError, SnapshotGoneError
from icetide.table.create import table_exists
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class ConsistentRead:
    """A database sync's tables as of one batch: `read[name]` is table `name` as of `batch_id`."""

    batch_id: int  # the latest batch every table has committed (0: none yet; every table reads empty)
    tables: dict[str, DataFrame] = field(default_factory=dict)
    snapshots: dict[str, int | None] = field(default_factory=dict)  # the snapshot each table is read at

    def __getitem__(self, name: str) -> DataFrame:
        return self.tables[name]


def read_consistent(spark: SparkSession, pipeline: PipelineConfig | str | Path) -> ConsistentRead:
    """Every table of a database sync (`pipeline`: its config, or its pipeline file) as of the
    latest batch that every one of them has committed.

    With `debezium.provide.transaction.metadata` on, each source transaction is then visible in
    every table it changed, or in none: no torn transaction, whatever the sync is doing (or
    after it was killed mid-batch). Without it, tables are still read as of one batch id, but a
    batch may hold part of a transaction, and a table the sync has not fed for a while holds the
    batch id back.

    Each table is read at a snapshot (time travel), so the frames stay on that state while the
    sync goes on. Raises SnapshotGoneError when a table's snapshot of that batch has expired.

    Example:

        view = icetide.read_consistent(spark, "inventory-sync.yaml")
        view["lake.inventory.orders"].join(view["lake.inventory.customers"], ...)
    """
    config = pipeline if isinstance(pipeline, PipelineConfig) else load_config(pipeline)
    if not config.routes_tables or config.dead_letter is None:
        raise ConfigError("read_consistent: reads a database sync (a table-name template and a dead_letter table)")
    if not table_exists(spark, config.dead_letter):
        return ConsistentRead(0)
    dead_letter = load_table(spark, config.dead_letter)
    dead_letter.refresh()
    registered = read_pipeline_state(dead_letter, config.pipeline)
    names = sorted((registered.registry or {}) if registered is not None else {})
    tables: dict[str, Any] = {}
    last: dict[str, int] = {}
    for name in names:
        if not table_exists(spark, name):
            continue
        jtable = load_table(spark, name)
        jtable.refresh()
        # The batch and the current snapshot from one metadata: a later commit cannot fall between.
        metadata = jtable.operations().current()
        state = read_pipeline_state(metadata, config.pipeline)
        tables[name] = metadata
        last[name] = state.batch_id if state is not None else 0
    batch = min(last.values(), default=0)
    frames: dict[str, DataFrame] = {}
    snapshots: dict[str, int | None] = {}
    for name, metadata in tables.items():
        snapshot = _snapshot_at(metadata, config.pipeline, batch, current=last[name] <= batch)
        snapshots[name] = snapshot
        if snapshot is None:
            frames[name] = spark.table(name).limit(0)
        else:
            frames[name] = spark.sql(f"SELECT * FROM {name} VERSION AS OF {snapshot}")
    return ConsistentRead(batch, frames, snapshots)


def _snapshot_at(metadata: Any, pipeline: str, batch: int, *, current: bool) -> int | None:
    """The id of the table's snapshot holding the pipeline's batches up to `batch` (the current one
    when the table's last batch is `batch`; else the latest ancestor committing a batch at or
    below it); None when the pipeline committed nothing there yet."""
    snapshot = metadata.currentSnapshot()
    if current or snapshot is None:
        return int(snapshot.snapshotId()) if snapshot is not None and batch > 0 else None
    while snapshot is not None:
        summary = snapshot.summary()
        if str(summary.get(SUMMARY_PIPELINE)) == pipeline:
            committed = int(str(summary.get(SUMMARY_BATCH)))
            if committed <= batch:
                return int(snapshot.snapshotId())
        parent = snapshot.parentId()
        if parent is None:
            return None
        found = metadata.snapshot(parent)
        if found is None:
            raise SnapshotGoneError(
                f"pipeline {pipeline}: the snapshot of batch {batch} has expired; read again, or keep "
                "snapshots for longer than a reader takes (maintenance's expiry)"
            )
        snapshot = found
    return None
