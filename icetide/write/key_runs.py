"""The key index's lookup structure: sorted runs, so a lookup costs what the batch looks up.

A run holds rows (key, where) sorted by the key's 64-bit form: for one integer key column
(integers, dates and timestamps are int64 in the index) the key times an odd constant modulo
2**64 (a bijection, so equal forms are equal keys, spread evenly), else a hash of the key
columns (`key_hash.py`), whose candidates are checked against the keys themselves. A directory on the forms'
top bits points at each bucket's rows, about two per bucket, so a key is found in two memory
reads whatever the run's size: binary search instead took 5 ms per 20k keys at 10M rows against
0.85 ms at 1M (one random read per level past the cache), the directory 0.6 ms at both.
`where` is a data file id and a row position in one int64 (`file << 32 | pos`); each run also
keeps its rows sorted by `where`, so deletion vectors and removed files find their rows by
binary search.

- `find` looks the batch's keys up in every run: O(keys x runs), where the hash join it replaces
  probed every row of the index (O(rows) per batch, not flat in the table's size).
- `add` makes the rows of newly committed data files a run; runs merge when a newer one grows
  to half its elder, so there are about log2(rows / batch) of them and each row is merged
  about that many times. The runs that merge are merged at once, and a merge sorts nothing
  from scratch: each run is already in both orders, so stable sorts (timsort) merge the
  stretches in linear time. A compaction that rewrote a 10M-row table is followed in about 2 s
  instead of 5.5 s (pairwise merges, each sorting `where` again).
- `kill` marks rows dead (a DV's positions, a removed file's rows); a merge, or a run more
  than half dead, drops them.

Memory per row: the form (8 bytes; for a hashed key also the key's own bytes), 8 bytes of
`where` twice, a 4-byte order, a live flag and about 2 bytes of directory: 31 bytes for a
BIGINT key.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from icetide.write.key_hash import key_hashes

POSITION_BITS = 32
_POSITION_MASK = (1 << POSITION_BITS) - 1
_SPREAD = np.uint64(0x9E3779B97F4A7C15)  # odd: multiplying by it modulo 2**64 is a bijection
_UNSPREAD = np.uint64(pow(0x9E3779B97F4A7C15, -1, 2**64))


def where_of(file_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """(file id, row position) pairs in one int64 each."""
    if len(positions) and int(positions.max()) > _POSITION_MASK:
        raise ValueError("a data file with more than 2**32 rows")
    return (file_ids.astype(np.int64) << POSITION_BITS) | positions.astype(np.int64)


def file_and_position(where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`where_of` undone: (file ids as int32, positions as int64)."""
    return (where >> POSITION_BITS).astype(np.int32), where & _POSITION_MASK


def _order_type(n: int) -> type[np.integer]:
    return np.int32 if n < 2**31 else np.int64


