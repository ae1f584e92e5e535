"""The icetide command line: demo, run, status, maintain, catalog serve."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from icetide.errors import ConfigError, DriverStoppedError, IcetideError, driver_stopped, one_line
from icetide.secrets import install_log_redaction, redact, scrub

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from icetide.config import PipelineConfig

log = logging.getLogger("icetide.cli")


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    install_log_redaction()


def _catalog_options(pairs: list[str] | None) -> dict[str, str] | None:
    """`--catalog-option KEY=VALUE` pairs as a mapping (None when there are none)."""
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--catalog-option: {pair!r} is not KEY=VALUE, e.g. type=rest")
        out[key.strip()] = value
    return out or None


def _table_session(args: argparse.Namespace) -> tuple[SparkSession, str, dict[str, Any]]:
    """The Spark session, table and (redacted) catalog settings `status` and `maintain` work on.

    With `--pipeline`, the pipeline file's catalog (warehouse or catalog block, Spark settings)
    and, unless a table is named, the table its maintenance looks after; otherwise the
    `--warehouse` / `--catalog-option` settings and the named table.
    """
    from icetide.spark.session import spark_session

    if args.pipeline:
        from icetide.config import load_config
        from icetide.pipeline.provision import pipeline_session

        config = load_config(args.pipeline)
        if args.warehouse or args.catalog_option:
            raise ConfigError("--pipeline: the pipeline file names the catalog; drop --warehouse / --catalog-option")
        table = args.table or config.maintained_table
        if table.split(".")[0] != config.catalog:
            raise ConfigError(f"table: {table} is not in the pipeline's catalog {config.catalog!r}")
        shown = {"warehouse": config.warehouse, **redact(config.catalog_options or {})}
        return pipeline_session(config), table, shown
    if not args.table:
        raise ConfigError("table: name the table (catalog.namespace.table) or give --pipeline FILE")
    options = _catalog_options(args.catalog_option)
    warehouse = args.warehouse or (None if options else "warehouse")
    spark = spark_session(warehouse=warehouse, catalog=args.table.split(".")[0], catalog_options=options)
    return spark, args.table, {"warehouse": warehouse, **redact(options or {})}


def _hour_label(hours_since_epoch: int | None) -> str:
    if hours_since_epoch is None:
        return "null"
    return datetime.fromtimestamp(hours_since_epoch * 3600, tz=UTC).strftime("%Y-%m-%d %H:00")


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo with a progress bar and print its summary."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from icetide.demo import run_demo
    from icetide.spark.session import spark_session

    console = Console()
    started = time.monotonic()
    with console.status("starting Spark with Iceberg ..."):
        spark = spark_session(warehouse=args.warehouse)
    progress = Progress(
        TextColumn("[bold]streaming ad events"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("demo", total=args.batches, info="")

        def on_batch(r: object) -> None:
            info = (
                f"batch {r.batch_id}: {r.rows_written} rows, {r.data_files} data + "  # type: ignore[attr-defined]
                f"{r.delete_files} delete files, write {r.write_seconds:.2f}s "  # type: ignore[attr-defined]
                f"commit {r.commit_seconds:.2f}s"  # type: ignore[attr-defined]
            )
            progress.update(task, advance=1, info=info)

        report = run_demo(
            spark, batches=args.batches, events_per_batch=args.events, distribution=args.distribution, on_batch=on_batch
        )
    console.print(f"\n[bold]{report.table}[/bold] after {len(report.batches)} micro-batches")
    console.print(
        f"  rows {report.rows:,} | snapshots {report.snapshots} | data files {report.data_files} | "
        f"equality-delete files {report.delete_files}"
    )
    console.print(
        f"  per batch: write median {report.median('write_seconds'):.2f}s "
        f"(max {max(b.write_seconds for b in report.batches):.2f}s), "
        f"commit median {report.median('commit_seconds'):.2f}s "
        f"(max {max(b.commit_seconds for b in report.batches):.2f}s), "
        f"{statistics_mean([b.data_files for b in report.batches]):.1f} data files on average"
    )
    files = Table(title=f"files per partition (distribution={args.distribution})")
    for column in ("hour", "records in files", "data files", "delete files", "avg data file"):
        files.add_column(column, justify="right")
    shown = report.partitions[: args.partitions]
    for p in shown:
        avg = p["bytes"] / max(1, p["file_count"])
        files.add_row(
            _hour_label(p["hour"]),
            f"{p['record_count']:,}",
            str(p["file_count"]),
            str(p["delete_files"]),
            f"{avg / 1024:.0f} KiB",
        )
    if len(report.partitions) > len(shown):
        files.caption = f"newest {len(shown)} of {len(report.partitions)} partitions"
    console.print(files)
    sample = Table(title="sample query: the newest hours")
    for column in report.sample_columns:
        sample.add_column(column, justify="right")
    for row in report.sample:
        sample.add_row(*[str(v) for v in row])
    console.print(sample)
    console.print(f"done in {time.monotonic() - started:.0f}s; the table is in {args.warehouse}/")
    spark.stop()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run a pipeline file: one JSON metrics line per batch (and per restart) on stdout, a status
    line in a terminal."""
    from icetide.config import load_config
    from icetide.pipeline.runner_lock import RunnerLock, lock_config

    config = load_config(args.pipeline)  # bad config fails here, before Spark starts
    lock = RunnerLock(lock_config(config))
    lock.acquire()  # a local warehouse's runner lock, also before Spark starts: a second runner exits at once
    try:
        return _run_held(args, config)
    finally:
        lock.release()


