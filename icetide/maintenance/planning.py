"""Compaction planning, in plain Python: which data files to rewrite, grouped how.

The inputs are plain descriptions of a snapshot's data files (path, size, sequence number,
partition, the delete files that apply to each), so every rule here is testable without Spark.
The rules follow Iceberg's bin-pack rewrite (SizeBasedFileRewritePlanner): a file is a
candidate when it is too small, too big, or has too many delete files applying; candidates are
bin-packed per partition into groups of at most `max_group_bytes`; a group is rewritten when
it has enough files, enough bytes, a file to split, or a file with too many deletes.

Groups run newest partition first (`group_order="newest"`, the default): the partition whose
newest data or delete file has the highest sequence number, the one the stream is writing now,
is what readers scan most and what piles up fastest; ties (one batch writes many partitions
at one sequence number) go to the partition path, descending, which for Iceberg's time
transforms (hours, days, months, years) is the newest time first; then the worst group.
`group_order="worst"` takes the most delete files, then the most files, first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from icetide.config.pipeline import parse_size
from icetide.errors import ConfigError
from icetide.table.iceberg import DEFAULT_TARGET_FILE_SIZE

DEFAULT_MIN_INPUT_FILES = 5  # Iceberg's min-input-files default
DEFAULT_MAX_GROUP_BYTES = 100 * 1024**3  # Iceberg's max-file-group-size-bytes default
MIN_FILE_SIZE_RATIO = 0.75  # Iceberg: min-file-size-bytes = 75% of the target
MAX_FILE_SIZE_RATIO = 1.8  # Iceberg: max-file-size-bytes = 180% of the target
SPLIT_OVERHEAD = 5 * 1024  # Iceberg adds this to a split so a split does not spill one extra file
DEFAULT_COMBINE_GROUPS_BYTES = 64 * 1024 * 1024  # small groups rewritten in one job, up to this input
DEFAULT_DRIVER_REWRITE_BYTES = 32 * 1024 * 1024  # units up to this input are rewritten on the driver
COMBINE_MAX_GROUPS = 100  # ... and at most this many partitions at once: one open writer each

PartitionKey = tuple[int, str]  # (spec id, partition path such as "ts_hour=2026-01-01-10"; "" unpartitioned)


def partition_label(key: PartitionKey) -> str:
    """A partition key as written in Iceberg's paths, with the spec id when it is not 0 (files
    read by `TableFiles` carry a label people read instead: `DataFileRef.label`)."""
    spec_id, path = key
    text = path or "(unpartitioned)"
    return text if spec_id == 0 else f"{text} [spec {spec_id}]"


@dataclass(frozen=True)
class DeleteRef:
    """A delete file that applies to some data file of the plan.

    `path` identifies it: the file's location, or for a deletion vector (one of many blobs of a
    Puffin file) `location#offset`.
    """

    path: str
    kind: Literal["equality", "position"]
    sequence_number: int
    scope: PartitionKey | None  # None: an equality delete of an unpartitioned spec applies everywhere
    record_count: int
    size: int
    referenced_data_file: str | None = None  # a DV or file-scoped position delete: the one file it applies to


@dataclass(frozen=True)
class DataFileRef:
    """A live data file of the planned snapshot, with the delete files that apply to it."""

    path: str
    size: int
    record_count: int
    sequence_number: int
    partition: PartitionKey
    deletes: tuple[DeleteRef, ...] = ()
    partition_label: str = ""  # as people read it (`2026-01-01 05:00`); "" derives one from the key

    @property
    def label(self) -> str:
        """The file's partition, readable."""
        return self.partition_label or partition_label(self.partition)


