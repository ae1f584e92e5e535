"""One Spark task's share of a Debezium batch on the Spark path (decode/debezium/tasks.py drives it).

`DebeziumTask` is the `mapInArrow` body: each Arrow batch of Kafka records (or file lines) goes
through the sync fast path's decoder (`EnvelopeReader`, `TableRows`) record by record, and comes
out as one frame of good changes (KIND GOOD), dead letters (BAD) and one SUMMARY row: the
truncates, the fields the table lacks and the heads of the schemas met. A record the decoder
cannot read exactly (NotHere) or that makes it fail is a dead letter saying why, with its
payload; the batch goes on (`UNDECODED`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from icetide.decode.debezium.changes import SOURCE_ORDER_COLUMN, SOURCE_TS_COLUMN, TRUNCATE_DEAD_LETTER
from icetide.decode.debezium.message import Envelope, EnvelopeReader
from icetide.decode.debezium.rows import Conversions, NotHere, TableRows, source_millis, source_order
from icetide.decode.json.tasks import ERROR, PAYLOAD, POSITION, position_texts
from icetide.decode.limits import PayloadLimits, spark_text
from icetide.decode.spark_compat.connect_text import field_text
from icetide.errors import one_line
from icetide.write.collapse import OP_COLUMN

KIND = "_icetide_kind"  # GOOD: a change; BAD: a dead letter; SUMMARY: a task's summary of one Arrow batch
GOOD, BAD, SUMMARY = "g", "b", "s"
RECORDS = "_icetide_records"  # records read, tombstones included
TRUNCATES = "_icetide_truncates"  # truncates met
TRUNCATE_AT = "_icetide_truncate_at"  # the latest truncate's _source_order
UNKNOWN_COUNTS = "_icetide_unknown_counts"  # field the table lacks -> records that carry it
SAMPLES = "_icetide_samples"  # field the table lacks -> a value's text (with schema_evolution)
HEADS = "_icetide_heads"  # message heads of the schemas met, each once per task
# Errors a record itself causes, the same each time it is read: such a record is a dead letter
# (UNDECODED). Any other (memory, I/O) fails the task, to be computed again.
_UNFORESEEN = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError)
UNDECODED = "not decoded"  # the dead letter of a record the decoder cannot read exactly: "not decoded: <why>"


@dataclass
class _Summary:
    """What one Arrow batch of a task tells the driver (its SUMMARY row)."""

    records: int = 0  # every record of the Arrow batch, tombstones included
    truncates: int = 0
    truncate_at: str | None = None
    unknown: dict[str, int] | None = None
    samples: dict[str, str] | None = None
    heads: list[str] | None = None


@dataclass(frozen=True)
class DebeziumTask:
    """What a task needs to decode its share of a batch; picklable, built on the driver."""

    schema: pa.Schema  # the table's columns
    key: tuple[str, ...]
    op_mode: str
    conversions: Conversions
    limits: PayloadLimits
    value_col: str
    position_cols: tuple[str, ...]
    extra_cols: tuple[str, ...]
    split: tuple[str, str] | None
    error_col: str | None
    arrival_col: str | None  # the arrival order, where it is not the last position column
    on_truncate: str
    sample: bool  # carry sample values of the fields the table lacks
    output: pa.Schema

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        reader = EnvelopeReader(self.limits, final=True)
        sent: set[int] = set()  # schema ids whose head this task reported
        split_heads: dict[int, bytes] = {}
        for batch in batches:
            if batch.num_rows:
                yield self.decode(batch, reader, sent, split_heads)

    def decode(
        self, batch: pa.RecordBatch, reader: EnvelopeReader, sent: set[int], split_heads: dict[int, bytes]
    ) -> pa.RecordBatch:
        values = batch.column(self.value_col)
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.binary())
        payloads: list[bytes | None] = values.to_pylist()
        n = len(payloads)
        arrival_col = self.arrival_col or (self.position_cols[-1] if self.position_cols else None)
        arrivals: list[Any] = batch.column(arrival_col).cast(pa.string()).to_pylist() if arrival_col else [""] * n
        read_errors = batch.column(self.error_col).to_pylist() if self.error_col else [None] * n
        if self.split:
            split_ids = batch.column(self.split[0]).to_pylist()
            for sid, head in zip(split_ids, batch.column(self.split[1]).to_pylist(), strict=True):
                if sid is not None and head is not None:
                    split_heads[sid] = head.encode() if isinstance(head, str) else head
        rows = TableRows(self.schema, self.key, self.op_mode, self.conversions)
        good_at: list[int] = []
        millis: list[int | None] = []
        bad_at: list[int] = []
        errors: list[str] = []
        bad_payloads: list[str] = []
        summary = _Summary(records=n, unknown={}, samples={} if self.sample else None, heads=[])
        for i, value in enumerate(payloads):
            if value is None:
                continue
            if self.split and split_ids[i] is not None:
                head = split_heads.get(split_ids[i])
                if head is None:  # the plan reads and decodes in one task: a head comes before its values
                    raise RuntimeError(f"a value whose split head (id {split_ids[i]}) is not in its task")
                value = head + value[1:]
            held, mark = len(rows), rows.mark()
            try:
                record = self._record(value, read_errors[i], arrivals[i], rows, reader, sent, summary)
            except (NotHere, *_UNFORESEEN) as exc:
                rows.undo(mark)
                record = [f"{UNDECODED}: {one_line(exc)}"], None
            if record is None:
                continue  # a tombstone, or a truncate applied
            found, source_ms = record
            added = len(rows) - held
            good_at += [i] * added
            millis += [source_ms] * added
            if found:
                text = spark_text(value)  # U+FFFD as the Spark path puts them
                for error in found:
                    bad_at.append(i)
                    errors.append(error)
                    bad_payloads.append(text)
        return self._rows(good_at, millis, bad_at, errors, bad_payloads, summary, batch, rows.table())

    def _record(
        self,
        value: bytes,
        read_error: str | None,
        arrival: str | None,
        rows: TableRows,
        reader: EnvelopeReader,
        sent: set[int],
        summary: _Summary,
    ) -> tuple[list[str], int | None] | None:
        """One record's changes added to `rows`: the errors of its dead letters and its source
        time (epoch ms); None for a tombstone or a truncate the batch applies."""
        envelope = reader.read(value) if read_error is None else self._read_failed(reader, value)
        if envelope is None:
            return None
        if envelope.schema_id and envelope.schema_id not in sent:
            sent.add(envelope.schema_id)
            assert summary.heads is not None
            summary.heads += [h.decode() for h, (sid, _) in reader.heads.items() if sid == envelope.schema_id]
        self._count_unknown(envelope, rows.known, summary)
        # Spark's lpad; a record without a position (a caller's own frame) orders by its source alone
        arrival = (arrival or "").rjust(20, "0")[:20] if self.position_cols else ""
        order = source_order(envelope.source, envelope.ts_ms, 0).rpartition("|")[0] + "|" + arrival
        # A truncate is one whatever else is wrong with it (a payload limit, a malformed part), as
        # on the Spark SQL path; its dead letter's error is the first of those, else its own.
        if envelope.op.strip(" ").lower() == "t":
            summary.truncates += 1
            if summary.truncate_at is None or order > summary.truncate_at:
                summary.truncate_at = order
            if self.on_truncate == "apply":
                return None
            return [read_error or envelope.error or TRUNCATE_DEAD_LETTER], None
        if read_error is not None:
            return [read_error] * len(rows.add(_as_dead(envelope), order, evolving=False)), None
        millis = source_millis(envelope.source, envelope.ts_ms)  # before `add`: nothing may raise after it
        return rows.add(envelope, order, evolving=False), millis

    def _read_failed(self, reader: EnvelopeReader, value: bytes) -> Envelope | None:
        """The event of a record the source could not read (its value is then the raw bytes in
        base64, which the former Spark SQL decoder read as one malformed record); a value that may
        be JSON is read, so that its changes count as that decoder counted them."""
        if value[:1] != b"{" and len(value) <= self.limits.max_record_bytes and value.strip() != b"null":
            return Envelope("", None, None, {}, None, None, 0, error="malformed JSON")
        return reader.read(value)

    def _count_unknown(self, envelope: Envelope, known: frozenset[str], summary: _Summary) -> None:
        """Count the fields of the event's row (after, else before) that the table lacks, as Spark SQL does."""
        row = envelope.after if isinstance(envelope.after, dict) else envelope.before
        if not isinstance(row, dict) or known.issuperset(row):
            return
        assert summary.unknown is not None
        for name, v in row.items():
            if name not in known:
                summary.unknown[name] = summary.unknown.get(name, 0) + 1
                if summary.samples is not None and v is not None and name not in summary.samples:
                    summary.samples[name] = field_text(v)  # the text Spark's map of the row holds

    def _rows(
        self,
        good_at: list[int],
        millis: list[int | None],
        bad_at: list[int],
        errors: list[str],
        bad_payloads: list[str],
        summary: _Summary,
        batch: pa.RecordBatch,
        changes: pa.Table | None = None,
    ) -> pa.RecordBatch:
        """The output frame of one Arrow batch: its changes, its dead letters, its summary row."""
        n_good, n_bad = len(good_at), len(bad_at)
        rest = n_bad + 1
        take_good, take_bad = pa.array(good_at, pa.int64()), pa.array(bad_at, pa.int64())

        def summary_column(value: Any, t: pa.DataType) -> pa.Array:
            return pa.array([None] * (n_good + n_bad) + [value], t)

        columns: list[pa.Array] = []
        for f in self.output:
            if changes is not None and f.name in changes.column_names:
                good = changes.column(f.name).combine_chunks().cast(f.type)
                columns.append(pa.concat_arrays([good, pa.nulls(rest, f.type)]))
            elif f.name in self.schema.names or f.name in (OP_COLUMN, SOURCE_ORDER_COLUMN):
                columns.append(pa.nulls(n_good + rest, f.type))  # a summary alone
            elif f.name == SOURCE_TS_COLUMN:
                stamps = pa.array(millis, pa.timestamp("ms", tz="UTC")).cast(f.type)
                columns.append(pa.concat_arrays([stamps, pa.nulls(rest, f.type)]))
            elif f.name in self.extra_cols:
                column = batch.column(f.name).cast(f.type)
                columns.append(pa.concat_arrays([column.take(take_good), pa.nulls(rest, f.type)]))
            elif f.name == KIND:
                columns.append(pa.array([GOOD] * n_good + [BAD] * n_bad + [SUMMARY], f.type))
            elif f.name == ERROR:
                columns.append(pa.array([None] * n_good + errors + [None], f.type))
            elif f.name == PAYLOAD:
                columns.append(pa.array([None] * n_good + bad_payloads + [None], f.type))
            elif f.name == POSITION:
                positions = position_texts(batch, self.position_cols).take(take_bad).cast(f.type)
                columns.append(pa.concat_arrays([pa.nulls(n_good, f.type), positions, pa.nulls(1, f.type)]))
            elif f.name == RECORDS:
                columns.append(summary_column(summary.records, f.type))
            elif f.name == TRUNCATES:
                columns.append(summary_column(summary.truncates, f.type))
            elif f.name == TRUNCATE_AT:
                columns.append(summary_column(summary.truncate_at, f.type))
            elif f.name == UNKNOWN_COUNTS:
                columns.append(summary_column(list((summary.unknown or {}).items()), f.type))
            elif f.name == SAMPLES:
                columns.append(summary_column(list((summary.samples or {}).items()), f.type))
            else:
                assert f.name == HEADS, f.name
                columns.append(summary_column(summary.heads or [], f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self.output)


def _as_dead(envelope: Envelope) -> Envelope:
    """The event as one the Spark SQL decoder makes dead letters of (one per change it would make)."""
    if envelope.error is not None:
        return envelope
    return Envelope(
        envelope.op,
        envelope.before,
        envelope.after,
        envelope.source,
        envelope.ts_ms,
        envelope.schema,
        envelope.schema_id,
        error="unreadable",
    )
