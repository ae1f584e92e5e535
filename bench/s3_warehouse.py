"""Benchmark: the same landing files ingested and upserted into a warehouse on local disk and on S3.

    .venv/bin/python bench/s3_warehouse.py [--events 1000000] [--files 40] [--max-files 4] [--rounds 1] [--record]

Lands `events` JSON events of about 200 bytes (bench/ingest.py's `event`) in `files` files on local
disk, then in each round drains them four times through the runner, each into its own table:
append and upsert, into a JDBC catalog (SQLite) whose warehouse is a local folder, and into one
whose warehouse is on an S3 API server (moto's, bench/s3_counting_server.py, its own process on
127.0.0.1). Both catalogs are in one Spark session, so the pipelines alternate within a round and
a noisy neighbour hits them alike. Reported: rows/s of wall time, batches, each table's format
version and delete mode (today's defaults: v3, upserts with deletion vectors), the machine's load
average, and for S3 the requests per batch by kind (PUT, GET, HEAD, LIST, DELETE), what object
storage bills, then by the object they name (data, equality deletes, deletion vectors,
manifests, table metadata, key index copies). The S3 server runs on this machine, so its latency
is far below a real store's; the request counts carry over, the times do not.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, parser, render_table, report
from bench.ingest import SCHEMA
from bench.ingest_files import land
from bench.s3_counting_server import COUNTS_PATH

KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")
KEY_ID, SECRET, REGION = "bench-key", "bench-secret", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def counts(endpoint: str, *, reset: bool = False) -> dict[str, int]:
    """The server's request counts so far; with `reset`, zeroed after reading."""
    request = urllib.request.Request(endpoint + COUNTS_PATH, method="POST" if reset else "GET")
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read()))


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("s3_counting_server.py")), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            counts(f"http://127.0.0.1:{port}")
            return proc
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the S3 server did not start") from None
            time.sleep(0.2)


def catalogs(work: Path, endpoint: str) -> dict[str, dict[str, str]]:
    """catalog name -> its options: `local` on a folder, `s3` on the bucket `bench`."""
    s3 = {
        "s3.endpoint": endpoint,
        "s3.path-style-access": "true",
        "s3.access-key-id": KEY_ID,
        "s3.secret-access-key": SECRET,
        "client.region": REGION,
    }
    return {
        "local": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 'local.db'}", "warehouse": str(work / "warehouse")},
        "s3": {"type": "jdbc", "uri": f"jdbc:sqlite:{work / 's3.db'}", "warehouse": "s3://bench/warehouse", **s3},
    }


def pipeline(name: str, catalog: str, options: dict[str, str], folder: Path, mode: str, max_files: int) -> Any:
    from icetide.config.pipeline import PipelineConfig

    return PipelineConfig.from_dict(
        {
            "pipeline": name,
            "catalog": options,
            "source": {"files": {"path": str(folder), "format": "json", "min_age_seconds": 0.001}},
            "table": {
                "name": f"{catalog}.bench.{name}",
                "schema": SCHEMA,
                "key": ["event_id", "event_time"],
                "partition_by": ["hours(event_time)"],
            },
            "mode": mode,
            "trigger": {"interval": "1s", "max_files": max_files},
            "dead_letter": f"{catalog}.bench.{name}_dead_letter",
        }
    )


def drain(spark: Any, config: Any) -> tuple[float, int, int]:
    """(wall seconds, rows committed, batches) of one drain of the folder."""
    from icetide.pipeline.table_runner import Runner

    runner = Runner(config, spark)
    started = time.perf_counter()
    summary = runner.run(once=True, handle_signals=False)
    wall = time.perf_counter() - started
    runner.close()
    return wall, summary.rows_written, len(summary.batches)


def table_kind(spark: Any, table: str, mode: str) -> str:
    """The table's format version and, for upserts, how it deletes replaced rows: `v3 vectors`."""
    from icetide.table.delete_modes import DELETES_OF_UNMARKED_TABLES, DELETES_PROPERTY
    from icetide.table.iceberg import format_version, load_table

    jtable = load_table(spark, table)
    if mode != "upsert":
        return f"v{format_version(jtable)}"
    deletes = jtable.properties().get(DELETES_PROPERTY) or DELETES_OF_UNMARKED_TABLES
    return f"v{format_version(jtable)} {deletes}"