@dataclass(frozen=True)
class FileGroup:
    """Data files of one partition that are rewritten together, into `output_files` files."""

    partition: PartitionKey
    files: tuple[DataFileRef, ...]
    output_files: int
    split_size: int  # read split size: one split becomes one output file
    write_max_file_size: int  # the writer rolls at this size

    @property
    def input_bytes(self) -> int:
        """Bytes of the data files read (delete files not included)."""
        return sum(f.size for f in self.files)

    @property
    def input_records(self) -> int:
        """Rows in the data files read, before deletes are applied."""
        return sum(f.record_count for f in self.files)

    @property
    def delete_files(self) -> tuple[DeleteRef, ...]:
        """Distinct delete files applying to the group's data files."""
        seen: dict[str, DeleteRef] = {}
        for f in self.files:
            for d in f.deletes:
                seen.setdefault(d.path, d)
        return tuple(seen.values())

    @property
    def label(self) -> str:
        """The group's partition, readable."""
        return self.files[0].label if self.files else partition_label(self.partition)


GroupOrder = Literal["newest", "worst"]
GROUP_ORDERS = ("newest", "worst")

SkipKind = Literal["small", "deferred", "already_rewritten", "conflict", "rewrite_failed", "aborted"]


@dataclass(frozen=True)
class SkippedGroup:
    """A group of files that was not rewritten or not committed, and why.

    `kind`: "small" (not worth rewriting yet), "deferred" (over the run's bounds),
    "already_rewritten" (another commit replaced all its files), "conflict" (its commit was
    rejected; `reason` names Iceberg's conflict), "rewrite_failed" (reading or writing failed),
    "aborted" (`abort()` deleted its new files before a commit).
    """

    partition: str
    input_files: int
    input_bytes: int
    kind: SkipKind
    reason: str


