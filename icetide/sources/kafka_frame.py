"""The Spark side of a Kafka read: planned offset ranges as a lazy DataFrame, one Spark
partition per range, whose tasks read them with librdkafka (icetide.sources.kafka_reader)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

from icetide.sources.head_split import HEAD_ID_SUFFIX, HEAD_SUFFIX, JsonHeadSplit
from icetide.sources.kafka_reader import VALUE_ERROR_COLUMN, OffsetRange, ValueTranscoder, read_ranges_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from icetide.sources.kafka_config import KafkaSourceConfig

RECORD_DDL = "topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY"
SPLIT_RECORD_DDL = f"{RECORD_DDL}, value{HEAD_ID_SUFFIX} BIGINT, value{HEAD_SUFFIX} STRING"
RANGE_DDL = "topic STRING, partition INT, start BIGINT, end BIGINT"
POSITION_COLUMNS = ["topic", "partition", "offset"]  # for decode's source_position: "ads/0@1234"


def read_ranges(
    spark: SparkSession,
    config: KafkaSourceConfig,
    ranges: Iterable[OffsetRange],
    *,
    split: JsonHeadSplit | None = None,
    transcode: ValueTranscoder | None = None,
) -> DataFrame:
    """A lazy DataFrame of the records in `ranges`, one Spark partition per range.

    Columns: topic string, partition int, offset bigint, timestamp timestamp (null when the
    record has none), key binary, value binary; within a Spark partition in offset order.
    With `split`, the values' heads are split off where they are read, and two more columns
    say how (value_head_id bigint, value_head string: icetide.sources.head_split). With
    `transcode`, keys and values are rewritten first, and `value_error` string says why a
    value could not be (icetide.decode.avro.decoder).
    Each task opens its own consumer, assigns the range's start and reads up to its end;
    offsets deleted by retention are skipped (logged on the executor). A task that makes no
    progress for read_timeout_seconds fails with a SourceError naming topic/partition@offset
    (recover it on the driver with `icetide.sources.base.source_error_in`). Every action on the
    DataFrame reads Kafka again: persist it if it is used more than once.
    """
    todo = [(r.topic, r.partition, r.start, r.end) for r in ranges if r.end > r.start]
    ddl = RECORD_DDL if split is None else SPLIT_RECORD_DDL
    if transcode is not None:
        ddl += f", {VALUE_ERROR_COLUMN} STRING"
    if not todo:
        return spark.createDataFrame([], ddl)
    frame = spark.createDataFrame(spark.sparkContext.parallelize(todo, len(todo)), RANGE_DDL)
    task = functools.partial(
        read_ranges_task,
        config.reader_settings(),
        config.read_timeout_seconds,
        split=split,
        transcode=transcode,
    )
    return frame.mapInArrow(task, ddl)
