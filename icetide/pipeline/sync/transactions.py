"""Whole source transactions: a sync that commits no part of a transaction before all of it.

With Debezium's transaction metadata on (`provide.transaction.metadata`), every change event
carries a `transaction` block (`id`, `total_order`, `data_collection_order`) and the connector
writes a BEGIN and an END event per transaction to its transaction topic; the END event counts
the transaction's events, in total and per data collection (`event_count`, `data_collections`).

A batch is planned as usual, then cut (`TransactionGate.cut`): the driver reads the batch's
records' `transaction` blocks and the transaction topic, and ends each topic-partition's range
before the first record of any transaction it cannot land whole: one whose END it has not read,
or whose events it has not all read (END's counts, per data collection), or that has an event
beyond a cut (the cuts are taken to a fixed point, `whole_transaction_ends`). What is cut off is
not held anywhere: the tables' positions stop before it, so the next batch (or the next run,
after a crash) reads it again from Kafka.

Every table commits every batch (a metadata-only commit when it has no record), and the
dead-letter table commits first with the batch's ends, so a batch is replayed whole after a
crash between two tables' commits (`SyncRunner.plan`): the tables that did not commit it read
up to exactly those ends, under the same batch id. The transaction topic's position (the first
BEGIN of a transaction not landed yet) rides in the dead-letter table's position too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from icetide.errors import SourceError
from icetide.sources.kafka_reader import OffsetRange, RangeReader, confluent_kafka_module, range_consumer
from icetide.sources.kafka_topics import KafkaTopics, TopicsPlan

log = logging.getLogger(__name__)

Partition = tuple[str, int]  # (topic, partition)
SCAN_THREADS = 4  # ranges read at once on the driver
TRANSACTION_TOPIC_BUDGET = 1 << 40  # the transaction topic is read to its end


@dataclass(frozen=True)
class TransactionEnd:
    """A transaction's END event: how many events it has, in total and per data collection."""

    id: str
    event_count: int
    collections: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ChangeEvent:
    """One record of a batch as far as transactions go: its offset, its transaction (None: the
    record belongs to none, as snapshot reads, tombstones and records that do not parse) and the
    names its data collection may have in END events (`schema.table`, `db.table`, ...)."""

    offset: int
    transaction: str | None
    collections: tuple[str, ...] = ()


def _envelope(value: bytes | None) -> dict[str, Any] | None:
    """The change event's envelope (the JSON converter's `payload` with schemas, else the value)."""
    if not value:
        return None
    try:
        message = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(message, dict):
        return None
    payload = message.get("payload") if "schema" in message and "payload" in message else message
    return payload if isinstance(payload, dict) else None


def change_event(offset: int, value: bytes | None) -> ChangeEvent:
    """What a change event says of its transaction (Debezium's `transaction` block)."""
    envelope = _envelope(value)
    block = envelope.get("transaction") if envelope is not None else None
    if not isinstance(block, dict) or block.get("id") is None:
        return ChangeEvent(offset, None)
    assert envelope is not None
    source = envelope.get("source")
    names: list[str] = []
    if isinstance(source, dict):
        db, schema, table = source.get("db"), source.get("schema"), source.get("table")
        for parts in ((schema, table), (db, table), (db, schema, table)):
            if all(isinstance(p, str) and p for p in parts):
                names.append(".".join(parts))  # type: ignore[arg-type]
    return ChangeEvent(offset, str(block["id"]), tuple(dict.fromkeys(names)))


def boundary(value: bytes | None) -> tuple[str, str, TransactionEnd | None] | None:
    """A transaction topic event as (status, id, its END counts): None when it is not one."""
    envelope = _envelope(value)
    if envelope is None or envelope.get("id") is None or envelope.get("status") not in ("BEGIN", "END"):
        return None
    txn, status = str(envelope["id"]), str(envelope["status"])
    if status == "BEGIN":
        return status, txn, None
    collections: dict[str, int] = {}
    for entry in envelope.get("data_collections") or []:
        if isinstance(entry, dict) and entry.get("data_collection") is not None:
            collections[str(entry["data_collection"])] = int(entry.get("event_count") or 0)
    return status, txn, TransactionEnd(txn, int(envelope.get("event_count") or 0), collections)


