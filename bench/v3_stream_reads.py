"""Benchmark: reads of format v3 upsert tables while the stream runs, with and without maintenance
beside it, in Spark, DuckDB and PyIceberg, against a compacted copy of the same rows (issue 24).

    .venv/bin/python bench/v3_stream_reads.py [--rows 200000] [--batches 50] [--keys 20000]
        [--read-every 5] [--maintain-every 5s] [--duckdb-cap 30] [--record]

Three format v3 tables get `--rows` rows appended, then the same `--batches` upsert batches of
`--keys` keys each (a fifth update existing keys, the rest are new), one table after the other in
each batch: `equality` (equality deletes, the old default), `vectors` (`deletes="vectors"`, the default of
new tables) and
`maintained` (`deletes="vectors"`, with the real `icetide maintain TABLE --every DURATION` beside
it in its own OS process, at its default policy). The first two get no maintenance.

After every `--read-every`th batch a compacted copy of the same rows is written (one data file, as
compaction makes it) and each table is read: a full scan (count and a sum over every row) and a
point lookup of one key, in Spark, DuckDB and PyIceberg, medians of `--repeats` after a warm-up (a
read over 10 s is timed once). The tables and the copy are read in turn, one read of each per
round (`bench.common.tables_reads`), so that a maintenance pass or other load lands on the table
and its copy alike. The same reads of `maintained` and a fresh compacted copy follow each batch
after which a maintenance commit (compaction) is found in the table's history: "right after each
maintenance pass" (the batches the stream committed after that commit are counted). DuckDB reading
equality deletes is stopped at `--duckdb-cap` seconds, and not tried again once stopped; PyIceberg
refuses equality deletes.

Per batch: each sink's latency, and in the two `vectors` sinks the time to find the rows the batch
replaces (its keys read back and looked up in the key index: `BatchResult.find_seconds`) and the
time the index spent being built or following commits (`index_seconds`).
"""

from __future__ import annotations

import gc
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    READ_ENGINES,
    ROOT,
    UPSERT_SCHEMA,
    ReadTarget,
    ReadTime,
    TableReads,
    UpsertBatches,
    bench_session,
    current_metadata,
    duckdb_with_iceberg,
    in_temp_warehouse,
    median,
    parser,
    render_table,
    report,
    tables_reads,
)

PREFIX = "lake.bench.v3s_"
STREAMS = {"equality": "equality", "vectors": "vectors", "maintained": "vectors"}  # table -> deletes mode
COMPACTED = f"{PREFIX}compacted"
STARTUP_TIMEOUT = 300.0  # the maintainer's JVM and first pass, on 2 busy cores
ENGINE_NAMES = {"spark": "Spark", "duckdb": "DuckDB", "pyiceberg": "PyIceberg"}
SPARK_FASTER_TARGET = 3.0  # vectors reads at least this much faster than equality in Spark
OTHERS_TARGET = 2.0  # PyIceberg and DuckDB on vectors within this of the compacted copy
P95_TARGET = 1.5  # maintained, 95th percentile over the run
AFTER_PASS_TARGET = 1.1  # maintained, right after each maintenance pass


@dataclass(frozen=True)
class ReadPoint:
    """The reads after one batch: table -> its reads (the compacted copy under COMPACTED)."""

    batch: int
    reads: dict[str, TableReads]
    after_pass: int | None = None  # the maintenance pass whose snapshot these reads are of (1, 2, ...)

    def ratio(self, table: str, kind: str, engine: str) -> float | None:
        """The table's read time over the compacted copy's (None when not measured)."""
        return _pick(self.reads[table], kind)[engine].ratio(_pick(self.reads[COMPACTED], kind)[engine])


def _pick(reads: TableReads, kind: str) -> dict[str, ReadTime]:
    return reads.scan if kind == "scan" else reads.lookup


def p95(values: Sequence[float]) -> float:
    """95th percentile, linear between the two nearest ranks."""
    return float(np.percentile(np.asarray(values, dtype=float), 95))


