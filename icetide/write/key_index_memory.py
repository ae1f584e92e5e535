"""The memory bound of the key indexes one process holds (`deletes="vectors"`).

A database sync writes many tables from one process, each with its own key index
(`key_index.py`, about 31 bytes per BIGINT key), so without a bound its memory grows with the
number of tables. The process's indexes are registered here (`process_key_indexes()`), each
with its size measured from the buffers it holds (`KeyIndex.nbytes`). When a table's index is
used (a batch stages or lands) and the indexes held then pass the bound
(`table.key_index_memory`, default 1 GiB), the least recently used other tables drop theirs.
Before dropping, a table writes a copy of its index (`key_index_copy.py`) unless one at the
index's snapshot exists already, so the next batch of that table does what a restart does:
loads the copy and catches up the commits since, a cost that follows the batch. A table whose
`icetide.key-index.copy-every-batches` is 0 writes no copy, and builds its index again.

The index a batch is using is never dropped (a table whose index alone passes the bound keeps
it, with a warning), so the bound can be passed while tables commit side by side; each later
use drops indexes again until the held ones fit. Dropping an index is only a cache miss: it
never changes what a batch commits.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from icetide.config.table import KEY_INDEX_MEMORY_DEFAULT

log = logging.getLogger(__name__)


class IndexHolder(Protocol):
    """What holds one table's index (`StreamVectors`)."""

    table_name: str
    lock: threading.Lock  # held while the holder changes or uses its index

    def drop_index(self) -> bool:
        """Drop the index (called with `lock` held); True when it wrote a copy first."""
        ...


@dataclass(frozen=True)
class KeyIndexMemoryStats:
    """The registry's counts since it was made."""

    limit: int  # bytes
    held_bytes: int  # what the held indexes measure now
    indexes: int  # indexes held
    evictions: int  # indexes dropped to stay within the limit
    copies_written: int  # copies written by tables dropping their index
    reloads: int  # dropped indexes given back by their copy (then caught up)
    rebuilds: int  # dropped indexes built again from the table (no usable copy)


class KeyIndexMemory:
    """The key indexes of one process, bounded to `limit` bytes by dropping the least recently used."""

    def __init__(self, limit: int = KEY_INDEX_MEMORY_DEFAULT) -> None:
        self._lock = threading.RLock()  # a weakref callback may run while it is held
        self.limit = limit
        self._held: OrderedDict[int, tuple[weakref.ref[IndexHolder], int]] = OrderedDict()  # oldest use first
        self._evictions = self._copies = self._reloads = self._rebuilds = 0
        self._warned: set[str] = set()

    def set_limit(self, limit: int) -> None:
        """A new bound, applied now to the indexes not in use (those in use, at their next use)."""
        with self._lock:
            self.limit = limit
        self.trim()

    def held_bytes(self) -> int:
        """The bytes the held indexes measured at their last use."""
        with self._lock:
            return sum(size for _, size in self._held.values())

    def stats(self) -> KeyIndexMemoryStats:
        """What is held now, and how often indexes were dropped and given back."""
        with self._lock:
            return KeyIndexMemoryStats(
                limit=self.limit,
                held_bytes=sum(size for _, size in self._held.values()),
                indexes=len(self._held),
                evictions=self._evictions,
                copies_written=self._copies,
                reloads=self._reloads,
                rebuilds=self._rebuilds,
            )

    def hold(self, holder: IndexHolder, nbytes: int) -> None:
        """`holder` (whose lock the caller holds) used its index of `nbytes`: it becomes the most
        recently used, and the others drop theirs as `trim` says."""
        key = id(holder)
        with self._lock:
            ref = self._held[key][0] if key in self._held else weakref.ref(holder, lambda _: self._gone(key))
            self._held[key] = (ref, nbytes)
            self._held.move_to_end(key)
            if nbytes > self.limit and holder.table_name not in self._warned:
                self._warned.add(holder.table_name)
                log.warning(
                    "the key index of %s alone holds %d bytes, over table.key_index_memory (%d): it is kept "
                    "while its table is written",
                    holder.table_name,
                    nbytes,
                    self.limit,
                )
        self.trim(keep=holder)

    def trim(self, *, keep: IndexHolder | None = None) -> None:
        """Drop the least recently used indexes but `keep`'s until the held ones fit the limit;
        an index in use by another thread (its holder's lock taken) is skipped, and dropped by a
        later call (each table calls this after its batch landed)."""
        victims: list[IndexHolder] = []
        with self._lock:
            total = sum(size for _, size in self._held.values())
            for other, (ref, size) in list(self._held.items()):
                if total <= self.limit:
                    break
                candidate = ref()
                if candidate is keep or (candidate is not None and not candidate.lock.acquire(blocking=False)):
                    continue
                del self._held[other]
                total -= size
                if candidate is not None:
                    victims.append(candidate)
        for victim in victims:  # outside the registry's lock: writing a copy takes a while
            try:
                wrote = victim.drop_index()
            except Exception:  # a copy that cannot be written is logged by the holder; the index is dropped
                log.debug("dropping the key index of %s", victim.table_name, exc_info=True)
                wrote = False
            finally:
                victim.lock.release()
            with self._lock:
                self._evictions += 1
                self._copies += int(wrote)
            log.info("dropped the key index of %s from memory (table.key_index_memory)", victim.table_name)

    def release(self, holder: IndexHolder) -> None:
        """`holder` no longer holds an index (it forgot it)."""
        self._gone(id(holder))

    def reloaded(self, *, from_copy: bool) -> None:
        """A dropped index was given back, from its copy or by building it again."""
        with self._lock:
            if from_copy:
                self._reloads += 1
            else:
                self._rebuilds += 1

    def _gone(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)


_PROCESS = KeyIndexMemory()


def process_key_indexes() -> KeyIndexMemory:
    """The registry of this process's key indexes (every `deletes="vectors"` sink uses it)."""
    return _PROCESS
