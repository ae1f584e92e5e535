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
    BadOperationError,
    CatalogUnavailableError,
    CommitConflictError,
    CommitFailedError,
    CommitStateUnknownError,
    CompactionConflictError,
    ConfigError,
    DataLossError,
    DeletionVectorError,
    DependencyError,
    DriverStoppedError,
    IcetideError,
    JavaNotFoundError,
    NotInstalledError,
    PipelineAlreadyRunningError,
    PipelineStateAtRiskError,
    SchemaError,
    SchemaEvolutionError,
    SnapshotGoneError,
    SourceAccessError,
    SourceError,
    TerminalError,
    TooManyBadRecordsError,
    TransientError,
    UnsupportedSparkError,
    WriteError,
)

if TYPE_CHECKING:
    from icetide.commit.pipeline_state import PipelineState
    from icetide.config.pipeline import PipelineConfig, load_config
    from icetide.config.secrets import install_log_redaction
    from icetide.maintenance.actions import ManifestRewriteResult, rewrite_manifests
    from icetide.maintenance.compaction import CompactionJob, compact, compaction
    from icetide.maintenance.expire import ExpireResult, expire_snapshots
    from icetide.maintenance.health import HealthThresholds, TableHealth, table_health
    from icetide.maintenance.maintain import MaintenancePolicy, MaintenanceReport, maintain
    from icetide.maintenance.orphans import OrphanResult, remove_orphan_files
    from icetide.maintenance.position_deletes import DeleteConversionResult, convert_equality_deletes
    from icetide.maintenance.results import CompactionResult
    from icetide.maintenance.upgrade import upgrade_format_version
    from icetide.pipeline.batch_path import BatchPath, FallbackReason
    from icetide.pipeline.batches import BatchMetrics, RunSummary, SyncBatchMetrics
    from icetide.pipeline.entry import run
    from icetide.pipeline.supervision import RestartMetrics
    from icetide.pipeline.sync.consistent import ConsistentRead, read_consistent
    from icetide.pipeline.sync.runner import SyncRunner
    from icetide.pipeline.table_runner import Runner
    from icetide.pipeline.two_stage import TwoStageRunner
    from icetide.sink.sink import UpsertSink
    from icetide.spark.session import spark_conf, spark_session
    from icetide.stateful.enrich import Enrichment
    from icetide.stateful.merge import MergeSpec
    from icetide.stateful.stage import ChangelogStage, StageOptions
    from icetide.table.create import create_table
    from icetide.write.batch import BatchResult
    from icetide.write.key_index_memory import process_key_indexes

    __version__: str

# Imported on first use, so `import icetide` (and the CLI's --help) stays fast and light.
_LAZY = {
    "BatchResult": "icetide.write.batch",
    "UpsertSink": "icetide.sink.sink",
    "PipelineState": "icetide.commit.pipeline_state",
    "spark_session": "icetide.spark.session",
    "spark_conf": "icetide.spark.session",
    "create_table": "icetide.table.create",
    "run": "icetide.pipeline.entry",
    "Runner": "icetide.pipeline.table_runner",
    "SyncRunner": "icetide.pipeline.sync.runner",
    "read_consistent": "icetide.pipeline.sync.consistent",
    "ConsistentRead": "icetide.pipeline.sync.consistent",
    "RunSummary": "icetide.pipeline.batches",
    "BatchMetrics": "icetide.pipeline.batches",
    "SyncBatchMetrics": "icetide.pipeline.batches",
    "BatchPath": "icetide.pipeline.batch_path",
    "FallbackReason": "icetide.pipeline.batch_path",
    "RestartMetrics": "icetide.pipeline.supervision",
    "load_config": "icetide.config.pipeline",
    "install_log_redaction": "icetide.config.secrets",
    "upgrade_format_version": "icetide.maintenance.upgrade",
    "process_key_indexes": "icetide.write.key_index_memory",
    "compaction": "icetide.maintenance.compaction",
    "compact": "icetide.maintenance.compaction",
    "CompactionJob": "icetide.maintenance.compaction",
    "CompactionResult": "icetide.maintenance.results",
    "maintain": "icetide.maintenance.maintain",
    "MaintenancePolicy": "icetide.maintenance.maintain",
    "MaintenanceReport": "icetide.maintenance.maintain",
    "expire_snapshots": "icetide.maintenance.expire",
    "ExpireResult": "icetide.maintenance.expire",
    "remove_orphan_files": "icetide.maintenance.orphans",
    "OrphanResult": "icetide.maintenance.orphans",
    "convert_equality_deletes": "icetide.maintenance.position_deletes",
    "DeleteConversionResult": "icetide.maintenance.position_deletes",
    "rewrite_manifests": "icetide.maintenance.actions",
    "ManifestRewriteResult": "icetide.maintenance.actions",
    "table_health": "icetide.maintenance.health",
    "TableHealth": "icetide.maintenance.health",
    "HealthThresholds": "icetide.maintenance.health",
    "PipelineConfig": "icetide.config.pipeline",
    "ChangelogStage": "icetide.stateful.stage",
    "StageOptions": "icetide.stateful.stage",
    "MergeSpec": "icetide.stateful.merge",
    "Enrichment": "icetide.stateful.enrich",
    "TwoStageRunner": "icetide.pipeline.two_stage",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        # Written in one place, pyproject.toml; read from the installed package's metadata.
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("icetide")
        except PackageNotFoundError:  # a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'icetide' has no attribute {name!r}")


__all__ = [
    "BadOperationError",
    "BatchMetrics",
    "BatchPath",
    "BatchResult",
    "CatalogUnavailableError",
    "ChangelogStage",
    "CommitConflictError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "CompactionConflictError",
    "CompactionJob",
    "CompactionResult",
    "ConfigError",
    "ConsistentRead",
    "DataLossError",
    "DeleteConversionResult",
    "DeletionVectorError",
    "DependencyError",
    "DriverStoppedError",
    "Enrichment",
    "ExpireResult",
    "FallbackReason",
    "HealthThresholds",
    "IcetideError",
    "JavaNotFoundError",
    "MaintenancePolicy",
    "MaintenanceReport",
    "ManifestRewriteResult",
    "MergeSpec",
    "NotInstalledError",
    "OrphanResult",
    "PipelineAlreadyRunningError",
    "PipelineConfig",
    "PipelineState",
    "PipelineStateAtRiskError",
    "RestartMetrics",
    "RunSummary",
    "Runner",
    "SchemaError",
    "SchemaEvolutionError",
    "SnapshotGoneError",
    "SourceAccessError",
    "SourceError",
    "StageOptions",
    "SyncBatchMetrics",
    "SyncRunner",
    "TableHealth",
    "TerminalError",
    "TooManyBadRecordsError",
    "TransientError",
    "TwoStageRunner",
    "UnsupportedSparkError",
    "UpsertSink",
    "WriteError",
    "__version__",
    "compact",
    "compaction",
    "convert_equality_deletes",
    "create_table",
    "expire_snapshots",
    "install_log_redaction",
    "load_config",
    "maintain",
    "process_key_indexes",
    "read_consistent",
    "remove_orphan_files",
    "rewrite_manifests",
    "run",
    "spark_conf",
    "spark_session",
    "table_health",
    "upgrade_format_version",
]
