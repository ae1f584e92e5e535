"""Table spec parsing and validation: pure, no Spark."""

import pytest

from icetide.errors import ConfigError
from icetide.table.spec import PartitionTransform, TableSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ts", PartitionTransform("identity", "ts")),
        ("identity(s)", PartitionTransform("identity", "s")),
        ("hours(ts)", PartitionTransform("hours", "ts")),
        ("hour(ts)", PartitionTransform("hours", "ts")),
        ("days(ts)", PartitionTransform("days", "ts")),
        ("months(ts)", PartitionTransform("months", "ts")),
        ("years(ts)", PartitionTransform("years", "ts")),
        ("bucket(16, id)", PartitionTransform("bucket", "id", 16)),
        ("truncate(4,s)", PartitionTransform("truncate", "s", 4)),
    ],
)
def test_partition_transforms_parse(text: str, expected: PartitionTransform) -> None:
    assert PartitionTransform.parse(text) == expected


@pytest.mark.parametrize("text", ["hours()", "bucket(id)", "bucket(0, id)", "weeks(ts)", "hours(a, b)", "1bad"])
def test_bad_partition_transforms_name_the_problem(text: str) -> None:
    with pytest.raises(ConfigError, match="partition_by"):
        PartitionTransform.parse(text)


def test_spark_expressions_use_icebergs_functions() -> None:
    assert PartitionTransform.parse("hours(ts)").spark_expression("lake") == "lake.system.hours(`ts`)"
    assert PartitionTransform.parse("bucket(8, id)").spark_expression("lake") == "lake.system.bucket(8, `id`)"
    assert PartitionTransform.parse("region").spark_expression("lake") == "`region`"


def test_iceberg_spellings_round_trip() -> None:
    assert PartitionTransform.from_iceberg("bucket[16]", "id") == PartitionTransform("bucket", "id", 16)
    assert PartitionTransform.from_iceberg("hour", "ts") == PartitionTransform("hours", "ts")


def test_partition_source_must_be_in_key() -> None:
    with pytest.raises(ConfigError, match=r"'ts'.*not part of the key"):
        TableSpec.of("id BIGINT NOT NULL, ts TIMESTAMP NOT NULL", ["id"], ["hours(ts)"])
    spec = TableSpec.of("id BIGINT NOT NULL, ts TIMESTAMP NOT NULL", ["id", "ts"], ["hours(ts)", "bucket(4, id)"])
    assert [str(p) for p in spec.partition_by] == ["hours(ts)", "bucket(4, id)"]


def test_key_is_required() -> None:
    with pytest.raises(ConfigError, match="key"):
        TableSpec.of("id BIGINT NOT NULL", [])
