"""Warehouses on S3, against a real S3 API server in its own process (tests/s3_server.py).

Iceberg's JDBC catalog on PostgreSQL with an `s3://` warehouse. Orphan removal on S3 keeps the
files of a batch whose commit state is unknown and deletes a real orphan; compaction, the
folding of equality deletes (a `deletes: equality` table) and expiry on S3; PyIceberg and DuckDB
read the table straight from S3, as docs/object_stores.md shows. A two-stage pipeline from Kafka
(the real broker) on S3, with raw retention deleting the raw files from S3 once stage 2 has
passed them. `icetide run` exactly once through SIGKILL with `icetide maintain` beside it
(format v3 deletion vectors and the key index's copy on S3), `icetide status`, `icetide catalog
serve` and the database sync on an S3 warehouse are in tests/test_catalog_postgres.py; the S3
settings themselves here, without a server.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

import tests.test_two_stage as two_stage
from icetide.catalog.settings import S3_FILE_IO, catalog_conf
from icetide.config.pipeline import PipelineConfig
from icetide.config.secrets import redact
from icetide.filesystems import ENV_PREFIX as S3_ENV_PREFIX
from icetide.filesystems import S3Settings, filesystem_for, is_s3, use_s3_settings
from icetide.maintenance.expire import expire_snapshots
from icetide.maintenance.maintain import maintain
from icetide.maintenance.orphans import remove_orphan_files
from icetide.pipeline.table_runner import Runner
from icetide.pipeline.two_stage import TwoStageRunner
from icetide.spark.jars import needs_aws_bundle
from icetide.spark.maven import ICEBERG_AWS_BUNDLE
from icetide.spark.session import spark_conf
from icetide.table.iceberg import format_version, load_table
from tests.commands import catalog_reader, run_cli
from tests.kafka_broker import create_topic, produce
from tests.lake_readers import duckdb_with_iceberg, keyed
from tests.model import table_rows
from tests.postgres_server import PostgresServer
from tests.s3_server import S3Server, doc_snippet, duckdb_s3_secret, duckdb_statement
from tests.test_catalog_postgres import jdbc_options
from tests.test_runner_files import COLUMNS, KEY, expected, land_files, pipeline_doc


@pytest.fixture
def keeps_the_active_session(spark: Any) -> Iterator[None]:
    """Maintenance run in this process on another session of the test's Spark leaves that session
    active in the JVM (where icetide.spark_session looks for one to reuse): the test process's
    own session is made active again for the tests after."""
    yield
    from pyspark.sql import SparkSession

    spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
    SparkSession._activeSession = spark


def forget_s3_settings(spark: Any) -> None:
    """Undo what loading a table on S3 in this process did (`adopt_s3_settings`): the S3 settings
    of icetide's own files, here and in the environment of the session's Python workers."""
    use_s3_settings(None)
    environment = spark.sparkContext.environment
    for name in [n for n in environment if n.startswith(S3_ENV_PREFIX)]:
        del environment[name]


@pytest.mark.usefixtures("keeps_the_active_session")
def test_on_s3_orphan_removal_keeps_a_batch_in_flight_and_maintenance_compacts_folds_and_expires(
    spark: Any, postgres: PostgresServer, s3: S3Server, tmp_path: Path
) -> None:
    """A runner killed with its second batch's files written but not committed: orphan removal
    with no age limit lists the table on S3, keeps those files (their commit state is unknown)
    and deletes a planted orphan. The restart lands the rest; maintenance compacts and expires
    snapshots; PyIceberg and DuckDB, reading straight from S3, see the model. The same files upserted
    into a `deletes: equality` table leave equality deletes on S3, which maintenance folds away."""
    bucket = s3.new_bucket()
    options = jdbc_options(postgres, f"s3://{bucket}/warehouse", s3)
    lines, _ = land_files(tmp_path / "landing", 3, seed=48)
    doc = pipeline_doc("s3orphans", tmp_path / "landing")
    doc["catalog"] = options
    doc["trigger"] = {"interval": "1s", "max_files": 1}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    # Killed with batch 2's files written and not committed: their commit state is unknown to
    # anyone listing the table, exactly as for a batch in flight.
    crashed = run_cli("run", str(path), "--once", env={"ICETIDE_CRASH_AT": "after_write", "ICETIDE_CRASH_BATCH": "2"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    table = "lake.runner.s3orphans"
    prefix = "warehouse/runner/s3orphans/data/"
    written = {k for k in s3.keys(bucket, prefix) if "-b000000000002-" in k}
    assert written, "batch 2 wrote no file"
    reader = catalog_reader(spark, "lake", options)
    use_s3_settings(S3Settings.from_catalog(options))  # this process's own listing reaches the server
    try:
        orphan = f"s3://{bucket}/{prefix}00000-crashed-elsewhere.parquet"
        fs, orphan_path = filesystem_for(orphan)
        with fs.open_output_stream(orphan_path) as f:
            f.write(b"not referenced by any snapshot")
        result = remove_orphan_files(reader, table, older_than=timedelta(0), dry_run=False)
    finally:
        use_s3_settings(None)
    assert result.orphans == (orphan,), result
    assert {f.removeprefix(f"s3://{bucket}/") for f in result.in_flight} == written, result
    assert not any(k.endswith("crashed-elsewhere.parquet") for k in s3.keys(bucket, prefix))
    restarted = run_cli("run", str(path), "--once")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert not written & set(s3.keys(bucket, prefix))  # the restart deleted the dead batch's files

    want = expected(lines)
    assert table_rows(reader, table, COLUMNS, KEY) == want
    report = maintain(reader, table)
    assert report.compaction is not None and report.compaction.groups > 0, report.lines()
    assert table_rows(reader, table, COLUMNS, KEY) == want

    # The same files into a table with `deletes: equality`, in this process: its upserts write
    # equality deletes to S3 (the table above writes deletion vectors), which maintenance folds.
    folds = f"{table}_equality"
    folding = pipeline_doc("s3folds", tmp_path / "landing")
    folding["catalog"] = options
    folding["table"] |= {"name": folds, "deletes": "equality"}
    folding["dead_letter"] = f"{folds}_dead_letter"
    folding["trigger"] = {"interval": "1s", "max_files": 1}  # 3 delete files a partition: folding is due
    try:
        runner = Runner(PipelineConfig.from_dict(folding), reader)
        batches = len(runner.run(once=True, handle_signals=False).batches)
        runner.close()
        equality = f"SELECT count(*) FROM {folds}.delete_files WHERE content = 2"
        before = reader.sql(equality).first()[0]
        assert batches == 3 and before > 0, (batches, before)
        assert table_rows(reader, folds, COLUMNS, KEY) == want
        folded = maintain(reader, folds)
        assert reader.sql(equality).first()[0] == 0, folded.lines()  # folded away
        assert table_rows(reader, folds, COLUMNS, KEY) == want
    finally:  # loading the table installed the server's S3 settings in this process and its workers
        forget_s3_settings(spark)
    # Expiry drops the snapshots before compaction and deletes their files on S3 (S3FileIO), the
    # source position kept; orphan removal takes what expiry leaves: S3 holds the live files only.
    before = set(s3.keys(bucket, prefix))
    expired = expire_snapshots(reader, table, retain_last=1, older_than=timedelta(0))
    assert expired.expired_snapshots > 0 and expired.snapshots_left == 1, expired
    assert [(p.pipeline_id, p.batch_id) for p in expired.pipelines] == [("s3orphans", 3)], expired
    live = {r[0].removeprefix(f"s3://{bucket}/") for r in reader.sql(f"SELECT file_path FROM {table}.files").collect()}
    expired_away = before - set(s3.keys(bucket, prefix))
    assert expired_away and not expired_away & live and live <= before, sorted(expired_away)
    remove_orphan_files(reader, table, older_than=timedelta(0), dry_run=False)
    # pyarrow's delete of a folder's last file (the restart's cleanup) leaves an empty marker
    # object `folder/` behind; Iceberg and orphan removal see no file in it.
    files = {k for k in s3.keys(bucket, prefix) if not k.endswith("/")}
    assert files == live, sorted(files ^ live)
    assert table_rows(reader, table, COLUMNS, KEY) == want

    # PyIceberg and DuckDB read the current metadata file straight from S3 (docs/object_stores.md).
    metadata = str(load_table(reader, table).operations().current().metadataFileLocation())
    assert metadata.startswith(f"s3://{bucket}/warehouse/runner/s3orphans/metadata/"), metadata
    # The snippets of docs/object_stores.md, run as written.
    placeholder = {"<metadata.json on S3>": metadata}
    namespace: dict[str, Any] = {}
    exec("\n".join(doc_snippet("python", s3, **placeholder)), namespace)
    assert keyed(namespace["rows"].to_pylist(), COLUMNS, KEY) == want
    with duckdb_with_iceberg() as con:
        duckdb_s3_secret(con, s3)
        scanned = duckdb_statement(con, s3, "SELECT * FROM iceberg_scan", **placeholder)
        names = [d[0] for d in scanned.description]
        assert keyed([dict(zip(names, r, strict=True)) for r in scanned.fetchall()], COLUMNS, KEY) == want


@pytest.mark.usefixtures("keeps_the_active_session")
def test_on_s3_a_two_stage_pipeline_from_kafka_merges_every_event_once_and_raw_retention_reclaims_storage(
    spark: Any, postgres: PostgresServer, s3: S3Server, kafka_broker: str, tmp_path: Path
) -> None:
    """A Kafka topic through the raw table (stage 1, a Kafka source into one table) into the merged
    table (stage 2), both on S3, with `raw.retention`, in this process: the table equals the merge
    model run after run, bad records land in the dead-letter table on S3, and retention deletes
    the raw rows, expires the snapshots stage 2 has passed and so deletes their files from S3."""
    bucket = s3.new_bucket()
    options = jdbc_options(postgres, f"s3://{bucket}/warehouse", s3)
    topic = create_topic(kafka_broker)

    def send(files: int, seed: int, first: int = 0) -> tuple[list[dict[str, Any]], int]:
        good, bad = two_stage.land(tmp_path / "events", files, seed=seed, first=first)
        lines = [
            line
            for n in range(first, first + files)
            for line in (tmp_path / "events" / f"part-{n:03d}.json").read_text().splitlines()
        ]
        produce(kafka_broker, topic, [(0, None, line.encode(), None) for line in lines])
        return good, bad

    doc = two_stage.pipeline_doc("s3two", tmp_path / "events", tmp_path / "warehouse")
    del doc["warehouse"]
    doc["catalog"] = options
    doc["source"] = {"kafka": {"bootstrap_servers": kafka_broker, "topic": topic, "starting_offsets": "earliest"}}
    doc["trigger"] = {"interval": "1s", "max_records": 60}
    doc["state"]["checkpoint"] = str(tmp_path / "chk")  # Spark's checkpoint: a local folder (no S3A jars)
    doc["raw"] = {"retention": "30d"}  # the events are of 2026-01-01: all past it
    config = PipelineConfig.from_dict(doc)
    table, raw, dead = "lake.two.s3two", "lake.two.s3two_raw", "lake.two.s3two_dead_letter"
    raw_data = "warehouse/two/s3two_raw/data/"
    session = catalog_reader(spark, "lake", options)
    try:
        events, bad = send(3, seed=21)
        TwoStageRunner(config, session).run(once=True, handle_signals=False)
        assert table_rows(session, table, two_stage.KEY + two_stage.VALUES, two_stage.KEY) == two_stage.expected(events)
        assert session.table(raw).count() == len(events)
        assert session.table(dead).count() == bad > 0
        for t in (table, raw, dead):
            files = [r[0] for r in session.sql(f"SELECT file_path FROM {t}.files").collect()]
            assert files and all(f.startswith(f"s3://{bucket}/warehouse/two/") for f in files), (t, files[:3])
        first_files = {k for k in s3.keys(bucket, raw_data) if k.endswith(".parquet")}
        assert first_files

        # Retention deletes the raw rows (all past it) and expires what stage 2 has passed.
        more, _ = send(2, seed=22, first=3)
        runner = TwoStageRunner(config, session)
        result = runner.apply_retention()
        assert result is not None and result.expired_snapshots > 0 and result.skipped_expiry is None, result
        assert session.table(raw).count() == 0
        runner.run(once=True, handle_signals=False)
        want = two_stage.expected(events + more)
        assert table_rows(session, table, two_stage.KEY + two_stage.VALUES, two_stage.KEY) == want
        assert session.table(raw).count() == len(more)  # the first records were not ingested again
        # Stage 2's table is format v3: the second run's upserts replaced rows with deletion vectors.
        assert format_version(load_table(session, table)) == 3
        formats = session.sql(f"SELECT DISTINCT content, file_format FROM {table}.all_delete_files").collect()
        assert [tuple(r) for r in formats] == [(1, "PUFFIN")], formats

        # Stage 2 has read past the delete: the next pass expires the snapshots that referenced the
        # first records' files, and S3FileIO deletes them from the bucket.
        result = TwoStageRunner(config, session).apply_retention()
        assert result is not None and result.expired_snapshots > 0, result
        assert not first_files & set(s3.keys(bucket, raw_data))
        assert session.table(raw).count() == 0
        assert table_rows(session, table, two_stage.KEY + two_stage.VALUES, two_stage.KEY) == want
    finally:  # loading the tables installed the server's S3 settings in this process and its workers
        forget_s3_settings(spark)


def test_s3_settings_come_from_the_catalog_options_and_reach_other_processes_redacted() -> None:
    options = {
        "type": "jdbc",
        "warehouse": "s3a://b/wh",
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.path-style-access": "true",
        "client.region": "eu-west-1",
        "s3.access-key-id": "AKIA-T",
        "s3.secret-access-key": "never-shown-7f3",
    }
    settings = S3Settings.from_catalog(options)
    assert settings == S3Settings("http://127.0.0.1:9", "eu-west-1", True, "AKIA-T", "never-shown-7f3")
    assert "never-shown-7f3" not in repr(settings) and "AKIA-T" not in repr(settings)
    assert S3Settings.from_environment(settings.environment()) == settings
    assert S3Settings.from_catalog({"type": "rest"}) == S3Settings()  # AWS's default chain decides
    assert S3Settings.from_catalog({"s3.path-style-access": "false"}).path_style is False

    use_s3_settings(settings)
    try:
        fs, path = filesystem_for("s3a://b/wh/runner/t/data/x.parquet")
        assert fs.type_name == "s3" and path == "b/wh/runner/t/data/x.parquet"
        assert filesystem_for("s3://b/wh/")[1] == "b/wh" and filesystem_for("s3://b/wh")[0] is fs
    finally:
        use_s3_settings(None)
    assert is_s3("s3n://b/k") and not is_s3("gs://b/k") and not is_s3("/tmp/s3://x")

    conf = catalog_conf("lake", warehouse=None, options=options)
    assert conf["spark.sql.catalog.lake.io-impl"] == S3_FILE_IO  # JDBC would default to HadoopFileIO
    rest = catalog_conf("lake", warehouse=None, options={"type": "rest", "uri": "http://h", "warehouse": "s3://b/w"})
    assert "spark.sql.catalog.lake.io-impl" not in rest  # a REST client resolves files by scheme
    assert needs_aws_bundle(None, options) and needs_aws_bundle("s3://b/w", {"type": "jdbc"})
    assert needs_aws_bundle(None, {"type": "rest", "uri": "http://h"})
    assert not needs_aws_bundle("/tmp/wh", None) and not needs_aws_bundle(None, {"type": "jdbc", "uri": "jdbc:x"})
    # A session or spark-submit of one's own: the bundle by its coordinates, the settings for the workers.
    conf = spark_conf(warehouse=None, catalog_options=options, packages=True)
    assert ICEBERG_AWS_BUNDLE.coordinates in conf["spark.jars.packages"].split(",")
    assert (
        S3Settings.from_environment(
            {k.removeprefix("spark.executorEnv."): v for k, v in conf.items() if k.startswith("spark.executorEnv.")}
        )
        == settings
    )
    assert "never-shown-7f3" not in str(redact(conf))