def _run_held(args: argparse.Namespace, config: PipelineConfig) -> int:
    from rich.console import Console

    from icetide.pipeline.batches import BatchMetrics
    from icetide.pipeline.entry import runner_for
    from icetide.pipeline.supervision import RestartMetrics
    from icetide.pipeline.two_stage import TwoStageRunner

    console = Console(stderr=True)
    interactive = console.is_terminal
    with console.status(f"starting pipeline {config.pipeline} ...") if interactive else _nothing():
        runner = runner_for(config)
    totals = {"batches": 0, "rows": 0, "bad": 0}

    def on_batch(m: BatchMetrics) -> None:
        print(m.to_json(), flush=True)
        totals["batches"] += 1
        totals["rows"] += m.rows_written
        totals["bad"] += m.bad_records
        if interactive:
            console.print(
                f"[bold]{config.pipeline}[/bold] batch {m.batch_id}: {m.records_in:,} in, {m.rows_written:,} rows, "
                f"{m.bad_records} bad, {m.data_files}+{m.delete_files} files, plan {m.plan_seconds:.2f}s, "
                f"write {m.write_seconds:.2f}s, commit {m.refresh_seconds + m.commit_seconds:.2f}s, "
                f"lag {m.source_lag:,} | total {totals['rows']:,} rows"
            )

    def on_restart(event: RestartMetrics) -> None:
        print(event.to_json(), flush=True)
        if interactive:
            console.print(
                f"[bold]{config.pipeline}[/bold] restart {event.attempt} of {event.max_attempts} in "
                f"{event.backoff_seconds:.1f}s after: {event.error}",
                highlight=False,
            )

    if isinstance(runner, TwoStageRunner):
        runner.on_stage_two = lambda line: print(line, flush=True)
        summary = runner.run(once=args.once, on_batch=on_batch)
    else:
        summary = runner.run(once=args.once, on_batch=on_batch, on_restart=on_restart)
    if summary.abandoned_files_removed:
        console.print(f"removed {summary.abandoned_files_removed} file(s) of batches that never committed")
    for report in runner.maintenance_runs[-1:]:
        console.print(
            f"maintenance ran {len(runner.maintenance_runs)} time(s); last: {'; '.join(report.lines())}",
            highlight=False,
        )
    how = "stopped by signal" if summary.stopped_by_signal else "done"
    console.print(f"{how}: {totals['batches']} batch(es), {totals['rows']:,} rows, {totals['bad']} bad record(s)")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print a table's health (text or --json); with --html (alias --chart) also write the status page."""
    from icetide.cli_status import pipeline_status, table_status

    config = _routing_pipeline(args)
    if config is not None:
        return pipeline_status(args, config)
    spark, table, catalog = _table_session(args)
    if args.pipeline:
        from icetide.config import load_config

        config = load_config(args.pipeline)
    return table_status(args, spark, table, catalog, config)


def _routing_pipeline(args: argparse.Namespace) -> PipelineConfig | None:
    """The pipeline file's config when it routes to many tables and no single table is named."""
    if not args.pipeline or args.table:
        return None
    from icetide.config import load_config

    config = load_config(args.pipeline)
    if not config.routes_tables:
        return None
    if args.warehouse or args.catalog_option:
        raise ConfigError("--pipeline: the pipeline file names the catalog; drop --warehouse / --catalog-option")
    return config


