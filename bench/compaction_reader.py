"""Benchmark: compaction with Iceberg's row reader (what icetide uses) against its vectorized reader.

    .venv/bin/python bench/compaction_reader.py [--rows 2000000] [--rounds 3] [--record]

icetide's compaction reads its groups with `vectorization-enabled: false`: Iceberg 1.10's
vectorized read of a rewrite's task set keeps JVM direct memory it never frees (docs/design.md).
This measures what that costs. Each round builds two identical format v3 tables (`--rows` rows in
8 files, then 5 upsert batches of 20k keys through `deletes="vectors"`) and compacts every file of
each into one, one table with each reader (the vectorized one by overriding the read option),
alternating; medians over the rounds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    UPSERT_SCHEMA,
    UpsertBatches,
    bench_session,
    in_temp_warehouse,
    median,
    parser,
    render_table,
    report,
)

READERS = ("row", "vectorized")


def run(rows: int, rounds: int, warehouse: str) -> str:
    from pyspark.sql import readwriter

    import icetide
    from icetide.maintenance.compaction import compact

    spark = bench_session(warehouse)
    plain = readwriter.DataFrameReader.option
    vectorized = {"on": False}

    def option(self: Any, key: str, value: Any) -> Any:  # compaction's read, turned back to vectorized
        if key == "vectorization-enabled" and vectorized["on"]:
            value = "true"
        return plain(self, key, value)

    readwriter.DataFrameReader.option = option  # type: ignore[method-assign]
    times: dict[str, list[float]] = {r: [] for r in READERS}
    for n in range(rounds):
        for reader in READERS if n % 2 == 0 else READERS[::-1]:
            name = f"lake.bench.compact_{reader}_{n}"
            icetide.create_table(spark, name, schema=UPSERT_SCHEMA, key=["id"], format_version=3)
            UpsertBatches.initial(spark, rows).repartition(8).writeTo(name).append()
            sink = icetide.UpsertSink(spark, name, pipeline_id="bench", order_by="seq", deletes="vectors")
            stream = UpsertBatches(rows, 20_000)
            for b in range(1, 6):
                sink.write(stream.batch(spark, b), batch_id=b)
            vectorized["on"] = reader == "vectorized"
            started = time.perf_counter()
            result = compact(spark, name, min_input_files=2, target_file_size=2**36, min_file_size=2**35)
            times[reader].append(time.perf_counter() - started)
            assert result.groups == 1, result
            print(f"round {n + 1}: {reader} {times[reader][-1]:.2f}s", flush=True)
    readwriter.DataFrameReader.option = plain  # type: ignore[method-assign]
    spark.stop()
    table = render_table(
        ["reader", "compaction s (median)", "runs"],
        [[r, f"{median(times[r]):.2f}", " ".join(f"{t:.2f}" for t in times[r])] for r in READERS],
    )
    ratio = median(times["row"]) / median(times["vectorized"])
    return (
        f"{rows:,} rows in 8 files plus 5 upsert batches of 20,000 keys (DVs), every file compacted into one, "
        f"{rounds} rounds alternating the order:\n\n{table}\n\nRow reader / vectorized: {ratio:.2f}x. "
        f"Command: `.venv/bin/python bench/compaction_reader.py --rows {rows} --rounds {rounds}`.\n"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    body = in_temp_warehouse(lambda wh: run(args.rows, args.rounds, wh))
    report("bench/compaction_reader.py: compaction's row reader against the vectorized one", body, save=args.record)


if __name__ == "__main__":
    main()
