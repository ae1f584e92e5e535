"""A persisted copy of the key index (`key_index.py`), so a restart catches up instead of building.

The copy is a cache and nothing more: one Parquet file per copy, in
`<table metadata folder>/_icetide-key-index/key-index-<snapshot id>.parquet`, describing the
index at that snapshot. Its rows are the index's (key columns in index form, an int32 file id,
an int64 position); its schema metadata holds the file id -> data file path mapping, every live
data file, each one's current DV (location and offset, to check against the table), the key's
field ids and types, and the table's UUID.

- Written by `write_copy` after a batch landed and the index followed it, every
  `icetide.key-index.copy-every-batches` batches (a table property; default 20, 0 = never), to
  a temporary name first and renamed, so a reader never sees half a file. The two newest copies
  are kept, older ones deleted.
- Read by `load_copy`, when a process has no index yet: the newest copy whose snapshot is the
  table's current one or one of its ancestors (a rollback, another branch or an expired snapshot
  makes a copy unusable). The Java DataFiles and DVs are not stored: they are planned again
  from that snapshot's manifests (cost follows the number of files, not of rows), and the copy
  is only used if they name exactly the data files and DVs it recorded. Any doubt (unreadable,
  another table, another key, files that differ) returns None, and the caller builds the index
  from the table as before.

The folder's name starts with "_", which both icetide's orphan removal and Iceberg's own
listing treat as hidden: no snapshot references a copy, so it would otherwise be an orphan.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from icetide.errors import ConfigError
from icetide.filesystems import filesystem_for, make_parent
from icetide.table.iceberg import key_field_ids, table_property
from icetide.write.key_index import SNAPSHOT_WALK_LIMIT, KeyIndex

log = logging.getLogger(__name__)

COPY_EVERY_BATCHES, COPY_EVERY_BATCHES_DEFAULT = "icetide.key-index.copy-every-batches", 20
COPIES_KEPT = 2
COPY_FOLDER = "_icetide-key-index"  # hidden from orphan removal's listing (a leading "_")
COPY_FORMAT = 1
STALE_TEMP_SECONDS = 3600  # a temporary file this old is a crashed writer's, not one in progress
_METADATA_KEY = b"icetide.key-index"
_COPY_NAME = re.compile(r"^key-index-(?P<snapshot>-?\d+)\.parquet$")


def copy_every_batches(table_name: str, jtable: Any) -> int:
    """How many landed batches between two copies (0: never), from the table's property;
    ConfigError naming the property when it is not a whole number >= 0."""
    text = table_property(jtable, COPY_EVERY_BATCHES, str(COPY_EVERY_BATCHES_DEFAULT))
    try:
        every = int(text)
    except ValueError:
        every = -1
    if every < 0:
        raise ConfigError(f"{COPY_EVERY_BATCHES}: must be a whole number >= 0 (0: never), got {text!r} on {table_name}")
    return every


def copy_folder(jtable: Any) -> str:
    """Where the copies of this table's key index live: a folder of its metadata folder."""
    try:  # honours write.metadata.path
        return str(jtable.operations().metadataFileLocation(COPY_FOLDER))
    except Exception:
        return str(jtable.location()).rstrip("/") + "/metadata/" + COPY_FOLDER


def _key_types(jtable: Any, field_ids: list[int]) -> list[str]:
    schema = jtable.schema()
    return [str(schema.findField(i).type()) for i in field_ids]


def _table_uuid(jtable: Any) -> str:
    try:
        return str(jtable.uuid())
    except Exception:
        return ""