def _maintain_pipeline(args: argparse.Namespace, config: PipelineConfig, policy: Any, every: float | None) -> int:
    """`icetide maintain --pipeline FILE` of a pipeline of many tables: passes over all of them,
    each within --time-budget; a pass starts where the last one stopped."""
    from rich.console import Console

    from icetide.maintenance.maintain import maintain_tables
    from icetide.pipeline.provision import pipeline_session
    from icetide.pipeline.sync import read_sync_state

    console = Console(stderr=True)
    spark = pipeline_session(config)
    start = 0
    while True:
        assert config.dead_letter is not None
        tables = [*sorted(read_sync_state(spark, config).tables), config.dead_letter]
        # Once: an error ends the command. With --every: a failing table is named and skipped.
        try:
            passed = maintain_tables(spark, tables, policy, start=start, keep_going=every is not None)
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
        if every is None:
            return 0
        time.sleep(every)


def _driver_stopped(exc: BaseException) -> DriverStoppedError:
    """Why `icetide maintain --every` ends instead of failing every pass from now on."""
    return DriverStoppedError(
        f"the Spark driver stopped, so no maintenance can run in this process ({one_line(exc)}); its JVM "
        "exited, most often out of memory (spark.driver.memory; the reason is in its log): start "
        "icetide maintain again, or let its supervisor restart it"
    )