@dataclass(frozen=True)
class CompactionOptions:
    """Validated compaction options; `from_kwargs` names the bad key on a ConfigError."""

    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_input_files: int = DEFAULT_MIN_INPUT_FILES
    min_file_size: int | None = None  # default 75% of the target
    max_file_size: int | None = None  # default 180% of the target
    delete_file_threshold: int | None = None  # rewrite a file with at least this many delete files
    # rewrite a file with at least this many equality-delete files (the ones some readers refuse)
    equality_delete_file_threshold: int | None = None
    partition_filter: str | None = None  # SQL predicate; files that may hold matching rows
    partial_progress: bool = False  # commit each group on its own
    max_groups: int | None = None  # bound on work per run
    max_bytes: int | None = None  # bound on input bytes per run
    max_group_bytes: int = DEFAULT_MAX_GROUP_BYTES
    use_starting_sequence_number: bool = True
    remove_deletes: bool = True  # drop delete files that only applied to rewritten files
    max_conflict_retries: int = 1  # re-plans of conflicting groups in run()
    group_order: GroupOrder = "newest"  # which groups run first (and survive max_groups/max_bytes)
    # v3: commit attempts that carry DVs committed meanwhile onto the new files (0: never carry)
    carry_attempts: int = 5
    # A file whose deletion vector (or file-scoped position deletes) marks at least this share of
    # its rows is rewritten, even alone; None: off.
    vector_deleted_share: float | None = None
    # In a partition whose files with a deletion vector hold at least this many rows, every such
    # file is rewritten; None: off.
    vector_file_rows: int | None = None
    # Groups that each write one file are rewritten in one Spark job and committed together, up to
    # this many input bytes (and COMBINE_MAX_GROUPS groups); 0 rewrites and commits each alone.
    combine_groups_bytes: int = DEFAULT_COMBINE_GROUPS_BYTES
    # A unit of work reading at most this many bytes (data and delete files) is rewritten on the
    # driver with Arrow instead of in a Spark job, where it can be (maintenance/driver_rewrite.py);
    # 0: always Spark.
    driver_rewrite_bytes: int = DEFAULT_DRIVER_REWRITE_BYTES

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any], *, default_target: int) -> CompactionOptions:
        """Check every option once; raises ConfigError naming the key."""
        known = {f.name for f in fields(cls)}
        for key in options:
            if key not in known:
                raise ConfigError(f"{key}: not a compaction option (one of {', '.join(sorted(known))})")
        values = dict(options)
        for key in (
            "target_file_size",
            "min_file_size",
            "max_file_size",
            "max_bytes",
            "max_group_bytes",
            "combine_groups_bytes",
            "driver_rewrite_bytes",
        ):
            if values.get(key) is not None:
                values[key] = parse_size(values[key], key)
        values.setdefault("target_file_size", default_target)
        for key in ("partial_progress", "use_starting_sequence_number", "remove_deletes"):
            if key in values and not isinstance(values[key], bool):
                raise ConfigError(f"{key}: must be true or false, got {values[key]!r}")
        for key, low in (
            ("target_file_size", 1),
            ("min_input_files", 1),
            ("min_file_size", 0),
            ("max_file_size", 1),
            ("delete_file_threshold", 1),
            ("equality_delete_file_threshold", 1),
            ("max_groups", 1),
            ("max_bytes", 1),
            ("max_group_bytes", 1),
            ("max_conflict_retries", 0),
            ("carry_attempts", 0),
            ("vector_file_rows", 1),
            ("combine_groups_bytes", 0),
            ("driver_rewrite_bytes", 0),
        ):
            value = values.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(f"{key}: must be an integer of at least {low}, got {value!r}")
        share = values.get("vector_deleted_share")
        if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1):
            raise ConfigError(f"vector_deleted_share: must be a number above 0 and at most 1, got {share!r}")
        if values.get("group_order", "newest") not in GROUP_ORDERS:
            raise ConfigError(f"group_order: must be one of {', '.join(GROUP_ORDERS)}, got {values['group_order']!r}")
        if values.get("partition_filter") is not None and not str(values["partition_filter"]).strip():
            raise ConfigError("partition_filter: must be a non-empty SQL predicate or None")
        options_ = cls(**values)
        if options_.effective_min_file_size >= options_.target_file_size:
            raise ConfigError("min_file_size: must be smaller than target_file_size")
        if options_.effective_max_file_size <= options_.target_file_size:
            raise ConfigError("max_file_size: must be larger than target_file_size")
        return options_

    @property
    def effective_min_file_size(self) -> int:
        """Files smaller than this are candidates."""
        if self.min_file_size is not None:
            return self.min_file_size
        return int(self.target_file_size * MIN_FILE_SIZE_RATIO)

    @property
    def effective_max_file_size(self) -> int:
        """Files larger than this are candidates (split)."""
        if self.max_file_size is not None:
            return self.max_file_size
        return int(self.target_file_size * MAX_FILE_SIZE_RATIO)

    @property
    def write_max_file_size(self) -> int:
        """Where the rewrite's writer rolls: halfway between target and max, as Iceberg does."""
        return int(self.target_file_size + (self.effective_max_file_size - self.target_file_size) * 0.5)

    @property
    def group_bytes_limit(self) -> int:
        """Largest group: `max_group_bytes`, never above the per-run `max_bytes`."""
        return min(self.max_group_bytes, self.max_bytes) if self.max_bytes else self.max_group_bytes


def output_file_count(input_bytes: int, options: CompactionOptions) -> int:
    """How many files `input_bytes` are rewritten into (Iceberg's numOutputFiles rule).

    A remainder file is kept if it is itself big enough; otherwise it is spread over the other
    files when that leaves them no more than 10% over the target.
    """
    target = options.target_file_size
    if input_bytes < target:
        return 1
    with_remainder = math.ceil(input_bytes / target)
    without_remainder = input_bytes // target
    if input_bytes % target > options.effective_min_file_size:
        return with_remainder
    average = input_bytes / without_remainder
    if average < min(1.1 * target, options.write_max_file_size):
        return without_remainder
    return with_remainder


def split_size(input_bytes: int, options: CompactionOptions) -> int:
    """The read split size that makes one split per output file (Iceberg's inputSplitSize rule)."""
    estimated = input_bytes // output_file_count(input_bytes, options) + SPLIT_OVERHEAD
    if estimated < options.target_file_size:
        return options.target_file_size
    return min(estimated, options.write_max_file_size)


