"""Schema and partition evolution under a streaming sink, against the reference model (issue 14, items 5, 6)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow.parquet as pq
import pytest

import icetide
from icetide.config.pipeline import PipelineConfig
from icetide.errors import ConfigError, IcetideError, SchemaError, SchemaEvolutionError
from icetide.maintenance.compaction import compact
from icetide.table.iceberg import load_table
from tests.model import ReferenceModel, table_rows

T0 = datetime(2026, 1, 1, 10)
KEY = ["id", "ts"]


# ---------------------------------------------------------------- partition evolution


def _rows(ids: range, *, v: str, op: str | None = None, hours: int = 30) -> list[dict[str, Any]]:
    """One row per id, spread over `hours` hours (so several days and hours partitions)."""
    return [{"id": i, "ts": T0 + timedelta(hours=i % hours), "v": v, "_op": op} for i in ids]


def _df(spark: Any, rows: list[dict[str, Any]]) -> Any:
    return spark.createDataFrame(
        [(r["id"], r["ts"], r["v"], r["_op"]) for r in rows], "id long, ts timestamp, v string, _op string"
    )


def _check(spark: Any, table: str, model: ReferenceModel) -> None:
    assert table_rows(spark, table, ["id", "ts", "v"], KEY) == model.rows


def _spec_ids_of_files(spark: Any, table: str, content: int) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in spark.sql(f"SELECT spec_id FROM {table}.files WHERE content = {content}").collect():
        counts[r["spec_id"]] = counts.get(r["spec_id"], 0) + 1
    return counts


def test_replace_partition_field_upserts_and_deletes_reach_old_rows(spark: Any, table_name: str) -> None:
    """The reported case: days(ts) -> hours(ts), then 100 upserts and 10 deletes must leave 90 rows."""
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
        key=KEY,
        partition_by=["days(ts)"],
        format_version=2,  # equality deletes under every live spec: what these tests are about
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="p")
    model = ReferenceModel(KEY, ["id", "ts", "v"], None)
    first = _rows(range(100), v="old")
    assert sink.write(_df(spark, first), batch_id=1).committed
    model.apply(1, first)
    spark.sql(f"ALTER TABLE {table_name} REPLACE PARTITION FIELD days(ts) WITH hours(ts)")
    sink.committer.table.refresh()
    # The fast paths cache their writer config per this version: it names the earlier specs with
    # live files (spec 0 here), so a change of those alone builds the config again (helper-29).
    assert sink.writer_config_version()[-1] == (0,)
    second = _rows(range(100), v="new") + _rows(range(10), v="", op="DELETE")
    result = sink.write(_df(spark, second), batch_id=2)
    assert result.committed
    model.apply(2, second)
    _check(spark, table_name, model)
    assert len(model.rows) == 90 and {r[2] for r in model.rows.values()} == {"new"}
    # Deletes were written under both specs: the new one (spec 1) and the old one with live rows (spec 0).
    assert set(_spec_ids_of_files(spark, table_name, 2)) == {0, 1}
    # Once maintenance folds everything into the new spec, spec 0 has no live files and gets no deletes.
    compact(spark, table_name, min_input_files=1, delete_file_threshold=1)
    _check(spark, table_name, model)
    sink.committer.table.refresh()
    assert sink.writer_config_version()[-1] == ()  # spec 0 has no live files: a new version
    third = _rows(range(20, 40), v="third") + _rows(range(40, 45), v="", op="DELETE")
    assert sink.write(_df(spark, third), batch_id=3).committed
    model.apply(3, third)
    _check(spark, table_name, model)


def test_add_and_drop_partition_fields_against_the_model(spark: Any, table_name: str) -> None:
    """Unpartitioned -> add days(ts) -> add bucket(4, id) -> drop days(ts): random upserts and deletes each step."""
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
        key=KEY,
        partition_by=[],
        format_version=2,  # equality deletes under every live spec: what these tests are about
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="p")
    model = ReferenceModel(KEY, ["id", "ts", "v"], None)
    rng = random.Random(14)
    evolutions = [
        None,
        "ADD PARTITION FIELD days(ts)",
        "ADD PARTITION FIELD bucket(4, id)",
        "DROP PARTITION FIELD days(ts)",
    ]
    batch_id = 0
    for step, ddl in enumerate(evolutions):
        if ddl:
            spark.sql(f"ALTER TABLE {table_name} {ddl}")
        for _ in range(2):
            batch_id += 1
            rows = []
            for _ in range(rng.randrange(20, 60)):
                i = rng.randrange(40)
                op = rng.choice(["UPSERT", "UPSERT", "DELETE", None])
                rows.append({"id": i, "ts": T0 + timedelta(hours=i % 30), "v": f"s{step}b{batch_id}", "_op": op})
            assert sink.write(_df(spark, rows), batch_id=batch_id).committed
            model.apply(batch_id, rows)
            _check(spark, table_name, model)
    jtable = load_table(spark, table_name)
    assert len(list(jtable.specs().keySet())) == 4
    # Compaction after the evolutions keeps every row as the model has it, and later batches still apply.
    compact(spark, table_name, min_input_files=1, delete_file_threshold=1)
    _check(spark, table_name, model)
    rows = _rows(range(0, 40, 3), v="after", op=None) + _rows(range(1, 40, 5), v="", op="DELETE")
    assert sink.write(_df(spark, rows), batch_id=batch_id + 1).committed
    model.apply(batch_id + 1, rows)
    _check(spark, table_name, model)


def test_a_spec_partitioned_by_a_non_key_column_is_refused(spark: Any, table_name: str) -> None:
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
        key=KEY,
        partition_by=[],
        format_version=2,  # equality deletes under every live spec: what these tests are about
    )
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="p")
    assert sink.write(_df(spark, _rows(range(10), v="a")), batch_id=1).committed
    spark.sql(f"ALTER TABLE {table_name} ADD PARTITION FIELD truncate(1, v)")
    before = load_table(spark, table_name).currentSnapshot().snapshotId()
    with pytest.raises(SchemaError, match=r"partition field 'v_trunc_1' \(truncate\(1, v\)\).*not in the key"):
        sink.write(_df(spark, _rows(range(10), v="b")), batch_id=2)
    jtable = load_table(spark, table_name)
    jtable.refresh()
    assert jtable.currentSnapshot().snapshotId() == before
    assert {r[2] for r in table_rows(spark, table_name, ["id", "ts", "v"], KEY).values()} == {"a"}


# ---------------------------------------------------------------- schema evolution

BASE = "id BIGINT NOT NULL, n INT, price DECIMAL(10,2)"


class EvolvingModel:
    """key -> dict of column values; a column never written reads None."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def apply(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if r.get("_op") == "DELETE":
                self.rows.pop(r["id"], None)
            else:
                self.rows[r["id"]] = {k: v for k, v in r.items() if k != "_op"}

    def expected(self, columns: list[str]) -> dict[int, tuple[Any, ...]]:
        return {i: tuple(row.get(c) for c in columns) for i, row in self.rows.items()}


