"""One shape for every source: plan a batch, read it, decode it; what a batch read again holds already."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from icetide.config.pipeline import AVRO_FORMATS, PipelineConfig
from icetide.decode.limits import PayloadLimits
from icetide.errors import ConfigError
from icetide.pipeline.dead_letter_table import KAFKA_WHERE, RESET, Held
from icetide.pipeline.sync.state import parse_position
from icetide.write.collapse import INSERT, OP_COLUMN, UPSERT

EVENT_OP_COLUMN = "_event_op"  # a raw table's record op (the raw table itself is append-only)
SOURCE_POSITION_COLUMN = "_source_position"
CAPTURE_COLUMNS = (EVENT_OP_COLUMN, SOURCE_POSITION_COLUMN)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructField, StructType

    from icetide.commit.pipeline_state import PipelineState
    from icetide.decode.avro.decoder import AvroSettings


@dataclass(frozen=True)
class PlannedBatch:
    """What one batch reads, and the source position after it (committed with the batch)."""

    items: list[Any]  # JSON-able: offset ranges or file paths
    position: dict[str, Any]
    records_planned: int
    # Source data lost before it was read, skipped with `on_data_loss: skip`: one dead-letter row
    # each ({"source_position", "error"}), committed with the batch.
    losses: list[dict[str, Any]] = field(default_factory=list)
    # What of it the dead-letter table already holds (read again after a crash): not written twice.
    held: Held = field(default_factory=Held)

    def starts(self) -> dict[str, dict[str, int]]:
        """Kafka: per topic and partition (as a string), the first offset the batch reads."""
        out: dict[str, dict[str, int]] = {}
        for r in self.items:
            out.setdefault(r["topic"], {})[str(r["partition"])] = r["start"]
        return out


@dataclass
class Decoded:
    """A batch decoded: good rows with `_op`, bad records, and what the sink must know about them."""

    good: DataFrame
    bad: DataFrame
    order_by: str | None  # the column that orders changes of one key
    truncated: bool = False  # a source TRUNCATE: rows committed before this batch go
    unknown_fields: dict[str, int] = field(default_factory=dict)  # fields the table lacks -> records
    new_columns: list[str] = field(default_factory=list)  # columns `good` adds to the table (schema evolution)
    # The source records read, where a record may make other than one row or dead letter (Debezium:
    # tombstones, truncates, key-moving updates); None: good rows and bad records count them.
    records: int | None = None
    nested_as_text: int = 0  # objects and arrays kept as JSON text in STRING columns (json: nested_as_text)


def payload_limits(config: PipelineConfig) -> PayloadLimits:
    """The pipeline's limits on a payload (max_record_bytes, max_nesting_depth)."""
    return PayloadLimits(config.max_record_bytes, config.max_nesting_depth)


def avro_transcoding(config: PipelineConfig, *, keys: bool = True) -> AvroSettings | None:
    """With `format: debezium-avro | avro`: what the Kafka read tasks need to rewrite each record
    as the JSON converter's message (icetide.decode.avro.decoder), else None. `keys`: the keys too (for
    a table created from the stream; the decoders themselves never read them)."""
    if config.format not in AVRO_FORMATS or config.schema_registry is None:
        return None
    from icetide.decode.avro.decoder import AvroSettings

    settings = AvroSettings.of(config.format, config.schema_registry, payload_limits(config))
    return dataclasses.replace(settings, keys=keys)


