"""Upgrade a table's Iceberg format version (v2 -> v3) beside a running stream.

The upgrade is one metadata-only commit: the table's `format-version` property, which Iceberg
turns into the metadata's format version. Iceberg retries it on top of concurrent commits, and a
stream commit that loses the race to it retries on the upgraded metadata, as after any commit.
What changes on v3: new position deletes must be deletion vectors (icetide's delete folding
writes them from then on), rows get row lineage (`_row_id`) from the next commit on, and
readers must support v3 (docs/explanation/deletion-vectors.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from icetide.errors import CommitFailedError, ConfigError
from icetide.table.format_version import FORMAT_VERSION_PROPERTY, parse_format_version
from icetide.table.iceberg import format_version, java_message, load_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UpgradeResult:
    """The table's format version before and after an upgrade."""

    table: str
    before: int
    after: int

    @property
    def upgraded(self) -> bool:
        """Did this call change the table?"""
        return self.after != self.before

    def line(self) -> str:
        """What happened, for a terminal or a log."""
        if self.upgraded:
            return f"upgraded from format v{self.before} to v{self.after}"
        return f"already format v{self.before}: nothing to upgrade"


def upgrade_format_version(spark: SparkSession, table: str, version: int = 3) -> UpgradeResult:
    """Raise `table` to format `version` (3), or do nothing if it is already there or beyond.

    Guarantees: no row and no file changes; the commit is metadata only and lands on top of any
    concurrent commit, so a pipeline writing the table keeps running. A version can never be
    lowered (ConfigError when asked to).
    """
    wanted = parse_format_version(version, "format_version")
    jtable = load_table(spark, table)
    jtable.refresh()
    before = format_version(jtable)
    if before >= wanted:
        if before > wanted:
            raise ConfigError(f"format_version: {table} is format v{before}; a format version cannot be lowered")
        return UpgradeResult(table, before, before)
    try:
        jtable.updateProperties().set(FORMAT_VERSION_PROPERTY, str(wanted)).commit()
    except Exception as exc:
        log.debug("upgrade failed", exc_info=True)
        raise CommitFailedError(f"upgrading {table} to format v{wanted} failed: {java_message(exc)}") from exc
    jtable.refresh()
    result = UpgradeResult(table, before, format_version(jtable))
    log.info("%s: %s", table, result.line())
    return result
