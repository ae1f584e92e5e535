"""The upsert sink against the reference model: random batches, replays, races, schema drift."""

from __future__ import annotations

import random
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import icetide
from icetide.errors import ConfigError, SchemaError
from tests.model import ReferenceModel, table_rows

SCHEMA = "id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING, seq BIGINT"
DDL = "id long, ts timestamp, v string, seq long, _op string"
COLUMNS = ["id", "ts", "v", "seq"]
KEY = ["id", "ts"]
T0 = datetime(2026, 1, 1, 10, tzinfo=UTC)


def make_table(spark: Any, name: str, partition_by: list[str] | None = None, **kw: Any) -> None:
    """The sink tests' table: format v2, so a sink at its defaults writes equality deletes (the
    deletion-vector path has its own tests, test_v3_*.py)."""
    kw.setdefault("format_version", 2)
    icetide.create_table(
        spark,
        name,
        schema=SCHEMA,
        key=KEY,
        partition_by=partition_by if partition_by is not None else ["hours(ts)"],
        **kw,
    )


def naive(ts: datetime) -> datetime:
    """Spark hands timestamps back as naive datetimes in the session zone (UTC)."""
    return ts.replace(tzinfo=None)


def random_batch(rng: random.Random, keys: int, size: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(size):
        late = rng.random() < 0.2
        hour = rng.choice([0, 1, 2]) if not late else rng.choice([-5, -12, -23])
        rows.append(
            {
                "id": rng.randrange(keys),
                "ts": naive(T0 + timedelta(hours=hour)),
                "v": rng.choice([None, "a", "b", "c", f"v{rng.randrange(1000)}"]),
                "seq": rng.choice([None, *range(5)]) if rng.random() < 0.1 else rng.randrange(5),
                "_op": rng.choice(["INSERT", "UPSERT", "UPSERT", "DELETE", None, "upsert"]),
            }
        )
    return rows


def to_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame([tuple(r.get(c) for c in [*COLUMNS, "_op"]) for r in rows], DDL)


def values_df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """The rows as an inline table (a local relation, whose size Spark knows), typed like to_df."""

    def lit(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, datetime):
            return f"TIMESTAMP'{v.isoformat(sep=' ')}'"
        return f"'{v}'" if isinstance(v, str) else str(v)

    values = ", ".join("(" + ", ".join(lit(r.get(c)) for c in [*COLUMNS, "_op"]) + ")" for r in rows)
    return spark.sql(
        "SELECT CAST(id AS BIGINT) AS id, CAST(ts AS TIMESTAMP) AS ts, CAST(v AS STRING) AS v, "
        f"CAST(seq AS BIGINT) AS seq, CAST(_op AS STRING) AS _op FROM VALUES {values} AS t(id, ts, v, seq, _op)"
    )


def check(spark: Any, table: str, model: ReferenceModel) -> None:
    assert table_rows(spark, table, COLUMNS, KEY) == model.rows


@pytest.mark.guarantee
@pytest.mark.parametrize("distribution", ["dynamic", "key", "partition", "none"])
def test_random_batches_match_the_model(spark: Any, table_name: str, distribution: str) -> None:
    make_table(spark, table_name, partition_by=["hours(ts)", "bucket(4, id)"])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="prop", order_by="seq", distribution=distribution)
    model = ReferenceModel(KEY, COLUMNS, "seq")
    rng = random.Random(f"sink-{distribution}")  # a fixed seed per case: a failure can be replayed
    batches = 8 if distribution == "dynamic" else 4
    history = []
    for batch_id in range(1, batches + 1):
        rows = random_batch(rng, keys=25, size=rng.randrange(1, 60))
        history.append(rows)
        result = sink.write(to_df(spark, rows), batch_id=batch_id, source_position={"n": batch_id})
        assert result.committed
        model.apply(batch_id, rows)
        check(spark, table_name, model)
        if batch_id % 3 == 0:  # replaying any committed batch changes nothing
            old = rng.randrange(1, batch_id + 1)
            replay = sink.write(to_df(spark, history[old - 1]), batch_id=old)
            assert not replay.committed
            check(spark, table_name, model)
    state = sink.last_committed()
    assert state is not None and state.batch_id == batches and state.source_position == {"n": batches}


