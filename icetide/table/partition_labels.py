"""Partition values as people read them. No I/O.

Iceberg stores a time partition as a count since 1970 (`hours(ts)` = 490901 for 2026-01-01 05:00)
and prints it, in partition paths, in a form of its own (`2026-01-01-05`). People read:

| transform | label |
|---|---|
| hours | `2026-01-01 05:00` |
| days | `2026-01-01` |
| months | `2026-01` |
| years | `2026` |
| identity | the value as it is |
| bucket(16, id) | `bucket[16]=3` |
| truncate(4, name) | `truncate[4]=abcd` |

A partition of several fields is labelled by its fields' labels joined with ", "; a void
(dropped) field is left out, and a table with no partition field is `(unpartitioned)`.
Time labels sort as text in time order, so the newest partition sorts last.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import unquote_plus

from icetide.table.spec import PartitionTransform

UNPARTITIONED = "(unpartitioned)"
NULL = "null"
SEPARATOR = ", "
_EPOCH_DAY = date(1970, 1, 1)


def value_label(transform: PartitionTransform | None, value: Any) -> str:
    """The label of one partition field's stored value (what Iceberg's manifests and Spark's
    metadata tables hold: an int count since 1970 for hours/months/years, an int or a date for
    days, the bucket number, the truncated value, the identity value)."""
    if value is None:
        return NULL
    if transform is None:  # a void field: always null
        return NULL
    kind = transform.transform
    if kind == "hours":
        if isinstance(value, datetime):
            return value.strftime("%Y-%m-%d %H:00")
        return datetime.fromtimestamp(int(value) * 3600, tz=UTC).strftime("%Y-%m-%d %H:00")
    if kind == "days":
        if isinstance(value, datetime):
            return value.date().isoformat()
        if isinstance(value, date):
            return value.isoformat()
        return (_EPOCH_DAY + timedelta(days=int(value))).isoformat()
    if kind == "months":
        if isinstance(value, date):
            return f"{value.year:04d}-{value.month:02d}"
        months = int(value)
        return f"{1970 + months // 12:04d}-{months % 12 + 1:02d}"
    if kind == "years":
        if isinstance(value, date):
            return f"{value.year:04d}"
        return f"{1970 + int(value):04d}"
    if kind in ("bucket", "truncate"):
        return f"{kind}[{transform.width}]={_plain(value)}"
    return _plain(value)


def human_label(transform: PartitionTransform | None, text: str | None) -> str:
    """The label of one field from Iceberg's own human form (`Transform.toHumanString`, as in
    partition paths: hours `2026-01-01-05`, days `2026-01-01`, bucket `3`, identity values)."""
    if text is None or text == NULL:
        return NULL
    if transform is None:
        return NULL
    kind = transform.transform
    if kind == "hours" and len(text) >= 13 and text[10] == "-":
        return f"{text[:10]} {text[11:13]}:00"
    if kind in ("bucket", "truncate"):
        return f"{kind}[{transform.width}]={text}"
    return text


def partition_label(field_labels: Sequence[str], *, void: Sequence[bool] = ()) -> str:
    """One partition's label from its fields' labels (void fields, flagged in `void`, left out)."""
    kept = [label for i, label in enumerate(field_labels) if not (i < len(void) and void[i])]
    return SEPARATOR.join(kept) if kept else UNPARTITIONED


def label_of_values(transforms: Sequence[PartitionTransform | None], values: Sequence[Any]) -> str:
    """A partition's label from its stored values, field by field (`transforms[i]` None: void)."""
    labels = [value_label(t, v) for t, v in zip(transforms, values, strict=True)]
    return partition_label(labels, void=[t is None for t in transforms])


def label_of_path(transforms: Sequence[PartitionTransform | None], path: str) -> str:
    """A partition's label from Iceberg's partition path (`PartitionSpec.partitionToPath`:
    `name=human-value/...`, each value URL-encoded), fields in spec order."""
    if not path:
        return UNPARTITIONED
    texts = [unquote_plus(part.partition("=")[2]) for part in path.split("/")]
    if len(texts) != len(transforms):  # not this spec's path: show it as Iceberg wrote it
        return path
    labels = [human_label(t, None if s == NULL else s) for t, s in zip(transforms, texts, strict=True)]
    return partition_label(labels, void=[t is None for t in transforms])


def partition_title(transforms: Sequence[PartitionTransform | None]) -> str:
    """What a partition label is made of, for a column heading: `hours(event_time)`, ..."""
    kept = [str(t) for t in transforms if t is not None]
    return SEPARATOR.join(kept) if kept else "partition"


def _plain(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)
