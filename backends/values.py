"""Database values as JSON, losslessly and explicitly.

    None, bool, int, str        as is (integers of any size stay JSON numbers)
    float                       as is; NaN and +/-Infinity become the strings "NaN", "Infinity", "-Infinity"
    Decimal                     a string with every digit, never an exponent ("12.50", "0.0000000001"):
                                a JSON number would round it
    date, datetime, time        ISO 8601 strings ("2024-05-01", "2024-05-01T10:00:00+00:00")
    timedelta (MySQL TIME)      {"$interval_s": 3600.5}
    bytes, bytearray, memoryview {"$bytes_b64": "<base64>"}
    UUID, IP addresses, ranges  their text form
    dict, list (JSON columns)   recursively encoded

The column's type in `columns[].type` says how to read a string back (a "numeric" column
holds decimal strings). `row_bytes` measures a row as it will appear on the wire, so the
byte cap counts what the client receives.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from typing import Any

import orjson


def json_safe(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, decimal.Decimal):
        return decimal_text(value)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return {"$interval_s": value.total_seconds()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes_b64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return str(value)


def decimal_text(value: decimal.Decimal) -> str:
    """Positional notation, as the database wrote it (str() alone gives "-1E-10" for a small
    DECIMAL, which MySQL and PostgreSQL write as -0.0000000001); str() first, as it is 3x faster."""
    text = str(value)
    return text if "E" not in text else format(value, "f")


# Types that are their own JSON (a row of them needs no call per value: most rows are).
_AS_IS = frozenset({str, int, bool, type(None)})


# The commonest others by exact type, encoded as json_safe would (anything else goes through it).
_BY_TYPE = {
    decimal.Decimal: decimal_text,
    datetime.date: datetime.date.isoformat,
    datetime.datetime: datetime.datetime.isoformat,
    datetime.time: datetime.time.isoformat,
}


def encode_row(row: Any) -> list[Any]:
    by_type = _BY_TYPE
    return [v if v.__class__ in _AS_IS else by_type.get(v.__class__, json_safe)(v) for v in row]


def row_bytes(encoded_row: list[Any]) -> int:
    return len(orjson.dumps(encoded_row))