def test_a_reader_in_the_same_session_sees_every_commit_after_its_cache_entry_expired(
    spark: Any, table_name: str
) -> None:
    """Spark reads go through the catalog's table cache, whose entry expires after 30 s without
    access (or is collected) and is then another Java object than the sink's: the sink drops the
    entry at each commit, so `spark.table` never stays on an old snapshot. (This is how the model
    checks above failed on a machine so loaded that a batch took over 30 s.)"""
    from icetide.table.iceberg import iceberg_catalog

    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="cache")
    model = ReferenceModel(KEY, COLUMNS, None)
    catalog, identifier = table_name.split(".", 1)
    expire = iceberg_catalog(spark, catalog).invalidateTable
    ident = spark._jvm.org.apache.iceberg.catalog.TableIdentifier.parse(identifier)
    for batch_id, v in enumerate(["one", "two", "three"], start=1):
        rows = [{"id": 1, "ts": naive(T0), "v": v, "seq": batch_id, "_op": "UPSERT"}]
        assert sink.write(to_df(spark, rows), batch_id=batch_id).committed
        model.apply(batch_id, rows)
        check(spark, table_name, model)
        expire(ident)  # as the cache does after 30 s idle: the next read loads another object
        check(spark, table_name, model)


@pytest.mark.parametrize("cached", [True, False])
def test_small_batch_skips_the_statistics_job_and_matches_the_model(spark: Any, table_name: str, cached: bool) -> None:
    """A batch Spark knows to be far below a target file goes to one writer task without the
    statistics job: one Spark job, one data file per partition, the same rows as the model."""
    make_table(spark, table_name, partition_by=["hours(ts)", "bucket(4, id)"])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="small", order_by="seq")
    model = ReferenceModel(KEY, COLUMNS, "seq")
    rng = random.Random(16)
    tracker = spark.sparkContext.statusTracker()
    for batch_id in range(1, 5):
        rows = random_batch(rng, keys=25, size=rng.randrange(20, 60))
        if cached:  # a materialized cache: Spark knows its exact size
            df = to_df(spark, rows).cache()
            df.count()
        else:  # an inline table: a local relation of known size, not cached
            df = values_df(spark, rows)
        jobs_before = len(tracker.getJobIdsForGroup())
        result = sink.write(df, batch_id=batch_id)
        jobs = len(tracker.getJobIdsForGroup()) - jobs_before
        assert sink.last_plan is not None and sink.last_plan.estimated
        assert jobs == 1 if cached else jobs <= 2  # the write (and its shuffle's map stage when not cached)
        assert result.committed
        assert sorted(result.files_per_partition.values()) == [1] * len(result.files_per_partition)
        model.apply(batch_id, rows)
        check(spark, table_name, model)
    # Spark's default size for an RDD is unknown: the statistics job still plans such a batch.
    rows = random_batch(rng, keys=25, size=30)
    sink.write(to_df(spark, rows), batch_id=5)
    assert sink.last_plan is not None and not sink.last_plan.estimated
    model.apply(5, rows)
    check(spark, table_name, model)


def test_delete_of_absent_key_and_repeated_insert(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="p", order_by="seq")
    model = ReferenceModel(KEY, COLUMNS, "seq")
    ts = naive(T0)
    batches = [
        [
            {"id": 1, "ts": ts, "v": "x", "seq": 1, "_op": "INSERT"},
            {"id": 9, "ts": ts, "v": None, "seq": 1, "_op": "DELETE"},
        ],
        [{"id": 1, "ts": ts, "v": "x", "seq": 1, "_op": "INSERT"}],  # repeated INSERT: still one row
        [
            {"id": 1, "ts": ts, "v": None, "seq": 2, "_op": "DELETE"},
            {"id": 1, "ts": ts, "v": "y", "seq": 3, "_op": "INSERT"},
        ],
    ]
    for i, rows in enumerate(batches, start=1):
        sink.write(to_df(spark, rows), batch_id=i)
        model.apply(i, rows)
        check(spark, table_name, model)
    assert model.rows == {(1, ts): (1, ts, "y", 3)}


