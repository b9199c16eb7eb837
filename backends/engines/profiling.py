"""What the profiling tools (table_profile, column_profile, suggest_joins) need to know of an
engine beyond quoting: one `Profiling` value per engine (`Engine.profiling`).

The statements are built in handlers/query/profile_sql.py from these pieces; the pieces that
are SQL are templates where "{}" stands for a quoted column (or an expression over one).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


def declared_family(declared: str) -> str:
    """integer | decimal | string | temporal | boolean | uuid | json | binary | other, from a
    column's declared type on a server engine (MySQL/MariaDB and PostgreSQL names)."""
    t = (declared or "").lower().strip()
    if t.endswith("[]"):
        return "other"
    base = t.split("(")[0].strip()
    if base in ("tinyint", "bool", "boolean") and (base != "tinyint" or t.startswith("tinyint(1)")):
        return "boolean"
    if base == "uuid":
        return "uuid"
    if base in ("json", "jsonb"):
        return "json"
    if base in ("bytea", "blob", "tinyblob", "mediumblob", "longblob", "binary", "varbinary", "bit"):
        return "binary"
    if re.search(r"\b(tiny|small|medium|big)?int(eger)?\b|serial", base) or base in ("int2", "int4", "int8", "year"):
        return "integer"
    if re.search(r"decimal|numeric|real|double|float|money", base):
        return "decimal"
    if re.search(r"^(date|time|timestamp|datetime)", base):
        return "temporal"
    if re.search(r"char|text|enum|^set$|citext|^name$", base):
        return "string"
    return "other"


@dataclass(frozen=True)
class Profiling:
    """An engine's profiling facts."""

    # Above the engine's row estimate, table_profile does not try COUNT(*): what counting a
    # table costs differs by an order of magnitude between engines.
    exact_count_max_rows: int
    epoch: str  # seconds since 1970 of a date/time value: a histogram's axis for temporal columns
    length: str = "LENGTH({})"  # characters of a text value
    byte_length: str = "LENGTH({})"  # bytes of a binary value
    # A json/xml/array value as text, to measure its length and to GROUP BY it (PostgreSQL's
    # json, xml and arrays have no '=' a GROUP BY can use); "{}" where values are text already.
    as_text: str = "{}"
    # Read after "<table> AS s": a seeded Bernoulli sample of the rows, with {percent} and {seed};
    # "" when the engine has none (table_profile then spreads windows over an integer key).
    bernoulli_sample: str = ""
    implicit_key: str = ""  # the integer row key of a table that has one undeclared (Engine.has_rowid)
    untyped_columns: bool = False  # a column may be declared without a type: no type evidence against a join
    type_family: Callable[[str], str] = declared_family  # a declared type's family, as above