def _read(spark: Any, table: str, columns: list[str]) -> dict[int, tuple[Any, ...]]:
    out = {}
    for r in spark.table(table).collect():
        assert r["id"] not in out
        out[r["id"]] = tuple(r[c] for c in columns)
    return out


def _files_fit_their_snapshot_schema(spark: Any, table: str) -> int:
    """Every data file a snapshot added has only field ids the snapshot's own schema knows; returns files checked."""
    jtable = load_table(spark, table)
    jtable.refresh()
    checked = 0
    schemas = jtable.schemas()
    for snapshot in jtable.snapshots():
        schema = schemas.get(snapshot.schemaId())
        known = {int(i) for i in schema.idToName().keySet()}
        for data_file in snapshot.addedDataFiles(jtable.io()):
            path = str(data_file.location()).removeprefix("file:")
            ids = {
                int(f.metadata[b"PARQUET:field_id"]) for f in pq.read_schema(path) if b"PARQUET:field_id" in f.metadata
            }
            assert ids <= known, f"snapshot {snapshot.snapshotId()} holds a file with field ids {ids - known} unknown"
            checked += 1
    return checked


def test_stream_that_adds_and_widens_columns(spark: Any, table_name: str) -> None:
    icetide.create_table(spark, table_name, schema=BASE, key=["id"], partition_by=["bucket(2, id)"])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="evo", schema_evolution=True)
    model = EvolvingModel()
    batches: list[tuple[str, list[dict[str, Any]]]] = [
        (
            "id long, n int, price decimal(10,2), _op string",
            [{"id": i, "n": i, "price": Decimal("1.50")} for i in range(6)],
        ),
        # a new column, a new nested column
        (
            "id long, n int, price decimal(10,2), note string, tags array<string>, _op string",
            [
                {"id": i, "n": i * 2, "price": Decimal("2.25"), "note": f"n{i}", "tags": ["a", str(i)]}
                for i in range(3, 9)
            ],
        ),
        # int -> bigint with a value int cannot hold
        (
            "id long, n long, _op string",
            [{"id": 1, "n": 5_000_000_000}, {"id": 2, "_op": "DELETE", "n": None}],
        ),
        # decimal(10,2) -> decimal(12,2) with a value decimal(10,2) cannot hold
        ("id long, price decimal(12,2), _op string", [{"id": 4, "price": Decimal("1234567890.12")}]),
        # narrower types into the widened columns are written as they are
        ("id long, n int, price decimal(5,1), _op string", [{"id": 7, "n": 7, "price": Decimal("9.5")}]),
    ]
    columns = ["n", "price", "note", "tags"]
    for batch_id, (ddl, rows) in enumerate(batches, start=1):
        names = [c.split()[0] for c in ddl.split(", ")]
        data = [tuple(r.get(c) for c in names) for r in rows]
        result = sink.write(spark.createDataFrame(data, ddl), batch_id=batch_id)
        assert result.committed
        # Columns absent from a batch read NULL for its rows (an upsert replaces the whole row).
        model.apply([{c: r.get(c) for c in ["id", *columns, "_op"]} for r in rows])
        present = [c for c in columns if c in spark.table(table_name).columns]
        assert _read(spark, table_name, present) == model.expected(present), f"after batch {batch_id}"
    schema = {f.name: f.dataType.simpleString() for f in spark.table(table_name).schema.fields}
    assert schema == {
        "id": "bigint",
        "n": "bigint",
        "price": "decimal(12,2)",
        "note": "string",
        "tags": "array<string>",
    }
    assert _read(spark, table_name, columns)[0] == (0, Decimal("1.50"), None, None)  # older rows read NULL
    assert _files_fit_their_snapshot_schema(spark, table_name) >= 5
    # Each evolving batch made exactly one snapshot, holding the schema change and the data together.
    jtable = load_table(spark, table_name)
    snapshots = list(jtable.snapshots())
    assert len(snapshots) == len(batches)
    assert len({int(s.schemaId()) for s in snapshots}) == 4  # base, +note/tags, n bigint, price decimal(12,2)


