"""`icetide maintain`: one table, or every table of a pipeline, once or every interval."""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from icetide.cli.session import routing_pipeline, table_session
from icetide.config.secrets import scrub
from icetide.errors import ConfigError, DriverStoppedError, driver_stopped, one_line
from icetide.ops.stop_signals import StopSignals

if TYPE_CHECKING:
    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger("icetide.cli")


@contextmanager
def stop_on_signal(stop: threading.Event) -> Iterator[None]:
    """SIGINT/SIGTERM set `stop`: maintenance stops after the step in flight (each step commits on
    its own, so nothing is left half done) and `--every` ends with exit code 0; a second signal
    interrupts at once. Entered once Spark has started: a signal before that ends the command."""
    signals = StopSignals(stop, "the maintenance step in flight").install()
    try:
        yield
    finally:
        signals.restore()


def _maintain_pipeline(
    args: argparse.Namespace, config: PipelineConfig, policy: Any, every: float | None, stop: threading.Event
) -> int:
    """`icetide maintain --pipeline FILE` of a pipeline of many tables: passes over all of them,
    each within --time-budget; a pass starts where the last one stopped. Until `stop` is set."""
    from rich.console import Console

    from icetide.maintenance.maintain import maintain_tables
    from icetide.pipeline.provision import pipeline_session
    from icetide.pipeline.sync.status import read_sync_state

    console = Console(stderr=True)
    spark = pipeline_session(config)
    start = 0
    with stop_on_signal(stop):
        while True:
            assert config.dead_letter is not None
            tables = [*sorted(read_sync_state(spark, config).tables), config.dead_letter]
            # Once: an error ends the command. With --every: a failing table is named and skipped.
            try:
                passed = maintain_tables(
                    spark,
                    tables,
                    policy,
                    start=start,
                    stop=stop.is_set,
                    keep_going=every is not None,
                    fold_all=args.fold_all,
                )
            except Exception as exc:
                if every is not None and driver_stopped(exc):
                    raise _driver_stopped(exc) from exc
                raise
            start = passed.next_start
            for table, error in passed.failed.items():
                console.print(f"{table}: maintenance failed: {error}", highlight=False, soft_wrap=True)
            for report in passed.reports:
                for line in report.lines():
                    console.print(f"{report.table}: {line}", highlight=False, soft_wrap=True)
            console.print(
                f"pass over {len(passed.reports)} of {len(tables)} table(s) in {passed.seconds:.1f}s"
                + (f"; next pass starts with {passed.not_reached[0]}" if passed.not_reached else ""),
                highlight=False,
                soft_wrap=True,
            )
            if every is None or stop.wait(every):
                return 0


def _driver_stopped(exc: BaseException) -> DriverStoppedError:
    """Why `icetide maintain --every` ends instead of failing every pass from now on."""
    return DriverStoppedError(
        f"the Spark driver stopped, so no maintenance can run in this process ({one_line(exc)}); its JVM "
        "exited, most often out of memory (spark.driver.memory; the reason is in its log): start "
        "icetide maintain again, or let its supervisor restart it"
    )


def cmd_maintain(args: argparse.Namespace) -> int:
    """One maintenance run, or one every --every interval until SIGINT/SIGTERM; progress bars in a terminal."""
    from icetide.config.pipeline import parse_duration, parse_size
    from icetide.config.runner import vector_deleted_share, vector_file_rows
    from icetide.maintenance.maintain import MaintenancePolicy

    if args.upgrade_v3:
        return _upgrade_v3(args)
    every = parse_duration(args.every, "--every") if args.every else None
    budget = parse_duration(args.time_budget, "--time-budget") if args.time_budget else None
    policy = MaintenancePolicy(
        fold_deletes=args.fold_deletes,
        time_budget_seconds=budget,
        vector_deleted_share=vector_deleted_share(args.vector_deleted_share, "--vector-deleted-share"),
        vector_file_rows=vector_file_rows(args.vector_file_rows, "--vector-file-rows"),
        driver_rewrite_bytes=parse_size(args.driver_rewrite_bytes, "--driver-rewrite-bytes"),
    )
    config = routing_pipeline(args)
    if config is not None and args.orphans:
        raise ConfigError("--orphans: name one table of the pipeline (icetide maintain TABLE --pipeline FILE)")
    stop = threading.Event()
    if config is not None:
        return _maintain_pipeline(args, config, policy, every, stop)
    return _maintain_table(args, policy, every, stop)


def _maintain_table(args: argparse.Namespace, policy: Any, every: float | None, stop: threading.Event) -> int:
    """`icetide maintain TABLE`: once, or every `every` seconds until `stop` is set."""
    from rich.console import Console

    from icetide.cli.progress import progress_view
    from icetide.maintenance.maintain import maintain
    from icetide.maintenance.orphans import remove_orphan_files

    console = Console(stderr=True)
    with console.status("starting Spark ...") if console.is_terminal else nullcontext():
        spark, table, _ = table_session(args)
    with stop_on_signal(stop):
        while True:
            try:
                with progress_view(console) as progress:
                    progress_callback = progress if args.progress else None
                    report = maintain(
                        spark, table, policy, progress=progress_callback, stop=stop.is_set, fold_all=args.fold_all
                    )
                    orphans = (
                        remove_orphan_files(spark, table, dry_run=False, progress=progress_callback)
                        if args.orphans and not stop.is_set()
                        else None
                    )
            except Exception as exc:
                if every is None:
                    raise  # once: an error ends the command
                if driver_stopped(exc):
                    raise _driver_stopped(exc) from exc
                # With --every, beside a running pipeline: a failed run is named and the next one comes.
                log.debug("maintenance of %s failed", table, exc_info=True)
                console.print(f"{table}: maintenance failed: {scrub(one_line(exc))}", highlight=False, soft_wrap=True)
                if stop.wait(every):
                    return 0
                continue
            for line in report.lines():
                console.print(f"{table}: {line}", highlight=False, soft_wrap=True)
            if orphans is not None:
                console.print(f"{table}: removed {len(orphans.orphans)} orphan file(s)", highlight=False)
            elif args.orphans:
                console.print(f"{table}: orphan files not removed: stopping", highlight=False)
            console.print(f"{table}: done in {report.seconds:.1f}s")
            if every is None or stop.wait(every):
                return 0


def _upgrade_v3(args: argparse.Namespace) -> int:
    """`icetide maintain --upgrade-v3 TABLE`: raise one table to format v3, and nothing else."""
    from rich.console import Console

    from icetide.maintenance.upgrade import upgrade_format_version

    if not args.table:
        raise ConfigError("--upgrade-v3: name the table to upgrade (icetide maintain --upgrade-v3 TABLE)")
    if args.every or args.orphans or args.fold_all:
        raise ConfigError("--upgrade-v3: runs once and does nothing else; drop --every / --orphans / --fold-all")
    spark, table, _ = table_session(args)
    result = upgrade_format_version(spark, table, 3)
    Console(stderr=True).print(f"{table}: {result.line()}", highlight=False, soft_wrap=True)
    return 0
