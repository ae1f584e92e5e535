"""Warehouses on S3, against a real S3 API server in its own process (tests/s3_server.py).

- Iceberg's JDBC catalog on PostgreSQL with an `s3://` warehouse, fed by landing files that are
  themselves on S3 (written `s3a://`, as Hadoop users write them): `icetide run` exactly once
  through a SIGKILL with `icetide maintain` beside it in another process, the dead letters once,
  `icetide status`; the catalog served over REST (`icetide catalog serve`) and read by DuckDB.
- Maintenance beside a stream on S3: orphan removal while a batch's files are written but not
  committed keeps them (and deletes a real orphan), then compaction, delete folding and expiry;
  PyIceberg and DuckDB read the tables straight from S3, as docs/object_stores.md shows.
- A whole database synced from Kafka into the S3 warehouse.

S3 keys come from the catalog options (in the pipeline file, the secret from the environment)
and never reach any output.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from icetide.filesystems import S3Settings, filesystem_for, use_s3_settings
from icetide.maintenance.maintain import maintain
from icetide.maintenance.orphans import remove_orphan_files
from icetide.table.iceberg import load_table
from tests.commands import ROOT, catalog_reader, communicate, run_cli
from tests.lake_readers import duckdb_rows, duckdb_with_iceberg, pyiceberg_rows
from tests.model import table_rows
from tests.postgres_server import USER, PostgresServer
from tests.s3_server import REGION, S3Server
from tests.test_catalog_rest import served
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

SECRET_ENV = "ICETIDE_T_S3_SECRET"
PASSWORD_ENV = "ICETIDE_T_PG_PASSWORD"


def s3_catalog(postgres: PostgresServer, s3: S3Server, bucket: str) -> dict[str, str]:
    """A JDBC catalog in a new database of the test PostgreSQL, its warehouse in `bucket`."""
    return {
        "type": "jdbc",
        "uri": postgres.uri(postgres.new_database()),
        "jdbc.user": USER,
        "jdbc.password": postgres.password,
        "warehouse": f"s3://{bucket}/warehouse",
        **s3.catalog_options(),
    }


def in_file(options: dict[str, str]) -> dict[str, str]:
    """The catalog block of a pipeline file: the secrets read from the environment."""
    return {**options, "jdbc.password": "${" + PASSWORD_ENV + "}", "s3.secret-access-key": "${" + SECRET_ENV + "}"}


def upload(s3: S3Server, bucket: str, folder: Path, prefix: str) -> None:
    """Every file of `folder` to s3://bucket/prefix/<name>."""
    client = s3.client()
    for path in sorted(folder.iterdir()):
        client.upload_file(str(path), bucket, f"{prefix}/{path.name}")


def duckdb_s3_secret(con: Any, s3: S3Server) -> None:
    """DuckDB's httpfs reaches the test server (the snippet of docs/object_stores.md)."""
    con.execute(
        f"""CREATE SECRET (TYPE s3, KEY_ID '{s3.access_key}', SECRET '{s3.secret_key}', REGION '{REGION}',
        ENDPOINT '{s3.endpoint.removeprefix("http://")}', URL_STYLE 'path', USE_SSL false)"""
    )


