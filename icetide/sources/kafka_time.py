"""A Kafka start given as a timestamp, made exact: the first record at or after it, per partition."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from icetide.errors import SourceError
from icetide.sources.kafka_config import KafkaSourceConfig
from icetide.sources.kafka_reader import AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE, PARTITION_EOF, confluent_kafka_module

log = logging.getLogger(__name__)


def scan_to_time(
    consumer: Any,
    config: KafkaSourceConfig,
    froms: Mapping[int, int],
    timestamp_ms: int,
    low_watermark: Callable[[int], int],
) -> dict[int, int]:
    """Per partition of `froms` (partition -> the offset the broker answered for `timestamp_ms`), the
    first offset at or after it whose record's timestamp is >= `timestamp_ms`: read forward from
    the answer (some Kafka-protocol brokers answer the earliest offset for any timestamp). A partition
    that ends first gives its end; one whose answer is gone, `low_watermark(partition)`."""
    kafka = confluent_kafka_module()
    topic = config.topic
    found: dict[int, int] = {}
    paused: list[Any] = []
    position = dict(froms)
    consumer.assign([kafka.TopicPartition(topic, p, offset) for p, offset in froms.items()])
    idle_deadline = time.monotonic() + config.read_timeout_seconds
    try:
        while len(found) < len(froms):
            if time.monotonic() > idle_deadline:
                p = min(set(froms) - set(found))
                raise SourceError(
                    f"{topic}/{p}@{position[p]}: no progress for {config.read_timeout_seconds}s "
                    f"while looking for the first record at or after timestamp {timestamp_ms}"
                )
            message = consumer.poll(0.2)
            if message is None:
                continue
            p, error = message.partition(), message.error()
            if p not in froms or p in found:
                continue
            idle_deadline = time.monotonic() + config.read_timeout_seconds
            if error is None:
                position[p] = message.offset() + 1
                if message.timestamp()[1] >= timestamp_ms:
                    found[p] = message.offset()
                    paused.append(kafka.TopicPartition(topic, p))
                    consumer.pause(paused[-1:])
            elif error.code() == PARTITION_EOF:
                found[p] = max(message.offset(), froms[p])
            elif error.code() in (OFFSET_OUT_OF_RANGE, AUTO_OFFSET_RESET):
                found[p] = low_watermark(p)
            elif not error.retriable():
                raise SourceError(f"{topic}/{p}@{position[p]}: {error.str()}")
    finally:
        if paused:  # librdkafka keeps a partition paused across assignments
            consumer.resume(paused)
        consumer.unassign()
    for p, offset in found.items():
        if offset > froms[p]:
            log.info(
                "%s/%d: the broker answered offset %d for timestamp %d; scanning found %d",
                topic,
                p,
                froms[p],
                timestamp_ms,
                offset,
            )
    return found
