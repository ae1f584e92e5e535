"""Where a pipeline of many tables stands: each table's own source position, and the registry.

Exactly once per table rests on three facts kept in the tables themselves:

- each table's commit carries the position of every topic that feeds it (topic -> partition ->
  next offset): the records it has, and nothing after;
- the dead-letter table's commit carries the pipeline's registry, the tables it feeds with, for
  each topic that feeds a table, the offsets that table's data starts from (its *floor*). A new
  table, or a table fed by a new topic, is registered before its first commit on that topic;
- the dead-letter table's commit also carries its own position: the bad records up to there
  are committed.

A batch is planned, per topic-partition, from the lowest position of the tables that partition
feeds (a table's floor where it has not committed yet), so after a crash between two tables'
commits the batch is read again; each table then skips what it already holds (offsets below
its own position), and the dead-letter table skips bad records below its position. A partition
the batch finds reset (a recreated topic) is a new log: no table skips any of it, and every
position there moves to the batch's end, back from the old log's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Position = dict[str, dict[str, int]]  # topic -> partition (as a string) -> next offset


def advance(
    position: Mapping[str, Mapping[str, int]],
    ends: Mapping[str, Mapping[str, int]],
    *,
    reset: Iterable[tuple[str, str]] = (),
) -> Position:
    """`position` moved on to `ends` where those are further; a position never goes back, but on
    the partitions `reset` ((topic, partition): a recreated topic, whose new log starts again)."""
    out: Position = {t: dict(p) for t, p in position.items()}
    again = set(reset)
    for topic, partitions in ends.items():
        mine = out.setdefault(topic, {})
        for p, offset in partitions.items():
            mine[p] = offset if (topic, p) in again else max(offset, mine.get(p, offset))
    return out


def parse_position(value: Any) -> Position:
    """A committed position as ints; anything malformed reads as empty."""
    if not isinstance(value, Mapping):
        return {}
    out: Position = {}
    for topic, partitions in value.items():
        if isinstance(partitions, Mapping):
            out[str(topic)] = {str(p): int(o) for p, o in partitions.items() if isinstance(o, int)}
    return out


@dataclass
class TableState:
    """One table of the pipeline: its last commit, and where it starts on topics it has not committed."""

    name: str
    batch_id: int = 0
    position: Position = field(default_factory=dict)
    floor: Position = field(default_factory=dict)
    committed_at: str | None = None

    def effective(self) -> Position:
        """Per topic, what the table holds up to: its committed position, else its floor."""
        out = {t: dict(p) for t, p in self.floor.items()}
        out.update({t: dict(p) for t, p in self.position.items()})
        return out

    def topics(self) -> set[str]:
        """The topics that feed this table."""
        return set(self.floor) | set(self.position)

    def after(self, ends: Mapping[str, Mapping[str, int]], *, reset: Iterable[tuple[str, str]] = ()) -> Position:
        """Where the table holds its topics once a batch that read up to `ends` commits; on the
        partitions `reset` (a new log), the new log's position, below the old one."""
        return advance(self.effective(), {t: ends[t] for t in self.topics() if t in ends}, reset=reset)


