"""Commits from several processes to one table of the embedded catalog: none is lost.

The Hadoop catalog commits by checking that the next metadata version does not exist and renaming
onto it; a local rename replaces, so without a lock shared by the processes two of them can both
"succeed" and one commit vanishes. icetide's sessions set `lock-impl` to its file lock. The race
is forced: the writers' file system waits between that check and the rename
(tests/jvm/SlowRenameFileSystem.java), so without the lock nearly every commit that overlaps
another is lost (docs/design.md records a run by hand with `race(..., plain=True)`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from icetide.catalog.settings import COMMIT_LOCK_IMPL, catalog_conf
from icetide.spark.jars import compiled_jar, icetide_jar, pyspark_jars
from icetide.table.iceberg import load_table
from tests.commit_race_driver import TAG

ROOT = Path(__file__).resolve().parent.parent
WRITERS = 3
COMMITS = 10
RENAME_DELAY_MS = 100


def slow_rename_jar() -> str:
    """The test-only file system that pauses before renames onto metadata files, built once."""
    source = str(ROOT / "tests" / "jvm" / "SlowRenameFileSystem.java")
    jars, version = pyspark_jars()
    jar = compiled_jar("icetide-test-fs", [source], [os.path.join(jars, "*")], depends_on=version)
    assert jar is not None, "javac is needed to build the test file system"
    return jar


def race(
    spark: Any,
    warehouse: str,
    table: str,
    tmp_path: Path,
    *,
    plain: bool,
    catalog_options: dict[str, str] | None = None,
    writers: int = WRITERS,
    commits: int = COMMITS,
    mixed: list[dict[str, str] | None] | None = None,
) -> dict[str, Any]:
    """Run `writers` driver processes committing `commits` appends each to `table`, all released
    at once. With `catalog_options`, the drivers open that catalog (and `spark` must read the
    same one); else the embedded one with the slow-rename file system. `mixed` gives each driver
    its own (`catalog_options`, or None for the embedded catalog on `warehouse`), one per writer.

    Returns what they reported and what the table holds afterwards."""
    spark.sql(
        f"CREATE TABLE {table} (id bigint, writer string) USING iceberg TBLPROPERTIES ("
        "'commit.retry.num-retries'='1000', 'commit.retry.min-wait-ms'='1', 'commit.retry.max-wait-ms'='20')"
    )
    sync = tmp_path / "sync"
    sync.mkdir()
    args = [sys.executable, "-m", "tests.commit_race_driver", warehouse, table]

    def options(catalog: dict[str, str] | None) -> list[str]:
        if catalog:
            return [f"--catalog-option={k}={v}" for k, v in catalog.items()]
        return ["--slow-rename", f"{slow_rename_jar()}:{RENAME_DELAY_MS}", *(["--plain"] if plain else [])]

    each = mixed if mixed is not None else [catalog_options] * writers
    writers = len(each)
    drivers = [
        subprocess.Popen(
            [*args, f"w{i}", str(commits), str(sync), *options(catalog)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, catalog in enumerate(each)
    ]
    try:
        deadline = time.monotonic() + 180
        while len(list(sync.glob("ready-*"))) < writers:
            for d in drivers:
                assert d.poll() is None, f"a driver exited before it was ready: {d.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, "drivers not ready in time"
            time.sleep(0.05)
        (sync / "go").touch()
        outputs = [d.communicate(timeout=180) for d in drivers]
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
    reported: list[dict[str, Any]] = []
    for d, (out, err) in zip(drivers, outputs, strict=True):
        assert d.returncode == 0, err[-3000:]
        reported.extend(json.loads(out.strip().splitlines()[-1])["commits"])
    jtable = load_table(spark, table)
    jtable.refresh()
    history = [str(s.summary().get(TAG)) for s in jtable.snapshots() if s.summary().get(TAG) is not None]
    rows = spark.table(table).count()
    return {"reported": reported, "history": history, "rows": rows}


def test_every_commit_of_several_processes_is_in_the_history(
    spark: Any, warehouse: str, table_name: str, tmp_path: Path
) -> None:
    """3 processes, each with its own Spark JVM, append to one table as fast as they can, with
    icetide's sessions (the file lock on): every commit a process saw succeed is in the table's
    history exactly once, and the table holds exactly the rows of those commits."""
    assert spark.conf.get("spark.sql.catalog.lake.lock-impl") == COMMIT_LOCK_IMPL
    result = race(spark, warehouse, table_name, tmp_path, plain=False)
    succeeded = [c for c in result["reported"] if c["ok"]]
    failed = [c for c in result["reported"] if not c["ok"]]
    assert len(result["reported"]) == WRITERS * COMMITS
    assert not failed, failed[:3]
    assert sorted(result["history"]) == sorted(c["tag"] for c in succeeded)
    assert result["rows"] == sum(c["rows"] for c in succeeded)
    # The lock file sits beside the metadata, hidden from Iceberg's listings.
    location = str(load_table(spark, table_name).location()).removeprefix("file:")
    assert os.path.exists(os.path.join(location, "metadata", ".icetide-commit.lock"))


def test_the_embedded_catalog_takes_the_commit_lock(tmp_path: Path) -> None:
    """The embedded catalog, and a Hadoop catalog named in options, get icetide's lock-impl; a
    lock-impl in options wins, and other catalog types get none."""
    embedded = catalog_conf("lake", warehouse=str(tmp_path), options=None, lock_impl=COMMIT_LOCK_IMPL)
    assert embedded["spark.sql.catalog.lake.lock-impl"] == COMMIT_LOCK_IMPL
    hadoop = catalog_conf("lake", warehouse=str(tmp_path), options={"type": "hadoop"}, lock_impl=COMMIT_LOCK_IMPL)
    assert hadoop["spark.sql.catalog.lake.lock-impl"] == COMMIT_LOCK_IMPL
    own = catalog_conf("lake", warehouse=None, options={"type": "hadoop", "lock-impl": "x.Y"}, lock_impl="a.B")
    assert own["spark.sql.catalog.lake.lock-impl"] == "x.Y"
    rest = catalog_conf("lake", warehouse=None, options={"type": "rest", "uri": "http://h"}, lock_impl="a.B")
    assert "spark.sql.catalog.lake.lock-impl" not in rest
    assert "spark.sql.catalog.lake.lock-impl" not in catalog_conf("lake", warehouse=str(tmp_path), options=None)
    jar = icetide_jar()
    assert jar is not None
    with zipfile.ZipFile(jar) as built:
        assert COMMIT_LOCK_IMPL.replace(".", "/") + ".class" in built.namelist()


HOLD_LOCK = """
import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.lockf(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(600)
"""


def test_the_lock_is_shared_with_other_processes_and_dies_with_them(spark: Any, tmp_path: Path) -> None:
    """The lock is an OS lock on the table's lock file (POSIX, as Python's fcntl.lockf takes
    it): while another process holds it, a commit's acquire times out; when that process is
    killed, the OS releases it and the acquire succeeds. Only the owner that took it releases it."""
    metadata = tmp_path / "db" / "t" / "metadata"
    metadata.mkdir(parents=True)
    entity = f"file:{metadata}/v2.metadata.json"
    lock_file = metadata / ".icetide-commit.lock"
    jvm: Any = spark._jvm
    manager = jvm.icetide.catalog.FileLockManager()
    props = jvm.java.util.HashMap()
    props.put("lock.acquire-timeout-ms", "300")
    manager.initialize(props)

    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock_file)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        assert not manager.acquire(entity, "owner-a")
        assert time.monotonic() - started >= 0.3
    finally:
        holder.kill()
        holder.wait()
    assert manager.acquire(entity, "owner-a")
    # Held by this JVM: another process cannot take it, another thread of this JVM neither.
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import fcntl; fcntl.lockf(open({str(lock_file)!r}, 'a'), fcntl.LOCK_EX | fcntl.LOCK_NB)",
        ],
        capture_output=True,
        text=True,
    )
    assert probe.returncode != 0 and "BlockingIOError" in probe.stderr
    assert not manager.acquire(f"file:{metadata}/v3.metadata.json", "owner-b")
    assert not manager.release(entity, "owner-b")
    assert manager.release(entity, "owner-a")
    assert manager.acquire(entity, "owner-b") and manager.release(entity, "owner-b")
    assert lock_file.exists()
