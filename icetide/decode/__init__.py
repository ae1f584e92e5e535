"""Decoders: raw records (JSON, Debezium change events) into a table's columns, bad records apart.

Example::

    good, bad = decode_json(
        df, "value", table_schema, key=["ad_id"], op_mode="upsert", position_cols=["topic", "partition", "offset"]
    )
"""

from __future__ import annotations

from icetide.decode.debezium.changes import SOURCE_TS_COLUMN
from icetide.decode.debezium.tasks import decode_debezium
from icetide.decode.frames import BAD_COLUMNS, BAD_DDL, EpochUnit, OpMode, source_position
from icetide.decode.json.tasks import decode_json

__all__ = [
    "BAD_COLUMNS",
    "BAD_DDL",
    "SOURCE_TS_COLUMN",
    "EpochUnit",
    "OpMode",
    "decode_debezium",
    "decode_json",
    "source_position",
]
