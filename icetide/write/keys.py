"""Key columns of data and delete files, read by Iceberg field id and compared in one form.

Files are matched to each other by their key values whoever wrote them (icetide's writers,
Spark's, another engine's), so each value is brought to one physical form per logical type
first: time zone flags, string widths and dictionary encoding must not make equal keys differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from icetide.errors import ConfigError
from icetide.executor.file_metrics import FIELD_ID_KEY
from icetide.filesystems import filesystem_for


def canonical(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """One physical form per logical type, so a data file's and a delete file's keys compare
    equal whoever wrote them (time zone flags, string widths, dictionary encoding)."""
    dtype = column.type
    if pa.types.is_dictionary(dtype):
        column = column.cast(dtype.value_type)
        dtype = column.type
    if pa.types.is_timestamp(dtype):
        return column.cast(pa.timestamp(dtype.unit)).cast(pa.int64())
    if pa.types.is_large_string(dtype):
        return column.cast(pa.string())
    if pa.types.is_large_binary(dtype):
        return column.cast(pa.binary())
    return column


def columns_by_field_id(table: pa.Table, field_ids: Sequence[int]) -> pa.Table:
    """The columns carrying these Iceberg field ids, named `f<id>`, in canonical form."""
    by_id = {int(f.metadata[FIELD_ID_KEY]): f.name for f in table.schema if f.metadata and FIELD_ID_KEY in f.metadata}
    missing = [i for i in field_ids if i not in by_id]
    if missing:
        raise ConfigError(f"file has no column with field id {missing[0]}")
    return pa.table({f"f{i}": canonical(table[by_id[i]]) for i in field_ids})


def read_by_field_id(location: str, field_ids: Sequence[int]) -> pa.Table:
    """Only the columns of a Parquet file that carry these field ids, as `columns_by_field_id`."""
    fs, path = filesystem_for(location)
    with fs.open_input_file(path) as handle:
        parquet = pq.ParquetFile(handle)
        schema = parquet.schema_arrow
        wanted = {str(i).encode() for i in field_ids}
        names = [f.name for f in schema if f.metadata and f.metadata.get(FIELD_ID_KEY) in wanted]
        return columns_by_field_id(parquet.read(columns=names), field_ids)


def distinct_keys(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """The distinct values of the `key` columns of `table`, each column in its canonical form."""
    keys = pa.table({name: canonical(table.column(name)) for name in key})
    return keys.group_by(list(key)).aggregate([])


def keys_meet(tables: Sequence[pa.Table]) -> bool:
    """Whether any key is in more than one of these tables of distinct keys (`distinct_keys`)."""
    tables = [t for t in tables if t.num_rows]
    if len(tables) < 2:
        return False
    names = tables[0].column_names
    together = distinct_keys(pa.concat_tables(tables), names)
    return together.num_rows < sum(t.num_rows for t in tables)
