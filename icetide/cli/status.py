"""`icetide status`: a table's (or a pipeline's tables') health in a terminal, as JSON, as a page.

The terminal view fits the console: the partition column always shows whole labels; when the
console is too narrow for every column, the least needed columns are dropped first.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console
    from rich.table import Table

    from icetide.cli.status_page import PipelineRow, TableView
    from icetide.config.pipeline import PipelineConfig
    from icetide.maintenance.health import PartitionHealth, TableHealth
    from icetide.pipeline.sync.status import TableStatus

log = logging.getLogger(__name__)

SHOWN_SUGGESTIONS = 6  # next-maintenance lines printed in a terminal

# (heading, cell, keep rank): columns are dropped highest rank first when the console is narrow.
_COLUMNS: list[tuple[str, Any, int]] = [
    ("records", lambda p: f"{p.records:,}", 6),
    ("data files", lambda p: str(p.data_files), 1),
    ("small", lambda p: str(p.small_files), 2),
    ("avg size", lambda p: f"{p.avg_data_file_bytes / 1024:,.0f} KiB", 4),
    ("eq-delete files", lambda p: str(p.equality_delete_files), 5),
    ("eq-delete rows", lambda p: f"{p.equality_delete_rows:,}", 3),
]
_OPTIONAL: list[tuple[str, Any, int]] = [  # shown only when some partition has them
    ("pos-delete files", lambda p: str(p.position_delete_files), 7),
    ("deletion vectors", lambda p: str(p.deletion_vectors), 3),
]


def partitions_table(console: Console, health: TableHealth, limit: int) -> Table:
    """The files-per-partition table, fitted to `console`'s width.

    Guarantees: every shown partition's label is whole on one line (the partition column never
    wraps or cuts); no number is cut or wrapped; columns are dropped, least needed first, until
    the rest fit the console; a label wider than the console by itself is wrapped, never cut.
    Headings wrap between words when space is short.
    """
    shown = health.partitions[:limit]
    columns = list(_COLUMNS)
    for heading, cell, rank in _OPTIONAL:
        if any(cell(p) != "0" for p in shown):
            columns.append((heading, cell, rank))
    label_width = max([len(p.label) for p in shown] + [len("partition")])

    def narrowest(heading: str, cell: Any) -> int:
        return max([len(cell(p)) for p in shown] + [len(word) for word in heading.split()])

    def needed(cols: Sequence[tuple[str, Any, int]]) -> int:  # cells, one space of padding each side, borders
        return label_width + sum(narrowest(h, c) for h, c, _ in cols) + 3 * (len(cols) + 1) + 1

    while columns and needed(columns) > console.width:
        worst = max(rank for _, _, rank in columns)
        columns = [c for c in columns if c[2] != worst]
    spare = console.width - needed(columns)
    widths = []
    for heading, cell, _ in columns:  # spare room first unwraps headings, left to right
        width = narrowest(heading, cell)
        grow = max(0, min(spare, len(heading) - width))
        widths.append(width + grow)
        spare -= grow
    return _build(health, shown, columns, label_width, widths, limit, console.width)


def _build(
    health: TableHealth,
    shown: Sequence[PartitionHealth],
    columns: Sequence[tuple[str, Any, int]],
    label_width: int,
    widths: Sequence[int],
    limit: int,
    console_width: int,
) -> Table:
    from rich.table import Table

    table = Table(title=f"files per partition: {health.partitioned_by}", title_justify="left")
    if columns or label_width + 4 <= console_width:
        table.add_column("partition", no_wrap=True, width=label_width)
    else:  # a label wider than the console: wrapped, never cut
        table.add_column("partition", overflow="fold")
    for (heading, _, _), width in zip(columns, widths, strict=True):
        table.add_column(heading, justify="right", width=width)
    for p in shown:
        table.add_row(p.label, *(cell(p) for _, cell, _ in columns))
    if len(health.partitions) > limit:
        table.caption = f"newest {limit} of {len(health.partitions)} partitions"
    return table


def print_health(console: Console, health: TableHealth, catalog: dict[str, Any], limit: int) -> None:
    """The terminal view of one table."""
    from rich.table import Table

    settings = ", ".join(f"{k}={v}" for k, v in catalog.items() if v is not None)
    console.print(f"catalog {health.table.split('.')[0]}: {settings}", highlight=False, soft_wrap=True)
    dvs = f", {health.deletion_vectors} deletion vectors" if health.deletion_vectors else ""
    console.print(
        f"[bold]{health.table}[/bold]: {health.data_files} data files, {health.delete_files} delete files{dvs}, "
        f"{health.equality_delete_rows:,} equality-delete rows waiting, {health.snapshots} snapshots "
        f"({health.oldest_snapshot} .. {health.newest_snapshot}), target file size "
        f"{health.target_file_size // (1024 * 1024)} MiB"
    )
    console.print(partitions_table(console, health, limit))
    pipes = Table(title="pipelines", title_justify="left")
    for column in ("pipeline", "last batch", "source position", "committed at"):
        pipes.add_column(column)
    for st in health.pipelines:
        committed = st.committed_at[:19].replace("T", " ")  # ISO 8601 in UTC, to the second
        pipes.add_row(st.pipeline_id, str(st.batch_id), json.dumps(st.source_position)[:60], committed)
    console.print(pipes)
    due = health.suggestions
    console.print("next maintenance: " + ("nothing due" if not due else f"{len(due)} step(s) due"), highlight=False)
    for line in due[:SHOWN_SUGGESTIONS]:
        console.print(f"  {line}", highlight=False)
    if len(due) > SHOWN_SUGGESTIONS:
        console.print(f"  ... and {len(due) - SHOWN_SUGGESTIONS} more (all of them: --json or --html)", highlight=False)


def table_view(
    spark: SparkSession, table: str, pipelines: list[PipelineRow], health: TableHealth | None = None
) -> TableView:
    """Everything the page shows of one table: health, timeline, the next pass planned."""
    from icetide.cli.status_page import TableView
    from icetide.maintenance.health import table_health
    from icetide.maintenance.next_pass import next_pass
    from icetide.maintenance.timeline import snapshot_timeline

    h = health or table_health(spark, table)
    return TableView(h, snapshot_timeline(spark, table), next_pass(spark, table, health=h), pipelines)


def source_lag(config: PipelineConfig | None, pipeline_id: str, position: Any) -> int | None:
    """Records (or files) the pipeline of `config` has not committed yet; None when not measurable."""
    if config is None or config.pipeline != pipeline_id or config.routes_tables or config.stateful is not None:
        return None
    from icetide.pipeline.spark_path import SourceAdapter

    source = None
    try:
        source = SourceAdapter(config)
        return int(source.lag(position if isinstance(position, dict) else None))
    except Exception:  # the broker or folder cannot say now: the page shows "unknown"
        log.debug("could not measure the lag of %s", pipeline_id, exc_info=True)
        return None
    finally:
        if source is not None:
            source.close()


def table_status(
    args: argparse.Namespace, spark: SparkSession, table: str, catalog: dict[str, Any], config: PipelineConfig | None
) -> int:
    """`icetide status TABLE`: text (or --json), and the page with --html (alias --chart)."""
    from rich.console import Console

    from icetide.cli.status_page import PipelineRow, status_page
    from icetide.maintenance.health import table_health

    health = table_health(spark, table)
    if args.html:
        rows = [
            PipelineRow(
                s.pipeline_id,
                table,
                s.batch_id,
                json.dumps(s.source_position),
                source_lag(config, s.pipeline_id, s.source_position),
                s.committed_at,
            )
            for s in health.pipelines
        ]
        page = status_page([table_view(spark, table, rows, health)], title=f"icetide status: {table}")
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(page)
    if args.json:
        print(health.to_json())
        return 0
    console = Console()
    print_health(console, health, catalog, args.partitions)
    if args.html:
        console.print(f"status page written to {args.html}", highlight=False)
    return 0


def _position_text(s: TableStatus) -> str:
    return ", ".join(f"{t}/{p}@{o}" for t, parts in sorted(s.position.items()) for p, o in sorted(parts.items()))


def pipeline_page(spark: SparkSession, pipeline: str, statuses: Sequence[TableStatus]) -> str:
    """The page of a pipeline of many tables: every table's position first, then a section per
    table that exists."""
    from icetide.cli.status_page import PipelineRow, status_page

    rows = [PipelineRow(pipeline, s.table, s.last_batch, _position_text(s), s.lag, s.last_commit) for s in statuses]
    views = [
        table_view(spark, s.table, [r for r in rows if r.table == s.table])
        for s in statuses
        if s.rows is not None  # None: the table does not exist (yet)
    ]
    return status_page(views, title=f"icetide status: pipeline {pipeline}", pipelines=rows)


def pipeline_status(args: argparse.Namespace, config: PipelineConfig) -> int:
    """`icetide status --pipeline FILE` of a pipeline of many tables: one line per table; with
    --html, a page with a section per table."""
    from rich.console import Console
    from rich.table import Table

    from icetide.pipeline.provision import pipeline_session
    from icetide.pipeline.sync.status import pipeline_status as statuses_of
    from icetide.pipeline.sync.status import status_json

    spark = pipeline_session(config)
    statuses = statuses_of(spark, config)
    if args.html:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(pipeline_page(spark, config.pipeline, statuses))
    if args.json:
        print(status_json(statuses))
        return 0
    view = Table(title=f"pipeline {config.pipeline}: {len(statuses) - 1} table(s) and the dead-letter table")
    for column in ("table", "last batch", "position", "lag", "last commit", "rows", "data files", "delete files"):
        view.add_column(column, justify="left" if column in ("table", "position", "last commit") else "right")
    for s in statuses:
        where = _position_text(s)
        view.add_row(
            s.table + (" (dead letters)" if s.dead_letter else ""),
            "-" if s.last_batch is None else str(s.last_batch),
            where[:60] + ("..." if len(where) > 60 else ""),
            "-" if s.lag is None else f"{s.lag:,}",
            s.last_commit or "-",
            "-" if s.rows is None else f"{s.rows:,}",
            str(s.data_files),
            str(s.delete_files),
        )
    console = Console(width=200)
    console.print(view)
    if args.html:
        console.print(f"status page written to {args.html}", highlight=False)
    return 0
