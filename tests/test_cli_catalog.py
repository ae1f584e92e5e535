"""`icetide maintain` and `icetide status` open a pipeline file's catalog; no secret of the file
reaches any output, even with -v; an object-store warehouse is refused for the Hadoop catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.commands import run_cli, warehouse_reader
from tests.test_runner_files import land_files, pipeline_doc

SECRET = "pw-Zq81-never-printed"


def test_maintain_and_status_use_the_pipeline_catalog_without_leaking_secrets(spark: Any, tmp_path: Path) -> None:
    warehouse = tmp_path / "own-warehouse"  # not ./warehouse: the commands must take it from the file
    land_files(tmp_path / "landing", 2, seed=31)
    doc = pipeline_doc("clicat", tmp_path / "landing", warehouse="${ICETIDE_T_WAREHOUSE}")
    # A Spark setting that says secret, given through the environment; Spark ignores it.
    doc["spark"] = {"spark.icetide.test.password": "${ICETIDE_T_SECRET}", "spark.sql.shuffle.partitions": "2"}
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    env = {"ICETIDE_T_SECRET": SECRET, "ICETIDE_T_WAREHOUSE": str(warehouse)}

    ran = run_cli("-v", "run", str(path), "--once", env=env)
    assert ran.returncode == 0, ran.stderr[-3000:]
    maintained = run_cli("-v", "maintain", "--pipeline", str(path), "--no-progress", env=env)
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    status = run_cli("status", "--pipeline", str(path), env=env)
    assert status.returncode == 0, status.stderr[-3000:]
    for done in (ran, maintained, status):
        assert SECRET not in done.stdout + done.stderr
    # -v logs the Spark settings; the secret one shows as ***.
    assert "'spark.icetide.test.password': '***'" in maintained.stderr
    assert "lake.runner.clicat: done in" in maintained.stderr
    assert "set history.expire" not in maintained.stderr  # the runner created the table with them
    out = status.stdout
    assert f"catalog lake: warehouse={warehouse}" in out and "clicat" in out
    # Both commands opened the file's warehouse: the table is there, and no ./warehouse was made for it.
    reader = warehouse_reader(spark, "lake", warehouse)
    assert reader.table("lake.runner.clicat").count() > 0
    assert not (Path(__file__).resolve().parent.parent / "warehouse" / "runner" / "clicat").exists()

    # A wrong combination fails at once, naming the option.
    both = run_cli("status", "--pipeline", str(path), "--warehouse", str(warehouse), env=env)
    assert both.returncode == 1 and "--pipeline: the pipeline file names the catalog" in both.stderr
    unset = run_cli("status", "--pipeline", str(path), env={"ICETIDE_T_WAREHOUSE": str(warehouse)})
    assert unset.returncode == 1
    assert "spark.spark.icetide.test.password: environment variable ICETIDE_T_SECRET is not set" in unset.stderr


def test_cli_refuses_a_hadoop_catalog_on_an_object_store(tmp_path: Path) -> None:
    done = run_cli("status", "lake.db.t", "--warehouse", "s3a://bucket/warehouse")
    assert done.returncode == 1
    line = done.stderr.strip()
    assert line.startswith("icetide: error: warehouse: a Hadoop catalog is not safe on s3a://"), line
    assert "REST, JDBC, Glue or Hive" in line and len(line.splitlines()) == 1
