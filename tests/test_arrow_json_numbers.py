"""Numbers as Spark spells them: a JSON number read into a STRING column, or quoted in an error,
is the text Spark's from_json keeps (Jackson's: a double as Java writes it, 1e7 as "1.0E7"), in the
pyarrow JSON decoder and in `decode_json` in Spark's tasks (decode/json/tasks.py) as in the Spark SQL
JSON decoder (same payloads, same batch; its output frozen in tests/golden/json/arrow_json_numbers.json)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from icetide.decode.json.records import ArrowJsonDecoder, DecodedBlock
from icetide.decode.json.scalars import raw_text
from icetide.decode.json.tasks import decode_json
from tests.frozen import PYTHON_JSON, frozen
from tests.test_arrow_json_nested import _plain, utc_process  # noqa: F401 (a fixture)
from tests.test_debezium_arrow import KAFKA_POSITION, kafka_frame

_TABLE = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("s", T.StringType()),
        T.StructField("i", T.IntegerType()),
        T.StructField("l", T.LongType()),
        T.StructField("f", T.DoubleType()),
        T.StructField("r", T.FloatType()),
        T.StructField("o", T.BooleanType()),
        T.StructField("t", T.TimestampType()),
        T.StructField("d", T.DateType()),
    ]
)
_ARROW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("s", pa.string()),
        pa.field("i", pa.int32()),
        pa.field("l", pa.int64()),
        pa.field("f", pa.float64()),
        pa.field("r", pa.float32()),
        pa.field("o", pa.bool_()),
        pa.field("t", pa.timestamp("us", tz="UTC")),
        pa.field("d", pa.date32()),
    ]
)
# Not here: 4.9e-324, which Java 17 writes "4.9E-324" and this decoder "5.0E-324" (the shortest
# digits; decode/spark_compat/json_values.py's known difference).
NUMBERS = [
    *("1e7", "1E7", "1.5e-5", "0.001", "0.0001", "1e-3", "123456789012.5", "1e400", "-1e400", "1E2", "100.0"),
    *("1.0", "-0.0", "0", "-0", "1e22", "1e21", "12345678.9", "0.30000000000000004", "9999999.0", "10000000.5"),
    *("12345678901234567890123", "-9223372036854775809", "2147483648", "1.7976931348623157e308"),
    *("2.2250738585072014E-308",),
    *("NaN", "Infinity", "-Infinity", "[1e7, 2.50]", '{"a": 1e-7}', "2.5E+3", "123e-2", "1e0"),
]


def _tasks_output(spark: Any, payloads: list[bytes]) -> Any:
    good, bad = decode_json(kafka_frame(spark, payloads), "value", _TABLE, ["id"], "append", KAFKA_POSITION)
    rows = sorted((r["id"], {n: _plain(r[n]) for n in [*_TABLE.names, "_op"]}) for r in good.collect())
    errors = {int(r["source_position"].rpartition("@")[2]): r["error"] for r in bad.collect()}
    return [row for _, row in rows], errors


def _python_output(decoded: DecodedBlock) -> Any:
    rows = sorted((r["id"], {n: _plain(v) for n, v in r.items()}) for r in decoded.with_ops().to_pylist())
    errors = {int(b.source_position.rpartition("@")[2]): b.error for b in decoded.bad}
    return [row for _, row in rows], errors


@pytest.mark.usefixtures("utc_process")
def test_numbers_are_spelled_as_the_spark_sql_decoder_spelled_them(spark: Any) -> None:
    payloads = [
        f'{{"id": {i * 10 + j}, "{c}": {n}}}'.encode()
        for i, n in enumerate(NUMBERS)
        for j, c in enumerate(["s", "i", "l", "f", "r", "o", "t", "d"])
    ]
    decoder = ArrowJsonDecoder(_ARROW, ["id"], time_zone=spark.conf.get("spark.sql.session.timeZone"))
    got = _python_output(decoder.decode(payloads, lambda i: f"cdc/0@{i}"))
    golden = "json/arrow_json_numbers.json"
    frozen(golden, "numbers into every scalar type", got, decoder=PYTHON_JSON)
    frozen(golden, "numbers into every scalar type", _tasks_output(spark, payloads), decoder=PYTHON_JSON)
    good, errors = got
    assert {r["s"] for r in good if r["id"] % 10 == 0} >= {"1.0E7", "1.5E-5", "1.0E-4"}
    # issue 49: a number beyond a double is no STRING (Spark's text of it was '"Infinity"')
    assert errors[56] == "column s: number '1e400' is beyond a double: not a STRING"
    assert errors[64] == "column s: number '-1e400' is beyond a double: not a STRING"
    assert errors[232] == "column s: array '[1.0E7,2.5]' is not a STRING"  # never its JSON text (issue 49)
    assert errors[1] == "column i: '1.0E7' is not an INT"  # the payload at offset 1: 1e7 into INT


def test_the_debezium_decoders_raw_text_keeps_pythons_spelling() -> None:
    """decode/debezium/rows.py and decode/debezium/conversions.py share `raw_text`: unchanged."""
    assert raw_text(1e7) == "10000000.0" and raw_text(1.5e-5) == "1.5e-05" and raw_text(float("inf")) == "Infinity"
