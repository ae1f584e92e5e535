"""Which partition specs an upsert batch writes its deletes under, and which specs it refuses.

An upsert deletes a key with an equality delete in the partition computed from the key, under
every spec that still has live data files (docs/design.md, "Partition evolution").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from icetide.errors import SchemaError
from icetide.executor.writer import SpecLayout
from icetide.table.iceberg import PartitionField, live_spec_ids, spec_fields

OLD_SPEC_COLUMN_PREFIX = "_icetide_s"  # partition values under an earlier spec: _icetide_s<spec id>_<i>


def check_spec_serves_upserts(table_name: str, key: Sequence[str], spec_id: int, fields: list[PartitionField]) -> None:
    """Refuse a spec whose partition values are not computed from key columns alone.

    An upsert deletes a key with an equality delete in the partition computed from the key; a
    field sourced from another column could put the old row elsewhere, leaving a duplicate.
    """
    for pf in fields:
        if pf.transform is not None and pf.transform.column not in key:
            raise SchemaError(
                f"table {table_name}: partition field {pf.name!r} ({pf.transform}) of spec {spec_id} is "
                f"computed from column {pf.transform.column!r}, which is not in the key {tuple(key)}; an upsert's "
                "delete could miss rows in that spec, so icetide does not write to this table (partition "
                "only by key columns, or add the column to the key)"
            )


class EarlierSpecs:
    """The earlier specs of one table that still have live data files, cached per snapshot."""

    def __init__(self, table_name: str) -> None:
        self.table_name = table_name
        self._live: tuple[int, frozenset[int]] | None = None  # (snapshot id, spec ids)

    def earlier_ids(self, jtable: Any, *, has_fields: bool) -> tuple[int, ...]:
        """The ids of the earlier specs with live data files, sorted (none when the current spec is
        unpartitioned: its deletes are global)."""
        if not has_fields or jtable.specs().size() == 1:
            return ()  # one spec ever: every data file is under it (no manifest list to read)
        snapshot = jtable.currentSnapshot()
        snapshot_id = int(snapshot.snapshotId()) if snapshot is not None else -1
        if self._live is None or self._live[0] != snapshot_id:
            self._live = (snapshot_id, frozenset(live_spec_ids(jtable)))
        return tuple(sorted(self._live[1] - {int(jtable.spec().specId())}))

    def layouts(
        self, jtable: Any, key: Sequence[str], *, has_fields: bool
    ) -> list[tuple[SpecLayout, list[PartitionField]]]:
        """Earlier partition specs with live data files, which each batch's deletes must also be written under.

        Live specs come from the current snapshot's manifest list, cached per snapshot. When the
        current spec is unpartitioned its deletes are global and reach every spec already.
        """
        specs = jtable.specs()
        result = []
        for spec_id in self.earlier_ids(jtable, has_fields=has_fields):
            fields = spec_fields(specs.get(spec_id), jtable.schema())
            check_spec_serves_upserts(self.table_name, key, spec_id, fields)
            layout = SpecLayout(
                spec_id=spec_id,
                columns=tuple(f"{OLD_SPEC_COLUMN_PREFIX}{spec_id}_{i}" for i in range(len(fields))),
                names=tuple(pf.name for pf in fields),
                types=tuple(pf.result_type for pf in fields),
                field_ids=tuple(pf.field_id for pf in fields),
            )
            result.append((layout, fields))
        return result