def _copies(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return [i for i in infos if i.type == pafs.FileType.File]


def write_copy(jtable: Any, index: KeyIndex) -> str | None:
    """Write `index` as a copy named by its snapshot and delete all but the newest copies;
    returns the copy's location (None for an index of an empty table). Raises on any I/O error
    (the caller logs it: a copy is never needed)."""
    if index.snapshot_id is None:
        return None
    live = sorted(index.data_files)
    new_ids = np.full(max(len(index.paths), 1), -1, np.int32)  # old file id -> position in `live`
    for n, path in enumerate(live):
        if path in index.ids:  # a live file whose rows are all deleted may never have had an id
            new_ids[index.ids[path]] = n
    rows = index.rows.combine_chunks()
    files = new_ids[rows["file"].to_numpy()] if rows.num_rows else np.zeros(0, np.int32)
    if (files < 0).any():
        raise ValueError("the key index has rows of a data file it does not know as live")
    vectors = {
        str(n): [str(d.location()), int(d.contentOffset())]
        for n, p in enumerate(live)
        if (d := index.vectors.get(p)) is not None
    }
    meta = {
        "format": COPY_FORMAT,
        "table-uuid": _table_uuid(jtable),
        "snapshot-id": index.snapshot_id,
        "field-ids": index.field_ids,
        "key-types": _key_types(jtable, index.field_ids),
        "files": live,
        "vectors": vectors,
    }
    table = rows.set_column(rows.schema.get_field_index("file"), "file", pa.array(files, pa.int32()))
    table = table.replace_schema_metadata({_METADATA_KEY: json.dumps(meta).encode()})
    folder = copy_folder(jtable)
    fs, base = filesystem_for(folder)
    name = f"key-index-{index.snapshot_id}.parquet"
    make_parent(fs, f"{base}/{name}")
    temporary = f"{base}/.{uuid.uuid4().hex}-{name}.tmp"
    try:
        pq.write_table(table, temporary, filesystem=fs, compression="zstd")
        fs.move(temporary, f"{base}/{name}")
    except BaseException:
        _delete(fs, temporary)
        raise
    _prune(fs, base, keep=name)
    log.info("wrote a copy of the key index at snapshot %s: %d keys, %s", index.snapshot_id, table.num_rows, name)
    return f"{folder}/{name}"


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except Exception:
        log.debug("could not delete %s", path, exc_info=True)


def _prune(fs: pafs.FileSystem, base: str, *, keep: str) -> None:
    """Keep `keep` and the newest other copies up to COPIES_KEPT; delete the rest, and
    temporary files left by a writer that died."""
    infos = _copies(fs, base)
    copies = sorted(
        (i for i in infos if _COPY_NAME.match(i.base_name) and i.base_name != keep),
        key=lambda i: i.mtime_ns or 0,
        reverse=True,
    )
    for info in copies[COPIES_KEPT - 1 :]:
        _delete(fs, info.path)
    stale = time.time_ns() - STALE_TEMP_SECONDS * 10**9
    for info in infos:
        if info.base_name.startswith(".") and info.base_name.endswith(".tmp") and (info.mtime_ns or 0) < stale:
            _delete(fs, info.path)


def _ancestors(jtable: Any) -> list[int]:
    """The current snapshot's id and its ancestors', newest first (as far as the table still
    knows them: an expired snapshot ends the chain)."""
    chain: list[int] = []
    snapshot = jtable.currentSnapshot()
    while snapshot is not None and len(chain) <= SNAPSHOT_WALK_LIMIT:
        chain.append(int(snapshot.snapshotId()))
        parent = snapshot.parentId()
        snapshot = jtable.snapshot(parent) if parent is not None else None
    return chain


def load_copy(table_name: str, jtable: Any) -> KeyIndex | None:
    """The key index from the newest usable copy, at the copy's snapshot (the caller catches it
    up); None when no copy can be trusted. Never raises."""
    try:
        fs, base = filesystem_for(copy_folder(jtable))
        names = {i.path: _COPY_NAME.match(i.base_name) for i in _copies(fs, base)}
        by_snapshot = {int(m.group("snapshot")): path for path, m in names.items() if m is not None}
        if not by_snapshot:
            return None
        ancestors = _ancestors(jtable)
    except Exception:
        log.info("the key index copies of %s cannot be listed; building the index", table_name, exc_info=True)
        return None
    for snapshot_id in ancestors:
        path = by_snapshot.get(snapshot_id)
        if path is None:
            continue
        try:
            index = _read_copy(table_name, jtable, fs, path, snapshot_id)
        except Exception as exc:
            log.info("the key index copy %s of %s is not usable (%s)", path, table_name, exc)
            log.debug("key index copy", exc_info=True)
            continue
        log.info("loaded the key index of %s from its copy at snapshot %s", table_name, snapshot_id)
        return index
    log.info("no copy of the key index of %s is at an ancestor of its current snapshot", table_name)
    return None


class CopyMismatch(Exception):
    """A copy does not describe this table at its snapshot."""


def _read_copy(table_name: str, jtable: Any, fs: pafs.FileSystem, path: str, snapshot_id: int) -> KeyIndex:
    with fs.open_input_file(path) as handle:
        table = pq.read_table(handle)
    raw = (table.schema.metadata or {}).get(_METADATA_KEY)
    if raw is None:
        raise CopyMismatch("no key index metadata")
    meta = json.loads(raw)
    ids = key_field_ids(jtable)
    expected = {
        "format": COPY_FORMAT,
        "snapshot-id": snapshot_id,
        "field-ids": ids,
        "key-types": _key_types(jtable, ids),
        "table-uuid": _table_uuid(jtable),
    }
    for key, value in expected.items():
        if meta.get(key) != value:
            raise CopyMismatch(f"{key} is {meta.get(key)!r}, the table's {value!r}")
    index = KeyIndex(ids, snapshot_id)
    files: list[str] = meta["files"]
    if table.column_names != [*index.names, "file", "pos"]:
        raise CopyMismatch(f"columns {table.column_names}")
    file_ids = table["file"].to_numpy()
    if len(file_ids) and (file_ids.min() < 0 or file_ids.max() >= len(files)):
        raise CopyMismatch("a row names an unknown file")
    for f in files:
        index.file_id(f)
    index.rows = table.replace_schema_metadata(None)
    index.resolve_files(table_name, jtable)
    if set(index.data_files) != set(files):
        raise CopyMismatch("its data files are not the snapshot's")
    recorded = {files[int(n)]: tuple(v) for n, v in meta["vectors"].items()}
    actual = {p: (str(d.location()), int(d.contentOffset())) for p, d in index.vectors.items()}
    if recorded != actual:
        raise CopyMismatch("its deletion vectors are not the snapshot's")
    return index
