"""How a fast-path batch's work is cut into tasks: Kafka offset ranges or landing files."""

from __future__ import annotations

import math

from icetide.sources.kafka_reader import OffsetRange


def split_ranges(ranges: list[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """Cut the ranges into at most `tasks` groups of about equal offset counts, in order."""
    total = sum(r.count for r in ranges)
    share = max(1, math.ceil(total / max(1, tasks)))
    groups: list[list[OffsetRange]] = [[]]
    room = share
    for r in ranges:
        start = r.start
        while start < r.end:
            if room == 0:
                groups.append([])
                room = share
            take = min(room, r.end - start)
            groups[-1].append(OffsetRange(r.topic, r.partition, start, start + take))
            start += take
            room -= take
    return [g for g in groups if g]


def split_partitions(ranges: list[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """Cut the ranges into at most `tasks` groups of whole Kafka partitions, of about equal offset
    counts (the largest partitions placed first, each into the lightest group); ranges keep their
    order within a group."""
    counts: dict[tuple[str, int], int] = {}
    for r in ranges:
        counts[(r.topic, r.partition)] = counts.get((r.topic, r.partition), 0) + r.count
    loads = [0] * max(1, min(tasks, len(counts)))
    group_of: dict[tuple[str, int], int] = {}
    for part, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        lightest = loads.index(min(loads))
        group_of[part] = lightest
        loads[lightest] += count
    groups: list[list[OffsetRange]] = [[] for _ in loads]
    for r in ranges:
        groups[group_of[(r.topic, r.partition)]].append(r)
    return [g for g in groups if g]


def split_files(files: list[str], sizes: list[int], tasks: int) -> list[list[str]]:
    """Cut the files, in order, into at most `tasks` groups of about equal bytes (a file is never cut)."""
    share = max(1, math.ceil(sum(sizes) / max(1, tasks)))
    groups: list[list[str]] = [[]]
    filled = 0
    for path, size in zip(files, sizes, strict=True):
        if groups[-1] and filled + size > share and len(groups) < tasks:
            groups.append([])
            filled = 0
        groups[-1].append(path)
        filled += size
    return [g for g in groups if g]
