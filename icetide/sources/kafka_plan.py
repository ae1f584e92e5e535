"""The pure parts of planning a Kafka batch: the record budget shared fairly, a committed
position read back, and the records a partition lost before the pipeline read them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from icetide.errors import ConfigError

_Share = TypeVar("_Share", int, str)  # what a budget is shared over: partitions, or topics


def allocate(available: Mapping[_Share, int], budget: int, *, rotation: int = 0) -> dict[_Share, int]:
    """Split `budget` records across partitions fairly (max-min fair, i.e. water-filling).

    Every partition gets min(its backlog, an equal share), the unused share is spread again over
    the partitions with backlog left. A remainder smaller than the number of such partitions goes
    one record each, starting at index `rotation` (so a tiny budget does not always favour
    partition 0). The result never exceeds a partition's backlog, and sums to min(budget, total).
    """
    result = {p: 0 for p in available}
    remaining = {p: n for p, n in available.items() if n > 0}
    left = max(0, budget)
    while left > 0 and remaining:
        share = left // len(remaining)
        if share == 0:
            order = sorted(remaining)
            for i in range(left):
                result[order[(rotation + i) % len(order)]] += 1
            break
        for p in sorted(remaining):
            take = min(share, remaining[p])
            result[p] += take
            remaining[p] -= take
            left -= take
            if remaining[p] == 0:
                del remaining[p]
    return result


def parse_position(position: Mapping[str, int] | None) -> dict[int, int] | None:
    """A committed position ({"partition": next offset}) as ints; ConfigError if malformed."""
    if position is None:
        return None
    if not isinstance(position, Mapping):
        raise ConfigError(f"kafka position: expected a mapping of partition to offset, got {position!r}")
    parsed: dict[int, int] = {}
    for name, offset in position.items():
        if not re.fullmatch(r"\d+", str(name)) or isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"kafka position: bad entry {name!r}: {offset!r}")
        parsed[int(name)] = offset
    return parsed


@dataclass(frozen=True)
class DataLoss:
    """Records of one partition lost before the pipeline read them: offsets [from_offset, to_offset);
    `to_offset` None when unknown (the partition was reset below the pipeline's position)."""

    topic: str
    partition: int
    from_offset: int
    to_offset: int | None
    reason: str

    def where(self) -> str:
        """'topic/partition@from..to' (to exclusive, '?' when unknown): the dead-letter row's position."""
        to = "?" if self.to_offset is None else str(self.to_offset)
        return f"{self.topic}/{self.partition}@{self.from_offset}..{to}"

    def to_json(self) -> dict[str, Any]:
        """JSON-able form, recorded with the batch's plan."""
        return {"source_position": self.where(), "error": f"data loss: {self.reason}"}
