"""Which runner a pipeline file gets, decided in one place (the library's `run` and `icetide run`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icetide.config.pipeline import PipelineConfig, load_config
from icetide.ops.runner_lock import RunnerLock
from icetide.pipeline.batches import RunSummary
from icetide.pipeline.sync.runner import SyncRunner
from icetide.pipeline.table_runner import Runner
from icetide.pipeline.two_stage import TwoStageRunner

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PipelineRunner = Runner | SyncRunner | TwoStageRunner


def runner_for(config: PipelineConfig, spark: SparkSession | None = None) -> PipelineRunner:
    """The runner of `config`: two stages with a merge engine or enrichment, the sync runner when
    it routes to many tables, else the one-table runner."""
    if config.stateful is not None:
        return TwoStageRunner(config, spark)
    if config.routes_tables:
        return SyncRunner(config, spark)
    return Runner(config, spark)


def run(config: PipelineConfig | str, *, once: bool = False, spark: SparkSession | None = None) -> RunSummary:
    """Run a pipeline (a PipelineConfig or the path of its YAML file) with the runner it calls for."""
    cfg = load_config(config) if isinstance(config, str) else config
    if cfg.stateful is None:
        return runner_for(cfg, spark).run(once=once)
    lock = RunnerLock(cfg)  # a local warehouse's lock; the raw stage's Runner.run holds its own
    lock.acquire()
    try:
        return runner_for(cfg, spark).run(once=once)
    finally:
        lock.release()
