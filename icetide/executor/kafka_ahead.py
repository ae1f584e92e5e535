"""Reading ahead of the trigger: a fast-path task reads its Kafka partitions past the planned
ranges until the batch's trigger time, decoding as records arrive, so that only the last block,
the write and the commit remain after it (docs/runner.md, "Reading ahead").

The planned ranges are read whole whatever the time (they hold records that were there when the
batch was planned); beyond them the partitions are read until `until`, at most `spare` records
more. Past `until` no partition is read beyond its planned range: a batch that is behind (a
partition still short of its planned end at the trigger) does not grow while it catches up.
What the task reached, per partition, is the batch's end: the driver extends its plan to it
before anything is committed.
"""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from icetide.errors import ExecutorSourceError
from icetide.sources.kafka_reader import PARTITION_EOF, OffsetRange

log = logging.getLogger(__name__)

BLOCK_SECONDS = 1.0  # records handed to decoding at least this often while reading ahead
POLL_SECONDS = 0.2  # the longest consume call
_PARTITION = operator.methodcaller("partition")
_TOPIC = operator.methodcaller("topic")
_ERROR = operator.methodcaller("error")  # None or a KafkaError (always true; never compared with None)


@dataclass(frozen=True)
class ReadAhead:
    """A task reads its partitions until `until` (time.time() seconds), at most `spare` records
    more than its planned ranges hold."""

    until: float
    spare: int


@dataclass
class _Partition:
    topic: str
    partition: int
    next_offset: int
    planned_end: int
    pending: list[Any] = field(default_factory=list)
    closed: bool = False  # an error past its planned range: read no further this batch
    moved_at: float = 0.0  # when it last took a record or an end (for the read timeout)

    @property
    def planned_done(self) -> bool:
        return self.next_offset >= self.planned_end


class AheadReader:
    """One consumer assigned every range's partition at the range's start; `blocks` yields
    ("topic/partition@", messages) in offset order per partition, and `reached` holds, after it,
    what was read of every partition: its planned range at least, unless the cap came first."""

    def __init__(
        self,
        consumer: Any,
        ranges: list[OffsetRange],
        ahead: ReadAhead,
        *,
        read_timeout: float,
        block_records: int,
        topic_partition: Callable[..., Any],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.consumer = consumer
        self.ahead = ahead
        self.read_timeout = read_timeout
        self.block_records = block_records
        self._tp = topic_partition
        self._clock = clock
        self.partitions = {(r.topic, r.partition): _Partition(r.topic, r.partition, r.start, r.end) for r in ranges}
        self._starts = [(p, p.next_offset) for p in self.partitions.values()]
        self.records = 0
        self.cap = sum(r.count for r in ranges) + ahead.spare

    @property
    def reached(self) -> list[OffsetRange]:
        """The ranges read: from each planned start to the partition's next offset."""
        return [OffsetRange(p.topic, p.partition, start, p.next_offset) for p, start in self._starts]

    def blocks(self) -> Iterator[tuple[str, list[Any]]]:
        """The records as they arrive, at least every BLOCK_SECONDS, until the trigger time (the
        planned ranges whole) or the cap."""
        self.consumer.assign([self._tp(p.topic, p.partition, p.next_offset) for p in self.partitions.values()])
        flushed = time.monotonic()
        for p in self.partitions.values():
            p.moved_at = self._clock()
        while True:
            now = self._clock()
            late = [p for p in self.partitions.values() if not p.planned_done]
            if self.records >= self.cap or (not late and now >= self.ahead.until):
                break
            stalled = next((p for p in late if now - p.moved_at > self.read_timeout), None)
            if stalled is not None:  # each partition on its own, as the range reader times out each range
                raise ExecutorSourceError(
                    f"{stalled.topic}/{stalled.partition}@{stalled.next_offset}: no records for "
                    f"{self.read_timeout:g}s while reading up to offset {stalled.planned_end}; "
                    "is the broker reachable and the data still there?"
                )
            past = now >= self.ahead.until
            if past:
                self._close_done()
            wait = POLL_SECONDS if late else min(POLL_SECONDS, max(0.0, self.ahead.until - now))
            wanted = max(1, min(self.block_records, self.cap - self.records))
            self._take(self.consumer.consume(num_messages=wanted, timeout=wait), past=past)
            if time.monotonic() - flushed >= BLOCK_SECONDS or self._pending() >= self.block_records:
                yield from self._flush()
                flushed = time.monotonic()
        yield from self._flush()

    def _close_done(self) -> None:
        """Past the trigger time: the partitions that reached their planned end are read no
        further (paused, so their fetches stop too)."""
        done = [p for p in self.partitions.values() if p.planned_done and not p.closed]
        for p in done:
            p.closed = True
        if done:
            try:
                self.consumer.pause([self._tp(p.topic, p.partition) for p in done])
            except Exception:  # their records are dropped anyway (`closed`)
                log.debug("pausing partitions past their plan failed", exc_info=True)

    def _take(self, messages: list[Any], *, past: bool = False) -> None:
        """File the messages under their partitions, noting when each last moved; `past` the
        trigger time, none beyond its partition's planned end."""
        if (
            messages
            and not any(map(_ERROR, messages))
            and len(set(map(_PARTITION, messages))) == 1
            and len(set(map(_TOPIC, messages))) == 1
        ):
            # The common case, checked in C: one partition's records, in offset order, no events.
            # Its topic too: a database sync reads many topics of one partition each (all `0`).
            part = self.partitions.get((messages[0].topic(), messages[0].partition()))
            if part is not None and not part.closed and messages[0].offset() >= part.next_offset:
                if past and messages[-1].offset() >= part.planned_end:
                    messages = [m for m in messages if m.offset() < part.planned_end]
                    part.closed = True
                    if not messages:
                        return
                part.pending.extend(messages)
                part.next_offset = messages[-1].offset() + 1
                part.moved_at = self._clock()
                self.records += len(messages)
                return
        for message in messages:
            part = self.partitions.get((message.topic(), message.partition()))
            if part is None or part.closed:
                continue
            error = message.error()
            if error is not None:
                if error.code() == PARTITION_EOF:
                    # Nothing past this offset yet (transaction markers and aborted records skipped).
                    part.next_offset = max(part.next_offset, message.offset())
                    part.moved_at = self._clock()
                elif error.retriable():
                    log.debug("%s/%d: retriable error %s", part.topic, part.partition, error.str())
                elif not part.planned_done:
                    raise ExecutorSourceError(f"{part.topic}/{part.partition}@{part.next_offset}: {error.str()}")
                else:  # past its planned range: the next plan meets the cause and says so
                    log.info("%s/%d: reading ahead stopped: %s", part.topic, part.partition, error.str())
                    part.closed = True
                continue
            offset = message.offset()
            if offset < part.next_offset:
                continue
            if past and offset >= part.planned_end:
                part.closed = True
                continue
            part.pending.append(message)
            part.next_offset = offset + 1
            part.moved_at = self._clock()
            self.records += 1

    def _pending(self) -> int:
        return sum(len(p.pending) for p in self.partitions.values())

    def _flush(self) -> Iterator[tuple[str, list[Any]]]:
        for p in self.partitions.values():
            if p.pending:
                messages, p.pending = p.pending, []
                yield f"{p.topic}/{p.partition}@", messages
