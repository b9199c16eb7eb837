"""The SQL of table_profile and column_profile, per engine, and the estimators that read it.

Every statement is built here from quoted identifiers (the caller's names never reach SQL
text unquoted) and handed to the shared read-only path, which checks it, applies the query
rules, caps and the timeout like any run_sql_readonly statement.

Sampling, when a table has more rows than the sample asks for:
    PostgreSQL   TABLESAMPLE BERNOULLI (p) REPEATABLE (seed): every statement of one profile
                 reads the same rows (~20 ms on 1M rows against ~60 ms for a count).
    MySQL/SQLite With a single-column integer key (or SQLite's rowid): WINDOWS windows, one in
                 each of WINDOWS equal strata of the key range, each from a seeded random
                 start, non-overlapping, read through the key index. A full scan with RAND()
                 costs ~0.2 s per statement on 1M MariaDB rows and a profile runs one per
                 column; the windows cost ~10 ms. Without such a key: the first rows.

Distinct counts from a sample (estimate_distinct): the occupancy estimator when the
sampled values have similar frequencies, else Haas and Stokes' Duj1 (PostgreSQL's ANALYZE
uses it): n*d / (n - f1 + f1*n/N), with n sampled non-null values, d distinct among them, f1
seen exactly once, N non-null rows in the table. A unique column scales to N, a
low-cardinality one stays d. Key windows read runs of neighbouring rows: a column whose
values follow the key (a creation time) is recognised by its repeated values never crossing
from one window to another, and estimated by scaling instead.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

DIALECTS = {"mysql": "mysql", "pgsql": "postgres", "sqlite": "sqlite"}
SEED = 42  # one profile's statements read the same sample, and a repeated profile the same numbers
WINDOWS = 20
WINDOW_COLUMN = "mcp_sample_window"  # which key window a sampled row came from
CLUSTERED_EVIDENCE = 10  # values seen more than once needed before calling a column clustered
ORDERED = ("integer", "decimal", "temporal")
GROUPABLE_AS_TEXT = ("json", "other")  # PostgreSQL json/xml/arrays have no '=' usable by GROUP BY


# -- types ---------------------------------------------------------------------------------


def type_family(declared: str, protocol: str) -> str:
    """integer | decimal | string | temporal | boolean | uuid | json | binary | other."""
    t = (declared or "").lower().strip()
    if protocol == "sqlite":
        return _sqlite_family(t)
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


def _sqlite_family(t: str) -> str:
    """SQLite's affinity rules, with dates, booleans and JSON told apart by their declared names."""
    if "bool" in t:
        return "boolean"
    if "int" in t:
        return "integer"
    if "date" in t or "time" in t:
        return "temporal"
    if "json" in t:
        return "json"
    if any(word in t for word in ("char", "clob", "text")):
        return "string"
    if "blob" in t:
        return "binary"
    if not t:
        return "other"
    if any(word in t for word in ("real", "floa", "doub", "num", "dec")):
        return "decimal"
    return "other"


# -- identifiers and expressions ------------------------------------------------------------


def ident(name: str, protocol: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect=DIALECTS[protocol])


def table_sql(schema: str, table: str, protocol: str) -> str:
    return f"{ident(schema, protocol)}.{ident(table, protocol)}"


def length_sql(column: str, protocol: str) -> str:
    return f"CHAR_LENGTH({column})" if protocol == "mysql" else f"LENGTH({column})"


def group_sql(column: str, family: str, protocol: str) -> str:
    if protocol == "pgsql" and family in GROUPABLE_AS_TEXT:
        return f"CAST({column} AS TEXT)"
    return column


def epoch_sql(column: str, protocol: str) -> str:
    """Seconds since 1970 of a date/time value: the histogram's numeric axis for temporal columns."""
    if protocol == "pgsql":
        return f"EXTRACT(EPOCH FROM {column})"
    if protocol == "mysql":
        return f"UNIX_TIMESTAMP({column})"
    return f"(JULIANDAY({column}) - 2440587.5) * 86400.0"


# -- the sample ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    template: str  # a FROM item; "{cols}" where a derived sample lists the columns it reads
    sampled: bool
    method: str  # full | bernoulli | key_windows | first_rows

    def source(self, columns: list[ColumnSpec], protocol: str) -> str:
        """The FROM item reading only `columns`: a derived sample carries no column no statement
        needs (the windows of 20,000 rows cost half as much with one column as with seven)."""
        return self.template.replace("{cols}", ", ".join(ident(c.name, protocol) for c in columns) or "*")


def full_table(schema: str, table: str, protocol: str) -> Sample:
    return Sample(f"{table_sql(schema, table, protocol)} AS s", False, "full")


