"""The pipeline file's stateful keys: `merge`, `enrich`, `state` and `raw`, validated at load.

A pipeline that names a merge engine or an enrichment runs in two stages (docs/stateful.md):
stage 1 appends the source into `raw.table`; stage 2 streams that table through the stateful
stage into the pipeline's table, with its Spark checkpoint in `state.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from icetide.errors import ConfigError
from icetide.stateful.enrich import Enrichment
from icetide.stateful.merge import MergeSpec

STATE_KEYS = {"checkpoint", "watermark", "ttl", "dedup_by", "dedup"}
RAW_KEYS = {"table", "retention"}


@dataclass(frozen=True)
class StatefulSettings:
    """Stage 2 of a two-stage pipeline."""

    merge: MergeSpec
    enrich: tuple[Enrichment, ...]
    checkpoint: str
    raw_table: str
    raw_retention_seconds: float | None = None
    watermark_seconds: float = 600.0
    ttl_seconds: float | None = None
    dedup_by: tuple[str, ...] | None = None
    dedup: bool | None = None  # None: auto (see StageOptions.deduplicates)

    @classmethod
    def from_dict(
        cls,
        d: Mapping[str, Any],
        *,
        table: str,
        pipeline: str,
        warehouse: str | None,
        order_by: str | None,
        duration: Callable[[Any, str], float],
    ) -> StatefulSettings | None:
        """None unless the document asks for a merge engine or enrichment."""
        if d.get("merge") is None and not d.get("enrich"):
            for key in ("state", "raw"):
                if d.get(key) is not None:
                    raise ConfigError(f"{key}: only used with merge or enrich (a two-stage pipeline)")
            return None
        if not order_by:
            raise ConfigError("order_by: a stateful pipeline (merge or enrich) needs the event-time column")
        merge = MergeSpec.from_dict(d["merge"]) if d.get("merge") is not None else MergeSpec()
        enrich_raw = d.get("enrich") or []
        if not isinstance(enrich_raw, list):
            raise ConfigError("enrich: expected a list of {table, on, columns}")
        enrich = tuple(Enrichment.from_dict(e, f"enrich[{i}]") for i, e in enumerate(enrich_raw))
        state = _block(d, "state", STATE_KEYS)
        raw = _block(d, "raw", RAW_KEYS)
        checkpoint = state.get("checkpoint") or (f"{warehouse}/_checkpoints/{pipeline}" if warehouse else None)
        if not checkpoint:
            raise ConfigError("state.checkpoint: required when the warehouse is not a local folder")
        raw_table = str(raw.get("table") or f"{table}_raw")
        if len(raw_table.split(".")) < 3:
            raise ConfigError(f"raw.table: {raw_table!r} must be <catalog>.<namespace>.<table>")
        dedup = state.get("dedup_by")
        if dedup is not None and (isinstance(dedup, str) or not all(isinstance(c, str) for c in dedup)):
            raise ConfigError("state.dedup_by: expected a list of column names")
        return cls(
            merge=merge,
            enrich=enrich,
            checkpoint=str(checkpoint),
            raw_table=raw_table,
            raw_retention_seconds=duration(raw["retention"], "raw.retention") if raw.get("retention") else None,
            watermark_seconds=duration(state.get("watermark", "10m"), "state.watermark"),
            ttl_seconds=duration(state["ttl"], "state.ttl") if state.get("ttl") else None,
            dedup_by=tuple(dedup) if dedup else None,
            dedup=_dedup(state.get("dedup", "auto")),
        )


def _block(d: Mapping[str, Any], key: str, allowed: set[str]) -> Mapping[str, Any]:
    block = d.get(key) or {}
    if not isinstance(block, Mapping):
        raise ConfigError(f"{key}: expected a mapping")
    extra = sorted(set(block) - allowed)
    if extra:
        raise ConfigError(f"{key}.{extra[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")
    return block


def _dedup(value: Any) -> bool | None:
    if value == "auto":
        return None
    if not isinstance(value, bool):
        raise ConfigError("state.dedup: expected auto, true or false")
    return value