def _is_candidate(f: DataFileRef, options: CompactionOptions) -> bool:
    return (
        f.size < options.effective_min_file_size
        or f.size > options.effective_max_file_size
        or _too_many_deletes(f, options)
    )


def _too_many_deletes(f: DataFileRef, options: CompactionOptions) -> bool:
    threshold = options.delete_file_threshold
    if threshold is not None and len(f.deletes) >= threshold:
        return True
    equality = options.equality_delete_file_threshold
    return equality is not None and sum(1 for d in f.deletes if d.kind == "equality") >= equality


def vector_rows(f: DataFileRef) -> int | None:
    """Rows of `f` its deletion vector (or file-scoped position deletes) marks; None without one."""
    marks = [d.record_count for d in f.deletes if d.referenced_data_file == f.path]
    return sum(marks) if marks else None


def due_by_vectors(files: Iterable[DataFileRef], options: CompactionOptions) -> set[str]:
    """Paths of the files the deletion-vector policy wants rewritten: a file whose vector marks at
    least `vector_deleted_share` of its rows, and every file with a vector in a partition where
    such files hold at least `vector_file_rows` rows (readers such as PyIceberg pay per row of a
    file with a vector, however few it marks)."""
    share, limit = options.vector_deleted_share, options.vector_file_rows
    if share is None and limit is None:
        return set()
    marked = [(f, rows) for f in files if (rows := vector_rows(f)) is not None]
    held: dict[PartitionKey, int] = {}
    for f, _ in marked:
        held[f.partition] = held.get(f.partition, 0) + f.record_count
    return {
        f.path
        for f, rows in marked
        if (share is not None and rows >= share * max(f.record_count, 1))
        or (limit is not None and held[f.partition] >= limit)
    }


def _bin_pack(files: list[DataFileRef], limit: int) -> list[list[DataFileRef]]:
    """First-fit decreasing: biggest files first, each into the first bin it fits."""
    bins: list[tuple[int, list[DataFileRef]]] = []
    for f in sorted(files, key=lambda f: (-f.size, f.path)):
        for i, (used, members) in enumerate(bins):
            if used + f.size <= limit:
                members.append(f)
                bins[i] = (used + f.size, members)
                break
        else:
            bins.append((f.size, [f]))
    return [members for _, members in bins]


def _why_not(files: list[DataFileRef], options: CompactionOptions, due: set[str] | None = None) -> str | None:
    """None if the group is worth rewriting, else the reason it is left alone."""
    total = sum(f.size for f in files)
    if due and any(f.path in due for f in files):
        return None
    if len(files) >= options.min_input_files:
        return None
    if len(files) > 1 and total >= options.target_file_size:
        return None
    if any(f.size > options.effective_max_file_size for f in files):
        return None
    if any(_too_many_deletes(f, options) for f in files):
        return None
    return (
        f"{len(files)} small file(s) ({total} bytes): fewer than min_input_files={options.min_input_files} "
        f"and less than target_file_size={options.target_file_size}"
    )


def partition_recency(f: DataFileRef) -> int:
    """How recently a data file's partition was written, as far as this file tells: the highest
    sequence number of the file and of the delete files of its partition that apply to it."""
    scoped = [d.sequence_number for d in f.deletes if d.scope == f.partition]
    return max([f.sequence_number, *scoped])


def _worst(g: FileGroup) -> tuple[int, int]:
    return (-len(g.delete_files), -len(g.files))


def order_groups(groups: list[FileGroup], newest: Mapping[PartitionKey, int], order: GroupOrder) -> list[FileGroup]:
    """Groups in the order they should run (see the module docstring).

    `newest` maps a partition to its highest data or delete sequence number.
    """
    if order == "worst":
        return sorted(groups, key=lambda g: (*_worst(g), g.partition))
    # Sorted from the least significant key up (Python's sort is stable): worst, path, recency.
    out = sorted(groups, key=_worst)
    out.sort(key=lambda g: (g.partition[1], g.partition[0]), reverse=True)
    out.sort(key=lambda g: -newest.get(g.partition, 0))
    return out


