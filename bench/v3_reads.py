"""Benchmark: format v3 upsert tables written with equality deletes and with deletion vectors
(`deletes="vectors"`), read in Spark, DuckDB and PyIceberg, beside a compacted copy.

    .venv/bin/python bench/v3_reads.py [--rows 200000] [--batches 10] [--keys 20000] [--record]

Two v3 tables get `--rows` rows appended, then the same `--batches` upsert batches of `--keys`
keys each (20% of them update existing keys, the rest are new): `equality` through today's sink,
`vectors` through `UpsertSink(deletes="vectors")`. Reported: each sink's batch latency (median),
and full scan (count and a sum over every row) and point lookup per engine, for `equality` as
streamed, `vectors` as streamed, `equality` after folding its deletes into DVs
(`convert_equality_deletes`, what `fold_deletes: position` maintenance does on v3) and after
compaction (the compacted copy every ratio is against). Medians of 3 after a warm-up; a read over
10 s is timed once. PyIceberg refuses equality deletes.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_session, in_temp_warehouse, median, parser, render_table, report, timed

TABLE = "lake.bench.v3"
SCHEMA = "id BIGINT NOT NULL, v STRING, amount DOUBLE, seq BIGINT"


def _duckdb() -> Any:
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    con = duckdb.connect()
    for module, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
        folder = os.path.dirname(module.__file__ or "")
        path = os.path.join(folder, "extensions", f"v{duckdb.__version__}", f"{name}.duckdb_extension")
        con.execute(f"LOAD '{path}'")
    return con


def _reads(spark: Any, table: str, metadata: str, probe: int, con: Any) -> dict[str, tuple[float | None, float | None]]:
    """engine -> (full scan s, point lookup s), medians of 3 after one warm-up; None: refused."""
    from pyiceberg.expressions import EqualTo
    from pyiceberg.table import StaticTable

    def spark_scan() -> Any:
        return spark.sql(f"SELECT count(*), sum(amount) FROM {table}").collect()

    def spark_lookup() -> Any:
        return spark.sql(f"SELECT * FROM {table} WHERE id = {probe}").collect()

    def duck_scan() -> Any:
        return con.execute(f"SELECT count(*), sum(amount) FROM iceberg_scan('{metadata}')").fetchall()

    def duck_lookup() -> Any:
        return con.execute(f"SELECT * FROM iceberg_scan('{metadata}') WHERE id = {probe}").fetchall()

    def py_scan() -> Any:
        return StaticTable.from_metadata(metadata).scan(selected_fields=("id", "amount")).to_arrow()

    def py_lookup() -> Any:
        return StaticTable.from_metadata(metadata).scan(row_filter=EqualTo("id", probe)).to_arrow()

    out: dict[str, tuple[float | None, float | None]] = {}
    for engine, scan, lookup in (
        ("spark", spark_scan, spark_lookup),
        ("duckdb", duck_scan, duck_lookup),
        ("pyiceberg", py_scan, py_lookup),
    ):
        try:
            first, _ = timed(scan)
        except ValueError:  # PyIceberg: "does not yet support equality deletes"
            out[engine] = (None, None)
            continue
        once, _ = timed(lookup)
        out[engine] = (
            first if first > 10 else median([timed(scan)[0] for _ in range(3)]),
            once if once > 10 else median([timed(lookup)[0] for _ in range(3)]),
        )
    return out


def run(rows: int, batches: int, keys: int, warehouse: str) -> str:
    import icetide
    from icetide.maintenance.compaction import compact
    from icetide.maintenance.position_deletes import convert_equality_deletes
    from icetide.table.iceberg import load_table

    spark = bench_session(warehouse)
    tables = {mode: f"{TABLE}_{mode}" for mode in ("equality", "vectors")}
    sinks = {}
    for mode, name in tables.items():
        icetide.create_table(spark, name, schema=SCHEMA, key=["id"], format_version=3)
        spark.sql(f"SELECT id, 'v0' v, rand(7) amount, 0L seq FROM range({rows})").writeTo(name).append()
        sinks[mode] = icetide.UpsertSink(spark, name, pipeline_id="bench", order_by="seq", deletes=mode)
    rng = random.Random(1)
    next_id = rows
    latency: dict[str, list[float]] = {"equality": [], "vectors": []}
    for b in range(1, batches + 1):
        updates = rng.sample(range(next_id), keys // 5)
        ids = updates + list(range(next_id, next_id + keys - len(updates)))
        next_id += keys - len(updates)
        df = spark.createDataFrame([(i, f"v{b}", rng.random(), b, None) for i in ids], f"{SCHEMA}, _op STRING").cache()
        df.count()
        for mode, sink in sinks.items():
            latency[mode].append(sink.write(df, batch_id=b).total_seconds)
        df.unpersist()
        print(f"batch {b}: equality {latency['equality'][-1]:.2f}s, vectors {latency['vectors'][-1]:.2f}s", flush=True)

    def metadata(name: str) -> str:
        jtable = load_table(spark, name)
        jtable.refresh()
        return str(jtable.operations().current().metadataFileLocation())

    def reads(name: str) -> dict[str, tuple[float | None, float | None]]:
        spark.sql(f"REFRESH TABLE {name}")
        return _reads(spark, name, metadata(name), probe, con)

    con = _duckdb()
    probe = rng.randrange(rows)
    eq, vec = tables["equality"], tables["vectors"]
    states: list[tuple[str, dict[str, tuple[float | None, float | None]], str]] = []
    states.append(("equality, as streamed", reads(eq), ""))
    states.append(("vectors, as streamed", reads(vec), ""))
    seconds, converted = timed(lambda: convert_equality_deletes(spark, eq))
    states.append(
        ("equality, deletes folded into DVs", reads(eq), f"{converted.position_files_added} DVs, {seconds:.1f}s")
    )
    seconds, compacted = timed(lambda: compact(spark, eq, min_input_files=2))
    states.append(("compacted", reads(eq), f"{compacted.files_added} files, {seconds:.1f}s"))
    spark.stop()
    base = states[-1][1]

    def cell(value: float | None, ref: float | None) -> str:
        if value is None:
            return "refused"
        return f"{value:.2f}" + (f" ({value / ref:.1f}x)" if ref else "")

    table_rows = []
    for name, reads, note in states:
        row = [name]
        for engine in ("spark", "duckdb", "pyiceberg"):
            scan, lookup = reads[engine]
            row += [cell(scan, base[engine][0]), cell(lookup, base[engine][1])]
        table_rows.append([*row, note])
    table = render_table(
        [
            "table state",
            "Spark scan s",
            "Spark lookup s",
            "DuckDB scan s",
            "DuckDB lookup s",
            "PyIceberg scan s",
            "PyIceberg lookup s",
            "maintenance",
        ],
        table_rows,
    )
    eq_latency, vec_latency = median(latency["equality"]), median(latency["vectors"])
    return (
        f"{rows:,} rows appended, then {batches} upsert batches of {keys:,} keys (20% updates) through UpsertSink "
        f"into two format v3 tables, `deletes=equality` and `deletes=vectors`; each state read in Spark "
        f"3.5.7/Iceberg 1.10.2, DuckDB 1.5.5 and PyIceberg 0.12.0 (in brackets: times the compacted state):\n\n"
        f"{table}\n\n- batch latency (write + commit, median): equality {eq_latency:.2f}s, vectors "
        f"{vec_latency:.2f}s ({vec_latency / eq_latency:.2f}x)\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--keys", type=int, default=20_000)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.rows, args.batches, args.keys, wh))
    report(
        "bench/v3_reads.py: v3 upserts with equality deletes and with deletion vectors, read by three engines",
        body,
        save=args.record,
    )


if __name__ == "__main__":
    main()