def test_run_on_s3_exactly_once_through_kill_9_with_maintain_beside_it(
    spark: Any, postgres: PostgresServer, s3: S3Server, tmp_path: Path, monkeypatch: Any
) -> None:
    """The runner, reading landing files on S3, is killed right after its second commit; the
    restart lands the rest while `icetide maintain` runs beside it in another process. The table
    equals the model, each bad record is in the dead-letter table once, `icetide status` shows
    the last batch, and DuckDB reads the table through `icetide catalog serve`."""
    monkeypatch.setenv(PASSWORD_ENV, postgres.password)
    monkeypatch.setenv(SECRET_ENV, s3.secret_key)
    bucket = s3.new_bucket()
    options = s3_catalog(postgres, s3, bucket)
    lines, bad = land_files(tmp_path / "landing", 4, seed=47)
    upload(s3, bucket, tmp_path / "landing", "landing")
    doc = pipeline_doc("s3run", tmp_path / "landing")
    doc["source"]["files"]["path"] = f"s3a://{bucket}/landing"
    doc["catalog"] = in_file(options)
    doc["trigger"] = {"interval": "1s", "max_files": 1}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))

    crashed = run_cli("run", str(path), "--once", env={"ICETIDE_CRASH_AT": "after_commit", "ICETIDE_CRASH_BATCH": "2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    restart = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "run", str(path), "--once"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ICETIDE_PAUSE_AT": "after_write", "ICETIDE_PAUSE_SECONDS": "3"},
    )
    try:
        maintained = run_cli("-v", "maintain", "--pipeline", str(path), "--no-progress")
        out, err = communicate(restart, 300)
    finally:
        if restart.poll() is None:
            restart.kill()
    assert restart.returncode == 0, err[-3000:]
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    batches = [json.loads(line)["batch_id"] for line in out.splitlines() if line.startswith("{")]
    assert batches == [3, 4], batches  # batch 2 had committed: nothing twice
    assert "lake.runner.s3run: done in" in maintained.stderr

    reader = catalog_reader(spark, "lake", options)
    assert table_rows(reader, "lake.runner.s3run", COLUMNS, KEY) == expected(lines)
    dead = [r["source_position"] for r in reader.table("lake.runner.s3run_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == bad
    files = [r[0] for r in reader.sql("SELECT file_path FROM lake.runner.s3run.files").collect()]
    assert files and all(f.startswith(f"s3://{bucket}/warehouse/runner/s3run/") for f in files), files[:3]
    assert not os.path.exists(ROOT / "s3:") and not os.path.exists(ROOT / bucket)  # nothing went to a local folder

    status = run_cli("status", "--pipeline", str(path), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    assert [(p["pipeline_id"], p["batch_id"]) for p in json.loads(status.stdout)["pipelines"]] == [("s3run", 4)]
    with served("--pipeline", str(path)) as uri, duckdb_with_iceberg() as con:
        duckdb_s3_secret(con, s3)
        con.execute(f"ATTACH '' AS served (TYPE iceberg, ENDPOINT '{uri}', AUTHORIZATION_TYPE 'none')")
        assert duckdb_rows(con, "served.runner.s3run", COLUMNS, KEY) == expected(lines)
    for done in (crashed, maintained, status):
        for secret in (s3.secret_key, postgres.password):
            assert secret not in done.stdout + done.stderr
    assert s3.secret_key not in out + err
    assert "'spark.sql.catalog.lake.s3.secret-access-key': '***'" in maintained.stderr  # -v logs settings, redacted


def test_orphan_removal_on_s3_keeps_a_batch_in_flight_and_maintenance_folds_beside_the_stream(
    spark: Any, postgres: PostgresServer, s3: S3Server, tmp_path: Path
) -> None:
    """While a runner holds its second batch's files written but not committed, orphan removal
    with no age limit lists the table on S3: it keeps those files and deletes a planted orphan.
    The runner then commits them; maintenance compacts, folds the equality deletes and expires
    snapshots; PyIceberg and DuckDB, reading straight from S3, see the model."""
    from pyiceberg.catalog import load_catalog

    bucket = s3.new_bucket()
    options = s3_catalog(postgres, s3, bucket)
    lines, _ = land_files(tmp_path / "landing", 3, seed=48)
    doc = pipeline_doc("s3orphans", tmp_path / "landing")
    doc["catalog"] = options
    doc["trigger"] = {"interval": "1s", "max_files": 1}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    runner = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "run", str(path), "--once"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "ICETIDE_PAUSE_AT": "after_write", "ICETIDE_PAUSE_SECONDS": "4"},
    )
    table = "lake.runner.s3orphans"
    prefix = "warehouse/runner/s3orphans/data/"
    try:
        assert runner.stdout is not None
        first = runner.stdout.readline()  # batch 1 committed; batch 2 is being written
        assert first.startswith("{"), first
        deadline = time.monotonic() + 60
        while not any("-b000000000002-" in k for k in s3.keys(bucket, prefix)):
            assert time.monotonic() < deadline, "batch 2 wrote no file"
            time.sleep(0.2)
        reader = catalog_reader(spark, "lake", options)
        use_s3_settings(S3Settings.from_catalog(options))  # this process's own listing reaches the server
        orphan = f"s3://{bucket}/{prefix}00000-crashed-elsewhere.parquet"
        fs, orphan_path = filesystem_for(orphan)
        with fs.open_output_stream(orphan_path) as f:
            f.write(b"not referenced by any snapshot")
        result = remove_orphan_files(reader, table, older_than=timedelta(0), dry_run=False)
        _, err = communicate(runner, 300)
    finally:
        if runner.poll() is None:
            runner.kill()
        use_s3_settings(None)
    assert runner.returncode == 0, err[-3000:]
    assert result.orphans == (orphan,), result
    assert result.in_flight and all("-b000000000002-" in f for f in result.in_flight), result
    assert not any(k.endswith("crashed-elsewhere.parquet") for k in s3.keys(bucket, prefix))

    want = expected(lines)
    assert table_rows(reader, table, COLUMNS, KEY) == want
    report = maintain(reader, table)
    deletes = reader.sql(f"SELECT count(*) FROM {table}.delete_files WHERE content = 2").first()[0]
    assert deletes == 0, report.lines()  # folded away
    assert table_rows(reader, table, COLUMNS, KEY) == want

    # PyIceberg through `icetide catalog serve`, the files straight from S3 (docs/object_stores.md).
    with served("--pipeline", str(path)) as uri:
        rest = load_catalog(
            "served",
            type="rest",
            uri=uri,
            **{
                "s3.endpoint": s3.endpoint,
                "s3.access-key-id": s3.access_key,
                "s3.secret-access-key": s3.secret_key,
                "s3.region": REGION,
                "s3.force-virtual-addressing": "false",
            },
        )
        assert pyiceberg_rows(rest.load_table("runner.s3orphans"), COLUMNS, KEY) == want
    location = str(load_table(reader, table).location())
    metadata_file = str(load_table(reader, table).operations().current().metadataFileLocation())
    assert metadata_file.startswith(location)
    with duckdb_with_iceberg() as con:
        duckdb_s3_secret(con, s3)
        assert duckdb_rows(con, f"iceberg_scan('{metadata_file}')", COLUMNS, KEY) == want
