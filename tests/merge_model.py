"""The reference model of the stateful stage: every event of a key merged by the engine's rules."""

from __future__ import annotations

from typing import Any

from icetide.stateful.merge import RESETTING, MergeSpec

Key = tuple[Any, ...]


def _content(event: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted(event.items()))


def merge_events(
    events: list[dict[str, Any]], key: list[str], order_by: str, values: list[str], spec: MergeSpec
) -> dict[Key, tuple[Any, ...]]:
    """key -> (key values..., merged values...) after all `events` (exact duplicates count once).

    Events need distinct `order_by` values per key (ties have no defined winner). A key whose
    latest event is a DELETE is absent. A DELETE's values are never merged; `last` and
    `last_non_null` merge only the events after the key's latest DELETE, the other functions
    every event of the key.
    """
    unique = {_content(e): e for e in events}
    by_key: dict[Key, list[dict[str, Any]]] = {}
    for e in unique.values():
        by_key.setdefault(tuple(e[k] for k in key), []).append(e)
    out: dict[Key, tuple[Any, ...]] = {}
    for k, group in by_key.items():
        group.sort(key=lambda e: e[order_by])
        if _deletes(group[-1]):
            continue
        if spec.engine == "last":
            out[k] = k + tuple(group[-1].get(v) for v in values)
            continue
        deletes = [i for i, e in enumerate(group) if _deletes(e)]
        since_delete = group[deletes[-1] + 1 :] if deletes else group
        live = [e for e in group if not _deletes(e)]
        out[k] = k + tuple(
            _merge(f, [e.get(v) for e in (since_delete if f in RESETTING else live)])
            for v, f in ((v, spec.function(v)) for v in values)
        )
    return out


def _deletes(event: dict[str, Any]) -> bool:
    return (event.get("_op") or "UPSERT") == "DELETE"


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