def complete(txn: str, events: Iterable[ChangeEvent], end: TransactionEnd | None) -> bool:
    """Whether `events` are all of transaction `txn`'s events, as its END event counts them."""
    if end is None:
        return False
    mine = [e for e in events if e.transaction == txn]
    if len(mine) != end.event_count:
        return False
    return all(sum(1 for e in mine if name in e.collections) == n for name, n in end.collections.items())


def whole_transaction_ends(
    events: Mapping[Partition, list[ChangeEvent]],
    ends: Mapping[str, TransactionEnd],
    planned: Mapping[Partition, int],
) -> tuple[dict[Partition, int], set[str]]:
    """Per partition, where the batch must end so that it holds whole transactions only, and the
    transactions it leaves out.

    `events`: the batch's records per partition (offsets within the partition's planned range),
    `ends`: the END events read, `planned`: each partition's planned end. A transaction is left
    out when it is not complete in `events`, or when one of its events lies at or past its
    partition's end; a partition ends at the first event of a transaction left out. Ends only move
    back, so this reaches a fixed point."""
    everything = [e for found in events.values() for e in found]
    firsts: dict[str, dict[Partition, int]] = {}
    lasts: dict[str, dict[Partition, int]] = {}
    for where, found in events.items():
        for e in found:
            if e.transaction is None:
                continue
            firsts.setdefault(e.transaction, {}).setdefault(where, e.offset)
            lasts.setdefault(e.transaction, {})[where] = e.offset
    out = dict(planned)
    left_out = {t for t in firsts if not complete(t, everything, ends.get(t))}
    pending = set(left_out)
    while pending:
        for txn in pending:
            for where, first in firsts[txn].items():
                out[where] = min(out[where], first)
        pending = {
            t
            for t, last in lasts.items()
            if t not in left_out and any(offset >= out[where] for where, offset in last.items())
        }
        left_out |= pending
    return out, left_out


def transaction_floor(
    begins: Mapping[str, tuple[int, int]],
    ends: Mapping[str, TransactionEnd],
    included: set[str],
    read_to: Mapping[str, int],
) -> dict[str, int]:
    """Where the transaction topic is read from next (partition -> offset): the BEGIN of the first
    transaction not landed yet, whose END is needed when its events are read; else `read_to`.

    `begins`: the BEGIN events read (id -> (partition, offset)); `included`: the transactions the
    batch lands. A transaction not included has landed before when a transaction after it on the
    same transaction-topic partition, changing a data collection it changed too, is included: a
    data collection's events come in commit order, so its events there were before the batch, and
    it landed whole. Any other one (its events not read yet, or not ended) keeps the floor."""
    out = dict(read_to)
    for txn, (p, offset) in begins.items():
        if txn in included:
            continue
        mine = set(ends[txn].collections) if txn in ends else set()
        later = (t for t in included if t in begins and begins[t][0] == p and begins[t][1] > offset and t in ends)
        if mine and any(mine & set(ends[t].collections) for t in later):
            continue
        out[str(p)] = min(out.get(str(p), offset), offset)
    return out


