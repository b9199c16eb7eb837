"""The SQL of table_profile and column_profile, and the estimators that read it.

Every statement is built here from quoted identifiers (the caller's names never reach SQL
text unquoted) and from the engine's profiling facts (backends/engines/profiling.py: its
length and epoch functions, how it reads a value as text, its row sampling), then handed to
the shared read-only path, which checks it, applies the query rules, caps and the timeout
like any run_sql_readonly statement.

Sampling, when a table has more rows than the sample asks for:
    Bernoulli    Where the engine samples rows itself (PostgreSQL: TABLESAMPLE BERNOULLI (p)
                 REPEATABLE (seed)): every statement of one profile reads the same rows
                 (~20 ms on 1M rows against ~60 ms for a count).
    Key windows  Otherwise (MySQL, SQLite), with a single-column integer key (or SQLite's
                 rowid): WINDOWS windows, one in each of WINDOWS equal strata of the key
                 range, each from a seeded random start, non-overlapping, read through the key
                 index. A full scan with RAND() costs ~0.2 s per statement on 1M MariaDB rows
                 and a profile runs one per column; the windows cost ~10 ms. Without such a
                 key: the first rows.

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
from dataclasses import dataclass
from typing import Any

from backends.engines.base import Engine

SEED = 42  # one profile's statements read the same sample, and a repeated profile the same numbers
WINDOWS = 20
WINDOW_COLUMN = "mcp_sample_window"  # which key window a sampled row came from
CLUSTERED_EVIDENCE = 10  # values seen more than once needed before calling a column clustered
ORDERED = ("integer", "decimal", "temporal")
GROUPABLE_AS_TEXT = ("json", "other")  # PostgreSQL json/xml/arrays have no '=' usable by GROUP BY


# -- identifiers and expressions ------------------------------------------------------------


def table_sql(schema: str, table: str, engine: Engine) -> str:
    return f"{engine.quote(schema)}.{engine.quote(table)}"


def length_sql(column: str, family: str, engine: Engine) -> str:
    """Characters of a text value (a non-string one read as text), bytes of a binary one."""
    facts = engine.profiling
    if family == "binary":
        return facts.byte_length.format(column)
    return facts.length.format(column if family == "string" else facts.as_text.format(column))


def group_sql(column: str, family: str, engine: Engine) -> str:
    return engine.profiling.as_text.format(column) if family in GROUPABLE_AS_TEXT else column


# -- the sample ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    template: str  # a FROM item; "{cols}" where a derived sample lists the columns it reads
    sampled: bool
    method: str  # full | bernoulli | key_windows | first_rows

    def source(self, columns: list[ColumnSpec], engine: Engine) -> str:
        """The FROM item reading only `columns`: a derived sample carries no column no statement
        needs (the windows of 20,000 rows cost half as much with one column as with seven)."""
        return self.template.replace("{cols}", ", ".join(engine.quote(c.name) for c in columns) or "*")


def full_table(schema: str, table: str, engine: Engine) -> Sample:
    return Sample(f"{table_sql(schema, table, engine)} AS s", False, "full")


def bernoulli(schema: str, table: str, engine: Engine, rows: int, sample_rows: int) -> Sample:
    """The engine's own seeded row sampling (Profiling.bernoulli_sample; only for tables)."""
    percent = min(100.0, 100.0 * sample_rows / max(rows, 1))
    clause = engine.profiling.bernoulli_sample.format(percent=percent, seed=SEED)
    return Sample(f"{table_sql(schema, table, engine)} AS s {clause}", True, "bernoulli")


def key_windows(schema: str, table: str, engine: Engine, key: str, low: int, high: int, sample_rows: int) -> Sample:
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
    tbl = table_sql(schema, table, engine)
    k = engine.quote(key)
    parts = []
    for i, start in enumerate(starts):
        bound = f" AND {k} < {starts[i + 1]}" if i + 1 < len(starts) else ""
        run = f"SELECT {{cols}} FROM {tbl} WHERE {k} >= {start}{bound} ORDER BY {k} LIMIT {per_window}"
        parts.append(f"SELECT {i} AS {WINDOW_COLUMN}, w{i}.* FROM ({run}) AS w{i}")
    return Sample(f"({' UNION ALL '.join(parts)}) AS s", True, "key_windows")


def first_rows(schema: str, table: str, engine: Engine, sample_rows: int) -> Sample:
    return Sample(f"(SELECT {{cols}} FROM {table_sql(schema, table, engine)} LIMIT {int(sample_rows)}) AS s", True, "first_rows")


def key_range_sql(schema: str, table: str, engine: Engine, key: str) -> str:
    k = engine.quote(key)
    return f"SELECT MIN({k}) AS low, MAX({k}) AS high FROM {table_sql(schema, table, engine)}"