class SourceAdapter:
    """Wraps a Kafka or file source for the runner."""

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.kind = config.source_kind
        settings = config.source[self.kind]
        if self.kind == "kafka":
            from icetide.sources.kafka import KafkaSource, KafkaSourceConfig

            self.kafka = KafkaSource(KafkaSourceConfig.from_dict(settings))
        else:
            from icetide.sources.files import FileSource, FileSourceConfig

            self.files = FileSource(FileSourceConfig.from_dict(settings))
            if self.files.config.format != "json" and config.reads_debezium:
                raise ConfigError("format: debezium needs json files (source.files.format: json)")

    @property
    def batch_limit(self) -> int:
        """The most a plan takes: max_records for Kafka, max_files for landing files."""
        return self.config.trigger.max_records if self.kind == "kafka" else self.config.trigger.max_files

    def plan(self, position: dict[str, Any] | None) -> PlannedBatch:
        """The next batch from `position` (None: a new pipeline)."""
        if self.kind == "kafka":
            from icetide.sources.kafka import DataLoss

            losses: list[DataLoss] | None = [] if self.config.on_data_loss == "skip" else None
            ranges, new_position = self.kafka.plan(position, self.config.trigger.max_records, losses=losses)
            return PlannedBatch(
                [asdict(r) for r in ranges],
                new_position,
                sum(r.count for r in ranges),
                [loss.to_json() for loss in losses or []],
            )
        from icetide.sources.files import LandedFile

        late: list[LandedFile] | None = [] if self.config.on_data_loss == "skip" else None
        files, new_position = self.files.plan(position, self.config.trigger.max_files, late=late)
        lost = [
            {
                "source_position": f.path,
                "error": f"data loss: file landed after the late window (late_window_seconds "
                f"{self.files.config.late_window_seconds:g}); not read",
            }
            for f in late or []
        ]
        return PlannedBatch(list(files), new_position, len(files), lost)

    def held(
        self, dead_letters: PipelineState | None, batch: PlannedBatch, recorded: Callable[[list[str]], set[str]]
    ) -> Held:
        """What of `batch` the dead-letter table's last commit already holds (a batch read again
        after a crash between that commit and the table's); `recorded` as for Held.kafka."""
        if dead_letters is None or dead_letters.source_position is None:
            return Held()
        lost = [loss["source_position"] for loss in batch.losses]
        if self.kind == "kafka":  # one topic: its position is partition -> offset
            position = parse_position({self.kafka.config.topic: dead_letters.source_position})
            return Held.kafka(position, batch.starts(), lost, recorded)
        return Held(files=frozenset(self.files.held(dead_letters.source_position, [*batch.items, *lost])))

    def dead_letter_position(self, dead_letters: PipelineState | None, batch: PlannedBatch) -> dict[str, Any]:
        """The position a dead-letter commit of `batch` records: the batch's, never behind the
        last dead-letter commit's (a batch read again after a crash may stop short of it), but
        for a partition the batch found reset (a recreated topic), whose new log starts again,
        unless the last dead-letter commit already recorded that very reset (its position is in
        the new log)."""
        before = dead_letters.source_position if dead_letters is not None else None
        if not isinstance(before, dict):
            return batch.position
        if self.kind == "kafka":
            wheres = [
                loss["source_position"]
                for loss in batch.losses
                if loss["source_position"].endswith(RESET) and loss["source_position"] not in batch.held.lost
            ]
            reset = {m[2] for m in map(partial(re.match, KAFKA_WHERE), wheres) if m is not None}
            out = dict(batch.position)
            for p, offset in before.items():
                if p not in reset and isinstance(offset, int):
                    out[p] = max(offset, out.get(p, offset))
            return out
        return self.files.merge_positions(before, batch.position)

    def close(self) -> None:
        """Release what the source holds between batches (the Kafka driver consumer)."""
        if self.kind == "kafka":
            self.kafka.close()

    def lag(self, position: dict[str, Any] | None) -> int:
        """Records (Kafka) or files (landing folder) not yet planned."""
        return sum(self.lag_by_partition(position).values())

    def lag_by_partition(self, position: dict[str, Any] | None) -> dict[str, int]:
        """`lag` per source partition: `<topic>/<partition>` for Kafka, one `files` entry for a folder."""
        if self.kind == "kafka":
            topic = self.kafka.config.topic
            return {f"{topic}/{p}": n for p, n in sorted(self.kafka.lag_by_partition(position).items())}
        files, _ = self.files.plan(position, 1_000_000, late=[])  # late files are the batch's to report
        return {"files": len(files)}

    def read(
        self, spark: SparkSession, batch: PlannedBatch, schema: StructType, *, whole_values: bool = False
    ) -> DataFrame:
        """The raw records of a planned batch, read on the executors, for `decode`.

        Debezium messages from Kafka have the JSON converter's schema split off where they are
        read (icetide.sources.head_split): it is most of their bytes and the same in every message.
        `whole_values`: never split (the values as they are, for other readers than `decode`)."""
        if self.kind == "kafka":
            from icetide.sources.head_split import JsonHeadSplit
            from icetide.sources.kafka import OffsetRange

            split = self.config.reads_debezium and not whole_values
            ranges = [OffsetRange(**r) for r in batch.items]
            return self.kafka.read(
                spark,
                ranges,
                split=JsonHeadSplit("schema", "payload") if split else None,
                transcode=avro_transcoding(self.config, keys=whole_values),
            )
        files = list(batch.items)
        frame = self.files.read(spark, files, schema=schema)
        if self.config.reads_debezium and files:
            from pyspark.sql import functions as F

            from icetide.sources.files import ARRIVAL_COLUMN, LINES_PER_FILE, SOURCE_FILE_COLUMN

            places = F.create_map(*[F.lit(v) for i, f in enumerate(files) for v in (f, i)])
            place = F.element_at(places, F.col(SOURCE_FILE_COLUMN)).cast("bigint")
            frame = frame.withColumn(ARRIVAL_COLUMN, place * F.lit(LINES_PER_FILE) + F.col("line"))
        return frame

    def decode(self, raw: DataFrame, schema: StructType, key: list[str], keep: list[DataFrame]) -> Decoded:
        """Decode a batch read by `read` against the table's schema and key."""
        if self.config.capture_source:
            return self._decode_captured(raw, schema, key, keep)
        return self._decode(raw, schema, key, keep)

    def _decode_captured(self, raw: DataFrame, schema: StructType, key: list[str], keep: list[DataFrame]) -> Decoded:
        """Stage 1 of a two-stage pipeline: the events plus their source position and op as columns."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        from icetide.decode.frames import source_position

        event_schema = StructType([f for f in schema.fields if f.name not in CAPTURE_COLUMNS])
        event_key = [k for k in key if k not in CAPTURE_COLUMNS]
        positions = self.position_columns()
        decoded = self._decode(raw, event_schema, event_key, keep, extra_cols=positions)
        captured = decoded.good.select(
            *[F.col(f"`{name}`") for name in [*[f.name for f in event_schema.fields], *decoded.new_columns]],
            F.col(OP_COLUMN).alias(EVENT_OP_COLUMN),
            source_position(positions).alias(SOURCE_POSITION_COLUMN),
            F.lit(INSERT).alias(OP_COLUMN),
        )
        decoded.good = captured
        return decoded

    def position_columns(self) -> list[str]:
        """The columns of a raw record that say where it came from."""
        if self.kind == "kafka":
            return ["topic", "partition", "offset"]
        if self.files.config.format != "json":
            raise ConfigError("a stateful pipeline (merge or enrich) reads json or debezium records")
        from icetide.sources.files import POSITION_COLUMNS

        return list(POSITION_COLUMNS)

    def _decode(
        self,
        raw: DataFrame,
        schema: StructType,
        key: list[str],
        keep: list[DataFrame],
        extra_cols: list[str] | None = None,
    ) -> Decoded:
        """Good rows with `_op`, bad records, the column that orders changes of one key.

        The decoded records are persisted once and appended to `keep`, for the caller to unpersist:
        counting good and bad and writing the good ones then read the source and parse it once.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        op_mode = self.config.mode
        if self.kind == "kafka":
            value_col, position_cols = "value", ["topic", "partition", "offset"]
        elif self.files.config.format == "json":
            from icetide.sources.files import POSITION_COLUMNS

            value_col, position_cols = "value", list(POSITION_COLUMNS)
        elif self.files.config.format == "csv":
            from icetide.decode.csv_lines import decode_csv
            from icetide.sources.files import CSV_DEFAULT_OPTIONS, POSITION_COLUMNS

            options = {**CSV_DEFAULT_OPTIONS, **self.files.config.options}
            good, bad = decode_csv(raw, "value", schema, key, op_mode, list(POSITION_COLUMNS), options, keep=keep)
            return Decoded(good, bad, self.config.order_by)
        else:  # parquet: Spark's reader already typed the columns
            from icetide.decode.frames import BAD_DDL

            op = F.lit(INSERT if op_mode == "append" else UPSERT)
            good = raw.select(*[F.col(f"`{f.name}`") for f in schema.fields], op.alias(OP_COLUMN))
            good = good.persist(StorageLevel.MEMORY_AND_DISK)
            keep.append(good)
            return Decoded(good, raw.sparkSession.createDataFrame([], BAD_DDL), self.config.order_by)
        if self.config.reads_debezium:
            from icetide.decode.debezium.changes import SOURCE_ORDER_COLUMN, SOURCE_TS_COLUMN
            from icetide.decode.debezium.tasks import decode_debezium
            from icetide.sources.files import ARRIVAL_COLUMN as FILE_ARRIVAL
            from icetide.sources.head_split import HEAD_ID_SUFFIX, HEAD_SUFFIX
            from icetide.sources.kafka_reader import VALUE_ERROR_COLUMN

            head_id, head = value_col + HEAD_ID_SUFFIX, value_col + HEAD_SUFFIX

            changes = decode_debezium(
                raw,
                value_col,
                schema,
                key,
                op_mode,
                position_cols,
                keep=keep,
                extra_cols=extra_cols or (),
                limits=payload_limits(self.config),
                settings=self.config.debezium,
                on_truncate=self.config.on_truncate,
                schema_evolution=self.config.schema_evolution,
                split=(head_id, head) if head_id in raw.columns else None,
                error_col=VALUE_ERROR_COLUMN if VALUE_ERROR_COLUMN in raw.columns else None,
                arrival_col=FILE_ARRIVAL if FILE_ARRIVAL in raw.columns else None,
            )
            order_by = self.config.order_by or changes.order_by
            # The sink takes table columns, `_op` and one order column: the other change columns go.
            good = changes.good.drop(*[c for c in (SOURCE_TS_COLUMN, SOURCE_ORDER_COLUMN) if c != order_by])
            return Decoded(
                good,
                changes.bad,
                order_by,
                truncated=changes.truncated,
                unknown_fields=changes.unknown_fields,
                new_columns=[f.name for f in changes.new_columns],
                records=changes.records,  # max_bad_fraction counts every record
            )
        from icetide.decode.json.tasks import decode_json

        # Without order_by, arrival order decides: a Kafka range is read in offset order, a file
        # in line order, and the sink keeps that order through monotonically_increasing_id.
        unknown: dict[str, int] = {}
        added: list[StructField] = []
        as_text: list[int] | None = [] if self.config.json.nested_as_text else None
        good, bad = decode_json(
            raw,
            value_col,
            schema,
            key,
            op_mode,
            position_cols,
            keep=keep,
            extra_cols=extra_cols or (),
            limits=payload_limits(self.config),
            unknown_fields=unknown,
            schema_evolution=self.config.schema_evolution,
            new_columns=added,
            nested_as_text=as_text,
        )
        return Decoded(
            good,
            bad,
            self.config.order_by,
            unknown_fields=unknown,
            new_columns=[f.name for f in added],
            nested_as_text=sum(as_text or ()),
        )
