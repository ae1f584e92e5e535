"""Pipelines on Iceberg's JDBC catalog on a real PostgreSQL server (tests/postgres_server.py):
`icetide run` exactly once through a SIGKILL, `icetide maintain` beside it in another process,
`icetide status`, `icetide catalog serve --pipeline` read by DuckDB, a whole database synced
from Kafka, and two processes committing to one table without losing a commit. The catalog's
password comes from the environment and never reaches any output. Tables are compared with the
reference models of the runner and sync tests.

The kill test and the database sync keep their warehouse on the S3 server (tests/s3_server.py:
S3FileIO for Iceberg, pyarrow for icetide's own files), the kill test's landing files too, and
the kill test checks its deletion vectors and the key index's copy there; the commit race keeps
a local folder, so both kinds of warehouse stay covered."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from icetide.errors import ConfigError, DependencyError
from icetide.spark.jars import jdbc_driver_jar
from icetide.table.delete_modes import DELETES_PROPERTY
from icetide.table.iceberg import format_version, load_table
from icetide.write.key_index_copy import COPIES_KEPT, COPY_EVERY_BATCHES, COPY_FOLDER
from tests.commands import ROOT, catalog_reader, crash_tour, run_cli
from tests.kafka_broker import create_topic, produce
from tests.lake_readers import duckdb_rows, duckdb_with_iceberg
from tests.model import table_rows
from tests.postgres_server import USER, PostgresServer
from tests.s3_server import S3Server, duckdb_s3_secret, duckdb_statement, upload
from tests.test_catalog_rest import served
from tests.test_commit_lock import race
from tests.test_db_sync import changes, inventory_streams, model_of, rows_of, same, unique
from tests.test_db_sync import pipeline_doc as sync_doc
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc

PASSWORD_ENV = "ICETIDE_T_PG_PASSWORD"
S3_SECRET_ENV = "ICETIDE_T_S3_SECRET"


def jdbc_options(postgres: PostgresServer, warehouse: Path | str, s3: S3Server | None = None) -> dict[str, str]:
    """A JDBC catalog in a new database of the test server, its files in `warehouse` (a folder,
    or an s3:// location of `s3`, with the options that reach it)."""
    return {
        "type": "jdbc",
        "uri": postgres.uri(postgres.new_database()),
        "jdbc.user": USER,
        "jdbc.password": postgres.password,
        "warehouse": str(warehouse),
        **(s3.catalog_options() if s3 else {}),
    }


def in_file(options: dict[str, str]) -> dict[str, str]:
    """The catalog block of a pipeline file: the password (and S3 secret key) read from the environment."""
    secrets = {"jdbc.password": "${" + PASSWORD_ENV + "}"}
    if "s3.secret-access-key" in options:
        secrets["s3.secret-access-key"] = "${" + S3_SECRET_ENV + "}"
    return {**options, **secrets}


def assert_no_secret(password: str, *outputs: subprocess.CompletedProcess[str] | str) -> None:
    for out in outputs:
        text = out if isinstance(out, str) else out.stdout + out.stderr
        assert password not in text


def test_a_jdbc_catalog_gets_its_driver_from_maven_or_one_line_naming_it(monkeypatch: Any, tmp_path: Path) -> None:
    uri = {"type": "jdbc", "uri": "jdbc:postgresql://127.0.0.1:1/x"}
    jar = jdbc_driver_jar(uri)
    assert jar is not None and jar.endswith("/org/postgresql/postgresql/42.7.14/postgresql-42.7.14.jar")
    assert jdbc_driver_jar({"type": "rest", "uri": "http://127.0.0.1:1"}) is None
    # A machine without the jar, whose repository cannot be reached: one line naming the coordinates.
    monkeypatch.setenv("ICETIDE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ICETIDE_MAVEN_REPOSITORY", "http://127.0.0.1:9")
    with pytest.raises(
        DependencyError, match=r"^cannot fetch org.postgresql:postgresql:42.7.14 from http://127.0.0.1:9 \("
    ):
        jdbc_driver_jar(uri)
    monkeypatch.setenv("ICETIDE_JDBC_DRIVER", str(tmp_path / "driver.jar"))
    with pytest.raises(ConfigError, match="ICETIDE_JDBC_DRIVER: no JDBC driver jar at"):
        jdbc_driver_jar(uri)


def test_run_exactly_once_through_kill_9_with_maintain_beside_it(
    spark: Any, postgres: PostgresServer, s3: S3Server, tmp_path: Path, monkeypatch: Any
) -> None:
    """The warehouse and the landing files on S3 (`s3://`, and `s3a://` as Hadoop users write it).
    The runner is killed right after its second commit; the restart (which takes over the dead
    runner's lease at once) lands the rest while `icetide maintain --every` compacts the table
    from another process. The table equals the model, each bad record is in the dead-letter table
    once, and `icetide status` shows the pipeline's last batch. The table is format v3 and the
    stream's deletes are deletion vectors (Puffin files on S3); the key index's copy is on S3
    (written through pyarrow, a copy every batch here) and the restart loads it instead of
    reading the table."""
    monkeypatch.setenv(PASSWORD_ENV, postgres.password)
    monkeypatch.setenv(S3_SECRET_ENV, s3.secret_key)
    bucket = s3.new_bucket()
    options = jdbc_options(postgres, f"s3://{bucket}/warehouse", s3)
    lines, bad = land_files(tmp_path / "landing", 4, seed=41)
    upload(s3, bucket, tmp_path / "landing", "landing")
    doc = pipeline_doc("pgrun", tmp_path / "landing")
    doc["source"]["files"]["path"] = f"s3a://{bucket}/landing"
    doc["catalog"] = in_file(options)
    doc["trigger"] = {"interval": "1s", "max_files": 1}
    doc["table"]["properties"] = {COPY_EVERY_BATCHES: "1"}  # the key index's copy after every batch
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))

    crashed = run_cli("run", str(path), "--once", env={"ICETIDE_CRASH_AT": "after_commit", "ICETIDE_CRASH_BATCH": "2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    # The restart holds each batch's files for 3 s before committing them, while one maintenance
    # pass runs in another process.
    restart = subprocess.Popen(
        [sys.executable, "-m", "icetide.cli", "-v", "run", str(path), "--once"],  # -v: the key index's log
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
    assert "lake.runner.pgrun: done in" in maintained.stderr

    reader = catalog_reader(spark, "lake", options)
    assert table_rows(reader, "lake.runner.pgrun", COLUMNS, KEY) == expected(lines)
    dead = [r["source_position"] for r in reader.table("lake.runner.pgrun_dead_letter").collect()]
    assert len(dead) == len(set(dead)) == bad
    files = [r[0] for r in reader.sql("SELECT file_path FROM lake.runner.pgrun.files").collect()]
    assert files and all(f.startswith(f"s3://{bucket}/warehouse/runner/pgrun/data/") for f in files), files[:3]
    assert not (tmp_path / "warehouse").exists() and not (ROOT / "s3:").exists() and not (ROOT / bucket).exists()
    assert_vectors_and_key_index_on_s3(reader, s3, bucket, "lake.runner.pgrun", err)

    status = run_cli("status", "--pipeline", str(path), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    report = json.loads(status.stdout)
    assert [(p["pipeline_id"], p["batch_id"]) for p in report["pipelines"]] == [("pgrun", 4)]
    # The same catalog served over REST (`catalog serve --pipeline`), read by DuckDB, the files from S3.
    with served("--pipeline", str(path)) as uri, duckdb_with_iceberg() as con:
        duckdb_s3_secret(con, s3)  # then attach as docs/object_stores.md does
        duckdb_statement(con, s3, "ATTACH", **{"<icetide catalog serve URI>": uri})
        assert duckdb_rows(con, "lake.runner.pgrun", COLUMNS, KEY) == expected(lines)
    for secret in (postgres.password, s3.secret_key):
        assert_no_secret(secret, crashed, out + err, status, maintained)
    assert "'spark.sql.catalog.lake.jdbc.password': '***'" in maintained.stderr  # -v logs settings, redacted
    assert "'spark.sql.catalog.lake.s3.secret-access-key': '***'" in maintained.stderr


def assert_vectors_and_key_index_on_s3(reader: Any, s3: S3Server, bucket: str, table: str, restart_log: str) -> None:
    """`table` is format v3 in `deletes: vectors` mode, its deletes are deletion vectors (Puffin,
    content 1) on S3, the copy of its key index is on S3, and the restart whose `-v` log is
    `restart_log` loaded that copy before it built any index from the table."""
    jtable = load_table(reader, table)
    assert format_version(jtable) == 3
    assert jtable.properties().get(DELETES_PROPERTY) == "vectors"
    folder = f"warehouse/{table.split('.', 1)[1].replace('.', '/')}"
    on_s3 = set(s3.keys(bucket, f"{folder}/"))
    # Every snapshot is still there (icetide's retention keeps an hour): every delete file the
    # stream and maintenance committed is listed.
    deletes = reader.sql(f"SELECT content, file_format, file_path FROM {table}.all_delete_files").collect()
    assert deletes, "no delete file was committed"
    assert {(r["content"], r["file_format"]) for r in deletes} == {(1, "PUFFIN")}, deletes[:3]
    paths = {r["file_path"] for r in deletes}
    assert all(p.startswith(f"s3://{bucket}/{folder}/data/") for p in paths), sorted(paths)[:3]
    assert {p.removeprefix(f"s3://{bucket}/") for p in paths} <= on_s3

    # pyarrow's create_dir leaves an empty marker object `folder/`, which no listing takes for a file.
    copies = sorted(k for k in on_s3 if k.startswith(f"{folder}/metadata/{COPY_FOLDER}/") and not k.endswith("/"))
    named = [re.fullmatch(rf"{folder}/metadata/{COPY_FOLDER}/key-index-(-?\d+)\.parquet", k) for k in copies]
    assert copies and all(named) and len(copies) <= COPIES_KEPT, copies  # pruned, no temporary file left
    snapshots = {r[0] for r in reader.sql(f"SELECT snapshot_id FROM {table}.snapshots").collect()}
    assert {int(m.group(1)) for m in named if m} <= snapshots, copies

    loaded = re.search(rf"loaded the key index of {re.escape(table)} from its copy at snapshot (-?\d+)", restart_log)
    assert loaded, restart_log[-3000:]
    assert int(loaded.group(1)) in snapshots
    built = restart_log.find(f"built the key index of {table}")  # a compaction beside it may force one later
    assert built == -1 or built > loaded.start(), restart_log[-3000:]


def test_a_database_synced_from_kafka_into_postgres_catalog(
    spark: Any, postgres: PostgresServer, s3: S3Server, kafka_broker: str, tmp_path: Path, monkeypatch: Any
) -> None:
    """Two Debezium topics into one table each, the warehouse on S3, killed after a table's commit
    and restarted: each table equals its source, and `icetide status` lists them with no lag."""
    monkeypatch.setenv(PASSWORD_ENV, postgres.password)
    monkeypatch.setenv(S3_SECRET_ENV, s3.secret_key)
    options = jdbc_options(postgres, f"s3://{s3.new_bucket()}/warehouse", s3)
    prefix, namespace = f"pg{unique()}", f"pgsync{unique()}"
    streams = {t: s for t, s in inventory_streams().items() if t != "products"}
    records = {t: changes(s, seed=20 + i, count=12) for i, (t, s) in enumerate(sorted(streams.items()))}
    for t, recs in records.items():
        create_topic(kafka_broker, name=f"{prefix}.inventory.{t}")
        produce(kafka_broker, f"{prefix}.inventory.{t}", recs)
    doc = sync_doc("pgsync", kafka_broker, prefix, namespace, catalog=in_file(options))
    doc["trigger"] = {"interval": "1s", "max_records": 10}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    restarted = crash_tour(path, [("after_table_commit", "2")])
    reader = catalog_reader(spark, "lake", options)
    keys = {"orders": "order_number", "customers": "id"}
    for t in streams:
        assert same(rows_of(reader, f"lake.{namespace}.{t}", keys[t]), model_of(records[t])), t
    status = run_cli("status", "--pipeline", str(path), "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    listed = {s["table"]: s for s in json.loads(status.stdout)}
    assert all(listed[f"lake.{namespace}.{t}"]["lag"] == 0 for t in streams), listed
    for secret in (postgres.password, s3.secret_key):
        assert_no_secret(secret, restarted, status)


def test_two_processes_commit_to_one_table_and_lose_nothing(
    spark: Any, postgres: PostgresServer, tmp_path: Path
) -> None:
    """Two processes, each with its own Spark JVM, append to one table as fast as they can: every
    commit is in the history once (the catalog's conditional update makes a loser retry), and the
    table holds exactly the rows of all commits."""
    options = jdbc_options(postgres, tmp_path / "warehouse")
    reader = catalog_reader(spark, "lake", options)
    reader.sql("CREATE NAMESPACE IF NOT EXISTS lake.race")
    result = race(reader, "", "lake.race.t", tmp_path, plain=False, catalog_options=options, writers=2, commits=20)
    assert len(result["reported"]) == 40
    assert all(c["ok"] for c in result["reported"]), [c for c in result["reported"] if not c["ok"]][:3]
    assert sorted(result["history"]) == sorted(c["tag"] for c in result["reported"])
    assert result["rows"] == sum(c["rows"] for c in result["reported"])
    assert load_table(reader, "lake.race.t").properties().get("commit.retry.num-retries") == "1000"