def count_sql(schema: str, table: str, engine: Engine) -> str:
    return f"SELECT COUNT(*) AS n FROM {table_sql(schema, table, engine)}"


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


def aggregate_sql(columns: list[ColumnSpec], sample: Sample, engine: Engine) -> str:
    """One pass over the sample: rows, then per column non-null count [, min, max] [, average length]."""
    parts = ["COUNT(*) AS n"]
    for i, column in enumerate(columns):
        c = engine.quote(column.name)
        parts.append(f"COUNT({c}) AS nn_{i}")
        if column.ordered:
            parts += [f"MIN({c}) AS min_{i}", f"MAX({c}) AS max_{i}"]
        if column.measures_length:
            parts.append(f"AVG({length_sql(c, column.family, engine)}) AS len_{i}")
    return f"SELECT {', '.join(parts)} FROM {sample.source(columns, engine)}"


def frequency_sql(column: ColumnSpec, sample: Sample, engine: Engine, top_k: int) -> str:
    """The top_k most frequent values with their counts, and on every row d (distinct values in
    the sample) and f1 (values seen once): what the distinct estimator needs, in one pass."""
    c = engine.quote(column.name)
    g = group_sql(c, column.family, engine)
    # Key windows: in how many windows each value was seen. A value repeated inside one window
    # and never seen in another is what a column following the key looks like.
    windows = f"MAX({WINDOW_COLUMN}) - MIN({WINDOW_COLUMN})" if sample.method == "key_windows" else "0"  # > 0: crossed
    inner = f"SELECT {g} AS v, COUNT(*) AS k, {windows} AS nw FROM {sample.source([column], engine)} WHERE {c} IS NOT NULL GROUP BY {g}"
    return (
        "SELECT v, k, COUNT(*) OVER () AS d, SUM(CASE WHEN k = 1 THEN 1 ELSE 0 END) OVER () AS f1, SUM(k * k) OVER () AS k2, "
        "SUM(CASE WHEN k > 1 THEN 1 ELSE 0 END) OVER () AS repeated, SUM(CASE WHEN nw > 0 THEN 1 ELSE 0 END) OVER () AS crossing "
        f"FROM ({inner}) AS g ORDER BY k DESC, v LIMIT {int(top_k)}"
    )


def distinct_values_sql(column: ColumnSpec, sample: Sample, engine: Engine, limit: int) -> str:
    c = engine.quote(column.name)
    g = group_sql(c, column.family, engine)
    return f"SELECT DISTINCT {g} AS v FROM {sample.source([column], engine)} WHERE {c} IS NOT NULL LIMIT {int(limit)}"


def axis_sql(column: ColumnSpec, engine: Engine) -> str:
    """The numeric axis of a histogram: the value, its epoch seconds, or a string's length."""
    c = engine.quote(column.name)
    if column.family == "temporal":
        return engine.profiling.epoch.format(c)
    if column.family in ("integer", "decimal"):
        return c
    return length_sql(c, column.family, engine)


def axis_range_sql(column: ColumnSpec, sample: Sample, engine: Engine) -> str:
    axis = axis_sql(column, engine)
    return f"SELECT MIN({axis}) AS low, MAX({axis}) AS high FROM {sample.source([column], engine)}"


def histogram_sql(column: ColumnSpec, sample: Sample, engine: Engine, low: float, high: float, buckets: int) -> str:
    """Equal-width buckets over [low, high]; the top value falls in the last bucket."""
    axis = axis_sql(column, engine)
    width = (high - low) / buckets
    bucket = f"CASE WHEN {axis} >= {high!r} THEN {buckets - 1} ELSE FLOOR(({axis} - {low!r}) / {width!r}) END"
    return (
        f"SELECT b, COUNT(*) AS k FROM (SELECT {bucket} AS b FROM {sample.source([column], engine)} "
        f"WHERE {engine.quote(column.name)} IS NOT NULL) AS h GROUP BY b ORDER BY b"
    )


def containment_sql(child: tuple[str, str, str], parent: tuple[str, str, str], engine: Engine, *, sample_values: int) -> str:
    """Of up to sample_values distinct non-null child values, how many exist in the parent column."""
    c_schema, c_table, c_col = child
    p_schema, p_table, p_col = parent
    cc, pc = engine.quote(c_col), engine.quote(p_col)
    distinct = (
        f"SELECT DISTINCT {cc} AS v FROM {table_sql(c_schema, c_table, engine)} WHERE {cc} IS NOT NULL LIMIT {int(sample_values)}"
    )
    probe = f"SELECT 1 FROM {table_sql(p_schema, p_table, engine)} AS p WHERE p.{pc} = s.v"
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
