"""Deletion vectors on format v3, on the driver: read a data file's earlier deletes, write new DVs.

On v3 a data file has at most one deletion vector (DV) and new position deletes must be DVs. So
whoever marks positions (delete folding, the stream's `deletes="vectors"`) writes, per data file,
one DV holding the new positions
merged with every position the file's earlier deletes held (its DV, or position-delete files
left from before an upgrade to v3), and the commit removes the earlier DV and the file-scoped
position-delete files it merged. Iceberg's reader ignores other position deletes of a file once
it has a DV, which is why every earlier one is merged, not only DVs.

All DVs of one run go into one Puffin file (as Iceberg's own writer does), each described by its
own DeleteFile: the referenced data file, the blob's offset and size, the positions it marks.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icetide.filesystems import filesystem_for, make_parent
from icetide.table.deletion_vectors import deserialize_positions, puffin_file
from icetide.table.iceberg import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def is_vector(delete_file: Any) -> bool:
    """Is this Java DeleteFile a deletion vector (a Puffin blob)? Only a DV has a content offset
    (the spec requires it of DVs and gives it to no other delete file): one JVM call, not two."""
    return delete_file.contentOffset() is not None


def earlier_positions(delete_file: Any, data_file_path: str) -> np.ndarray:
    """The positions of `data_file_path` a position-delete DeleteFile (a DV, or a Parquet
    position-delete file) marks, sorted int64."""
    offset = delete_file.contentOffset()  # a DV's, None for any other delete file (`is_vector`)
    size = None if offset is None else int(delete_file.contentSizeInBytes())
    return marked_positions(str(delete_file.location()), data_file_path, offset=offset, size=size)


def marked_positions(location: str, data_file_path: str, *, offset: int | None, size: int | None) -> np.ndarray:
    """`earlier_positions` from plain values: the delete file's location, and for a DV (a blob of
    a Puffin file) its offset and size; sorted int64."""
    fs, path = filesystem_for(location)
    if offset is not None:
        with fs.open_input_file(path) as handle:
            blob = handle.read_at(int(size or 0), int(offset))
        return deserialize_positions(bytes(blob))
    with fs.open_input_file(path) as handle:
        table = pq.ParquetFile(handle).read(columns=["file_path", "pos"])
    pos = table.filter(pc.equal(table["file_path"], data_file_path))["pos"]
    return np.unique(pos.to_numpy().astype(np.int64))


def replaceable(delete_file: Any, data_file_path: str) -> bool:
    """May a new DV of `data_file_path` replace (remove) this position delete? Only if it applies
    to that one file: a DV, or a position-delete file scoped to it."""
    referenced = delete_file.referencedDataFile()
    return referenced is not None and str(referenced) == data_file_path


@dataclass(frozen=True)
class PlannedVector:
    """One data file's new DV: all its positions, and the earlier deletes it replaces."""

    data_file: Any  # the Java DataFile
    positions: np.ndarray  # sorted, distinct
    replaces: tuple[Any, ...]  # Java DeleteFiles removed in the same commit


def plan_vector(
    data_file: Any, earlier: Sequence[Any], new: np.ndarray, earlier_known: Sequence[np.ndarray] | None = None
) -> PlannedVector | None:
    """A data file's DV: the `new` positions merged with those its `earlier` position deletes
    (Java DeleteFiles that apply to it) mark, read from them unless the caller knows them
    (`earlier_known`, in the order of `earlier`); None when `new` adds nothing."""
    path = str(data_file.location())
    known = list(earlier_known) if earlier_known is not None else [earlier_positions(d, path) for d in earlier]
    before = np.unique(np.concatenate(known)) if known else np.zeros(0, np.int64)
    merged = np.union1d(before, np.asarray(new, dtype=np.int64))
    if len(merged) == len(before):
        return None
    return PlannedVector(data_file, merged, tuple(d for d in earlier if replaceable(d, path)))


@dataclass(frozen=True)
class WrittenVectors:
    """A Puffin file of DVs and the Java DeleteFiles describing them, in the order planned."""

    location: str
    delete_files: tuple[Any, ...]


def write_vectors(spark: SparkSession, jtable: Any, planned: Sequence[PlannedVector]) -> WrittenVectors | None:
    """Write the planned DVs into one new Puffin file in the table's data folder; commits nothing.
    None when nothing is planned."""
    if not planned:
        return None
    j = jvm(spark)
    content, written = puffin_file([(str(p.data_file.location()), p.positions) for p in planned])
    location = str(jtable.locationProvider().newDataLocation(f"icetide-dv-{uuid.uuid4().hex}.puffin"))
    fs, path = filesystem_for(location)
    make_parent(fs, path)
    with fs.open_output_stream(path) as sink:
        sink.write(content)
    files = []
    file_metadata = j.org.apache.iceberg.FileMetadata  # resolved once: each `.` of a JVM path is a JVM call
    specs: dict[int, Any] = {}  # spec id -> Java PartitionSpec, one lookup each
    for p, w in zip(planned, written, strict=True):
        spec_id = int(p.data_file.specId())
        spec = specs.get(spec_id)
        if spec is None:
            spec = specs[spec_id] = jtable.specs().get(spec_id)
        files.append(
            file_metadata.deleteFileBuilder(spec)
            .ofPositionDeletes()
            .withFormat("PUFFIN")
            .withPath(location)
            .withFileSizeInBytes(len(content))
            .withPartition(p.data_file.partition())
            .withRecordCount(w.cardinality)
            .withReferencedDataFile(w.data_file)
            .withContentOffset(w.offset)
            .withContentSizeInBytes(w.size)
            .build()
        )
    return WrittenVectors(location, tuple(files))
