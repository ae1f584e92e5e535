"""icetide: exactly-once streaming upserts into Apache Iceberg tables from PySpark.

Quick start::

    import icetide
    spark = icetide.spark_session(warehouse="warehouse")
    icetide.create_table(spark, "lake.db.events",
                         schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
                         key=["id", "ts"], partition_by=["hours(ts)"])
    sink = icetide.UpsertSink(spark, "lake.db.events", pipeline_id="p1", order_by="ts")
    sink.write(batch_df, batch_id=1)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from icetide.errors import (
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    ConfigError,
    DependencyError,
    IcetideError,
    SchemaError,
    SourceError,
    UnsupportedSparkError,
)

if TYPE_CHECKING:
    from icetide.config import PipelineConfig, load_config
    from icetide.maintenance.actions import rewrite_manifests
    from icetide.maintenance.compaction import compact, compaction
    from icetide.maintenance.expire import expire_snapshots
    from icetide.maintenance.health import table_health
    from icetide.maintenance.maintain import MaintenancePolicy, maintain
    from icetide.maintenance.orphans import remove_orphan_files
    from icetide.maintenance.position_deletes import convert_equality_deletes
    from icetide.pipeline.entry import run
    from icetide.pipeline.runner import Runner
    from icetide.sink.batch import BatchResult
    from icetide.sink.pipeline_state import PipelineState
    from icetide.sink.sink import UpsertSink
    from icetide.spark.session import spark_conf, spark_session
    from icetide.table.catalog import create_table

__version__ = "0.1.0"

# Imported on first use, so `import icetide` (and the CLI's --help) stays fast and light.
_LAZY = {
    "BatchResult": "icetide.sink.batch",
    "UpsertSink": "icetide.sink.sink",
    "PipelineState": "icetide.sink.pipeline_state",
    "spark_session": "icetide.spark.session",
    "spark_conf": "icetide.spark.session",
    "create_table": "icetide.table.catalog",
    "run": "icetide.pipeline.entry",
    "Runner": "icetide.pipeline.runner",
    "load_config": "icetide.config",
    "compaction": "icetide.maintenance.compaction",
    "compact": "icetide.maintenance.compaction",
    "maintain": "icetide.maintenance.maintain",
    "MaintenancePolicy": "icetide.maintenance.maintain",
    "expire_snapshots": "icetide.maintenance.expire",
    "remove_orphan_files": "icetide.maintenance.orphans",
    "convert_equality_deletes": "icetide.maintenance.position_deletes",
    "rewrite_manifests": "icetide.maintenance.actions",
    "table_health": "icetide.maintenance.health",
    "PipelineConfig": "icetide.config",
    "ChangelogStage": "icetide.stateful.stage",
    "StageOptions": "icetide.stateful.stage",
    "MergeSpec": "icetide.stateful.merge",
    "Enrichment": "icetide.stateful.enrich",
    "TwoStageRunner": "icetide.pipeline.two_stage",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'icetide' has no attribute {name!r}")


__all__ = [
    "BatchResult",
    "ChangelogStage",
    "CommitConflictError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "ConfigError",
    "DependencyError",
    "Enrichment",
    "IcetideError",
    "MaintenancePolicy",
    "MergeSpec",
    "PipelineConfig",
    "PipelineState",
    "Runner",
    "SchemaError",
    "SourceError",
    "StageOptions",
    "TwoStageRunner",
    "UnsupportedSparkError",
    "UpsertSink",
    "__version__",
    "compact",
    "compaction",
    "convert_equality_deletes",
    "create_table",
    "expire_snapshots",
    "load_config",
    "maintain",
    "remove_orphan_files",
    "rewrite_manifests",
    "run",
    "spark_conf",
    "spark_session",
    "table_health",
]
