"""`icetide catalog serve`: the lake over the Iceberg REST protocol, and the lake read without Spark.

- A table icetide wrote (upserts and deletes: equality deletes) reads the same as the reference
  model in Spark, PyIceberg and DuckDB, from the embedded warehouse directly and through the REST
  server; PyIceberg refuses equality deletes, so it reads after a maintenance pass folds them.
- Pipelines on `catalog: {type: rest, uri: ...}`: `icetide run` exactly once through a SIGKILL
  with `icetide maintain` beside it and `icetide status`, against a server that requires a
  bearer token; the token never reaches any output.
- A whole database synced from Kafka through the server, its warehouse on S3.
- Two processes racing commits to one table through the server, and a third beside them on the
  server's warehouse directly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from icetide.catalog.settings import COMMIT_LOCK_IMPL
from icetide.config.pipeline import PipelineConfig
from icetide.maintenance.maintain import maintain
from icetide.pipeline.table_runner import Runner
from icetide.table.iceberg import load_table
from tests.commands import ROOT, catalog_reader, run_cli, stop_with_signal
from tests.kafka_broker import create_topic, produce
from tests.lake_readers import duckdb_rows, duckdb_with_iceberg, pyiceberg_rows
from tests.model import table_rows
from tests.s3_server import S3Server
from tests.test_commit_lock import race
from tests.test_db_sync import changes, inventory_streams, model_of, rows_of, same, unique
from tests.test_db_sync import pipeline_doc as sync_doc
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

TOKEN_ENV = "ICETIDE_T_REST_TOKEN"


@contextmanager
def served(*args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`icetide catalog serve ARGS --port 0` as a user runs it; yields the URI it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "catalog", "serve", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        assert proc.stdout is not None
        uri = proc.stdout.readline().strip()
        assert uri.startswith("http://127.0.0.1:"), proc.communicate(timeout=30)[1][-3000:]
        yield uri
    finally:
        try:
            _, err = stop_with_signal(proc, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err[-3000:]


def test_the_lake_reads_the_same_in_spark_pyiceberg_and_duckdb(spark: Any, warehouse: str, tmp_path: Path) -> None:
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.table import StaticTable

    lines, _ = land_files(tmp_path / "landing", 3, seed=77)
    doc = pipeline_doc("readers", tmp_path / "landing")
    doc["trigger"] = {"interval": "1s", "max_files": 1}  # a batch a file: later batches delete earlier rows
    config = PipelineConfig.from_dict(doc)
    Runner(config, spark).run(once=True, handle_signals=False)
    want = expected(lines)
    location = str(load_table(spark, config.table.name).location()).removeprefix("file:")
    with duckdb_with_iceberg() as con:  # DuckDB applies equality deletes: no maintenance needed
        assert duckdb_rows(con, f"iceberg_scan('{location}')", COLUMNS, KEY) == want

    report = maintain(spark, config.table.name)
    deletes = spark.sql(f"SELECT count(*) FROM {config.table.name}.delete_files WHERE content = 2").first()[0]
    assert deletes == 0, report.lines()  # folded away
    # The embedded warehouse, directly: the table's folder (its version hint names the metadata).
    assert pyiceberg_rows(StaticTable.from_metadata(location), COLUMNS, KEY) == want

    with served("--warehouse", warehouse) as uri:
        catalog = RestCatalog("lake", uri=uri)
        assert ("runner",) in catalog.list_namespaces()
        assert pyiceberg_rows(catalog.load_table("runner.readers"), COLUMNS, KEY) == want
        with duckdb_with_iceberg() as con:
            con.execute(f"ATTACH '' AS served (TYPE iceberg, ENDPOINT '{uri}', AUTHORIZATION_TYPE 'none')")
            assert duckdb_rows(con, "served.runner.readers", COLUMNS, KEY) == want
        reader = catalog_reader(spark, "served", {"type": "rest", "uri": uri})
        assert table_rows(reader, "served.runner.readers", COLUMNS, KEY) == want
        # A second server on the same port says why it cannot start, in one line.
        taken = run_cli("catalog", "serve", "--warehouse", warehouse, "--port", uri.rsplit(":", 1)[1])
        assert taken.returncode == 1
        why = "icetide: error: catalog serve: the server did not start: BindException: Address already in use"
        assert taken.stderr.strip() == why, taken.stderr


def test_run_exactly_once_through_kill_9_with_maintain_beside_it(spark: Any, tmp_path: Path, monkeypatch: Any) -> None:
    """As tests/test_catalog_postgres.py, through a REST server on a fresh embedded warehouse that
    wants a bearer token: the runner killed after its second commit, the restart holding each
    batch for 3 s while `icetide maintain` runs in another process; then `icetide status`."""
    token = "tok-Xb71-never-printed"
    monkeypatch.setenv(TOKEN_ENV, token)
    lines, bad = land_files(tmp_path / "landing", 4, seed=43)
    with served("--warehouse", str(tmp_path / "warehouse"), env={"ICETIDE_CATALOG_TOKEN": token}) as uri:
        options = {"type": "rest", "uri": uri, "token": token}
        doc = pipeline_doc("restrun", tmp_path / "landing")
        doc["catalog"] = {**options, "token": "${" + TOKEN_ENV + "}"}
        doc["trigger"] = {"interval": "1s", "max_files": 1}
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(doc))
        crashed = run_cli(
            "run", str(path), "--once", env={"ICETIDE_CRASH_AT": "after_commit", "ICETIDE_CRASH_BATCH": "2"}
        )
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
            out, err = restart.communicate(timeout=300)
        finally:
            if restart.poll() is None:
                restart.kill()
        assert restart.returncode == 0, err[-3000:]
        assert maintained.returncode == 0, maintained.stderr[-3000:]
        batches = [json.loads(line)["batch_id"] for line in out.splitlines() if line.startswith("{")]
        assert batches == [3, 4], batches  # batch 2 had committed: nothing twice

        reader = catalog_reader(spark, "restcheck", options)
        assert table_rows(reader, "restcheck.runner.restrun", COLUMNS, KEY) == expected(lines)
        dead = [r["source_position"] for r in reader.table("restcheck.runner.restrun_dead_letter").collect()]
        assert len(dead) == len(set(dead)) == bad
        status = run_cli("status", "--pipeline", str(path), "--json")
        assert status.returncode == 0, status.stderr[-3000:]
        assert [(p["pipeline_id"], p["batch_id"]) for p in json.loads(status.stdout)["pipelines"]] == [("restrun", 4)]
        # Without the token the server refuses, and the command says so in one line.
        refused = run_cli(
            "status", "lake.runner.restrun", "--catalog-option", "type=rest", "--catalog-option", f"uri={uri}"
        )
        assert refused.returncode == 1, refused.stderr[-3000:]
        line = refused.stderr.strip()
        assert line.startswith("icetide: error: catalog: cannot open catalog 'lake': ") and len(line.splitlines()) == 1
        assert "NotAuthorizedException: Not authorized: missing or wrong bearer token" in line, line
    for done in (crashed, maintained, status):
        assert token not in done.stdout + done.stderr
    assert token not in out + err
    assert "'spark.sql.catalog.lake.token': '***'" in maintained.stderr  # -v logs the settings, redacted


def test_processes_through_the_server_and_beside_it_lose_no_commit(spark: Any, tmp_path: Path) -> None:
    """Two processes append to one table through one server as fast as they can while a third
    commits to the server's warehouse directly (its renames slowed, so every overlap races): a
    commit that loses a race through the server gets a 409 and is retried by its client, and the
    server takes icetide's commit lock as the direct session does, so every commit is in the
    history once and the table holds exactly their rows."""
    warehouse = tmp_path / "warehouse"
    with served("--warehouse", str(warehouse)) as uri:
        embedded = {"type": "hadoop", "warehouse": str(warehouse), "lock-impl": COMMIT_LOCK_IMPL}
        reader = catalog_reader(spark, "lake", embedded)
        rest = {"type": "rest", "uri": uri}
        result = race(
            reader, str(warehouse), "lake.race.t", tmp_path, plain=False, commits=15, mixed=[rest, rest, None]
        )
    assert len(result["reported"]) == 45
    assert all(c["ok"] for c in result["reported"]), [c for c in result["reported"] if not c["ok"]][:3]
    assert sorted(result["history"]) == sorted(c["tag"] for c in result["reported"])
    assert result["rows"] == sum(c["rows"] for c in result["reported"])


def test_a_database_synced_from_kafka_through_the_server(
    spark: Any, kafka_broker: str, s3: S3Server, tmp_path: Path
) -> None:
    """Two Debezium topics into one table each, the tables created and committed through the
    server, whose warehouse is on S3 (a JDBC catalog on SQLite behind it): each table equals its
    source, and `icetide status` lists them with no lag. The clients bring the S3 settings."""
    prefix, namespace = f"rs{unique()}", f"restsync{unique()}"
    streams = {t: s for t, s in inventory_streams().items() if t != "products"}
    records = {t: changes(s, seed=30 + i, count=12) for i, (t, s) in enumerate(sorted(streams.items()))}
    for t, recs in records.items():
        create_topic(kafka_broker, name=f"{prefix}.inventory.{t}")
        produce(kafka_broker, f"{prefix}.inventory.{t}", recs)
    behind = {
        "type": "jdbc",
        "uri": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        "warehouse": f"s3://{s3.new_bucket()}/warehouse",
        **s3.catalog_options(),
    }
    server_file = tmp_path / "served.yaml"
    server_file.write_text(yaml.safe_dump(sync_doc("restsync", kafka_broker, prefix, namespace, catalog=behind)))
    with served("--pipeline", str(server_file)) as uri:
        options = {"type": "rest", "uri": uri, **s3.catalog_options()}
        doc = sync_doc("restsync", kafka_broker, prefix, namespace, catalog=options)
        doc["trigger"] = {"interval": "1s", "max_records": 10}
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump(doc))
        ran = run_cli("run", str(path), "--once")
        assert ran.returncode == 0, ran.stderr[-3000:]
        reader = catalog_reader(spark, "restsync", options)
        keys = {"orders": "order_number", "customers": "id"}
        for t in streams:
            assert same(rows_of(reader, f"restsync.{namespace}.{t}", keys[t]), model_of(records[t])), t
        status = run_cli("status", "--pipeline", str(path), "--json")
        assert status.returncode == 0, status.stderr[-3000:]
        listed = {s["table"]: s for s in json.loads(status.stdout)}
        assert all(listed[f"lake.{namespace}.{t}"]["lag"] == 0 for t in streams), listed
        location = str(load_table(reader, f"restsync.{namespace}.orders").location())
        assert location.startswith(behind["warehouse"] + "/"), location
