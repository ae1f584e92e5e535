"""Which delete files still matter: Iceberg's rules for when a delete applies to a data file.

An equality delete with sequence number s applies to data files of its partition (of every
partition, when its spec is unpartitioned) whose data sequence number is below s; a position
delete applies to data files of its partition with a data sequence number at or below s, or,
when it names one data file (a deletion vector, a file-scoped position delete), to that file
only. A delete file that applies to no live data file is dangling: dropping it changes no row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from icetide.maintenance.planning import DeleteRef, PartitionKey


@dataclass(frozen=True)
class LiveDataFile:
    """A live data file as far as delete scoping cares: where it is and how old its rows are."""

    path: str
    sequence_number: int
    partition: PartitionKey


def applies(delete: DeleteRef, sequence_number: int, partition: PartitionKey) -> bool:
    """Does `delete` apply to a data file with this data sequence number in this partition?"""
    if delete.scope is not None and delete.scope != partition:
        return False
    return _older(delete, sequence_number)


def _older(delete: DeleteRef, sequence_number: int) -> bool:
    """Is data of this sequence number old enough for `delete` to apply to it?"""
    if delete.kind == "equality":
        return sequence_number < delete.sequence_number
    return sequence_number <= delete.sequence_number


def removable_deletes(
    candidates: Iterable[DeleteRef], live: Iterable[LiveDataFile], replaced: set[str] | frozenset[str]
) -> list[DeleteRef]:
    """The candidates that apply to no data file left live once `replaced` are gone.

    Guarantee: a returned delete file applies (by the rules above) to none of the `live` files
    outside `replaced`, so removing it in the same commit that replaces `replaced` leaves every
    row of the table as it was. Files the commit adds are not passed: a rewrite's output has a
    data sequence number at or above that of every delete that applied to its input.
    """
    oldest_by_partition: dict[PartitionKey, int] = {}
    for f in live:
        if f.path in replaced:
            continue
        known = oldest_by_partition.get(f.partition)
        if known is None or f.sequence_number < known:
            oldest_by_partition[f.partition] = f.sequence_number
    oldest_anywhere = min(oldest_by_partition.values(), default=None)
    kept = {f.path for f in live if f.path not in replaced}
    result = []
    for d in candidates:
        if d.referenced_data_file is not None:  # a DV or file-scoped position delete: its one file only
            if d.referenced_data_file not in kept:
                result.append(d)
            continue
        oldest = oldest_anywhere if d.scope is None else oldest_by_partition.get(d.scope)
        if oldest is None or not _older(d, oldest):
            result.append(d)
    return result