def test_changelog_mode_writes_no_delete_for_new_keys(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="cl", order_by="seq", changelog=True)
    rows = [{"id": i, "ts": naive(T0), "v": "n", "seq": 1, "_op": "INSERT"} for i in range(10)]
    result = sink.write(to_df(spark, rows), batch_id=1)
    assert result.rows_written == 10 and result.delete_rows == 0 and result.delete_files == 0
    rows2 = [{"id": 3, "ts": naive(T0), "v": "u", "seq": 2, "_op": "UPSERT"}]
    result = sink.write(to_df(spark, rows2), batch_id=2)
    assert result.delete_rows == 1
    model = ReferenceModel(KEY, COLUMNS, "seq")
    model.apply(1, rows)
    model.apply(2, rows2)
    check(spark, table_name, model)


def test_files_roll_at_target_size_and_carry_pipeline_and_batch(spark: Any, table_name: str) -> None:
    make_table(spark, table_name, partition_by=[])
    sink = icetide.UpsertSink(
        spark, table_name, pipeline_id="roll", target_file_size=16 * 1024, distribution="partition"
    )
    df = spark.range(60_000).selectExpr("id", "timestamp'2026-01-01 10:00:00' AS ts", "uuid() AS v", "id AS seq")
    result = sink.write(df, batch_id=7)
    assert result.data_files > 3  # one task, rolled many times
    paths = [r[0] for r in spark.sql(f"SELECT file_path FROM {table_name}.files WHERE content = 0").collect()]
    assert len(paths) == result.data_files
    assert all("icetide-roll-b000000000007-" in p for p in paths)
    sizes = [r[0] for r in spark.sql(f"SELECT file_size_in_bytes FROM {table_name}.files").collect()]
    assert max(sizes) < 16 * 1024 * 4
    assert spark.table(table_name).count() == 60_000


def test_writer_config_version_follows_writer_properties_not_pipeline_state(spark: Any, table_name: str) -> None:
    """The append fast path rebuilds its task config only when this version changes: a commit
    (which rewrites the pipeline-state property) must not change it, a writer property must."""
    make_table(spark, table_name, partition_by=[])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="version")
    before = sink.writer_config_version()
    rows = spark.range(10).selectExpr("id", "timestamp'2026-01-01 10:00:00' AS ts", "'x' AS v", "id AS seq")
    sink.write(rows, batch_id=1)
    assert sink.writer_config_version() == before
    spark.sql(f"ALTER TABLE {table_name} SET TBLPROPERTIES ('write.parquet.compression-codec' = 'snappy')")
    sink.committer.table.refresh()
    assert sink.writer_config_version() != before
    assert sink.writer_config(2, ()).compression == "snappy"


