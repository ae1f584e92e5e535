"""`icetide demo`: stream generated ad events through the sink and show what landed."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from icetide.sink.sink import UpsertSink
from icetide.sources.generator import AD_EVENTS_KEY, AD_EVENTS_PARTITION_BY, AD_EVENTS_SCHEMA, AdEventsConfig, ad_events
from icetide.table.create import create_table
from icetide.write.batch import BatchResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

DEMO_TABLE = "lake.demo.ad_events"
DEMO_PIPELINE = "demo"
SAMPLE_QUERY = (
    "SELECT date_trunc('hour', event_time) AS hour, count(*) AS impressions, sum(clicks) AS clicks, "
    "sum(conversions) AS conversions, round(sum(revenue), 2) AS revenue FROM {table} "
    "GROUP BY 1 ORDER BY 1 DESC LIMIT 5"
)


@dataclass
class DemoReport:
    """What the demo did and what the table looks like afterwards."""

    table: str
    batches: list[BatchResult] = field(default_factory=list)
    rows: int = 0
    snapshots: int = 0
    data_files: int = 0
    delete_files: int = 0
    partitions: list[dict[str, Any]] = field(default_factory=list)
    sample_columns: list[str] = field(default_factory=list)
    sample: list[tuple[Any, ...]] = field(default_factory=list)

    def median(self, attr: str) -> float:
        """Median over batches of a BatchResult timing attribute."""
        values = [getattr(b, attr) for b in self.batches if b.committed]
        return statistics.median(values) if values else 0.0


def run_demo(
    spark: SparkSession,
    *,
    batches: int = 24,
    events_per_batch: int = 20_000,
    table: str = DEMO_TABLE,
    distribution: str = "dynamic",
    on_batch: Callable[[BatchResult], None] | None = None,
    format_version: int | None = None,
) -> DemoReport:
    """Recreate the demo table, stream `batches` generated batches through the sink, report.

    The table has create_table's defaults (format v3, deletion vectors) unless `format_version`
    says otherwise (2: the stream writes equality deletes)."""
    spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    create_table(
        spark,
        table,
        schema=AD_EVENTS_SCHEMA,
        key=AD_EVENTS_KEY,
        partition_by=AD_EVENTS_PARTITION_BY,
        target_file_size=128 * 1024 * 1024,
        format_version=format_version,
    )
    sink = UpsertSink(spark, table, pipeline_id=DEMO_PIPELINE, order_by="updated_at", distribution=distribution)
    config = AdEventsConfig(events_per_batch=events_per_batch)
    report = DemoReport(table)
    for batch in range(batches):
        result = sink.write(ad_events(spark, batch, config), batch_id=batch, source_position={"generated_batch": batch})
        report.batches.append(result)
        if on_batch:
            on_batch(result)
    report.rows = spark.table(table).count()
    report.snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").first()[0]  # type: ignore[index]
    counts = spark.sql(f"SELECT content, count(*) AS n FROM {table}.files GROUP BY content").collect()
    by_content = {int(r["content"]): int(r["n"]) for r in counts}
    report.data_files = by_content.get(0, 0)
    report.delete_files = by_content.get(1, 0) + by_content.get(2, 0)
    parts = spark.sql(
        f"SELECT partition.event_time_hour AS hour, record_count, file_count, "
        f"equality_delete_file_count AS delete_files, total_data_file_size_in_bytes AS bytes "
        f"FROM {table}.partitions ORDER BY hour DESC"
    ).collect()
    report.partitions = [r.asDict() for r in parts]
    sample = spark.sql(SAMPLE_QUERY.format(table=table))
    report.sample_columns = sample.columns
    report.sample = [tuple(r) for r in sample.collect()]
    return report