class SortedRun:
    """Rows sorted by key form (`forms`), with their `where` and a second order by `where`."""

    def __init__(
        self,
        keys: pa.Table | None,
        forms: np.ndarray,
        where: np.ndarray,
        by_where: np.ndarray,
        where_sorted: np.ndarray | None = None,
    ) -> None:
        """Rows already in form order; `by_where` orders them by `where` (`where_sorted`, if known)."""
        self.keys = keys  # None: the forms are the keys
        self.forms = forms
        self.where = where
        self.by_where = by_where.astype(_order_type(len(forms)), copy=False)
        self.where_sorted = where[self.by_where] if where_sorted is None else where_sorted
        self.live = np.ones(len(forms), np.bool_)
        self.dead = 0
        bits = max(len(forms).bit_length() - 2, 1)  # 2**bits buckets: 2 to 4 rows each
        self.shift = np.uint64(64 - bits)
        counts = np.bincount((forms >> self.shift).astype(np.int64), minlength=1 << bits)
        self.directory = np.zeros((1 << bits) + 1, _order_type(len(forms)))
        np.cumsum(counts, out=self.directory[1:])

    @classmethod
    def of(cls, keys: pa.Table | None, forms: np.ndarray, where: np.ndarray) -> SortedRun:
        """A run of new rows, in any order. New data files' rows come in `where` order; then the
        order by `where` is the form order's inverse, with no second sort (sorting `where` again
        was 1.4 s of a 10M-row compaction's catch-up)."""
        order = np.argsort(forms, kind="stable")
        if len(where) < 2 or bool(np.all(where[1:] > where[:-1])):
            by_where = np.empty(len(order), _order_type(len(order)))
            by_where[order] = np.arange(len(order), dtype=by_where.dtype)
            where_sorted = where
        else:
            by_where, where_sorted = None, None
        where = where[order]
        return cls(
            keys.take(pa.array(order)) if keys is not None else None,
            forms[order],
            where,
            np.argsort(where, kind="stable") if by_where is None else by_where,
            where_sorted,
        )

    @classmethod
    def merged(cls, runs: list[SortedRun]) -> SortedRun:
        """The live rows of `runs` in one run. Each run is already sorted both ways, so both
        orders come from stable sorts of a few sorted stretches (timsort merges them in linear
        time): sorting the merged rows' `where` from scratch took 1.4 s of a 10M-row merge."""
        parts = [r.live_parts() for r in runs]
        starts = np.cumsum([0, *(len(p[1]) for p in parts)])
        forms = np.concatenate([p[1] for p in parts])
        where = np.concatenate([p[2] for p in parts])
        order = np.argsort(forms, kind="stable")
        rank = np.empty(len(order), np.int64)  # each concatenated row's place in the merged run
        rank[order] = np.arange(len(order))
        by_where = np.concatenate([s + r.live_where_order() for r, s in zip(runs, starts.tolist(), strict=False)])
        where_sorted = where[by_where]
        merge = np.argsort(where_sorted, kind="stable")
        keys = [p[0] for p in parts if p[0] is not None]
        return cls(
            pa.concat_tables(keys).take(pa.array(order)) if keys else None,
            forms[order],
            where[order],
            rank[by_where[merge]],
            where_sorted[merge],
        )

    def live_where_order(self) -> np.ndarray:
        """The live rows' indices among the live rows (as `live_parts` gives them), in `where` order."""
        if not self.dead:
            return self.by_where.astype(np.int64)
        among_live = np.cumsum(self.live, dtype=np.int64) - 1
        return among_live[self.by_where[self.live[self.by_where]]]

    def __len__(self) -> int:
        return len(self.forms)

    def candidates(self, forms: np.ndarray) -> np.ndarray:
        """Indices of the live rows whose key form is one of `forms` (distinct)."""
        bucket = (forms >> self.shift).astype(np.int64)
        lo = self.directory[bucket].astype(np.int64)
        counts = self.directory[bucket + 1] - lo
        total = int(counts.sum())
        if not total:
            return np.zeros(0, np.int64)
        rows = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(total)
        rows = rows[self.forms[rows] == np.repeat(forms, counts)]
        return rows[self.live[rows]]

    def kill_where(self, where: np.ndarray) -> None:
        """Mark dead the rows at these `where` values (those this run does not hold are ignored)."""
        j = np.searchsorted(self.where_sorted, where)
        inside = j < len(self.where_sorted)
        j = j[inside]
        j = j[self.where_sorted[j] == where[inside]]
        self._kill(self.by_where[j])

    def kill_files(self, file_ids: np.ndarray) -> None:
        """Mark dead every row of these data files."""
        first = file_ids.astype(np.int64) << POSITION_BITS
        lo = np.searchsorted(self.where_sorted, first)
        hi = np.searchsorted(self.where_sorted, first + (1 << POSITION_BITS))
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            if b > a:
                self._kill(self.by_where[a:b])

    def _kill(self, rows: np.ndarray) -> None:
        self.dead += int(self.live[rows].sum())
        self.live[rows] = False

    def live_parts(self) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
        """(keys, forms, where) of the live rows, in key-form order."""
        if not self.dead:
            return self.keys, self.forms, self.where
        keys = self.keys.filter(pa.array(self.live)) if self.keys is not None else None
        return keys, self.forms[self.live], self.where[self.live]

    def nbytes(self) -> int:
        arrays = (self.forms, self.where, self.by_where, self.where_sorted, self.live, self.directory)
        return sum(a.nbytes for a in arrays) + (int(self.keys.get_total_buffer_size()) if self.keys is not None else 0)


