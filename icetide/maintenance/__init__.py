"""Table maintenance that is safe beside the stream: compaction, delete folding, expiry, orphans.

Entry point: `icetide.maintenance.compaction.compaction(spark, table, **options)` returns a
`CompactionJob` whose steps (plan, rewrite, commit) can be called one by one.
"""
