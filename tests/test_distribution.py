"""Slot planning for the dynamic distribution, and the task routing it relies on."""

import pytest

from icetide.write.distribution import (
    MIN_TASK_BYTES,
    SMALL_BATCH_MARGIN,
    PartitionStats,
    is_small_batch,
    plan_slots,
    slots_for_partition,
    spark_hash_int,
    task_routing_values,
)


def test_slots_are_bytes_over_target_capped_by_parallelism() -> None:
    assert slots_for_partition(0, 100, 8) == 1
    assert slots_for_partition(100, 100, 8) == 1
    assert slots_for_partition(101, 100, 8) == 2
    assert slots_for_partition(10_000, 100, 8) == 8


def test_hot_partition_spreads_and_small_ones_share_tasks() -> None:
    stats = [PartitionStats(("hot",), 1000, 800), *[PartitionStats((f"old{i}",), 1, 10) for i in range(12)]]
    plan = plan_slots(stats, target_file_size=100, parallelism=4)
    assert plan.tasks == 4
    assert plan.slots[("hot",)] == [0, 1, 2, 3]  # 8 slots wanted, capped at 4 distinct tasks
    for i in range(12):
        assert len(plan.slots[(f"old{i}",)]) == 1  # a long-tail partition costs one file
    used = {t for tasks in plan.slots.values() for t in tasks}
    assert used == {0, 1, 2, 3}  # no task idle


def test_tiny_batch_uses_few_tasks() -> None:
    plan = plan_slots(
        [PartitionStats((1,), 3, 30), PartitionStats((2,), 3, 30)], target_file_size=10**6, parallelism=20
    )
    assert plan.tasks == 1  # 60 bytes need one task, which writes both partitions' files
    assert plan.files_expected() == 2


def test_a_batch_worth_sharing_uses_every_core_without_more_files() -> None:
    """48 hourly partitions of about 2 MB each: one file each fits one task, but one task would
    leave a core idle (a 2M-row INSERT ran at 0.51x Spark's native append so)."""
    mb = 1024 * 1024
    stats = [PartitionStats((h,), 40_000, 2 * mb) for h in range(48)]
    plan = plan_slots(stats, target_file_size=512 * mb, parallelism=2)
    assert plan.tasks == 2
    assert plan.files_expected() == 48  # still one file a partition
    assert {t for tasks in plan.slots.values() for t in tasks} == {0, 1}
    # one slot: one task, whatever its size
    assert plan_slots([PartitionStats((0,), 10**6, 100 * mb)], target_file_size=512 * mb, parallelism=8).tasks == 1
    # below MIN_TASK_BYTES twice over: one task
    small = [PartitionStats((h,), 100, MIN_TASK_BYTES // 100) for h in range(48)]
    assert plan_slots(small, target_file_size=512 * mb, parallelism=2).tasks == 1


def test_only_a_known_size_far_below_the_target_skips_the_statistics() -> None:
    target = 512 * 1024 * 1024
    assert is_small_batch(target // SMALL_BATCH_MARGIN, target)
    assert not is_small_batch(target // SMALL_BATCH_MARGIN + 1, target)
    assert not is_small_batch(None, target)  # no estimate: the statistics decide
    assert not is_small_batch(2**63 - 1, target)  # Spark's default size for an unknown source


def test_load_is_balanced_largest_first() -> None:
    stats = [PartitionStats((i,), 1, b) for i, b in enumerate([50, 40, 30, 20, 10])]
    plan = plan_slots(stats, target_file_size=60, parallelism=2)
    loads = [0, 0]
    for s in stats:
        loads[plan.slots[s.values][0]] += s.estimated_bytes
    assert sorted(loads) == [70, 80]


@pytest.mark.parametrize("n", [1, 2, 7, 20, 64])
def test_routing_values_hit_every_task(n: int) -> None:
    values = task_routing_values(n)
    assert [spark_hash_int(v) % n for v in values] == list(range(n))


def test_python_murmur3_matches_spark(spark) -> None:  # type: ignore[no-untyped-def]
    rows = spark.sql("SELECT id, hash(CAST(id AS INT)) AS h FROM range(-50, 200)").collect()
    assert all(spark_hash_int(r["id"]) == r["h"] for r in rows)