class KeyRuns:
    """Sorted runs of (key, where) over key columns `names` (index form)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.runs: list[SortedRun] = []  # oldest (largest) first
        self.key_types: list[pa.DataType] | None = None  # fixed by the first rows added

    @property
    def exact(self) -> bool:
        """One integer key column: its int64 is its form, and equal forms are equal keys."""
        return self.key_types is not None and len(self.key_types) == 1 and pa.types.is_int64(self.key_types[0])

    def forms(self, keys: pa.Table) -> np.ndarray:
        """The 64-bit form (uint64) of each key: the key spread by a bijection for `exact`, else a
        hash of the key columns."""
        if self.exact:
            return keys.column(0).to_numpy().astype(np.int64).view(np.uint64) * _SPREAD
        return key_hashes(keys.select(self.names))

    def add(self, keys: pa.Table, where: np.ndarray) -> None:
        """Rows of data files just committed (`keys` in index form, `where` from `where_of`)."""
        if not len(where):
            return
        keys = keys.select(self.names)
        if self.key_types is None:
            self.key_types = [c.type for c in keys.columns]
        self.runs.append(SortedRun.of(None if self.exact else keys, self.forms(keys), where))
        merging, rows = 1, len(self.runs[-1])  # the newest runs that merge, and their rows
        while merging < len(self.runs) and 2 * rows >= len(self.runs[-merging - 1]):
            merging += 1
            rows += len(self.runs[-merging])
        if merging > 1:  # in one merge, not pairwise: each row is moved once
            self.runs[-merging:] = [SortedRun.merged(self.runs[-merging:])]

    def kill(self, where: np.ndarray) -> None:
        """Mark dead the rows at these `where` values."""
        where = np.asarray(where, np.int64)
        if len(where):
            for run in self.runs:
                run.kill_where(where)
            self._drop_dead()

    def kill_files(self, file_ids: list[int]) -> None:
        """Mark dead every row of these data files."""
        if file_ids:
            ids = np.asarray(file_ids, np.int64)
            for run in self.runs:
                run.kill_files(ids)
            self._drop_dead()

    def _drop_dead(self) -> None:
        """Rewrite a run more than half dead (amortised: its dead rows were each killed once)."""
        self.runs = [SortedRun.merged([r]) if r.dead and 2 * r.dead > len(r) else r for r in self.runs]
        self.runs = [r for r in self.runs if len(r)]

    def find(self, keys: pa.Table) -> np.ndarray:
        """The sorted `where` of every live row holding one of `keys` (index form)."""
        if not keys.num_rows or not self.runs:
            return np.zeros(0, np.int64)
        keys = keys.select(self.names)
        if self.key_types is not None and [c.type for c in keys.columns] != self.key_types:
            keys = keys.cast(pa.schema([pa.field(n, t) for n, t in zip(self.names, self.key_types, strict=True)]))
        forms = np.unique(self.forms(keys))
        found = []
        for run in self.runs:
            rows = run.candidates(forms)
            if len(rows) and run.keys is not None:  # a hash: keep the rows whose keys are equal
                candidates = run.keys.take(pa.array(rows)).append_column("_row", pa.array(rows))
                rows = candidates.join(keys, keys=self.names, join_type="left semi")["_row"].to_numpy()
            found.append(run.where[rows])
        return np.unique(np.concatenate(found))

    def live_rows(self) -> int:
        return sum(len(r) - r.dead for r in self.runs)

    def table(self) -> pa.Table:
        """Every live row: the key columns, `file` (id) and `pos`."""
        types = self.key_types or [pa.int64()] * len(self.names)
        parts = [r.live_parts() for r in self.runs]
        where = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, np.int64)
        if not parts:
            columns = {n: pa.array([], t) for n, t in zip(self.names, types, strict=True)}
        elif self.exact:
            keys = (np.concatenate([p[1] for p in parts]) * _UNSPREAD).view(np.int64)
            columns = {self.names[0]: pa.array(keys, pa.int64())}
        else:
            keys = pa.concat_tables([p[0] for p in parts if p[0] is not None])
            columns = {n: keys[n].combine_chunks() for n in self.names}
        files, positions = file_and_position(where)
        return pa.table({**columns, "file": pa.array(files, pa.int32()), "pos": pa.array(positions, pa.int64())})

    def nbytes(self) -> int:
        return sum(r.nbytes() for r in self.runs)
