"""A table of the demo's ad events, streamed through the sink: shared by the maintenance tests."""

from __future__ import annotations

from typing import Any

import icetide
from icetide.sources.generator import AD_EVENTS_KEY, AD_EVENTS_PARTITION_BY, AD_EVENTS_SCHEMA, AdEventsConfig, ad_events


def stream_ad_events(spark: Any, table: str, *, pipeline_id: str, batches: int, events: int) -> icetide.UpsertSink:
    """Create `table` (format v2: the maintenance tests fold its equality deletes) and write `batches`
    generated batches (position {"batch": b}); returns the sink."""
    icetide.create_table(
        spark, table, schema=AD_EVENTS_SCHEMA, key=AD_EVENTS_KEY, partition_by=AD_EVENTS_PARTITION_BY, format_version=2
    )
    sink = icetide.UpsertSink(spark, table, pipeline_id=pipeline_id, order_by="updated_at")
    config = AdEventsConfig(events_per_batch=events)
    for b in range(batches):
        sink.write(ad_events(spark, b, config), batch_id=b, source_position={"batch": b})
    return sink