def test_another_writer_commits_between_write_and_commit(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    mine = icetide.UpsertSink(spark, table_name, pipeline_id="mine", order_by="seq")
    other = icetide.UpsertSink(spark, table_name, pipeline_id="other", order_by="seq")
    model = ReferenceModel(KEY, COLUMNS, "seq")
    first = [{"id": i, "ts": naive(T0), "v": "base", "seq": 0, "_op": None} for i in range(6)]
    mine.write(to_df(spark, first), batch_id=1)
    model.apply(1, first)
    theirs = [{"id": i, "ts": naive(T0), "v": "theirs", "seq": 0, "_op": None} for i in (1, 2, 10)]
    ours = [{"id": i, "ts": naive(T0), "v": "ours", "seq": 0, "_op": None} for i in (2, 3)]
    original = mine.committer.commit

    def commit_after_other_writer(*args: Any, **kw: Any) -> Any:
        other.write(to_df(spark, theirs), batch_id=1)  # lands after our files are written
        return original(*args, **kw)

    mine.committer.commit = commit_after_other_writer  # type: ignore[method-assign]
    assert mine.write(to_df(spark, ours), batch_id=2).committed
    expected = dict(model.rows)
    for r in theirs + ours:  # ours committed last, so it wins on key 2
        expected[(r["id"], r["ts"])] = (r["id"], r["ts"], r["v"], r["seq"])
    assert table_rows(spark, table_name, COLUMNS, KEY) == expected


@pytest.mark.guarantee
def test_a_commit_through_a_shared_table_between_state_read_and_commit_is_caught(spark: Any, table_name: str) -> None:
    """Two sinks of one pipeline get one Java table from the catalog's cache. The other commits
    the same batch after this one read the committed batch and before it starts its commit, and
    the shared table moves on: the commit must still see the batch as landed, never land it twice.
    (Found by the concurrent-writers test below, on PySpark 3.5.8 in CI.)"""
    make_table(spark, table_name)
    mine = icetide.UpsertSink(spark, table_name, pipeline_id="shared", order_by="seq")
    other = icetide.UpsertSink(spark, table_name, pipeline_id="shared", order_by="seq")
    rows = [{"id": i, "ts": naive(T0), "v": "b2", "seq": 0, "_op": None} for i in range(3)]
    mine.write(to_df(spark, rows[:1]), batch_id=1)
    original = mine.committer._content_files

    def other_commits_first(*args: Any, **kw: Any) -> Any:  # runs after the committed-batch check
        assert other.write(to_df(spark, rows), batch_id=2).committed
        mine.committer.table.refresh()  # what a commit through the shared table does
        return original(*args, **kw)

    mine.committer._content_files = other_commits_first  # type: ignore[method-assign]
    assert not mine.write(to_df(spark, rows), batch_id=2).committed
    batches = [
        r["b"] for r in spark.sql(f"SELECT summary['icetide.batch-id'] AS b FROM {table_name}.snapshots").collect()
    ]
    assert sorted(int(b) for b in batches) == [1, 2]


@pytest.mark.guarantee
def test_concurrent_writers_of_one_pipeline_land_each_batch_once(spark: Any, table_name: str) -> None:
    """Two sinks with the same pipeline id (a zombie and its replacement) race on every batch."""
    make_table(spark, table_name)
    sinks = [icetide.UpsertSink(spark, table_name, pipeline_id="zombie", order_by="seq") for _ in range(2)]
    batches = {
        b: [{"id": b * 100 + i, "ts": naive(T0), "v": f"b{b}", "seq": 0, "_op": "INSERT"} for i in range(5)]
        for b in range(1, 5)
    }
    outcomes: list[tuple[int, bool]] = []
    errors: list[BaseException] = []

    def run(sink: icetide.UpsertSink) -> None:
        try:
            for b, rows in batches.items():
                outcomes.append((b, sink.write(to_df(spark, rows), batch_id=b).committed))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    model = ReferenceModel(KEY, COLUMNS, "seq")
    for b, rows in batches.items():
        model.apply(b, rows)
    check(spark, table_name, model)
    snapshots = spark.sql(f"SELECT summary['icetide.batch-id'] AS b FROM {table_name}.snapshots").collect()
    committed = [int(r["b"]) for r in snapshots]
    assert sorted(committed) == [1, 2, 3, 4]  # every batch committed, none twice
    assert sorted(b for b, landed in outcomes if landed) == [1, 2, 3, 4]


def test_schema_drift(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="drift")
    # A batch may omit nullable columns and use narrower types.
    df = spark.createDataFrame([(1, naive(T0))], "id int, ts timestamp")
    assert sink.write(df, batch_id=1).committed
    assert table_rows(spark, table_name, COLUMNS, KEY) == {(1, naive(T0)): (1, naive(T0), None, None)}
    bad = spark.createDataFrame([(2, naive(T0), "x")], "id long, ts timestamp, extra string")
    with pytest.raises(SchemaError, match="'extra'"):
        sink.write(bad, batch_id=2)
    bad = spark.createDataFrame([("two", naive(T0))], "id string, ts timestamp")
    with pytest.raises(SchemaError, match="'id' is string"):
        sink.write(bad, batch_id=2)
    bad = spark.createDataFrame([(3, "x")], "id long, v string")
    with pytest.raises(SchemaError, match="NOT NULL column 'ts'"):
        sink.write(bad, batch_id=2)
    nulls = spark.createDataFrame([(None, naive(T0))], "id long, ts timestamp")
    with pytest.raises(SchemaError, match="'id' is NOT NULL"):
        sink.write(nulls, batch_id=2)
    assert sink.last_committed().batch_id == 1  # type: ignore[union-attr]
    leftovers = spark.sql(f"SELECT count(*) FROM {table_name}.files").first()[0]
    assert leftovers == 2  # batch 1's data and delete file; nothing of the failed batches


def test_unknown_op_fails_the_batch_with_its_value(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="ops")
    df = spark.createDataFrame([(1, naive(T0), "x", 1, "MERGE")], DDL)
    with pytest.raises(SchemaError, match="'MERGE'"):
        sink.write(df, batch_id=1)
    assert sink.last_committed() is None


def test_create_table_is_idempotent_and_refuses_a_conflicting_definition(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    make_table(spark, table_name)  # same definition: a no-op
    make_table(spark, table_name, partition_by=["days(ts)"])  # another spec: the table evolved, accepted
    with pytest.raises(SchemaError, match=r"key: the table's key is \['id', 'ts'\], the pipeline declares \['id'\]"):
        icetide.create_table(spark, table_name, schema=SCHEMA, key=["id"])
    with pytest.raises(SchemaError, match=r"column 'seq' is long in the table, which cannot hold the declared string"):
        icetide.create_table(spark, table_name, schema=SCHEMA.replace("seq BIGINT", "seq STRING"), key=KEY)
    with pytest.raises(SchemaError, match=r"column 'w' \(string\) is declared but the table has no such column"):
        icetide.create_table(spark, table_name, schema=SCHEMA + ", w STRING", key=KEY)
    with pytest.raises(ConfigError, match=r"'v'.*not part of the key"):
        icetide.create_table(spark, table_name + "_x", schema=SCHEMA, key=KEY, partition_by=["v"])
    props = icetide.create_table(spark, table_name, schema=SCHEMA, key=KEY, partition_by=["hours(ts)"]).properties()
    assert props.get("format-version") == "2" or spark.sql(f"SHOW TBLPROPERTIES {table_name}").count() > 0
    assert props.get("write.delete.mode") == "merge-on-read"


@pytest.mark.parametrize(
    "partition_by",
    [["days(ts)"], ["months(ts)"], ["years(ts)"], ["bucket(3, id)"], ["truncate(10, id)"], ["id"], []],
)
def test_every_transform_round_trips(spark: Any, table_name: str, partition_by: list[str]) -> None:
    make_table(spark, table_name, partition_by=partition_by)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="t", order_by="seq")
    model = ReferenceModel(KEY, COLUMNS, "seq")
    rows = [{"id": i, "ts": naive(T0 + timedelta(days=40 * i)), "v": str(i), "seq": 0, "_op": None} for i in range(12)]
    sink.write(to_df(spark, rows), batch_id=1)
    model.apply(1, rows)
    deletes = [{**rows[i], "_op": "DELETE", "seq": 1} for i in (0, 5, 11)]
    sink.write(to_df(spark, deletes), batch_id=2)
    model.apply(2, deletes)
    check(spark, table_name, model)
    # Spark's partition pruning agrees with the values icetide wrote.
    hit = spark.table(table_name).where(f"id = 7 AND ts = timestamp'{naive(T0 + timedelta(days=280))}'").count()
    assert hit == 1


def test_string_partition_values_with_slashes(spark: Any, table_name: str) -> None:
    icetide.create_table(
        spark, table_name, schema="k STRING NOT NULL, v INT", key=["k"], partition_by=["k", "truncate(2, k)"]
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="s")
    keys = ["a/b", "a=b", "x y", "%2F", "ü"]
    sink.write(spark.createDataFrame([(k, i) for i, k in enumerate(keys)], "k string, v int"), batch_id=1)
    got = {r["k"]: r["v"] for r in spark.table(table_name).collect()}
    assert got == {k: i for i, k in enumerate(keys)}
    assert spark.table(table_name).where("k = 'a/b'").count() == 1


def test_bad_sink_config_names_the_key(spark: Any, table_name: str) -> None:
    make_table(spark, table_name)
    with pytest.raises(ConfigError, match="distribution"):
        icetide.UpsertSink(spark, table_name, pipeline_id="x", distribution="random")
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="x", order_by="nope")
    with pytest.raises(SchemaError, match="order_by column 'nope'"):
        sink.write(spark.createDataFrame([(1, naive(T0))], "id long, ts timestamp"), batch_id=1)
    with pytest.raises(ConfigError, match="pipeline_id"):
        icetide.UpsertSink(spark, table_name, pipeline_id="")