def test_incompatible_change_stops_with_nothing_committed(spark: Any, table_name: str) -> None:
    icetide.create_table(spark, table_name, schema=BASE, key=["id"])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="evo", schema_evolution=True)
    ok = spark.createDataFrame([(1, 1, Decimal("1.00"))], "id long, n int, price decimal(10,2)")
    assert sink.write(ok, batch_id=1).committed
    before = load_table(spark, table_name)
    before.refresh()
    snapshot, schema_id = before.currentSnapshot().snapshotId(), before.schema().schemaId()
    bad = [
        (spark.createDataFrame([(2, "x", "new")], "id long, n string, extra string"), "'n'.*string.*int"),
        (spark.createDataFrame([(2, Decimal("1.234"))], "id long, price decimal(10,3)"), "'price'.*decimal"),
        (spark.createDataFrame([(2, 1.5)], "id long, n double"), "'n'.*double.*int"),
    ]
    for df, pattern in bad:
        with pytest.raises(SchemaEvolutionError, match=pattern):
            sink.write(df, batch_id=2)
    after = load_table(spark, table_name)
    after.refresh()
    assert after.currentSnapshot().snapshotId() == snapshot and after.schema().schemaId() == schema_id
    assert spark.table(table_name).columns == ["id", "n", "price"]
    assert sink.last_committed().batch_id == 1  # type: ignore[union-attr]
    # Without evolution a new column is still an error naming it.
    plain = icetide.UpsertSink(spark, table_name, pipeline_id="plain")
    with pytest.raises(SchemaError, match="column 'extra' is not in table"):
        plain.write(spark.createDataFrame([(3, "x")], "id long, extra string"), batch_id=1)


def test_a_concurrent_schema_change_is_revalidated_at_commit(spark: Any, table_name: str) -> None:
    """Files written for a planned column id that another writer took in the meantime never commit."""
    icetide.create_table(spark, table_name, schema=BASE, key=["id"])
    sink = icetide.UpsertSink(spark, table_name, pipeline_id="evo", schema_evolution=True)
    df = spark.createDataFrame([(1, "a")], "id long, note string")
    written = sink.stage(df, batch_id=1)
    spark.sql(f"ALTER TABLE {table_name} ADD COLUMN other STRING")  # takes the id `note` was written with
    with pytest.raises(IcetideError, match="schema changed while the batch was written"):
        sink.commit_written(written)
    assert sink.last_committed() is None
    assert spark.table(table_name).count() == 0
    # Written again, the batch plans the next id and lands.
    assert sink.write(df, batch_id=1).committed
    assert [tuple(r) for r in spark.table(table_name).select("id", "note", "other").collect()] == [(1, "a", None)]


