"""A pipeline's state on a table: what it last committed (batch, source position, registry), kept
in the table property `icetide.pipeline.<pipeline>` by each commit (commit/committer.py), typed and
versioned (docs/design.md, "Pipeline state")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from icetide.errors import TerminalError
from icetide.spark.py4j_collections import java_list

STATE_PROPERTY_PREFIX = "icetide.pipeline."
STATE_VERSION = 1  # the pipeline state's layout (docs/design.md, "Pipeline state")


@dataclass(frozen=True)
class PipelineState:
    """What a pipeline last committed to a table, as kept in the table property
    `icetide.pipeline.<pipeline>` (version 1):

    - `source_position`: where the table holds the source up to: Kafka `{topic: {partition:
      next offset}}`, landing files `{"max_mtime_ms", "files", "listed_at_ms"}`; on a dead-letter
      table, the position up to which the pipeline's bad records are committed;
    - `registry`: on the dead-letter table of a pipeline of many tables, the tables it feeds
      and, per topic, the offsets each table's data starts from (icetide.pipeline.sync.state);
    - `batch_path`, `fallback`: how the pipeline ran that batch, its metrics line's `path` and
      `fallback` (icetide.pipeline.batch_path), for `icetide status`; absent (None) for a batch
      committed through `UpsertSink.write` by a job of the user's own, and before icetide kept them.
      Optional keys that an earlier icetide of the same version ignores.

    Version 0 (no `version` key) kept a dead-letter table's state in `source_position`, as
    `{"plan": {..., "position": P}}` (one table) or `{"position": P, "tables": R}` (many);
    `from_json` reads it as position P and registry R.
    """

    pipeline_id: str
    batch_id: int
    source_position: Any
    committed_at: str
    registry: dict[str, Any] | None = None
    version: int = STATE_VERSION
    batch_path: str | None = None
    fallback: str | None = None

    def to_json(self) -> str:
        """The table-property form."""
        out: dict[str, Any] = {
            "version": self.version,
            "batch_id": self.batch_id,
            "source_position": self.source_position,
            "committed_at": self.committed_at,
        }
        if self.registry is not None:
            out["registry"] = self.registry
        if self.batch_path is not None:
            out["batch_path"] = str(self.batch_path)
        if self.fallback is not None:
            out["fallback"] = str(self.fallback)
        return json.dumps(out, sort_keys=True)

    @classmethod
    def from_json(cls, pipeline_id: str, text: str) -> PipelineState:
        """Parse the table-property form, of any version up to STATE_VERSION."""
        data = json.loads(text)
        version = int(data.get("version", 0))
        if version > STATE_VERSION:
            raise TerminalError(
                f"pipeline {pipeline_id}: its state on the table is of version {version}, written by a newer "
                f"icetide than this one (which reads up to version {STATE_VERSION}); upgrade icetide"
            )
        position, registry = data.get("source_position"), data.get("registry")
        if version == 0:
            position, registry = _version_0(position)
        committed_at = str(data.get("committed_at", ""))
        path, fallback = data.get("batch_path"), data.get("fallback")
        return cls(
            pipeline_id,
            int(data["batch_id"]),
            position,
            committed_at,
            registry,
            STATE_VERSION,
            batch_path=str(path) if path is not None else None,
            fallback=str(fallback) if fallback is not None else None,
        )


def _version_0(position: Any) -> tuple[Any, dict[str, Any] | None]:
    """A version-0 source position as (position, registry): a dead-letter table's recorded plan
    or registry summary unpacked, any other position as it is."""
    if isinstance(position, dict):
        plan = position.get("plan")
        if set(position) == {"plan"} and isinstance(plan, dict) and "position" in plan:
            return plan["position"], None
        if set(position) == {"position", "tables"} and isinstance(position["tables"], dict):
            return position["position"], position["tables"]
    return position, None


def state_property(pipeline_id: str) -> str:
    """The table property holding a pipeline's last committed batch and position."""
    return f"{STATE_PROPERTY_PREFIX}{pipeline_id}"


def read_pipeline_state(jtable: Any, pipeline_id: str) -> PipelineState | None:
    """The pipeline's last committed batch on this (already loaded) table or TableMetadata, or None."""
    text = jtable.properties().get(state_property(pipeline_id))
    return PipelineState.from_json(pipeline_id, str(text)) if text else None


def all_pipeline_states(jtable: Any) -> list[PipelineState]:
    """Every pipeline's last committed batch on this table."""
    states = []
    for entry in java_list(jtable.properties().entrySet()):
        key = str(entry.getKey())
        if key.startswith(STATE_PROPERTY_PREFIX):
            states.append(PipelineState.from_json(key[len(STATE_PROPERTY_PREFIX) :], str(entry.getValue())))
    return sorted(states, key=lambda s: s.pipeline_id)
