"""What a sink batch is staged with and what writing it did: plain values shared by the sink and
the pipelines that stage batches outside it (pipeline/json_fast.py, pipeline/sync/fast_path.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icetide.executor.writer import WriterConfig
from icetide.table.spec import PartitionTransform

if TYPE_CHECKING:
    from icetide.commit.committer import CommitOutcome, WrittenFile
    from icetide.write.evolution import SchemaChange


@dataclass(frozen=True)
class BatchResult:
    """What one UpsertSink.write did."""

    batch_id: int
    committed: bool
    snapshot_id: int | None
    data_files: int
    delete_files: int
    rows_written: int
    delete_rows: int
    bytes_written: int
    write_seconds: float  # the write job: executors write the batch's files
    commit_seconds: float  # the catalog commit, its retries included
    files_per_partition: dict[str, int]
    skipped_reason: str = ""
    writers: tuple[str, ...] = ()  # host:pid of the processes that wrote the files
    plan_seconds: float = 0.0  # preparing the batch and its distribution (the statistics job)
    refresh_seconds: float = 0.0  # reading the table's committed state, before writing and committing
    # deletes="vectors", within commit_seconds: finding the rows the batch replaces (its keys read
    # back and looked up in the key index), and the index built or following commits
    find_seconds: float = 0.0
    index_seconds: float = 0.0
    commit_attempts: int = 0  # the catalog commit's attempts: 1, more after lost races or failed calls (0: none made)

    @classmethod
    def of_files(
        cls,
        batch_id: int,
        files: Sequence[WrittenFile],
        outcome: CommitOutcome,
        *,
        write_seconds: float,
        commit_seconds: float,
        plan_seconds: float = 0.0,
        refresh_seconds: float = 0.0,
        find_seconds: float = 0.0,
        index_seconds: float = 0.0,
    ) -> BatchResult:
        """What a batch's written files came to once its commit returned, for every path that
        stages files (the sink, the fast paths): files that did not land count nothing."""
        landed = list(files) if outcome.committed else []
        data = [f for f in landed if f.content == "data"]
        deletes = [f for f in landed if f.content != "data"]
        per_partition: dict[str, int] = {}
        for f in data:
            name = "/".join("null" if v is None else v for v in f.partition) or "(unpartitioned)"
            per_partition[name] = per_partition.get(name, 0) + 1
        return cls(
            batch_id=batch_id,
            committed=outcome.committed,
            snapshot_id=outcome.snapshot_id,
            data_files=len(data),
            delete_files=len(deletes),
            rows_written=sum(f.record_count for f in data),
            delete_rows=sum(f.record_count for f in deletes),
            bytes_written=sum(f.file_size for f in landed),
            write_seconds=write_seconds,
            commit_seconds=commit_seconds,
            files_per_partition=per_partition,
            skipped_reason=outcome.reason,
            writers=tuple(sorted({f.writer for f in landed})),
            plan_seconds=plan_seconds,
            refresh_seconds=refresh_seconds,
            commit_attempts=outcome.attempts,
            find_seconds=find_seconds,
            index_seconds=index_seconds,
        )

    @property
    def total_seconds(self) -> float:
        """The batch's time in the sink, all phases."""
        return self.plan_seconds + self.write_seconds + self.refresh_seconds + self.commit_seconds


@dataclass(frozen=True)
class WriterPlan:
    """What writer tasks outside the sink need to stage a batch: its writer config, and the columns
    to add to the batch with the partition transform that computes each (None: a void field, null);
    the current spec's columns (PARTITION_COLUMN_PREFIX<i>) first, then those of each earlier spec
    the batch's deletes are also written under (OLD_SPEC_COLUMN_PREFIX<spec id>_<i>)."""

    writer: WriterConfig
    partitions: tuple[tuple[str, PartitionTransform | None], ...]


@dataclass(frozen=True)
class WrittenBatch:
    """A batch whose files UpsertSink.stage wrote, nothing committed yet (UpsertSink.commit_written
    commits them); `skipped`: its batch id was committed already, and nothing was written."""

    batch_id: int
    files: list[WrittenFile]
    schema_change: SchemaChange  # what the commit adds to the table's schema (empty: nothing)
    write_seconds: float = 0.0
    plan_seconds: float = 0.0
    refresh_seconds: float = 0.0
    skipped: bool = False