def test_schema_evolution_config_key() -> None:
    base = {
        "pipeline": "p",
        "source": {"files": {"path": "in"}},
        "table": {"name": "lake.db.t", "schema": "id BIGINT NOT NULL", "key": ["id"]},
    }
    assert PipelineConfig.from_dict(base).schema_evolution is False
    assert PipelineConfig.from_dict({**base, "schema_evolution": True}).schema_evolution is True
    with pytest.raises(ConfigError, match="schema_evolution"):
        PipelineConfig.from_dict({**base, "schema_evolution": "yes"})


def test_a_spec_that_became_live_during_the_write_is_rechecked_at_commit(spark: Any, table_name: str) -> None:
    """A batch whose deletes were planned before another writer filled a new spec never commits."""
    icetide.create_table(
        spark,
        table_name,
        schema="id BIGINT NOT NULL, ts TIMESTAMP NOT NULL, v STRING",
        key=KEY,
        partition_by=["days(ts)"],
        format_version=2,  # equality deletes under every live spec: what these tests are about
    )
    slow = icetide.UpsertSink(spark, table_name, pipeline_id="slow")
    fast = icetide.UpsertSink(spark, table_name, pipeline_id="fast")
    model = ReferenceModel(KEY, ["id", "ts", "v"], None)
    first = _rows(range(20), v="one")
    assert fast.write(_df(spark, first), batch_id=1).committed
    model.apply(1, first)
    written = slow.stage(_df(spark, _rows(range(10), v="slow")), batch_id=1)
    spark.sql(f"ALTER TABLE {table_name} REPLACE PARTITION FIELD days(ts) WITH hours(ts)")
    second = _rows(range(10, 30), v="two")
    assert fast.write(_df(spark, second), batch_id=2).committed
    model.apply(2, second)
    with pytest.raises(IcetideError, match=r"partition spec\(s\) \[1\] became live"):
        slow.commit_written(written)
    assert slow.last_committed() is None
    _check(spark, table_name, model)
    # Written again, the batch's deletes cover both specs and land.
    again = _rows(range(10), v="slow")
    assert slow.write(_df(spark, again), batch_id=1).committed
    model.apply(3, again)
    _check(spark, table_name, model)


def test_plan_change_rules() -> None:
    """The evolution rules on types alone (no Spark session)."""
    from pyspark.sql import types as T

    from icetide.write.evolution import fits_column, plan_change, widened

    assert widened(T.LongType(), T.IntegerType()) == T.LongType()
    assert widened(T.DoubleType(), T.FloatType()) == T.DoubleType()
    assert widened(T.DecimalType(12, 2), T.DecimalType(10, 2)) == T.DecimalType(12, 2)
    assert widened(T.DecimalType(11, 1), T.DecimalType(10, 2)) == T.DecimalType(12, 2)  # keeps the scale
    assert widened(T.DecimalType(10, 3), T.DecimalType(10, 2)) is None  # a scale change would round
    assert widened(T.DecimalType(38, 0), T.DecimalType(10, 2)) is None  # past 38 digits
    assert widened(T.StringType(), T.LongType()) is None
    assert widened(T.DoubleType(), T.IntegerType()) is None

    def struct(**types: Any) -> T.StructType:
        return T.StructType([T.StructField(n, t) for n, t in types.items()])

    inner = struct(a=T.IntegerType())
    table = struct(id=T.LongType(), n=T.IntegerType(), price=T.DecimalType(10, 2), f=T.FloatType(), s=inner)
    batch = struct(
        id=T.IntegerType(),
        n=T.LongType(),
        price=T.DecimalType(9, 2),
        f=T.DoubleType(),
        s=inner,
        m=T.MapType(T.StringType(), T.IntegerType()),
        z=T.NullType(),
        _op=T.StringType(),
    )
    change, evolved = plan_change(table, batch, ignore={"_op"}, fits=fits_column, table_name="t")
    assert [n for n, _ in change.adds] == ["m"]  # an untyped all-null column is not added
    assert [n for n, _ in change.widenings] == ["n", "f"]
    assert evolved.simpleString() == (
        "struct<id:bigint,n:bigint,price:decimal(10,2),f:double,s:struct<a:int>,m:map<string,int>>"
    )
    wider_struct = struct(s=struct(a=T.IntegerType(), b=T.IntegerType()))
    with pytest.raises(SchemaEvolutionError, match=r"column 's': the batch has struct<a:int,b:int>, table t has"):
        plan_change(table, wider_struct, ignore=set(), fits=fits_column, table_name="t")
    with pytest.raises(SchemaEvolutionError, match=r"column 'id': the batch has string, table t has bigint"):
        plan_change(table, struct(id=T.StringType()), ignore=set(), fits=fits_column, table_name="t")