@contextmanager
def maintainer(table: str, warehouse: str, every: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`icetide maintain TABLE --every EVERY` (the default policy) in its own process until the block ends."""
    with log.open("wb") as out:
        command = [sys.executable, "-m", "icetide.cli", "maintain", table, "--warehouse", warehouse]
        process = subprocess.Popen([*command, "--every", every, "--no-progress"], cwd=ROOT, stdout=out, stderr=out)
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT
            while f"{table}: done in" not in log.read_text(errors="replace"):  # its JVM is up, one pass done
                if process.poll() is not None:
                    raise RuntimeError(f"icetide maintain exited {process.returncode}: {log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"icetide maintain: no pass in {STARTUP_TIMEOUT:.0f}s")
                time.sleep(0.5)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class PassWatch:
    """Finds the maintenance commits (compaction) that landed in a table since the last look."""

    def __init__(self, spark: Any, table: str) -> None:
        from icetide.table.iceberg import load_table

        self.jtable = load_table(spark, table)
        self.jtable.refresh()
        self.seen = int(self.jtable.currentSnapshot().snapshotId())

    def new_passes(self) -> tuple[int, int | None]:
        """(maintenance commits since the last call, the newest one's snapshot id)."""
        from icetide.maintenance.compaction import SUMMARY_OPERATION

        self.jtable.refresh()
        snapshot = self.jtable.currentSnapshot()
        newest = int(snapshot.snapshotId())
        passes, pass_snapshot = 0, None
        while snapshot is not None and int(snapshot.snapshotId()) != self.seen:
            if snapshot.summary().get(SUMMARY_OPERATION) is not None:
                passes += 1
                pass_snapshot = pass_snapshot or int(snapshot.snapshotId())
            parent = snapshot.parentId()
            snapshot = self.jtable.snapshot(parent) if parent is not None else None
        self.seen = newest
        return passes, pass_snapshot


def write_compacted_copy(spark: Any, source: str, snapshot_id: int | None = None) -> None:
    """COMPACTED: the rows of `source` now (or at `snapshot_id`), in one data file of a format v3 table."""
    spark.sql(f"REFRESH TABLE {source}")
    reader = spark.read.format("iceberg")
    if snapshot_id is not None:
        reader = reader.option("versionAsOf", str(snapshot_id))
    (
        reader.load(source)
        .coalesce(1)
        .writeTo(COMPACTED)
        .using("iceberg")
        .tableProperty("format-version", "3")
        .createOrReplace()
    )


def run(args: Any, warehouse: str) -> tuple[str, str]:
    import icetide

    spark = bench_session(warehouse)
    names = {t: f"{PREFIX}{t}" for t in STREAMS}
    sinks = {}
    for table, mode in STREAMS.items():
        icetide.create_table(spark, names[table], schema=UPSERT_SCHEMA, key=["id"], format_version=3)
        UpsertBatches.initial(spark, args.rows).writeTo(names[table]).append()
        sinks[table] = icetide.UpsertSink(spark, names[table], pipeline_id="bench", order_by="seq", deletes=mode)
    stream = UpsertBatches(args.rows, args.keys)
    results: dict[str, list[Any]] = {t: [] for t in STREAMS}
    points: list[ReadPoint] = []
    after_pass: list[ReadPoint] = []
    passes = 0
    layouts: dict[str, str] = {}  # table -> its layout at the last read
    stopped: set[tuple[str, str]] = set()  # (table, engine) whose reads passed the DuckDB cap
    log_path = Path(warehouse) / "maintain.log"
    started = time.monotonic()
    with duckdb_with_iceberg() as con, maintainer(names["maintained"], warehouse, args.maintain_every, log_path):
        watch = PassWatch(spark, names["maintained"])

        def read(tables: Sequence[str], snapshot_id: int | None = None) -> dict[str, TableReads]:
            """Reads of `tables` and of a compacted copy of their rows; with `snapshot_id`, of that
            snapshot of the one table named."""
            write_compacted_copy(spark, names[tables[0]] if snapshot_id else names["vectors"], snapshot_id)
            probe = stream.rng.randrange(args.rows)
            read_as = [*tables, "compacted"]  # read in turn, so load lands on each alike
            targets = []
            for table in read_as:
                name = names.get(table, COMPACTED)
                targets.append(
                    ReadTarget(
                        name,
                        current_metadata(spark, name),
                        snapshot_id if table != "compacted" else None,
                        tuple(e for t, e in stopped if t == table),
                    )
                )
            found = tables_reads(spark, targets, probe, con, repeats=args.repeats, duckdb_cap=args.duckdb_cap)
            out = {}
            for table, reads in zip(read_as, found, strict=True):
                stopped.update((table, e) for e in READ_ENGINES if reads.scan[e].capped or reads.lookup[e].capped)
                out[COMPACTED if table == "compacted" else table] = reads
            counts = {t: r.rows for t, r in out.items()}
            if len(set(counts.values())) != 1:
                raise AssertionError(f"the tables hold different row counts: {counts}")
            return out

        for b in range(1, args.batches + 1):
            df = stream.batch(spark, b)
            for table, sink in sinks.items():
                result = sink.write(df, batch_id=b)
                if not result.committed:
                    raise AssertionError(f"{table}: batch {b} not committed: {result.skipped_reason}")
                results[table].append(result)
            df.unpersist()
            line = ", ".join(f"{t} {r[-1].total_seconds:.2f}s" for t, r in results.items())
            print(f"batch {b}: {line} (find {results['vectors'][-1].find_seconds:.3f}s)", flush=True)
            if b % args.read_every == 0:
                points.append(ReadPoint(b, read(list(STREAMS))))
                print(f"  reads after batch {b}: {_brief(points[-1])}", flush=True)
                for table in STREAMS:
                    layouts[table] = layout(spark, names[table])
                    print(f"    {table}: {layouts[table]}", flush=True)
            landed, pass_snapshot = watch.new_passes()
            if pass_snapshot is not None:
                passes += landed
                after_pass.append(ReadPoint(b, read(["maintained"], pass_snapshot), passes))
                print(f"  reads of maintenance pass {passes}'s snapshot: {_brief(after_pass[-1])}", flush=True)
    elapsed = time.monotonic() - started
    spark.stop()
    maintain_log = log_path.read_text(errors="replace")
    if args.maintain_log:
        Path(args.maintain_log).write_text(maintain_log)
    return _report(args, results, points, after_pass, maintain_log, elapsed, layouts), maintain_log


def layout(spark: Any, name: str) -> str:
    """What a reader of the table's current snapshot opens: data files, DVs (and the Puffin files
    holding them), other delete files, manifests."""
    row = spark.sql(
        f"SELECT (SELECT count(*) FROM {name}.data_files), "
        f"(SELECT count(*) FROM {name}.delete_files WHERE file_format = 'PUFFIN'), "
        f"(SELECT count(DISTINCT file_path) FROM {name}.delete_files WHERE file_format = 'PUFFIN'), "
        f"(SELECT count(*) FROM {name}.delete_files WHERE file_format <> 'PUFFIN'), "
        f"(SELECT count(*) FROM {name}.manifests)"
    ).collect()[0]
    return (
        f"{row[0]} data files, {row[1]} DVs in {row[2]} Puffin files, {row[3]} other delete files, {row[4]} manifests"
    )


def _brief(point: ReadPoint) -> str:
    parts = []
    for table in point.reads:
        if table == COMPACTED:
            continue
        cells = [f"{e} {_show_ratio(point.ratio(table, 'scan', e))}" for e in READ_ENGINES]
        parts.append(f"{table} scan " + " ".join(cells))
    return "; ".join(parts)


def _show_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _stats(values: Sequence[float]) -> str:
    return f"{median(values):.3f} / {p95(values):.3f}" if values else "-"


def _report(
    args: Any,
    results: dict[str, list[Any]],
    points: list[ReadPoint],
    after_pass: list[ReadPoint],
    maintain_log: str,
    elapsed: float,
    layouts: dict[str, str] | None = None,
) -> str:
    batches = len(results["equality"])
    half = max(1, batches // 5)  # first and last fifth of the run, to see whether finding follows the table
    latency_rows = []
    for table, rs in results.items():
        vectors = STREAMS[table] == "vectors"
        find = [r.find_seconds for r in rs]
        latency_rows.append(
            [
                f"{table} ({STREAMS[table]}{', maintained' if table == 'maintained' else ''})",
                _stats([r.total_seconds for r in rs]),
                _stats([r.commit_seconds for r in rs]),
                _stats(find) if vectors else "-",
                f"{median(find[:half]):.3f} / {median(find[-half:]):.3f}" if vectors else "-",
                f"{_stats([r.index_seconds for r in rs])}, max {max(r.index_seconds for r in rs):.2f}"
                if vectors
                else "-",
            ]
        )
    latency = render_table(
        [
            "table (deletes)",
            "batch s, median / p95",
            "commit s, median / p95",
            "find replaced rows s, median / p95",
            f"find s, median of first / last {half} batches",
            "index build/follow s, median / p95",
        ],
        latency_rows,
    )
    sections = [latency]
    for engine in READ_ENGINES:
        rows = []
        for p in points:
            row = [str(p.batch)]
            for kind in ("scan", "lookup"):
                base = _pick(p.reads[COMPACTED], kind)[engine]
                row.append(base.show())
                row += [_pick(p.reads[t], kind)[engine].show(base) for t in STREAMS]
            rows.append(row)
        headers = ["after batch"]
        for kind in ("scan", "lookup"):
            headers += [f"compacted {kind} s", *(f"{t} {kind} s" for t in STREAMS)]
        title = f"{ENGINE_NAMES[engine]} (in brackets: times the compacted copy)"
        sections.append(f"{title}:\n\n{render_table(headers, rows)}")
    pass_rows = []
    for p in after_pass:
        row = [str(p.after_pass), str(p.batch)]
        row += [_show_ratio(p.ratio("maintained", k, e)) for e in READ_ENGINES for k in ("scan", "lookup")]
        pass_rows.append(row)
    pass_headers = ["pass", "found after batch"]
    pass_headers += [f"{ENGINE_NAMES[e]} {k}" for e in READ_ENGINES for k in ("scan", "lookup")]
    sections.append(
        "`maintained` right after each maintenance pass (the snapshot its compaction committed, read by "
        "snapshot id), times a compacted copy of that snapshot's rows:\n\n"
        + (render_table(pass_headers, pass_rows) if pass_rows else "(no maintenance commit landed)")
    )
    sections.append(_targets(points, after_pass))
    failed_runs = maintain_log.count("maintenance failed")
    done = maintain_log.count(": done in")
    sections.append(
        f"- run: {elapsed / 60:.1f} min; `icetide maintain --every {args.maintain_every}` ran {done} passes, "
        f"{failed_runs} failed; {len(after_pass)} times a compaction commit was found after a batch"
    )
    for table, text in (layouts or {}).items():
        sections.append(f"- `{table}` at the last read: {text}")
    from pyspark import __version__ as pyspark_version

    from icetide.spark.maven import ICEBERG_VERSION

    head = (
        f"{args.rows:,} rows appended, then {batches} upsert batches of {args.keys:,} keys (20% updates) through "
        f"UpsertSink into three format v3 tables: `equality` (the old default), `vectors` (`deletes=vectors`, "
        f"the default of new tables), "
        f"`maintained` (`deletes=vectors`, `icetide maintain --every {args.maintain_every}` at its default "
        f"policy in its own process). After every {args.read_every}th batch, each table and a compacted copy of the "
        f"same rows (one data file) read by Spark {pyspark_version}/Iceberg {ICEBERG_VERSION}, DuckDB 1.5.5 and "
        f"PyIceberg 0.12.0: full "
        f"scan (count, sum) and point lookup, medians of {args.repeats} after a warm-up, the tables and the copy read "
        f"in turn. DuckDB stopped at "
        f"{args.duckdb_cap:.0f} s. Command: `.venv/bin/python bench/v3_stream_reads.py --rows {args.rows} "
        f"--batches {args.batches} --keys {args.keys} --read-every {args.read_every} --maintain-every "
        f"{args.maintain_every} --duckdb-cap {args.duckdb_cap:g} --repeats {args.repeats}"
        f"{' --record' if args.record else ''}`."
    )
    return head + "\n\n" + "\n\n".join(sections) + "\n"


def _verdict(ok: bool | None) -> str:
    return "not measured" if ok is None else ("**met**" if ok else "**not met**")


def _targets(points: list[ReadPoint], after_pass: list[ReadPoint]) -> str:
    lines = []

    def ratios(pts: list[ReadPoint], fn: Callable[[ReadPoint], float | None]) -> list[float]:
        return [r for r in (fn(p) for p in pts) if r is not None]

    for kind in ("scan", "lookup"):
        faster = ratios(points, lambda p, k=kind: _faster(p, k))
        ok = min(faster) >= SPARK_FASTER_TARGET if faster else None
        lines.append(
            f"- Spark {kind}, `vectors` faster than `equality` (target >= {SPARK_FASTER_TARGET:g}x at every read): "
            + (
                f"median {median(faster):.2f}x, min {min(faster):.2f}x, "
                f"{_count(faster, lambda r: r >= SPARK_FASTER_TARGET)}; "
                if faster
                else ""
            )
            + _verdict(ok)
        )
    for engine in ("pyiceberg", "duckdb"):
        for kind in ("scan", "lookup"):
            rs = ratios(points, lambda p, e=engine, k=kind: p.ratio("vectors", k, e))
            ok = max(rs) <= OTHERS_TARGET if rs else None
            lines.append(
                f"- {ENGINE_NAMES[engine]} {kind}, `vectors` / compacted (target <= {OTHERS_TARGET:g}x at every read): "
                + (
                    f"median {median(rs):.2f}x, max {max(rs):.2f}x, {_count(rs, lambda r: r <= OTHERS_TARGET)}; "
                    if rs
                    else ""
                )
                + _verdict(ok)
            )
    for engine in READ_ENGINES:
        for kind in ("scan", "lookup"):
            rs = ratios(points, lambda p, e=engine, k=kind: p.ratio("maintained", k, e))
            after = ratios(after_pass, lambda p, e=engine, k=kind: p.ratio("maintained", k, e))
            lines.append(
                f"- {ENGINE_NAMES[engine]} {kind}, `maintained` / compacted: p95 over the run "
                + (f"{p95(rs):.2f}x (target <= {P95_TARGET:g}x) {_verdict(p95(rs) <= P95_TARGET)}" if rs else "-")
                + "; right after each pass "
                + (
                    f"max {max(after):.2f}x, median {median(after):.2f}x, "
                    f"{_count(after, lambda r: r <= AFTER_PASS_TARGET)} (target <= {AFTER_PASS_TARGET:g}x) "
                    f"{_verdict(max(after) <= AFTER_PASS_TARGET)}"
                    if after
                    else "not measured"
                )
            )
    return "Targets:\n\n" + "\n".join(lines)


def _count(ratios: Sequence[float], ok: Callable[[float], bool]) -> str:
    return f"within target at {sum(1 for r in ratios if ok(r))} of {len(ratios)}"


def _faster(point: ReadPoint, kind: str) -> float | None:
    """How many times faster Spark reads `vectors` than `equality` at this point."""
    return _pick(point.reads["equality"], kind)["spark"].ratio(_pick(point.reads["vectors"], kind)["spark"])


def find_costs(sizes: Sequence[int], keys: int, repeats: int = 5) -> str:
    """The key index lookup alone (`KeyIndex.locate`, what `find_seconds` times besides reading the
    batch's keys back), on a synthetic index of each size: rows 0..n-1 in files of 1M rows, a batch
    of `keys` keys of which a fifth are live. No Spark, no table: only how the lookup scales."""
    import pyarrow as pa

    from icetide.write.key_index import KeyIndex

    rng = np.random.default_rng(1)
    rows = []
    for n in sizes:
        index = KeyIndex([1], None)
        ids = np.arange(n, dtype=np.int64)
        index.paths = [f"data-{i}.parquet" for i in range((n - 1) // 1_000_000 + 1)]
        index.rows = pa.table({"f1": ids, "file": (ids // 1_000_000).astype(np.int32), "pos": ids % 1_000_000})
        live = rng.choice(n, keys // 5, replace=False)
        batch = pa.table({"f1": np.concatenate([live, np.arange(n, n + keys - len(live))]).astype(np.int64)})
        times = []
        for _ in range(repeats + 1):
            started = time.perf_counter()
            found = index.locate(batch)
            times.append(time.perf_counter() - started)
        assert sum(len(v) for v in found.values()) == len(live)
        rows.append([f"{n:,}", f"{median(times[1:]) * 1000:.1f}", f"{index.runs.nbytes() / n * 1e6 / 2**20:.1f}"])
    del index, found, batch
    # Without this, the interpreter's exit sometimes aborts ("terminate called without an active
    # exception", pyarrow 17) while collecting the 10M-row index.
    gc.collect()
    table = render_table(["index rows", "locate ms (median)", "index MiB per million keys"], rows)
    return (
        f"The key index lookup alone (`KeyIndex.locate`) for a batch of {keys:,} keys (a fifth live), on a "
        f"synthetic index of each size (int64 keys, no Spark), median of {repeats} after a warm-up:\n\n{table}\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--keys", type=int, default=20_000)
    p.add_argument("--read-every", type=int, default=5, help="read after every Nth batch (default: 5)")
    p.add_argument("--maintain-every", default="5s", help="icetide maintain --every (default: 5s)")
    p.add_argument("--duckdb-cap", type=float, default=30.0, help="stop a DuckDB read after this many seconds")
    p.add_argument("--repeats", type=int, default=3, help="timed reads after the warm-up (default: 3)")
    p.add_argument("--maintain-log", help="also keep the maintainer's whole output in this file")
    p.add_argument(
        "--find-sizes",
        help="only time the key index lookup on synthetic indexes of these sizes (e.g. 1000000,10000000)",
    )
    args = p.parse_args()
    if args.find_sizes:
        sizes = [int(n) for n in args.find_sizes.split(",")]
        body = find_costs(sizes, args.keys)
        command = f".venv/bin/python bench/v3_stream_reads.py --find-sizes {args.find_sizes} --keys {args.keys}"
        body += f"\nCommand: `{command}`.\n"
        report("bench/v3_stream_reads.py --find-sizes: the key index lookup by table size", body, save=args.record)
        return
    body, maintain_log = in_temp_warehouse(lambda wh: run(args, wh))
    print("--- icetide maintain output (tail) ---\n" + maintain_log[-3000:])
    report(
        "bench/v3_stream_reads.py: v3 upsert tables read while the stream runs, with and without maintenance",
        body,
        save=args.record,
    )


if __name__ == "__main__":
    main()
