"""The stack icetide runs on: the Spark line, Iceberg by its Maven coordinates, Java, and a session
the user already has. Bad set-ups end in one line saying what to do."""

from __future__ import annotations

import hashlib
import http.server
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import icetide
from icetide.errors import ConfigError, DependencyError, JavaNotFoundError, UnsupportedSparkError
from icetide.spark import jars, maven
from icetide.spark.java import check_java
from icetide.spark.maven import Artifact, fetch


def test_spark_lines_icetide_supports_and_one_line_for_the_others() -> None:
    assert jars.spark_line("4.1.4") == "4.1"
    assert jars.spark_line("3.5.8") == "3.5"
    for version in ("4.0.1", "4.2.0", "3.4.4"):
        with pytest.raises(UnsupportedSparkError) as err:
            jars.spark_line(version)
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith(f"PySpark {version} is not supported: icetide runs on PySpark 4.1")
        assert "pip install 'pyspark>=4.1,<4.2'" in message


def test_the_runtime_matches_the_installed_pyspark() -> None:
    spark_jars, version = jars.pyspark_jars()
    runtime = jars.iceberg_runtime()
    line = jars.spark_line(version)
    scala = jars.scala_version(spark_jars)
    assert runtime.coordinates == f"org.apache.iceberg:iceberg-spark-runtime-{line}_{scala}:{maven.ICEBERG_VERSION}"
    assert (line, scala) in {("4.1", "2.13"), ("3.5", "2.12")}
    path = jars.iceberg_runtime_jar()
    assert path.endswith(runtime.path)
    # The jar on disk is the pinned one.
    assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == runtime.sha256


def test_spark_conf_names_jars_by_path_or_by_coordinates(tmp_path: Path) -> None:
    by_path = icetide.spark_conf(warehouse=str(tmp_path))
    assert by_path["spark.sql.extensions"] == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    assert by_path["spark.sql.catalog.lake.warehouse"] == str(tmp_path)
    assert by_path["spark.sql.session.timeZone"] == "UTC"
    assert all(os.path.isfile(j) for j in by_path["spark.jars"].split(","))
    assert "spark.jars.packages" not in by_path
    jdbc = {"type": "jdbc", "uri": "jdbc:postgresql://127.0.0.1:1/x", "warehouse": str(tmp_path)}
    by_coordinates = icetide.spark_conf(warehouse=None, catalog="pg", catalog_options=jdbc, packages=True)
    assert by_coordinates["spark.jars.packages"].split(",") == [
        jars.iceberg_runtime().coordinates,
        maven.POSTGRESQL_JDBC.coordinates,
    ]
    assert by_coordinates["spark.sql.catalog.pg.uri"] == jdbc["uri"]


@pytest.fixture
def repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """A Maven repository served over HTTP on 127.0.0.1 from a folder, and an empty cache."""
    root = tmp_path / "repo"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("ICETIDE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ICETIDE_MAVEN_REPOSITORY", f"http://127.0.0.1:{server.server_address[1]}")
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()
    server.server_close()


def test_a_jar_is_fetched_once_checked_against_its_pin(repository: tuple[str, Path]) -> None:
    url, root = repository
    content = b"not really a jar"
    good = Artifact("org.example", "thing", "1.0", hashlib.sha256(content).hexdigest())
    (root / os.path.dirname(good.path)).mkdir(parents=True)
    (root / good.path).write_bytes(content)
    path = fetch(good)
    assert Path(path).read_bytes() == content
    (root / good.path).unlink()  # a second fetch reads the cache, not the repository
    assert fetch(good) == path

    altered = Artifact("org.example", "thing", "2.0", "0" * 64)
    (root / os.path.dirname(altered.path)).mkdir(parents=True)
    (root / altered.path).write_bytes(content)
    with pytest.raises(DependencyError, match=r"^org.example:thing:2.0: .* served a jar whose SHA-256 is"):
        fetch(altered)
    assert not os.listdir(os.path.dirname(os.path.join(os.environ["ICETIDE_CACHE"], "maven", altered.path)))

    missing = Artifact("org.example", "absent", "1.0", "0" * 64)
    with pytest.raises(DependencyError) as err:
        fetch(missing)
    assert str(err.value) == (
        f"cannot fetch org.example:absent:1.0 from {url} (HTTP 404): check the network, "
        "or set ICETIDE_MAVEN_REPOSITORY to a Maven mirror"
    )


