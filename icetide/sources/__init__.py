"""Sources the icetide runner reads: Kafka offset ranges and landing files.

Each plans a batch on the driver (`plan(position, limit) -> (items, new_position)`, the position
committed with the batch's data) and reads it on the executors (`read(spark, items)`).
Importing this package does not import confluent-kafka; using KafkaSource needs `icetide[kafka]`.
"""

from __future__ import annotations

from icetide.sources.base import BatchSource, source_error_in
from icetide.sources.files import FileSource, FileSourceConfig
from icetide.sources.kafka import KafkaSource, KafkaSourceConfig, OffsetRange

__all__ = [
    "BatchSource",
    "FileSource",
    "FileSourceConfig",
    "KafkaSource",
    "KafkaSourceConfig",
    "OffsetRange",
    "source_error_in",
]
