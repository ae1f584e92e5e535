"""The status page: one self-contained HTML file that shows a table (or every table of a pipeline).

Charts are drawn by Plotly (plotly.js, embedded in the page once, so the page works offline,
with no CDN): files, small files and average file size per partition against the target size;
the delete backlog per partition; a timeline of snapshots, stream and maintenance commits
apart. HTML tables give the pipelines' positions, lag and last commit, what the next
maintenance pass would do, and the partitions as numbers. Why Plotly: docs/status_page.md.

Rendering only: every value comes in as plain data (TableHealth, SnapshotEvents, NextPass,
PipelineRows); nothing here reads a table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from icetide.maintenance.health import PartitionHealth, TableHealth
from icetide.maintenance.next_pass import NextPass
from icetide.maintenance.timeline import SnapshotEvent

MAX_CHART_PARTITIONS = 48  # newest partitions charted; the table below the charts lists them all
STREAM_COLOUR = "#1f77b4"
MAINTENANCE_COLOUR = "#ff7f0e"
OTHER_COLOUR = "#7f7f7f"
MIB = 1024 * 1024


@dataclass(frozen=True)
class PipelineRow:
    """Where one pipeline stands on one table."""

    pipeline: str
    table: str
    last_batch: int | None
    position: str  # the source position reached, as text
    lag: int | None  # records (Kafka) or files (landing folder) not in the table yet; None: unknown
    last_commit: str | None  # ISO 8601


@dataclass(frozen=True)
class TableView:
    """Everything the page shows of one table."""

    health: TableHealth
    timeline: list[SnapshotEvent]
    next_pass: NextPass | None
    pipelines: list[PipelineRow]


def _ago(at: str | None, now: datetime) -> str:
    if not at:
        return "-"
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = max(0, int((now - when).total_seconds()))
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 7200:
        return f"{seconds // 60} min ago"
    if seconds < 172800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86400} days ago"


def _when(at: str | None) -> str:
    """An ISO 8601 instant, to the second, in UTC."""
    if not at:
        return "-"
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        return at
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _figure_html(fig: Any, div_id: str) -> str:
    import plotly.io as pio

    return str(
        pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def _charted(health: TableHealth) -> list[PartitionHealth]:
    """The newest partitions, oldest of them first (time runs left to right)."""
    return list(reversed(health.partitions[:MAX_CHART_PARTITIONS]))


def _partition_axis(fig: Any, health: TableHealth) -> None:
    """Whole partition labels, upright, under the lower of two stacked charts."""
    fig.update_xaxes(type="category", tickangle=-90, tickfont={"size": 10}, automargin=True)
    fig.update_xaxes(title_text=f"partition: {health.partitioned_by}", row=2, col=1)


def _stacked(*titles: str, spacing: float = 0.08) -> Any:
    """A figure of one chart per title, stacked over one shared x axis."""
    from plotly.subplots import make_subplots

    return make_subplots(rows=len(titles), cols=1, shared_xaxes=True, vertical_spacing=spacing, subplot_titles=titles)


def files_chart(health: TableHealth) -> Any:
    """Data files and small files per partition; average data file size against the target."""
    import plotly.graph_objects as go

    parts = _charted(health)
    labels = [p.label for p in parts]
    fig = _stacked("data files per partition", "average data file size (MiB)")
    fig.add_trace(go.Bar(name="data files", x=labels, y=[p.data_files for p in parts], marker_color="#4c78a8"), 1, 1)
    fig.add_trace(
        go.Bar(
            name=f"small files (< {_size(health.small_file_bytes)})",
            x=labels,
            y=[p.small_files for p in parts],
            marker_color="#e45756",
        ),
        1,
        1,
    )
    fig.add_trace(
        go.Bar(
            name="average size",
            x=labels,
            y=[round(p.avg_data_file_bytes / MIB, 3) for p in parts],
            marker_color="#54a24b",
            showlegend=True,
        ),
        2,
        1,
    )
    target = health.target_file_size / MIB
    fig.add_trace(
        go.Scatter(
            name=f"target file size ({_size(health.target_file_size)})",
            x=labels,
            y=[target] * len(labels),
            mode="lines",
            line={"color": "#222", "dash": "dash"},
        ),
        2,
        1,
    )
    fig.update_yaxes(title_text="files", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="MiB", type="log", row=2, col=1)
    _partition_axis(fig, health)
    fig.update_layout(barmode="group", height=600, template="plotly_white", margin={"t": 40, "b": 60})
    return fig


def deletes_chart(health: TableHealth) -> Any:
    """Delete files per partition by kind, and the rows they delete."""
    import plotly.graph_objects as go

    parts = _charted(health)
    labels = [p.label for p in parts]
    fig = _stacked("delete files per partition", "rows deleted but not yet folded away")
    kinds = [
        ("equality-delete files", [p.equality_delete_files for p in parts], "#e45756"),
        ("position-delete files", [p.position_delete_files for p in parts], "#f58518"),
        ("deletion vectors", [p.deletion_vectors for p in parts], "#b279a2"),
    ]
    for name, values, colour in kinds:
        if any(values) or name == "equality-delete files":
            fig.add_trace(go.Bar(name=name, x=labels, y=values, marker_color=colour), 1, 1)
    rows = [
        ("equality-delete rows", [p.equality_delete_rows for p in parts], "#9d2b2b"),
        ("position-delete rows", [p.position_delete_rows for p in parts], "#c46a0c"),
        ("deletion-vector rows", [p.deletion_vector_rows for p in parts], "#6b3d66"),
    ]
    for name, values, colour in rows:
        if any(values) or name == "equality-delete rows":
            fig.add_trace(go.Bar(name=name, x=labels, y=values, marker_color=colour), 2, 1)
    fig.update_yaxes(title_text="files", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="rows", rangemode="tozero", row=2, col=1)
    _partition_axis(fig, health)
    fig.update_layout(
        barmode="stack", height=560, template="plotly_white", margin={"t": 40, "b": 60}, legend={"traceorder": "normal"}
    )
    return fig


def timeline_chart(events: Sequence[SnapshotEvent]) -> Any:
    """Snapshots over time: rows, data files and delete files added (up) and removed (down),
    stream commits and maintenance commits in their own colours."""
    import plotly.graph_objects as go

    fig = _stacked(
        "rows added (+) / removed (-)", "data files added / removed", "delete files added / removed", spacing=0.07
    )
    kinds = [
        ("stream", STREAM_COLOUR, "stream commits"),
        ("maintenance", MAINTENANCE_COLOUR, "maintenance commits"),
        ("other", OTHER_COLOUR, "other commits"),
    ]
    for kind, colour, name in kinds:
        chosen = [e for e in events if e.kind == kind]
        if not chosen and kind == "other":
            continue
        x = [e.committed_at for e in chosen]
        hover = [
            html.escape(e.writer) + (f" batch {e.batch_id}" if e.batch_id is not None else "") + f"<br>{e.operation}"
            f"<br>snapshot {e.snapshot_id}"
            + (f"<br>{e.equality_deletes_added:,} equality-delete rows added" if e.equality_deletes_added else "")
            for e in chosen
        ]
        series = (
            ([e.rows_added for e in chosen], [-e.rows_removed for e in chosen]),
            ([e.data_files_added for e in chosen], [-e.data_files_removed for e in chosen]),
            ([e.delete_files_added for e in chosen], [-e.delete_files_removed for e in chosen]),
        )
        for row, (added, removed) in enumerate(series, start=1):
            for values, sign in ((added, "added"), (removed, "removed")):
                # a commit that removed nothing draws no "removed" point on the zero line
                keep = [i for i, v in enumerate(values) if sign == "added" or v != 0]
                fig.add_trace(
                    go.Scatter(
                        name=name,
                        legendgroup=kind,
                        showlegend=row == 1 and sign == "added",
                        x=[x[i] for i in keep],
                        y=[values[i] for i in keep],
                        mode="markers",
                        marker={
                            "color": colour,
                            "size": 8 if kind == "maintenance" else 6,
                            "symbol": "diamond" if kind == "maintenance" else "circle",
                            "opacity": 1.0 if sign == "added" else 0.55,
                        },
                        text=[hover[i] for i in keep],
                        hovertemplate="%{text}<br>%{y:,}<extra>" + sign + "</extra>",
                    ),
                    row,
                    1,
                )
    for e in events:
        if e.kind == "maintenance":
            fig.add_vline(x=e.committed_at, line={"color": MAINTENANCE_COLOUR, "width": 1, "dash": "dot"})
    fig.update_yaxes(zeroline=True, zerolinecolor="#444")
    fig.update_xaxes(title_text="commit time (UTC)", row=3, col=1)
    fig.update_layout(height=640, template="plotly_white", margin={"t": 40, "b": 60}, hovermode="closest")
    return fig


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _pipelines_html(rows: Sequence[PipelineRow], now: datetime) -> str:
    if not rows:
        return "<p class='muted'>No pipeline has committed to this table.</p>"
    return _table(
        ("pipeline", "table", "last batch", "source position", "lag", "last commit", ""),
        [
            (
                r.pipeline,
                r.table,
                "-" if r.last_batch is None else str(r.last_batch),
                r.position if len(r.position) <= 120 else r.position[:117] + "...",
                "unknown" if r.lag is None else f"{r.lag:,}",
                _when(r.last_commit),
                _ago(r.last_commit, now),
            )
            for r in rows
        ],
        css="pipelines",
    )


def _next_pass_html(plan: NextPass | None) -> str:
    if plan is None:
        return "<p class='muted'>Not planned.</p>"
    items = "".join(f"<li>{html.escape(line)}</li>" for line in plan.lines())
    due = "".join(f"<li>{html.escape(s)}</li>" for s in plan.due) or "<li>nothing</li>"
    out = (
        f"<ol class='plan'>{items}</ol><details><summary>why: the thresholds crossed</summary><ul>{due}</ul></details>"
    )
    if plan.groups:
        out += _table(
            ("order", "partition", "files in", "bytes in", "files out", "delete files folded"),
            [
                (
                    str(i),
                    g.partition,
                    str(g.input_files),
                    _size(g.input_bytes),
                    str(g.output_files),
                    str(g.delete_files),
                )
                for i, g in enumerate(plan.groups, start=1)
            ],
            css="groups",
        )
    return out


def _partitions_html(health: TableHealth) -> str:
    return _table(
        (
            health.partitioned_by,
            "records",
            "data files",
            "small",
            "avg size",
            "eq-delete files",
            "eq-delete rows",
            "pos-delete files",
            "deletion vectors",
            "last updated",
        ),
        [
            (
                p.label,
                f"{p.records:,}",
                str(p.data_files),
                str(p.small_files),
                _size(p.avg_data_file_bytes),
                str(p.equality_delete_files),
                f"{p.equality_delete_rows:,}",
                str(p.position_delete_files),
                str(p.deletion_vectors),
                p.last_updated or "-",
            )
            for p in health.partitions
        ],
        css="partitions",
    )


def _section(index: int, view: TableView, now: datetime) -> str:
    h = view.health
    anchor = f"t{index}"
    stream = sum(1 for e in view.timeline if e.kind == "stream")
    maintenance = sum(1 for e in view.timeline if e.kind == "maintenance")
    facts = [
        f"{h.data_files:,} data files",
        f"{h.delete_files:,} delete files",
        f"{h.equality_delete_rows:,} equality-delete rows waiting",
        f"{h.snapshots:,} snapshots",
        f"target file size {_size(h.target_file_size)}",
        f"partitioned by {h.partitioned_by}",
    ]
    charted = min(len(h.partitions), MAX_CHART_PARTITIONS)
    note = f"newest {charted} of {len(h.partitions)} partitions" if len(h.partitions) > charted else ""
    return (
        f"<section id='{anchor}'><h2>{html.escape(h.table)}</h2>"
        f"<p class='facts'>{' · '.join(html.escape(f) for f in facts)}</p>"
        "<h3>Pipelines</h3>"
        f"{_pipelines_html(view.pipelines, now)}"
        "<h3>Files per partition</h3>"
        + (f"<p class='muted'>{note}</p>" if note else "")
        + _figure_html(files_chart(h), f"{anchor}-files")
        + "<h3>Delete backlog per partition</h3>"
        + _figure_html(deletes_chart(h), f"{anchor}-deletes")
        + f"<h3>Snapshots: {stream} stream commits, {maintenance} maintenance commits "
        f"(last {len(view.timeline)})</h3>"
        + _figure_html(timeline_chart(view.timeline), f"{anchor}-timeline")
        + "<h3>Next maintenance pass</h3>"
        + _next_pass_html(view.next_pass)
        + "<h3>Partitions</h3>"
        + _partitions_html(h)
        + "</section>"
    )


_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto; max-width: 1200px;
       color: #222; padding: 0 16px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 19px; border-bottom: 1px solid #ddd; margin-top: 36px; }
h3 { font-size: 15px; margin: 22px 0 6px; } .muted { color: #777; } .facts { color: #444; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 3px 10px; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; } th { background: #f6f6f6; }
table.pipelines td, table.pipelines th { text-align: left; }
ol.plan { margin: 4px 0 8px; } nav a { margin-right: 14px; }
"""


def status_page(views: Sequence[TableView], *, title: str, pipelines: Sequence[PipelineRow] = ()) -> str:
    """The whole page: a pipeline overview (when given), then one section per table.

    Guarantees: the page loads nothing from the network (plotly.js is inline); every partition
    label of every table appears in it as text.
    """
    from plotly.offline import get_plotlyjs

    now = datetime.now(UTC)
    nav = ""
    if len(views) > 1:
        nav = (
            "<nav>"
            + "".join(f"<a href='#t{i}'>{html.escape(v.health.table)}</a>" for i, v in enumerate(views))
            + "</nav>"
        )
    overview = f"<h2>Pipelines</h2>{_pipelines_html(pipelines, now)}" if pipelines else ""
    sections = "".join(_section(i, v, now) for i, v in enumerate(views))
    generated = now.strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p class='muted'>generated {generated} by icetide status</p>"
        f"{nav}{overview}{sections}</body></html>"
    )