def test_per_batch_settings_override_the_sinks_for_that_batch_only(spark: Any, table_name: str) -> None:
    """`write(order_by=...)` decides which change of a key wins in that batch (in the writers and in
    the Spark collapse of distribution `none`); the next batch orders by the sink's own again."""
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="per-batch")  # no order_by: the last arrival wins
    ts = naive(T0)

    def changes(first: str, second: str) -> list[dict[str, Any]]:
        # The first to arrive has the higher seq: order_by="seq" keeps it, arrival order the second.
        return [{"id": 1, "ts": ts, "v": first, "seq": 2}, {"id": 1, "ts": ts, "v": second, "seq": 1}]

    def value() -> str:
        return spark.table(table_name).where("id = 1").collect()[0]["v"]

    assert sink.write(to_df(spark, changes("a", "b")), batch_id=1, order_by="seq").committed
    assert value() == "a"
    assert sink.write(to_df(spark, changes("c", "d")), batch_id=2).committed
    assert value() == "d"
    assert sink.write(to_df(spark, changes("e", "f")), batch_id=3, order_by="seq", distribution="none").committed
    assert value() == "e"
    assert (sink.order_by, sink.distribution) == (None, "dynamic")
    with pytest.raises(ConfigError, match="distribution: 'random'"):
        sink.write(to_df(spark, changes("g", "h")), batch_id=4, distribution="random")
    with pytest.raises(ConfigError, match="write_parallelism"):
        sink.write(to_df(spark, changes("g", "h")), batch_id=4, write_parallelism=0)
    assert sink.last_committed().batch_id == 3  # type: ignore[union-attr]
    assert spark.table(table_name).count() == 1