class TransactionGate:
    """Cuts a sync's batches to whole source transactions (the module docstring)."""

    def __init__(self, topics: KafkaTopics, reader_settings: dict[str, str], read_timeout: float, topic: str) -> None:
        self.topics = topics
        self.reader_settings = reader_settings
        self.read_timeout = read_timeout
        self.topic = topic  # the connector's transaction topic

    def cut(self, plan: TopicsPlan, floor: Mapping[str, int] | None) -> TopicsPlan:
        """`plan` with every range ended before the first record of a transaction it cannot land
        whole; its `ends` also carry the transaction topic's next position (`floor`: where this
        batch reads it from, None: from its beginning)."""
        ranges = [r for r in plan.ranges if r.end > r.start]
        boundaries, read_to = self._boundaries(floor)
        begins = {txn: (p, offset) for p, offset, status, txn, _ in boundaries if status == "BEGIN"}
        ends = {txn: end for _, _, status, txn, end in boundaries if status == "END" and end is not None}
        with ThreadPoolExecutor(max_workers=max(1, min(SCAN_THREADS, len(ranges)))) as pool:
            scanned = list(pool.map(lambda r: list(self._events(r)), ranges))
        events = {(r.topic, r.partition): found for r, found in zip(ranges, scanned, strict=True)}
        planned = {(r.topic, r.partition): r.end for r in ranges}
        cuts, left_out = whole_transaction_ends(events, ends, planned)
        included = {e.transaction for found in events.values() for e in found if e.transaction} - left_out
        next_floor = transaction_floor(begins, ends, included, read_to)
        cut_ranges = [dataclasses.replace(r, end=cuts.get((r.topic, r.partition), r.end)) for r in plan.ranges]
        new_ends = {t: dict(p) for t, p in plan.ends.items()}
        for r in cut_ranges:
            new_ends[r.topic][str(r.partition)] = r.end
        new_ends[self.topic] = next_floor
        held = sum(r.count for r in plan.ranges) - sum(r.count for r in cut_ranges)
        if held:
            log.debug("batch cut to whole transactions: %d records wait for %d transactions", held, len(left_out))
        return dataclasses.replace(plan, ranges=cut_ranges, ends=new_ends, starts=dict(plan.starts))

    def _boundaries(
        self, floor: Mapping[str, int] | None
    ) -> tuple[list[tuple[int, int, str, str, TransactionEnd | None]], dict[str, int]]:
        """The transaction topic's events from `floor` to its end, as (partition, offset, status,
        id, END counts), and the position after them; none while the topic does not exist."""
        if self.topic not in self.topics.present():
            return [], dict(floor or {})
        ranges, read_to = self.topics.source(self.topic).plan(dict(floor or {}), TRANSACTION_TOPIC_BUDGET)
        out = []
        for r in ranges:
            for offset, value in _read(r, self.reader_settings, self.read_timeout):
                found = boundary(value)
                if found is not None:
                    out.append((r.partition, offset, *found))
        return out, dict(read_to)

    def _events(self, r: OffsetRange) -> Iterator[ChangeEvent]:
        for offset, value in _read(r, self.reader_settings, self.read_timeout):
            yield change_event(offset, value)


def _read(r: OffsetRange, settings: Mapping[str, str], read_timeout: float) -> Iterator[tuple[int, bytes | None]]:
    """The (offset, value) of every record of range `r`, read here on the driver."""
    if r.end <= r.start:
        return
    kafka = confluent_kafka_module()
    consumer = range_consumer(kafka, settings, r)
    try:
        reader = RangeReader(consumer, r, read_timeout=read_timeout, topic_partition=kafka.TopicPartition)
        for block in reader.message_blocks():
            for m in block:
                yield m.offset(), m.value()
    except SourceError as exc:
        raise SourceError(f"reading {r.topic}/{r.partition} for its transactions: {exc}") from exc
    finally:
        consumer.close()


def replay(plan: TopicsPlan, ends: Mapping[str, Mapping[str, int]], transaction_topic: str) -> TopicsPlan:
    """A batch read again to `ends`, the ends of a batch some tables committed and others did not
    (the dead-letter table's position): each partition from where `plan` starts it to exactly
    there, whatever `plan`'s own ends (a partition `ends` lack is not read)."""
    ranges = []
    new_ends: dict[str, dict[str, int]] = {}
    for topic, starts in plan.starts.items():
        mine = ends.get(topic, {})
        new_ends[topic] = {}
        for p, start in starts.items():
            end = max(start, mine.get(p, start))
            ranges.append(OffsetRange(topic, int(p), start, end))
            new_ends[topic][p] = end
    new_ends[transaction_topic] = dict(ends.get(transaction_topic, {}))
    # `full`: more may follow (a run with --once goes on after it)
    return dataclasses.replace(plan, ranges=ranges, ends=new_ends, full=True)