def bernoulli(schema: str, table: str, rows: int, sample_rows: int) -> Sample:
    percent = min(100.0, 100.0 * sample_rows / max(rows, 1))
    source = f"{table_sql(schema, table, 'pgsql')} AS s TABLESAMPLE BERNOULLI ({percent:.6f}) REPEATABLE ({SEED})"
    return Sample(source, True, "bernoulli")


def key_windows(schema: str, table: str, protocol: str, key: str, low: int, high: int, sample_rows: int) -> Sample:
    """WINDOWS non-overlapping runs of the key index, one per stratum of [low, high]."""
    span = high - low + 1
    strata = max(1, min(WINDOWS, span))
    per_window = max(1, math.ceil(sample_rows / strata))
    rng = random.Random(SEED)
    width = span / strata
    starts = []
    for i in range(strata):
        lower = low + int(i * width)
        upper = low + int((i + 1) * width)  # exclusive
        slack = max(0, upper - lower - per_window)
        starts.append(lower + (rng.randint(0, slack) if slack else 0))
    tbl = table_sql(schema, table, protocol)
    k = ident(key, protocol)
    parts = []
    for i, start in enumerate(starts):
        bound = f" AND {k} < {starts[i + 1]}" if i + 1 < len(starts) else ""
        run = f"SELECT {{cols}} FROM {tbl} WHERE {k} >= {start}{bound} ORDER BY {k} LIMIT {per_window}"
        parts.append(f"SELECT {i} AS {WINDOW_COLUMN}, w{i}.* FROM ({run}) AS w{i}")
    return Sample(f"({' UNION ALL '.join(parts)}) AS s", True, "key_windows")


def first_rows(schema: str, table: str, protocol: str, sample_rows: int) -> Sample:
    return Sample(
        f"(SELECT {{cols}} FROM {table_sql(schema, table, protocol)} LIMIT {int(sample_rows)}) AS s", True, "first_rows"
    )


def key_range_sql(schema: str, table: str, protocol: str, key: str) -> str:
    k = ident(key, protocol)
    return f"SELECT MIN({k}) AS low, MAX({k}) AS high FROM {table_sql(schema, table, protocol)}"


def count_sql(schema: str, table: str, protocol: str) -> str:
    return f"SELECT COUNT(*) AS n FROM {table_sql(schema, table, protocol)}"


# -- statements over the sample -------------------------------------------------------------


@dataclass(frozen=True)
class ColumnSpec:
    name: str
    type: str
    family: str

    @property
    def ordered(self) -> bool:
        return self.family in ORDERED

    @property
    def measures_length(self) -> bool:
        return self.family in ("string", "json", "binary")


def aggregate_sql(columns: list[ColumnSpec], sample: Sample, protocol: str) -> str:
    """One pass over the sample: rows, then per column non-null count [, min, max] [, average length]."""
    parts = ["COUNT(*) AS n"]
    for i, column in enumerate(columns):
        c = ident(column.name, protocol)
        parts.append(f"COUNT({c}) AS nn_{i}")
        if column.ordered:
            parts += [f"MIN({c}) AS min_{i}", f"MAX({c}) AS max_{i}"]
        if column.measures_length:
            value = c if protocol != "pgsql" or column.family == "string" else f"CAST({c} AS TEXT)"
            length = length_sql(value, protocol) if column.family != "binary" else f"LENGTH({c})"
            parts.append(f"AVG({length}) AS len_{i}")
    return f"SELECT {', '.join(parts)} FROM {sample.source(columns, protocol)}"


def frequency_sql(column: ColumnSpec, sample: Sample, protocol: str, top_k: int) -> str:
    """The top_k most frequent values with their counts, and on every row d (distinct values in
    the sample) and f1 (values seen once): what the distinct estimator needs, in one pass."""
    c = ident(column.name, protocol)
    g = group_sql(c, column.family, protocol)
    # Key windows: in how many windows each value was seen. A value repeated inside one window
    # and never seen in another is what a column following the key looks like.
    windows = f"MAX({WINDOW_COLUMN}) - MIN({WINDOW_COLUMN})" if sample.method == "key_windows" else "0"  # > 0: crossed
    inner = f"SELECT {g} AS v, COUNT(*) AS k, {windows} AS nw FROM {sample.source([column], protocol)} WHERE {c} IS NOT NULL GROUP BY {g}"
    return (
        "SELECT v, k, COUNT(*) OVER () AS d, SUM(CASE WHEN k = 1 THEN 1 ELSE 0 END) OVER () AS f1, SUM(k * k) OVER () AS k2, "
        "SUM(CASE WHEN k > 1 THEN 1 ELSE 0 END) OVER () AS repeated, SUM(CASE WHEN nw > 0 THEN 1 ELSE 0 END) OVER () AS crossing "
        f"FROM ({inner}) AS g ORDER BY k DESC, v LIMIT {int(top_k)}"
    )