@dataclass(frozen=True)
class GroupPlan:
    """What planning chose: groups to rewrite, in order, and groups left alone with reasons."""

    groups: tuple[FileGroup, ...]
    skipped: tuple[SkippedGroup, ...]


def plan_groups(
    files: Iterable[DataFileRef],
    options: CompactionOptions,
    *,
    only_partitions: frozenset[PartitionKey] | None = None,
) -> GroupPlan:
    """Group a snapshot's data files for rewriting.

    Guarantees: every group holds files of one partition only; no file is in two groups; no
    group exceeds `max_group_bytes` (or `max_bytes`) unless it is a single file; groups come
    in `options.group_order` (see the module docstring), and the per-run bounds `max_groups` /
    `max_bytes` cut that list, the rest being reported as deferred. The first group always
    runs, so a single file bigger than `max_bytes` is not deferred forever.
    """
    by_partition: dict[PartitionKey, list[DataFileRef]] = {}
    newest: dict[PartitionKey, int] = {}
    files = [f for f in files if only_partitions is None or f.partition in only_partitions]
    due = due_by_vectors(files, options)
    for f in files:
        newest[f.partition] = max(newest.get(f.partition, 0), partition_recency(f))
        if _is_candidate(f, options) or f.path in due:
            by_partition.setdefault(f.partition, []).append(f)
    chosen: list[FileGroup] = []
    skipped: list[SkippedGroup] = []
    for partition in sorted(by_partition):
        for members in _bin_pack(by_partition[partition], options.group_bytes_limit):
            reason = _why_not(members, options, due)
            total = sum(f.size for f in members)
            if reason is not None:
                skipped.append(SkippedGroup(members[0].label, len(members), total, "small", reason))
                continue
            chosen.append(
                FileGroup(
                    partition=partition,
                    files=tuple(sorted(members, key=lambda f: f.path)),
                    output_files=output_file_count(total, options),
                    split_size=split_size(total, options),
                    write_max_file_size=options.write_max_file_size,
                )
            )
    chosen = order_groups(chosen, newest, options.group_order)
    kept: list[FileGroup] = []
    used = 0
    for group in chosen:
        reason = None
        if options.max_groups is not None and len(kept) >= options.max_groups:
            reason = f"deferred to a later run: max_groups={options.max_groups} reached"
        elif options.max_bytes is not None and kept and used + group.input_bytes > options.max_bytes:
            reason = f"deferred to a later run: max_bytes={options.max_bytes} reached"
        if reason is not None:
            skipped.append(SkippedGroup(group.label, len(group.files), group.input_bytes, "deferred", reason))
            continue
        kept.append(group)
        used += group.input_bytes
    return GroupPlan(tuple(kept), tuple(skipped))


def combine_groups(groups: Sequence[FileGroup], options: CompactionOptions, current_spec: int) -> list[list[int]]:
    """The plan's groups (by index, in order) as units of work: one Spark job and one commit each.

    Consecutive groups that each write a single file, in the current partition spec (their new
    files land in their own partition) and of distinct partitions, share a unit while its input
    stays within `combine_groups_bytes` and COMBINE_MAX_GROUPS groups: beside a stream that
    touches many small partitions, a pass then pays one job and one commit instead of one per
    partition (docs/design.md, "Compaction in fewer jobs"). Every other group is a unit alone.
    """
    units: list[list[int]] = []
    used = 0
    open_unit = False  # may the last unit take more groups?
    for index, group in enumerate(groups):
        combinable = (
            group.output_files == 1
            and group.partition[0] == current_spec
            and group.input_bytes <= options.combine_groups_bytes
        )
        last = units[-1] if units else []
        if (
            combinable
            and open_unit
            and used + group.input_bytes <= options.combine_groups_bytes
            and len(last) < COMBINE_MAX_GROUPS
            and all(groups[i].partition != group.partition for i in last)
        ):
            last.append(index)
            used += group.input_bytes
        else:
            units.append([index])
            used = group.input_bytes
            open_unit = combinable
    return units