def test_the_install_step_says_in_one_line_when_the_repository_is_out_of_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    env = {
        **os.environ,
        "ICETIDE_CACHE": str(tmp_path / "cache"),
        "HOME": str(tmp_path),
        "ICETIDE_MAVEN_REPOSITORY": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "icetide.spark.jars"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot fetch org.postgresql:postgresql:42.7.14 from http://127.0.0.1:9 (")
    assert done.stderr.count("\n") == 1


def _fake_java(folder: Path, version: str) -> None:
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2021-01-19' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IEXEC)


def test_java_too_old_or_missing_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_java(tmp_path / "jdk11", "11.0.20")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(JavaNotFoundError, match=r"^Java 11 at .* is too old; Spark with Iceberg 1.12 needs 17"):
        check_java()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(JavaNotFoundError, match=r"^Java was not found: install Java 17"):
        check_java()


def test_an_active_session_is_reused_when_it_fits_and_refused_in_one_line_when_not(
    spark: Any, warehouse: str, tmp_path: Path
) -> None:
    assert icetide.spark_session(warehouse=warehouse) is spark
    with pytest.raises(ConfigError) as err:
        icetide.spark_session(warehouse=str(tmp_path / "elsewhere"))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("the active Spark session does not fit icetide: spark.sql.catalog.lake.warehouse is ")
    assert message.endswith("(stop it, or start it with icetide.spark_conf())")
    # From another thread, where the session is not the active one, the same check holds.
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            icetide.spark_session(warehouse=str(tmp_path / "elsewhere"))
        except ConfigError as exc:
            errors.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert [str(e) for e in errors] == [message]
    # A catalog the session lacks is added to it, and works.
    other = tmp_path / "other"
    assert icetide.spark_session(warehouse=str(other), catalog="other") is spark
    spark.sql("CREATE TABLE other.db.t (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO other.db.t VALUES (1), (2)")
    assert spark.table("other.db.t").count() == 2
    assert (other / "db" / "t" / "metadata").is_dir()


def test_a_cluster_session_leaves_the_driver_address_to_spark_and_the_executors_no_local_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Local Spark binds to loopback; on a cluster the executors connect back to the driver, so
    icetide must not pin it to 127.0.0.1, and settings sent to executors on other machines must not
    name a file of the driver's machine (tests/test_cluster_machines.py runs such a cluster)."""
    from icetide.spark.session import TUNING_DEFAULTS, is_local_master, session_master

    assert all(is_local_master(m) for m in ("local", "local[2]", "local[*]"))
    assert not any(is_local_master(m) for m in ("spark://10.0.0.2:7077", "yarn", "k8s://https://api:6443"))
    monkeypatch.delenv("ICETIDE_SPARK_MASTER", raising=False)
    assert session_master(None, None) is None and is_local_master(None)  # Spark's default: local[*]
    monkeypatch.setenv("ICETIDE_SPARK_MASTER", "spark://m:7077")
    assert session_master(None, {}) == "spark://m:7077"
    assert session_master("local[2]", {}) == "local[2]"
    assert session_master("local[2]", {"spark.master": "yarn"}) == "yarn"  # the pipeline's spark block wins
    assert not any(k.startswith("spark.executor") for k in TUNING_DEFAULTS), TUNING_DEFAULTS


def test_a_job_spark_submit_starts_runs_on_its_master_with_spark_conf(tmp_path: Path) -> None:
    """A job started by spark-submit with `icetide.spark_conf()`'s settings, as
    docs/how-to/cluster.md shows: `icetide.spark_session()` in it keeps spark-submit's `--master`
    (it used to set local[*] over it), finds Spark's jars under $SPARK_HOME (spark-submit's
    PySpark is imported from a zip there), and the sink lands a batch."""
    import pyspark

    warehouse = str(tmp_path / "warehouse")
    job = tmp_path / "job.py"
    job.write_text(
        "import icetide\n"
        f"spark = icetide.spark_session(warehouse={warehouse!r})\n"
        "icetide.create_table(spark, 'lake.db.t', schema='id BIGINT NOT NULL, v STRING', key=['id'])\n"
        "df = spark.createDataFrame([(1, 'a'), (2, 'b'), (1, 'c')], 'id BIGINT, v STRING')\n"
        "icetide.UpsertSink(spark, 'lake.db.t', pipeline_id='job').write(df, batch_id=1)\n"
        "print('master=' + spark.sparkContext.master)\n"
        "print('rows=' + str(sorted(tuple(r) for r in spark.table('lake.db.t').collect())))\n"
        "spark.stop()\n"
    )
    confs = [f"--conf={k}={v}" for k, v in icetide.spark_conf(warehouse=warehouse).items()]
    submit = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(root)}
    env.pop("ICETIDE_SPARK_MASTER", None)
    done = subprocess.run(
        [submit, "--master", "local[1]", *confs, str(job)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "master=local[1]" in lines, done.stdout
    assert "rows=[(1, 'c'), (2, 'b')]" in lines, done.stdout
