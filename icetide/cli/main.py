"""The icetide command line: demo, run, status, maintain, catalog serve."""

from __future__ import annotations

import argparse
import faulthandler
import io
import logging
import signal
import sys
import time
from contextlib import nullcontext, suppress
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import icetide
from icetide.cli.maintain import cmd_maintain
from icetide.cli.session import routing_pipeline, table_session
from icetide.config.secrets import install_log_redaction, scrub
from icetide.errors import ConfigError, IcetideError, one_line

if TYPE_CHECKING:
    from icetide.config.pipeline import PipelineConfig

log = logging.getLogger("icetide.cli")


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    install_log_redaction()
    # `kill -USR1 <pid>` prints every thread's Python stack to stderr: what a stuck process is doing.
    # Not where there is no SIGUSR1 (Windows) or stderr is no file (main() called in a notebook).
    with suppress(AttributeError, ValueError, io.UnsupportedOperation):
        faulthandler.register(signal.SIGUSR1, all_threads=True)


def _hour_label(hours_since_epoch: int | None) -> str:
    if hours_since_epoch is None:
        return "null"
    return datetime.fromtimestamp(hours_since_epoch * 3600, tz=UTC).strftime("%Y-%m-%d %H:00")


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo with a progress bar and print its summary."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from icetide.cli.demo import run_demo
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
    from icetide.config.pipeline import load_config
    from icetide.ops.runner_lock import RunnerLock, lock_config

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
    with console.status(f"starting pipeline {config.pipeline} ...") if interactive else nullcontext():
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
    from icetide.cli.status import pipeline_status, table_status

    config = routing_pipeline(args)
    if config is not None:
        return pipeline_status(args, config)
    spark, table, catalog = table_session(args)
    if args.pipeline:
        from icetide.config.pipeline import load_config

        config = load_config(args.pipeline)
    return table_status(args, spark, table, catalog, config)


def cmd_catalog_serve(args: argparse.Namespace) -> int:
    """Serve a catalog over the Iceberg REST protocol until interrupted: the embedded lake in
    --warehouse (default ./warehouse), or with --pipeline that pipeline's catalog."""
    import os
    import signal

    from icetide.catalog.server import CatalogServer, served_catalog
    from icetide.catalog.settings import DEFAULT_CATALOG

    token = os.environ.get("ICETIDE_CATALOG_TOKEN") or None  # clients must send it as `token`
    if args.pipeline:
        from icetide.config.pipeline import load_config

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


class _PrintVersion(argparse.Action):
    """`--version`: the installed package's version, read only when asked (a metadata lookup)."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"icetide {icetide.__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="icetide", description="Exactly-once streaming upserts into Iceberg.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logs, with Java stack traces")
    parser.add_argument("--version", action=_PrintVersion, help="print icetide's version and exit")
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
    maintain.add_argument(
        "--fold-all",
        action="store_true",
        help="fold every equality delete and compact now, whatever the thresholds: every engine reads the table",
    )
    maintain.add_argument(
        "--vector-deleted-share",
        metavar="SHARE",
        default="0.1",
        help="compact a data file once its deletion vector marks this share of its rows (default: 0.1; off)",
    )
    maintain.add_argument(
        "--vector-file-rows",
        metavar="ROWS",
        default="1000000",
        help="compact a partition's files with a deletion vector once they hold this many rows (default: 1000000; off)",
    )
    maintain.add_argument("--time-budget", metavar="DURATION", help="stop taking new compaction work after DURATION")
    maintain.add_argument(
        "--driver-rewrite-bytes",
        metavar="SIZE",
        default="32MB",
        help="compact units reading at most SIZE with Arrow on the driver, not a Spark job (default: 32MB; 0: off)",
    )
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


if __name__ == "__main__":  # `python -m icetide.cli.main` as well as `python -m icetide.cli`
    sys.exit(main())
