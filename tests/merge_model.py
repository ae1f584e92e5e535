"""The reference model of the stateful stage: every event of a key merged by the engine's rules."""

from __future__ import annotations

from typing import Any

from icetide.stateful.merge import MergeSpec

Key = tuple[Any, ...]


def _content(event: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(event.items()))


def merge_events(
    events: list[dict[str, Any]], key: list[str], order_by: str, values: list[str], spec: MergeSpec
) -> dict[Key, tuple[Any, ...]]:
    """key -> (key values..., merged values...) after all `events` (exact duplicates count once).

    Events need distinct `order_by` values per key (ties have no defined winner). A key whose
    latest event is a DELETE is absent.
    """
    unique = {_content(e): e for e in events}
    by_key: dict[Key, list[dict[str, Any]]] = {}
    for e in unique.values():
        by_key.setdefault(tuple(e[k] for k in key), []).append(e)
    out: dict[Key, tuple[Any, ...]] = {}
    for k, group in by_key.items():
        group.sort(key=lambda e: e[order_by])
        if (group[-1].get("_op") or "UPSERT") == "DELETE":
            continue
        out[k] = k + tuple(_merge(spec.function(v), [e.get(v) for e in group]) for v in values)
    return out


def _merge(function: str, ordered: list[Any]) -> Any:
    present = [v for v in ordered if v is not None]
    if function == "last":
        return ordered[-1]
    if function == "last_non_null":
        return present[-1] if present else None
    if function == "first":
        return ordered[0]
    if function == "max":
        return max(present) if present else None
    if function == "min":
        return min(present) if present else None
    if function == "sum":
        return sum(present) if present else None
    if function == "count":
        return len(present)
    raise ValueError(function)
