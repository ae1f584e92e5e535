"""What a compaction did, as typed, immutable values."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from icetide.maintenance.planning import DeleteRef, FileGroup, SkippedGroup


@dataclass(frozen=True)
class StagedGroup:
    """A group rewritten into new files that are written but not committed (invisible to readers)."""

    group: FileGroup
    output_paths: tuple[str, ...]
    output_bytes: int
    output_records: int

    @classmethod
    def of(cls, group: FileGroup, outputs: list[Any]) -> StagedGroup:
        """The group staged into `outputs` (Java DataFiles)."""
        return cls(
            group=group,
            output_paths=tuple(str(f.location()) for f in outputs),
            output_bytes=sum(int(f.fileSizeInBytes()) for f in outputs),
            output_records=sum(int(f.recordCount()) for f in outputs),
        )


@dataclass(frozen=True)
class GroupResult:
    """One committed group: what it replaced and what it added."""

    partition: str
    snapshot_id: int
    files_rewritten: int
    bytes_rewritten: int
    records_read: int  # rows in the replaced files, before deletes
    files_added: int
    bytes_added: int
    records_written: int  # rows after deletes
    delete_files_removed: int
    delete_records_removed: int


@dataclass(frozen=True)
class CompactionResult:
    """Everything one compaction committed and everything it skipped, with reasons."""

    table: str
    planned_snapshot_id: int | None
    data_sequence_number: int | None  # given to the new files; None: a fresh one at commit
    committed: tuple[GroupResult, ...] = ()
    skipped: tuple[SkippedGroup, ...] = ()
    snapshot_ids: tuple[int, ...] = ()  # snapshots this compaction committed, in order
    retries: int = 0  # re-plans after conflicts (run() only)

    @property
    def groups(self) -> int:
        """Groups committed."""
        return len(self.committed)

    @property
    def files_rewritten(self) -> int:
        """Data files replaced."""
        return sum(g.files_rewritten for g in self.committed)

    @property
    def files_added(self) -> int:
        """Data files added."""
        return sum(g.files_added for g in self.committed)

    @property
    def bytes_rewritten(self) -> int:
        """Bytes of the data files replaced."""
        return sum(g.bytes_rewritten for g in self.committed)

    @property
    def bytes_added(self) -> int:
        """Bytes of the data files added."""
        return sum(g.bytes_added for g in self.committed)

    @property
    def rows_removed(self) -> int:
        """Deleted rows folded away: rows read minus rows written."""
        return sum(g.records_read - g.records_written for g in self.committed)

    @property
    def delete_files_removed(self) -> int:
        """Delete files dropped because they no longer applied to any live data file."""
        return sum(g.delete_files_removed for g in self.committed)

    @property
    def delete_records_removed(self) -> int:
        """Records in the delete files dropped."""
        return sum(g.delete_records_removed for g in self.committed)

    @property
    def conflicts(self) -> tuple[SkippedGroup, ...]:
        """Groups whose commit was rejected, each with Iceberg's reason."""
        return tuple(s for s in self.skipped if s.kind == "conflict")

    def then(self, later: CompactionResult) -> CompactionResult:
        """This result followed by a retry's: the retry's outcome replaces this one's conflicts."""
        return replace(
            self,
            committed=self.committed + later.committed,
            skipped=tuple(s for s in self.skipped if s.kind != "conflict") + later.skipped,
            snapshot_ids=self.snapshot_ids + later.snapshot_ids,
            retries=self.retries + 1 + later.retries,
        )


def committed_groups(staged: list[StagedGroup], snapshot_id: int, dropped: list[DeleteRef]) -> list[GroupResult]:
    """The results of groups committed together in one snapshot; each dropped delete file is
    counted once, for the first group it applied to."""
    left = {d.path: d for d in dropped}
    out = []
    for s in staged:
        removed = [left.pop(d.path) for d in s.group.delete_files if d.path in left]
        out.append(
            GroupResult(
                partition=s.group.label,
                snapshot_id=snapshot_id,
                files_rewritten=len(s.group.files),
                bytes_rewritten=s.group.input_bytes,
                records_read=s.group.input_records,
                files_added=len(s.output_paths),
                bytes_added=s.output_bytes,
                records_written=s.output_records,
                delete_files_removed=len(removed),
                delete_records_removed=sum(d.record_count for d in removed),
            )
        )
    return out