def run(events: int, files: int, max_files: int, rounds: int, work: Path) -> str:
    import icetide
    from icetide.catalog.settings import catalog_conf

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = start_server(port)
    try:
        import boto3

        boto3.client(
            "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET
        ).create_bucket(Bucket="bench")
        options = catalogs(work, endpoint)
        folder = work / "landing"
        land(folder, events, files)
        spark = icetide.spark_session(
            warehouse=None,
            catalog="s3",
            catalog_options=options["s3"],
            master="local[*]",
            conf={
                "spark.driver.memory": "8g",
                "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
                **catalog_conf("local", warehouse=None, options=options["local"]),
            },
        )
        drain(spark, pipeline("warmup", "local", options["local"], folder, "append", files))
        results: dict[tuple[str, str], list[tuple[float, int, dict[str, int]]]] = {}
        kinds: dict[tuple[str, str], str] = {}
        loads = [os.getloadavg()[0]]  # other work shares the machine: say how busy it was
        for r in range(rounds):
            for mode in ("append", "upsert"):
                for catalog in ("local", "s3"):
                    counts(endpoint, reset=True)
                    name = f"{mode}_{catalog}_{r}"
                    wall, rows, batches = drain(
                        spark, pipeline(name, catalog, options[catalog], folder, mode, max_files)
                    )
                    assert rows == events, f"{name} wrote {rows} rows of {events}"
                    requests = counts(endpoint)
                    loads.append(os.getloadavg()[0])
                    results.setdefault((mode, catalog), []).append((events / wall, batches, requests))
                    kinds[mode, catalog] = table_kind(spark, f"{catalog}.bench.{name}", mode)
                    billed = {k: requests[k] for k in KINDS if k in requests}
                    print(f"round {r + 1} {mode} {catalog}: {events / wall:,.0f} rows/s, {batches} batches, {billed}")
        spark.stop()
    finally:
        server.terminate()
        server.wait()
    rows = []
    for (mode, catalog), runs in results.items():
        batches = runs[-1][1]
        per_batch = [
            f"{median([r[2].get(k, 0) / max(1, r[1]) for r in runs]):,.1f}" if catalog == "s3" else "-" for k in KINDS
        ]
        rows.append([mode, catalog, kinds[mode, catalog], f"{median([r[0] for r in runs]):,.0f}", batches, *per_batch])
    table = render_table(["mode", "warehouse", "table", "rows/s", "batches", *(f"{k}/batch" for k in KINDS)], rows)
    by_object = []
    for (mode, catalog), runs in results.items():
        if catalog != "s3":
            continue
        objects = sorted({k.partition(" ")[2] for r in runs for k in r[2] if " " in k})
        for what in objects:
            per_batch = [median([r[2].get(f"{k} {what}", 0) / max(1, r[1]) for r in runs]) for k in KINDS]
            by_object.append([mode, what, *(f"{n:,.1f}" if n else "-" for n in per_batch)])
    objects_table = render_table(["mode", "object", *(f"{k}/batch" for k in KINDS)], by_object)
    return (
        f"`bench/s3_warehouse.py --events {events} --files {files} --max-files {max_files} --rounds {rounds}`: "
        f"{events:,} events of about 200 bytes in {files} local files, {events // files * max_files:,} per batch, "
        f"into a JDBC catalog (SQLite) on a local folder and on moto's S3 server on 127.0.0.1 (requests counted "
        f"by the server, table creation included). Load average (1 min) of the machine, shared with other "
        f"work, from {min(loads):.1f} to {max(loads):.1f} over the drains.\n\n{table}\n\n"
        f"The S3 requests per batch by the object they name (bench/s3_counting_server.py `what`; table "
        f"metadata, manifests and the dead-letter table's metadata included):\n\n{objects_table}"
    )


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--files", type=int, default=40)
    p.add_argument("--max-files", type=int, default=4)
    p.add_argument("--rounds", type=int, default=1)
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="icetide-bench-s3-"))
    try:
        body = run(args.events, args.files, args.max_files, args.rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report("bench/s3_warehouse.py: ingest and upsert, warehouse on local disk and on S3", body, save=args.record)


if __name__ == "__main__":
    main()
