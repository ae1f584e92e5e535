"""The upsert sink: changelog ops and dedup, distribution, executor writers, the committer."""
