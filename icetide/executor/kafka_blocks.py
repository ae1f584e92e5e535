"""A fast-path task's Kafka reader: its offset ranges read on a thread of their own, in blocks
(pipeline/json_fast.py and executor/sync_task.py decode them as they come)."""

from __future__ import annotations

import contextlib
import gc
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from icetide.errors import ExecutorSourceError
from icetide.executor.kafka_ahead import AheadReader, ReadAhead
from icetide.sources.kafka_reader import OffsetRange, RangeReader, confluent_kafka_module, range_consumer

BLOCK_RECORDS = 50_000  # records decoded per pyarrow call
QUEUED_BLOCKS = 2  # blocks read ahead of decoding, per task


@dataclass(frozen=True)
class _Block:
    """Consecutive messages of one range, and their payloads joined by newlines (None: a tombstone,
    or a reader that does not join)."""

    where: str  # "topic/partition@", for dead-letter positions
    messages: list[Any]
    joined: bytes | None


_DONE = object()  # the reader thread's last item when it read everything


class BlockReader:
    """Reads a task's ranges on its own thread, a bounded queue of blocks ahead of decoding.

    librdkafka's consume and the Message objects it returns hold the GIL, `pyarrow.json.read_json`
    and the compute kernels release it: on a thread of its own the read of the next block
    overlaps the decode of the current one. At most QUEUED_BLOCKS blocks wait in the queue.
    """

    def __init__(
        self,
        consumer_settings: dict[str, str],
        read_timeout: float,
        ranges: list[OffsetRange],
        *,
        join: bool = True,
        ahead: ReadAhead | None = None,
    ) -> None:
        self.consumer_settings = consumer_settings
        self.read_timeout = read_timeout
        self.ranges = ranges
        self.join = join  # False: blocks without joined payloads, for a reader that takes messages one by one
        self.ahead = ahead  # read past the ranges until the trigger time (executor/kafka_ahead.py)
        self.reached: list[OffsetRange] = []  # with `ahead`: the ranges read, once the blocks are done
        self._value: Any = None  # confluent_kafka.Message.value, once imported
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUED_BLOCKS)
        self.stopping = threading.Event()
        self.cpu_seconds = 0.0
        self.wait_seconds = 0.0  # how long `blocks` waited for the next block (with `ahead`: for records to arrive)
        self.thread = threading.Thread(target=self._run, name="icetide-kafka-reader", daemon=True)

    def __enter__(self) -> BlockReader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        while self.thread.is_alive():  # unblock a reader waiting for room in the queue
            with contextlib.suppress(queue.Empty):
                self.queue.get(timeout=0.05)
        self.thread.join()

    def blocks(self) -> Iterator[_Block]:
        """The blocks in range order; re-raises the reader thread's error."""
        while True:
            waiting = time.perf_counter()
            item = self.queue.get()
            self.wait_seconds += time.perf_counter() - waiting
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _put(self, item: Any) -> bool:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        started = time.thread_time()
        try:
            self._read()
            self._put(_DONE)
        except BaseException as exc:  # handed to the decoding thread, which raises it
            self._put(exc)
        finally:
            self.cpu_seconds = time.thread_time() - started

    def _block(self, where: str, messages: list[Any]) -> _Block:
        joined: bytes | None = None
        if self.join:
            with contextlib.suppress(TypeError):  # TypeError: a tombstone (null value)
                joined = b"\n".join(map(self._value, messages))  # in C: no Python list of the payloads
        return _Block(where, messages, joined)

    def _read(self) -> None:
        kafka = confluent_kafka_module()
        self._value = kafka.Message.value
        if self.ahead is not None:
            self._read_ahead(kafka, self.ahead)
            return
        for r in self.ranges:
            consumer = range_consumer(kafka, self.consumer_settings, r)
            try:
                reader = RangeReader(
                    consumer,
                    r,
                    read_timeout=self.read_timeout,
                    batch_rows=BLOCK_RECORDS,
                    topic_partition=kafka.TopicPartition,
                )
                where = f"{r.topic}/{r.partition}@"
                for messages in reader.message_blocks():
                    if not self._put(self._block(where, messages)):
                        return
            finally:
                consumer.close()

    def _read_ahead(self, kafka: Any, ahead: ReadAhead) -> None:
        """Every range's partition on one consumer, past the ranges until the trigger time."""
        try:
            consumer = kafka.Consumer(dict(self.consumer_settings))
        except Exception as exc:
            raise ExecutorSourceError(f"{self.ranges[0].topic}: cannot create a consumer: {exc}") from exc
        try:
            reader = AheadReader(
                consumer,
                self.ranges,
                ahead,
                read_timeout=self.read_timeout,
                block_records=BLOCK_RECORDS,
                topic_partition=kafka.TopicPartition,
            )
            for where, messages in reader.blocks():
                if not self._put(self._block(where, messages)):
                    return
            self.reached = reader.reached
        finally:
            consumer.close()


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """The cycle collector off for one task. librdkafka's Message objects are GC-tracked and a
    task holds up to two blocks of them, so every collection walked 100,000 of them: about 8% of
    the task's CPU in the profile (docs/design.md, "Python task start"). The task makes no
    cycles of its own; reference counting frees the blocks as they are decoded."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