def _throw(spark: Any, java_class: str, message: str) -> None:
    """Make the JVM throw `java_class` the way a catalog would during a commit."""
    jvm = spark._jvm
    exc = (
        jvm.org.apache.iceberg.exceptions.CommitStateUnknownException(jvm.java.lang.RuntimeException(message))
        if java_class.endswith("CommitStateUnknownException")
        else jvm.java.lang.IllegalStateException(message)
    )
    jvm.org.apache.iceberg.util.ExceptionUtil.castAndThrow(exc, exc.getClass())


def _batch_files(warehouse: str, table: str, batch_id: int) -> list[str]:
    from pathlib import Path

    folder = Path(warehouse).joinpath(*table.split(".")[1:])
    return [str(p) for p in folder.rglob(f"icetide-fail-b{batch_id:012d}-*.parquet")]


def test_definite_commit_failure_deletes_files_and_unknown_state_keeps_them(
    spark: Any, table_name: str, warehouse: str
) -> None:
    make_table(spark, table_name)
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="fail")
    rows = [{"id": 1, "ts": naive(T0), "v": "x", "seq": 1, "_op": None}]
    sink.committer._attempt = lambda *a, **k: _throw(spark, "java.lang.IllegalStateException", "catalog refused")  # type: ignore[method-assign]
    with pytest.raises(icetide.CommitFailedError, match="catalog refused"):
        sink.write(to_df(spark, rows), batch_id=1)
    assert _batch_files(warehouse, table_name, 1) == []  # definitely not committed: files deleted
    sink.committer._attempt = lambda *a, **k: _throw(  # type: ignore[method-assign]
        spark, "org.apache.iceberg.exceptions.CommitStateUnknownException", "socket closed"
    )
    sink.committer._batch_landed = lambda *a, **k: None  # type: ignore[method-assign]
    with pytest.raises(icetide.CommitStateUnknownError, match="state unknown"):
        sink.write(to_df(spark, rows), batch_id=2)
    assert len(_batch_files(warehouse, table_name, 2)) == 2  # may have landed: nothing deleted
    assert sink.last_committed() is None
