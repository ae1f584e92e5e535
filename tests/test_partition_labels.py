"""Partition labels: every transform as people read it, from stored values and from Iceberg's paths."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from icetide.table.partition_labels import (
    UNPARTITIONED,
    label_of_path,
    label_of_values,
    partition_title,
    value_label,
)
from icetide.table.spec import PartitionTransform

HOURS = PartitionTransform("hours", "ts")
DAYS = PartitionTransform("days", "ts")
MONTHS = PartitionTransform("months", "ts")
YEARS = PartitionTransform("years", "ts")
BUCKET = PartitionTransform("bucket", "id", 16)
TRUNCATE = PartitionTransform("truncate", "name", 4)
IDENTITY = PartitionTransform("identity", "region")


def hours_since_epoch(when: datetime) -> int:
    return int(when.replace(tzinfo=UTC).timestamp()) // 3600


@pytest.mark.parametrize(
    ("transform", "value", "label"),
    [
        (HOURS, hours_since_epoch(datetime(2026, 1, 1, 5)), "2026-01-01 05:00"),
        (HOURS, 490901, "2026-01-01 05:00"),  # the demo's raw hour count, seen in issue 27
        (HOURS, 0, "1970-01-01 00:00"),
        (HOURS, -1, "1969-12-31 23:00"),
        (DAYS, (date(2026, 1, 1) - date(1970, 1, 1)).days, "2026-01-01"),
        (DAYS, date(2026, 1, 1), "2026-01-01"),  # Spark's metadata tables give days as dates
        (MONTHS, (2026 - 1970) * 12, "2026-01"),
        (MONTHS, (2026 - 1970) * 12 + 11, "2026-12"),
        (MONTHS, -1, "1969-12"),
        (YEARS, 56, "2026"),
        (BUCKET, 3, "bucket[16]=3"),
        (TRUNCATE, "abcd", "truncate[4]=abcd"),
        (TRUNCATE, 120, "truncate[4]=120"),
        (IDENTITY, "eu-west", "eu-west"),
        (IDENTITY, 42, "42"),
        (IDENTITY, True, "true"),
        (IDENTITY, b"\x01\xff", "01ff"),
        (IDENTITY, None, "null"),
        (HOURS, None, "null"),
    ],
)
def test_value_labels(transform: PartitionTransform, value: object, label: str) -> None:
    assert value_label(transform, value) == label


def test_several_fields_join_and_void_fields_drop() -> None:
    assert label_of_values([HOURS, BUCKET], [490901, 3]) == "2026-01-01 05:00, bucket[16]=3"
    assert label_of_values([None, DAYS], [None, date(2026, 1, 2)]) == "2026-01-02"
    assert label_of_values([None], [None]) == UNPARTITIONED
    assert label_of_values([], []) == UNPARTITIONED


def test_labels_from_iceberg_partition_paths() -> None:
    assert label_of_path([HOURS], "event_time_hour=2026-01-01-05") == "2026-01-01 05:00"
    assert label_of_path([DAYS, BUCKET], "ts_day=2026-01-01/id_bucket=3") == "2026-01-01, bucket[16]=3"
    assert label_of_path([MONTHS, YEARS], "m=2026-01/y=2026") == "2026-01, 2026"
    assert label_of_path([TRUNCATE], "name_trunc=ab%2Fc") == "truncate[4]=ab/c"  # URL-encoded by Iceberg
    assert label_of_path([IDENTITY], "region=eu+west") == "eu west"
    assert label_of_path([IDENTITY], "region=null") == "null"
    assert label_of_path([], "") == UNPARTITIONED
    assert label_of_path([HOURS], "a=1/b=2") == "a=1/b=2"  # not this spec's path: left as written


def test_time_labels_sort_in_time_order() -> None:
    hours = [hours_since_epoch(datetime(2025, 12, 31, h)) for h in (9, 23, 10)] + [490901]
    labels = [value_label(HOURS, h) for h in hours]
    assert sorted(labels) == [value_label(HOURS, h) for h in sorted(hours)]


def test_titles() -> None:
    assert partition_title([HOURS]) == "hours(ts)"
    assert partition_title([None, BUCKET]) == "bucket(16, id)"
    assert partition_title([]) == "partition"


def test_compaction_plans_carry_the_labels_of_their_files() -> None:
    from icetide.maintenance.planning import CompactionOptions, DataFileRef, plan_groups

    def f(n: int, path: str, label: str) -> DataFileRef:
        return DataFileRef(f"{path}/{n}.parquet", 10, 1, n, (0, path), partition_label=label)

    files = [f(n, "ts_hour=2026-01-01-05", "2026-01-01 05:00") for n in range(3)]
    files += [f(9, "ts_hour=2026-01-01-04", "2026-01-01 04:00")]
    plan = plan_groups(files, CompactionOptions(target_file_size=1000, min_input_files=2))
    assert [g.label for g in plan.groups] == ["2026-01-01 05:00"]
    assert [s.partition for s in plan.skipped] == ["2026-01-01 04:00"]  # one small file: left alone
    unlabelled = DataFileRef("x.parquet", 10, 1, 1, (1, "ts_hour=2026-01-01-05"))
    assert unlabelled.label == "ts_hour=2026-01-01-05 [spec 1]"  # without a label: Iceberg's path