def cmd_maintain(args: argparse.Namespace) -> int:
    """One maintenance run, or one every --every interval until interrupted; progress bars in a terminal."""
    from rich.console import Console

    from icetide.cli_progress import progress_view
    from icetide.config import parse_duration
    from icetide.maintenance.maintain import MaintenancePolicy, maintain
    from icetide.maintenance.orphans import remove_orphan_files

    if args.upgrade_v3:
        return _upgrade_v3(args)
    every = parse_duration(args.every, "--every") if args.every else None
    budget = parse_duration(args.time_budget, "--time-budget") if args.time_budget else None
    policy = MaintenancePolicy(fold_deletes=args.fold_deletes, time_budget_seconds=budget)
    config = _routing_pipeline(args)
    if config is not None:
        if args.orphans:
            raise ConfigError("--orphans: name one table of the pipeline (icetide maintain TABLE --pipeline FILE)")
        return _maintain_pipeline(args, config, policy, every)
    console = Console(stderr=True)
    with console.status("starting Spark ...") if console.is_terminal else _nothing():
        spark, table, _ = _table_session(args)
    while True:
        try:
            with progress_view(console) as progress:
                progress_callback = progress if args.progress else None
                report = maintain(spark, table, policy, progress=progress_callback)
                orphans = (
                    remove_orphan_files(spark, table, dry_run=False, progress=progress_callback)
                    if args.orphans
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
            time.sleep(every)
            continue
        for line in report.lines():
            console.print(f"{table}: {line}", highlight=False, soft_wrap=True)
        if orphans is not None:
            console.print(f"{table}: removed {len(orphans.orphans)} orphan file(s)", highlight=False)
        console.print(f"{table}: done in {report.seconds:.1f}s")
        if every is None:
            return 0
        time.sleep(every)


def cmd_catalog_serve(args: argparse.Namespace) -> int:
    """Serve a catalog over the Iceberg REST protocol until interrupted: the embedded lake in
    --warehouse (default ./warehouse), or with --pipeline that pipeline's catalog."""
    import os
    import signal

    from icetide.spark.rest_server import CatalogServer, served_catalog
    from icetide.spark.session import DEFAULT_CATALOG

    token = os.environ.get("ICETIDE_CATALOG_TOKEN") or None  # clients must send it as `token`
    if args.pipeline:
        from icetide.config import load_config

        if args.warehouse:
            raise ConfigError("--pipeline: the pipeline file names the catalog; drop --warehouse")
        config = load_config(args.pipeline)
        catalog = served_catalog(
            config.catalog, warehouse=config.warehouse, options=config.catalog_options, token=token
        )
    else:
        catalog = served_catalog(DEFAULT_CATALOG, warehouse=args.warehouse or "warehouse", options=None, token=token)
    server = CatalogServer(catalog, host=args.host, port=args.port)
    uri = server.start()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stops it as Ctrl-C does
    print(uri, flush=True)
    print(
        f"serving catalog {catalog.name} ({catalog.describe()}) at {uri}; "
        f"e.g. catalog: {{type: rest, uri: {uri}}}. Ctrl-C stops it.",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _upgrade_v3(args: argparse.Namespace) -> int:
    """`icetide maintain --upgrade-v3 TABLE`: raise one table to format v3, and nothing else."""
    from rich.console import Console

    from icetide.maintenance.upgrade import upgrade_format_version

    if not args.table:
        raise ConfigError("--upgrade-v3: name the table to upgrade (icetide maintain --upgrade-v3 TABLE)")
    if args.every or args.orphans:
        raise ConfigError("--upgrade-v3: runs once and does nothing else; drop --every / --orphans")
    spark, table, _ = _table_session(args)
    result = upgrade_format_version(spark, table, 3)
    Console(stderr=True).print(f"{table}: {result.line()}", highlight=False, soft_wrap=True)
    return 0


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def statistics_mean(values: list[int]) -> float:
    """Mean of a list, 0 for an empty one."""
    return sum(values) / len(values) if values else 0.0


def _add_catalog_arguments(parser: argparse.ArgumentParser) -> None:
    """--pipeline, or --warehouse / --catalog-option: which catalog a table command opens."""
    parser.add_argument(
        "-p", "--pipeline", metavar="FILE", help="open the catalog of this pipeline file (and its table by default)"
    )
    parser.add_argument("--warehouse", help="warehouse of the embedded catalog (default: ./warehouse)")
    parser.add_argument(
        "--catalog-option",
        action="append",
        metavar="KEY=VALUE",
        help="a Spark catalog option, as in a pipeline's catalog block (repeatable), e.g. type=rest",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="icetide", description="Exactly-once streaming upserts into Iceberg.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs, with Java stack traces")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="stream generated ad events into an embedded lakehouse and summarise")
    demo.add_argument("--warehouse", default="warehouse", help="warehouse folder (default: ./warehouse)")
    demo.add_argument("--batches", type=int, default=24, help="micro-batches to stream (default: 24)")
    demo.add_argument("--events", type=int, default=20_000, help="events per batch (default: 20000)")
    demo.add_argument(
        "--distribution",
        default="dynamic",
        choices=["none", "key", "partition", "dynamic"],
        help="writer distribution (default: dynamic)",
    )
    demo.add_argument("--partitions", type=int, default=12, help="partitions to list (default: 12)")
    demo.set_defaults(func=cmd_demo)
    run = sub.add_parser("run", help="run a pipeline file until stopped (SIGINT/SIGTERM stop it cleanly)")
    run.add_argument("pipeline", help="pipeline YAML file")
    run.add_argument("--once", action="store_true", help="process what is available, then exit")
    run.set_defaults(func=cmd_run)
    status = sub.add_parser("status", help="a table's health: files per partition, deletes, snapshots, pipelines")
    status.add_argument("table", nargs="?", help="catalog.namespace.table, e.g. lake.demo.ad_events")
    _add_catalog_arguments(status)
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument(
        "--html",
        "--chart",
        dest="html",
        metavar="FILE.html",
        help="also write the status page: files, deletes, snapshots, pipelines, next maintenance (works offline)",
    )
    status.add_argument("--partitions", type=int, default=20, help="partitions to list (default: 20)")
    status.set_defaults(func=cmd_status)
    maintain = sub.add_parser("maintain", help="compact, fold deletes, rewrite manifests, expire snapshots as due")
    maintain.add_argument("table", nargs="?", help="catalog.namespace.table (default with --pipeline: its table)")
    _add_catalog_arguments(maintain)
    maintain.add_argument("--every", metavar="DURATION", help="run again every DURATION (e.g. 5m) until stopped")
    maintain.add_argument(
        "--fold-deletes",
        choices=["rewrite", "position"],
        default="rewrite",
        help="fold equality deletes by rewriting data files (default) or converting them to position deletes",
    )
    maintain.add_argument("--time-budget", metavar="DURATION", help="stop taking compaction groups after DURATION")
    maintain.add_argument(
        "--orphans", action="store_true", help="also delete orphan files older than 3 days (never a batch in flight)"
    )
    maintain.add_argument(
        "--upgrade-v3",
        action="store_true",
        help="only upgrade TABLE to Iceberg format v3 (deletion vectors), safely beside a running pipeline",
    )
    maintain.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bars or progress lines"
    )
    maintain.set_defaults(func=cmd_maintain)
    catalog = sub.add_parser("catalog", help="catalog commands: serve")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True)
    serve = catalog_sub.add_parser(
        "serve", help="serve the lake (or a pipeline's catalog) over the Iceberg REST protocol until stopped"
    )
    serve.add_argument("-p", "--pipeline", metavar="FILE", help="serve this pipeline file's catalog")
    serve.add_argument("--warehouse", help="warehouse of the embedded catalog to serve (default: ./warehouse)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8181, help="port to listen on (default: 8181; 0: any free one)")
    serve.set_defaults(func=cmd_catalog_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: errors print as one line (details with --verbose), exit code 1."""
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    try:
        return int(args.func(args))
    except IcetideError as exc:
        log.debug("failed", exc_info=True)
        print(f"icetide: error: {scrub(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("icetide: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a Java or library error: one line here, the trace with -v
        log.debug("failed", exc_info=True)
        hint = "" if args.verbose else " (run with -v for details)"
        print(f"icetide: error: {scrub(one_line(exc))}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
