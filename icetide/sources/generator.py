"""A generator of ad events like SmartNews' lake (seed 003), computed on executors.

Each batch holds new impressions (most for the current hour, a long tail of late ones across
older hours) and clicks/conversions that update impressions of earlier batches. Every value is
a pure function of (batch, index), so any batch can be regenerated exactly, on any executor,
without keeping state: the reference model of a test and a replay after a crash see the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

AD_EVENTS_SCHEMA = (
    "impression_id STRING NOT NULL, event_time TIMESTAMP NOT NULL, ad_id BIGINT, campaign_id BIGINT, "
    "country STRING, clicks INT, last_click_time TIMESTAMP, conversions INT, revenue DOUBLE, "
    "updated_at TIMESTAMP NOT NULL"
)
AD_EVENTS_KEY = ["impression_id", "event_time"]
AD_EVENTS_PARTITION_BY = ["hours(event_time)"]
COUNTRIES = ["JP", "US", "GB", "DE", "FR", "KR", "TW", "BR", "IN", "CA"]


@dataclass(frozen=True)
class AdEventsConfig:
    """Shape of the generated stream."""

    events_per_batch: int = 20_000
    minutes_per_batch: int = 15
    update_share: float = 0.3  # share of a batch's events that update earlier impressions
    late_share: float = 0.15  # share of new impressions whose event time is in an older hour
    max_late_hours: int = 23
    ads: int = 5_000
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    seed: int = 7


def _uniform(seed: int, salt: int, *cols: Column) -> Column:
    """A deterministic uniform [0, 1) from the hash of the columns."""
    from pyspark.sql import functions as F

    return (F.xxhash64(F.lit(seed), F.lit(salt), *cols).bitwiseAND(F.lit(0xFFFFFF))).cast("double") / float(1 << 24)


def _long_tail_hours(u: Column, max_hours: int) -> Column:
    """Hours late: 1 with the largest share, then a decaying share for each older hour."""
    from pyspark.sql import functions as F

    return F.least(F.lit(max_hours), F.floor(-F.log(F.lit(1.0) - u) * 3.0) + 1).cast("int")


def impression(config: AdEventsConfig, batch: Column, index: Column) -> dict[str, Column]:
    """The impression fields of impression (batch, index): same values wherever computed."""
    from pyspark.sql import functions as F

    s = config.seed
    batch_start = F.timestamp_seconds(F.lit(int(config.start.timestamp())) + batch * (config.minutes_per_batch * 60))
    within = (_uniform(s, 1, batch, index) * (config.minutes_per_batch * 60)).cast("int")
    is_late = _uniform(s, 2, batch, index) < F.lit(config.late_share)
    late_hours = _long_tail_hours(_uniform(s, 3, batch, index), config.max_late_hours)
    seconds = within - F.when(is_late, late_hours * 3600).otherwise(F.lit(0))
    event_time = F.timestamp_seconds(F.unix_seconds(batch_start) + seconds)
    ad = (_uniform(s, 4, batch, index) * config.ads).cast("long")
    return {
        "impression_id": F.concat_ws("-", F.lit("imp"), batch.cast("string"), index.cast("string")),
        "event_time": event_time,
        "ad_id": ad,
        "campaign_id": ad % F.lit(97),
        "country": F.element_at(
            F.array(*[F.lit(c) for c in COUNTRIES]), (_uniform(s, 5, batch, index) * len(COUNTRIES)).cast("int") + 1
        ),
    }


def ad_events(spark: SparkSession, batch: int, config: AdEventsConfig | None = None) -> DataFrame:
    """Batch `batch` of the stream: new impressions plus updates (clicks, conversions) of older ones."""
    from pyspark.sql import functions as F

    c = config or AdEventsConfig()
    updates = int(c.events_per_batch * c.update_share) if batch > 0 else 0
    news = c.events_per_batch - updates
    now = F.timestamp_seconds(F.lit(int(c.start.timestamp()) + (batch + 1) * c.minutes_per_batch * 60 - 1))
    b = F.lit(batch).cast("long")
    fresh = spark.range(news).select(
        *[v.alias(k) for k, v in impression(c, b, F.col("id")).items()],
        F.lit(0).alias("clicks"),
        F.lit(None).cast("timestamp").alias("last_click_time"),
        F.lit(0).alias("conversions"),
        F.lit(0.0).alias("revenue"),
        now.alias("updated_at"),
    )
    if not updates:
        return fresh
    u = _uniform(c.seed, 10, b, F.col("id"))
    # Most updates touch the last few batches; a long tail reaches back much further.
    back = F.least(b, F.floor(-F.log(F.lit(1.0) - u) * 4.0).cast("long") + 1)
    older = spark.range(updates).select(F.col("id"), (b - back).alias("ob"))
    oi = (_uniform(c.seed, 11, b, F.col("id")) * news).cast("long")
    older = older.select("*", oi.alias("oi"))
    converted = _uniform(c.seed, 12, b, F.col("id")) < F.lit(0.1)
    clicks = (_uniform(c.seed, 13, b, F.col("id")) * 3).cast("int") + 1
    updated = older.select(
        *[v.alias(k) for k, v in impression(c, F.col("ob"), F.col("oi")).items()],
        clicks.alias("clicks"),
        now.alias("last_click_time"),
        F.when(converted, 1).otherwise(0).alias("conversions"),
        F.when(converted, F.round(_uniform(c.seed, 14, b, F.col("id")) * 20, 2)).otherwise(0.0).alias("revenue"),
        now.alias("updated_at"),
    )
    return fresh.unionByName(updated)
