"""Where every table of a pipeline of many tables stands: position, lag, last commit, rows, files."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from icetide.commit.committer import Committer
from icetide.commit.pipeline_state import read_pipeline_state
from icetide.config.pipeline import PipelineConfig
from icetide.errors import SourceError
from icetide.pipeline.sync.state import Position, SyncState, TableState, parse_position
from icetide.table.create import table_exists
from icetide.table.iceberg import load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from icetide.commit.pipeline_state import PipelineState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableStatus:
    """One table of the pipeline (the dead-letter table included, `dead_letter` true)."""

    table: str
    last_batch: int | None
    position: Position
    lag: int | None  # records of its topics not in the table yet (None: the broker could not say)
    last_commit: str | None
    rows: int | None  # live rows, deletes applied (None: the table does not exist)
    data_files: int
    delete_files: int
    dead_letter: bool = False
    batch_path: str | None = None  # how its last batch ran (pipeline/batch_path.py), as its state says
    fallback: str | None = None  # on a Spark path, why no fast path took that batch

    def to_json(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def pipeline_status(spark: SparkSession, config: PipelineConfig, *, with_lag: bool = True) -> list[TableStatus]:
    """Every table the pipeline feeds, then its dead-letter table; rows are counted with a scan of each."""
    from icetide.sources.kafka import KafkaSourceConfig
    from icetide.sources.kafka_topics import KafkaTopics

    assert config.dead_letter is not None
    topics = KafkaTopics(KafkaSourceConfig.from_dict(config.source["kafka"])) if with_lag else None
    out = []
    try:
        states = table_states(config, spark)
        for s in sorted(states, key=lambda s: s.name):
            lag = _lag(topics, s.effective()) if topics is not None else None
            out.append(_status(spark, config.pipeline, s.name, s.batch_id or None, s.position, lag, s.committed_at))
        dl = (
            Committer(spark, config.dead_letter, config.pipeline).last_committed()
            if table_exists(spark, config.dead_letter)
            else None
        )
        position = (dl.source_position if dl is not None else None) or {}
        out.append(
            _status(
                spark,
                config.pipeline,
                config.dead_letter,
                dl.batch_id if dl else None,
                position,
                None,
                dl.committed_at if dl else None,
                dead_letter=True,
            )
        )
    finally:
        if topics is not None:
            topics.close()
    return out


def _lag(topics: Any, position: Position) -> int | None:
    try:
        return sum(topics.lag_by_partition(position).values())
    except (SourceError, OSError):
        log.debug("could not measure lag", exc_info=True)
        return None


def _status(
    spark: SparkSession,
    pipeline: str,
    name: str,
    batch: int | None,
    position: Position,
    lag: int | None,
    committed_at: str | None,
    *,
    dead_letter: bool = False,
) -> TableStatus:
    if not table_exists(spark, name):
        return TableStatus(name, batch, position, lag, committed_at, None, 0, 0, dead_letter)
    jtable = load_table(spark, name)
    jtable.refresh()
    state = read_pipeline_state(jtable, pipeline)
    snapshot = jtable.currentSnapshot()
    summary = dict(snapshot.summary()) if snapshot is not None else {}
    spark.catalog.refreshTable(name)  # a cached table object would count an old snapshot
    rows = int(spark.table(name).count())
    return TableStatus(
        table=name,
        last_batch=batch,
        position=position,
        lag=lag,
        last_commit=committed_at,
        rows=rows,
        data_files=int(summary.get("total-data-files", 0)),
        delete_files=int(summary.get("total-delete-files", 0)),
        dead_letter=dead_letter,
        batch_path=state.batch_path if state is not None else None,
        fallback=state.fallback if state is not None else None,
    )


def status_json(statuses: list[TableStatus]) -> str:
    """The statuses as one JSON document."""
    return json.dumps([s.to_json() for s in statuses], sort_keys=True)


def read_sync_state(
    spark: SparkSession,
    config: PipelineConfig,
    last_committed: Callable[[str], PipelineState | None] | None = None,
) -> SyncState:
    """Where a routing pipeline stands, read from its dead-letter table (the registry and its
    position) and from each registered table's last commit (`last_committed(table)`; default:
    read from the table)."""
    assert config.dead_letter is not None
    state = SyncState()
    if not table_exists(spark, config.dead_letter):
        return state
    last = Committer(spark, config.dead_letter, config.pipeline).last_committed()
    if last is not None:
        state.load_dead_letter(last.batch_id, last.source_position, last.registry)
    for name in sorted(state.tables):
        if not table_exists(spark, name):
            continue
        if last_committed is not None:
            committed = last_committed(name)
        else:
            committed = Committer(spark, name, config.pipeline).last_committed()
        if committed is not None:
            table = state.tables[name]
            table.batch_id = committed.batch_id
            table.position = parse_position(committed.source_position)
            table.committed_at = committed.committed_at
    return state


def table_states(config: PipelineConfig, spark: SparkSession) -> list[TableState]:
    """Every table of a routing pipeline with what it last committed (for `icetide status`)."""
    return list(read_sync_state(spark, config).tables.values())