@dataclass
class SyncState:
    """The pipeline's tables and its dead-letter table's position, as committed."""

    tables: dict[str, TableState] = field(default_factory=dict)
    dead_letter_position: Position = field(default_factory=dict)
    dead_letter_batch: int = 0
    # Whole transactions (pipeline/sync/transactions.py): every table commits every batch, after
    # the dead-letter table, whose position then holds the batch's ends.
    whole_transactions: bool = False

    @property
    def started(self) -> bool:
        """Has the pipeline committed anything yet?"""
        return bool(self.dead_letter_batch or any(t.batch_id for t in self.tables.values()))

    def next_batch_id(self) -> int:
        """One more than any batch id committed to any of the pipeline's tables."""
        return 1 + max([self.dead_letter_batch, *(t.batch_id for t in self.tables.values())])

    def registry(self) -> dict[str, Position]:
        """What the dead-letter table records: table -> topic -> the table's floor."""
        return {name: {t: dict(p) for t, p in s.floor.items()} for name, s in sorted(self.tables.items())}

    def due(self, read: set[str], fed: set[str]) -> list[str]:
        """The tables a batch commits: those it fed (`fed`) and those fed by a topic it `read`,
        whose positions move on even without a record; with whole transactions, every table."""
        if self.whole_transactions:
            return sorted(self.tables)
        return sorted(n for n, s in self.tables.items() if n in fed or s.topics() & read)

    def unfinished_batch(self) -> int | None:
        """With whole transactions: the batch the dead-letter table committed and some table did
        not (a crash between their commits), to be read again to the same ends; else None."""
        if not self.whole_transactions or not self.dead_letter_batch:
            return None
        behind = [n for n, s in self.tables.items() if s.batch_id < self.dead_letter_batch]
        return self.dead_letter_batch if behind else None

    def after_batch(
        self,
        batch_id: int,
        ends: Mapping[str, Mapping[str, int]],
        *,
        read: set[str],
        fed: set[str],
    ) -> SyncState:
        """This state as it will be once batch `batch_id`, which read `read` up to `ends` and fed
        `fed`, has committed every table it is due to (the next plan starts there while it
        commits). Only a batch without reset partitions (without data losses) is projected."""
        ahead = copy.deepcopy(self)
        for name in ahead.due(read, fed):
            table = ahead.tables[name]
            table.position = table.after(ends)
            table.batch_id = max(table.batch_id, batch_id)
        return ahead

    def feeding(self, topic: str) -> list[TableState]:
        """The tables `topic` feeds."""
        return [s for s in self.tables.values() if topic in s.topics()]

    def resume_position(self, topic: str) -> dict[str, int] | None:
        """Where `topic` is read from next: per partition, the lowest of the positions of the tables
        it feeds (a partition some table has no offset for is read from its earliest offset); for a
        topic that feeds no table, the dead-letter table's position; None when neither has one."""
        tables = self.feeding(topic)
        if not tables:
            known = self.dead_letter_position.get(topic)
            return dict(known) if known is not None else None
        positions = [s.effective()[topic] for s in tables]
        common = set(positions[0]).intersection(*positions[1:])
        return {p: min(pos[p] for pos in positions) for p in sorted(common)}

    def register(self, table: str, floors: Mapping[str, Mapping[str, int]]) -> bool:
        """Record that `table` is fed by these topics from these offsets; True if anything was new."""
        state = self.tables.setdefault(table, TableState(table))
        new = False
        for topic, offsets in floors.items():
            if topic not in state.topics():
                state.floor[topic] = dict(offsets)
                new = True
        return new

    def load_dead_letter(self, batch_id: int, position: Any, registry: Any) -> None:
        """Take the dead-letter position and the registry from the dead-letter table's last commit."""
        self.dead_letter_batch = batch_id
        self.dead_letter_position = parse_position(position)
        for name, floors in (registry if isinstance(registry, Mapping) else {}).items():
            self.tables.setdefault(str(name), TableState(str(name))).floor = parse_position(floors)


def skipped_below(
    position: Mapping[str, Mapping[str, int]],
    starts: Mapping[str, Mapping[str, int]],
    topics: Iterable[str],
    *,
    reset: Iterable[tuple[str, str]] = (),
) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the offset below which a table (or the dead-letter table) already
    holds what the batch reads, for the partitions where that is above the batch's start; none on
    the partitions `reset` ((topic, partition): a new log, of which an old-log position holds nothing)."""
    again = set(reset)
    out: dict[tuple[str, int], int] = {}
    for topic in topics:
        held = position.get(topic, {})
        for p, start in starts.get(topic, {}).items():
            if (topic, p) not in again and held.get(p, start) > start:
                out[(topic, int(p))] = held[p]
    return out