def distinct_values_sql(column: ColumnSpec, sample: Sample, protocol: str, limit: int) -> str:
    c = ident(column.name, protocol)
    g = group_sql(c, column.family, protocol)
    return f"SELECT DISTINCT {g} AS v FROM {sample.source([column], protocol)} WHERE {c} IS NOT NULL LIMIT {int(limit)}"


def axis_sql(column: ColumnSpec, protocol: str) -> str:
    """The numeric axis of a histogram: the value, its epoch seconds, or a string's length."""
    c = ident(column.name, protocol)
    if column.family == "temporal":
        return epoch_sql(c, protocol)
    if column.family in ("integer", "decimal"):
        return c
    value = c if protocol != "pgsql" or column.family == "string" else f"CAST({c} AS TEXT)"
    return length_sql(value, protocol)


def axis_range_sql(column: ColumnSpec, sample: Sample, protocol: str) -> str:
    axis = axis_sql(column, protocol)
    return f"SELECT MIN({axis}) AS low, MAX({axis}) AS high FROM {sample.source([column], protocol)}"


def histogram_sql(column: ColumnSpec, sample: Sample, protocol: str, low: float, high: float, buckets: int) -> str:
    """Equal-width buckets over [low, high]; the top value falls in the last bucket."""
    axis = axis_sql(column, protocol)
    width = (high - low) / buckets
    bucket = f"CASE WHEN {axis} >= {high!r} THEN {buckets - 1} ELSE FLOOR(({axis} - {low!r}) / {width!r}) END"
    return (
        f"SELECT b, COUNT(*) AS k FROM (SELECT {bucket} AS b FROM {sample.source([column], protocol)} "
        f"WHERE {ident(column.name, protocol)} IS NOT NULL) AS h GROUP BY b ORDER BY b"
    )


def containment_sql(child: tuple[str, str, str], parent: tuple[str, str, str], protocol: str, *, sample_values: int) -> str:
    """Of up to sample_values distinct non-null child values, how many exist in the parent column."""
    c_schema, c_table, c_col = child
    p_schema, p_table, p_col = parent
    cc, pc = ident(c_col, protocol), ident(p_col, protocol)
    distinct = f"SELECT DISTINCT {cc} AS v FROM {table_sql(c_schema, c_table, protocol)} WHERE {cc} IS NOT NULL LIMIT {int(sample_values)}"
    probe = f"SELECT 1 FROM {table_sql(p_schema, p_table, protocol)} AS p WHERE p.{pc} = s.v"
    return f"SELECT COUNT(*) AS n, SUM(CASE WHEN EXISTS ({probe}) THEN 1 ELSE 0 END) AS hit FROM ({distinct}) AS s"


# -- estimators ----------------------------------------------------------------------------


def estimate_distinct(
    *, sampled: bool, n: int, d: int, f1: int, k2: int, total_non_null: float, repeated: int = 0, crossing: int = 0
) -> int:
    """Distinct values of a column of total_non_null values, from a sample of n values with d
    distinct, f1 seen once and k2 the sum of each value's squared count.

    Sample counts about as dispersed as random draws make them (variance/mean < DISPERSED)
    mean values of similar frequency: the occupancy estimator solves d = D (1 - e^(-n/D)) for
    D, the values the rows are drawn from (n draws from D equally likely values show that many
    on average), and the table's N rows then hold D (1 - e^(-N/D)) of them. Within a few % on
    such columns where Duj1 was 15-20 % low at moderate cardinality (bench/discovery.py).
    Skewed counts (a few frequent values, a long tail): Duj1. A key-window sample where the
    repeated values stay inside one window (crossing < half of repeated) is a column that
    follows the key: each window holds its own values, so distinct values scale with rows."""
    if not sampled or n == 0 or d == 0:
        return d
    total = max(total_non_null, n)
    if repeated >= CLUSTERED_EVIDENCE and crossing < repeated / 2:
        return int(round(min(total, d * total / n)))
    mean = n / d
    dispersion = (k2 / d - mean * mean) / mean
    if dispersion < DISPERSED:
        if d >= n:
            return int(total)  # every sampled value differs: a unique column
        values = occupancy_estimate(n=n, d=d)  # the values rows are drawn from ...
        return int(round(min(total, max(d, values * -math.expm1(-total / values)))))  # ... of which the table holds this many
    denominator = n - f1 + f1 * n / total
    if denominator <= 0:
        return int(total)
    return int(round(min(total, max(d, n * d / denominator))))


DISPERSED = 2.0


def occupancy_estimate(*, n: int, d: int) -> float:
    """D with D (1 - e^(-n/D)) = d < n, by bisection (the left side grows with D towards n)."""

    def expected(distinct: float) -> float:
        return distinct * -math.expm1(-n / distinct)

    low, high = float(d), float(d)
    while expected(high) < d and high < 1e15:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        if expected(middle) < d:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def as_float(value: Any) -> float | None:
    """A JSON-encoded numeric (decimals arrive as strings) as a float; None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
