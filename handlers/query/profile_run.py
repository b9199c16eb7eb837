"""One profile of one table: count, choose the sample, then one pass for every column's counts
and ranges and one pass per column for its frequencies, inside one time budget.

The statements run through `run(sql, timeout_ms)`, the shared read-only path (query rules,
read-only checks, caps, statement timeout). The budget is the target's timeout_ms for the
whole profile: each statement gets what remains, and when the budget runs out (or a statement
is cancelled by the server for it) the profile stops and returns what it has, truncated=true,
naming the columns it did not reach.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from backends.engines.base import Engine
from gateway.errors import DeadlineExceeded
from handlers.query import profile_sql as q
from handlers.query.profile_sql import ColumnSpec, Sample

RunSql = Callable[[str, int], dict[str, Any]]  # (sql, timeout_ms) -> the shared path's result
COUNT_BUDGET_SHARE = 0.3  # an exact count may use this much of the budget before the estimate is used
AGGREGATE_COLUMNS = 40  # columns per aggregate statement
MIN_STATEMENT_MS = 20  # less budget than this left: stop instead of starting a statement
STATEMENTS_AT_ONCE = 3  # per-column statements of one profile in flight together
PATTERN_VALUES = 200  # distinct values read for pattern hints
PATTERN_SHARE = 0.8  # a hint needs this share of the values read
PATTERNS = (
    ("email", re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z0-9-]{2,}$")),
    ("uuid", re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")),
    ("datetime", re.compile(r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")),
    ("date", re.compile(r"^\d{4}-\d{2}-\d{2}$")),
    ("url", re.compile(r"^https?://\S+$")),
    ("integer_text", re.compile(r"^-?\d+$")),
    ("decimal_text", re.compile(r"^-?\d+\.\d+$")),
)


class OutOfBudget(Exception):
    """The profile's time budget is spent: stop here, report what is done."""


@dataclass
class TableShape:
    """What the catalog said about the table before any statement ran."""

    engine: Engine
    schema: str
    table: str
    columns: list[ColumnSpec]
    rows_estimate: int | None
    integer_key: str | None  # a single-column integer primary key, or SQLite's rowid
    unique_columns: frozenset[str] = frozenset()  # single-column primary or unique keys: distinct = non-null
    is_table: bool = True  # views cannot be TABLESAMPLEd


@dataclass
class Profiler:
    run: RunSql
    shape: TableShape
    deadline: float  # time.monotonic()
    statements: int = 0
    rows: int = 0
    rows_exact: bool = True
    sample: Sample | None = None
    notes: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- budget ------------------------------------------------------------------------------
    def remaining_ms(self) -> int:
        return int((self.deadline - time.monotonic()) * 1000)

    def _query(self, sql: str, *, share: float = 1.0) -> list[list[Any]]:
        remaining = self.remaining_ms()
        if remaining < MIN_STATEMENT_MS:
            raise OutOfBudget
        with self.lock:
            self.statements += 1
        try:
            return self.run(sql, max(MIN_STATEMENT_MS, int(remaining * share)))["rows"]
        except DeadlineExceeded:
            if share < 1.0:
                raise  # the caller has a fallback
            raise OutOfBudget from None

    # -- count and sample --------------------------------------------------------------------
    def count_rows(self) -> None:
        s = self.shape
        estimate = s.rows_estimate
        # Above the engine's estimate, COUNT(*) is not tried (Profiling.exact_count_max_rows).
        if estimate is None or estimate <= s.engine.profiling.exact_count_max_rows:
            try:
                self.rows = int(self._query(q.count_sql(s.schema, s.table, s.engine), share=COUNT_BUDGET_SHARE)[0][0])
                return
            except DeadlineExceeded:
                if estimate is None:
                    raise OutOfBudget from None
                self.notes.append("COUNT(*) did not finish in its share of the budget: row_count is the engine's estimate")
        self.rows, self.rows_exact = int(estimate or 0), False

    def choose_sample(self, sample_rows: int) -> Sample:
        s = self.shape
        if self.rows <= sample_rows:
            self.sample = q.full_table(s.schema, s.table, s.engine)
        elif s.engine.profiling.bernoulli_sample and s.is_table:
            self.sample = q.bernoulli(s.schema, s.table, s.engine, self.rows, sample_rows)
        elif s.integer_key:
            low, high = self._query(q.key_range_sql(s.schema, s.table, s.engine, s.integer_key))[0]
            if low is None or high is None:
                self.sample = q.full_table(s.schema, s.table, s.engine)
            else:
                self.sample = q.key_windows(s.schema, s.table, s.engine, s.integer_key, int(low), int(high), sample_rows)

        else:
            self.sample = q.first_rows(s.schema, s.table, s.engine, sample_rows)
            self.notes.append(
                "no integer key to spread the sample over (or a view): the sample is the first rows the engine returns"
            )
        return self.sample

    # -- statements over the sample ----------------------------------------------------------
    def aggregates(self, columns: list[ColumnSpec]) -> tuple[int, dict[str, dict[str, Any]]]:
        """(rows in the sample, per column: non_null, min, max, avg_length)."""
        assert self.sample is not None
        n, out = 0, {}
        for start in range(0, len(columns), AGGREGATE_COLUMNS):
            chunk = columns[start : start + AGGREGATE_COLUMNS]
            result = self.run_aggregate(chunk)
            n = result.pop("n")
            out.update(result)
        return n, out

    def run_aggregate(self, columns: list[ColumnSpec]) -> dict[str, Any]:
        assert self.sample is not None
        rows = self._query(q.aggregate_sql(columns, self.sample, self.shape.engine))
        values = iter(rows[0])
        out: dict[str, Any] = {"n": int(next(values) or 0)}
        for column in columns:
            item: dict[str, Any] = {"non_null": int(next(values) or 0), "min": None, "max": None, "avg_length": None}
            if column.ordered:
                item["min"], item["max"] = next(values), next(values)
            if column.measures_length:
                length = q.as_float(next(values))
                item["avg_length"] = round(length, 2) if length is not None else None
            out[column.name] = item
        return out

    def all_frequencies(self, columns: list[ColumnSpec], top_k: int) -> dict[str, tuple[list[dict[str, Any]], dict[str, int]]]:
        """frequencies() of each column, STATEMENTS_AT_ONCE statements at a time (each on its own
        pooled connection): the per-column statements are most of a profile's time. A column of a
        single-column key needs none: its values are distinct by constraint. Columns whose
        statement did not fit in the budget are missing from the result."""
        out: dict[str, tuple[list[dict[str, Any]], dict[str, int]]] = {}
        wanted = []
        for column in columns:
            if column.name in self.shape.unique_columns:
                out[column.name] = ([], {"d": -1, "f1": 0, "k2": 0, "repeated": 0, "crossing": 0})  # d filled by the caller
            else:
                wanted.append(column)
        with ThreadPoolExecutor(max_workers=STATEMENTS_AT_ONCE, thread_name_prefix="mcp-profile") as pool:
            futures = {column.name: pool.submit(self.frequencies, column, top_k) for column in wanted}
            for name, future in futures.items():
                with contextlib.suppress(OutOfBudget):  # that column stays unprofiled; the caller says truncated
                    out[name] = future.result()
        return out

    def frequencies(self, column: ColumnSpec, top_k: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """(top values with counts, the sample's shape: d distinct, f1 seen once, k2 sum of squared
        counts, repeated values seen more than once, crossing those seen in more than one window)."""
        assert self.sample is not None
        rows = self._query(q.frequency_sql(column, self.sample, self.shape.engine, top_k))
        if not rows:
            return [], {"d": 0, "f1": 0, "k2": 0, "repeated": 0, "crossing": 0}
        top = [{"value": r[0], "count": int(r[1])} for r in rows]
        names = ("d", "f1", "k2", "repeated", "crossing")
        shape = {name: int(q.as_float(value) or 0) for name, value in zip(names, rows[0][2:7], strict=True)}
        if self.sample.method != "key_windows":
            shape["repeated"] = shape["crossing"] = 0  # no windows to cross: not evidence of clustering
        return top, shape

    def histogram(self, column: ColumnSpec, buckets: int) -> list[dict[str, Any]]:
        assert self.sample is not None
        low, high = (q.as_float(v) for v in self._query(q.axis_range_sql(column, self.sample, self.shape.engine))[0])
        if low is None or high is None:
            return []
        if high == low:
            total = self._query(q.aggregate_sql([column], self.sample, self.shape.engine))[0][1]
            return [{"low": low, "high": high, "count": int(total or 0)}]
        rows = self._query(q.histogram_sql(column, self.sample, self.shape.engine, low, high, buckets))
        width = (high - low) / buckets
        counts = {int(q.as_float(b) or 0): int(k) for b, k in rows}
        return [
            {"low": round(low + i * width, 6), "high": round(low + (i + 1) * width, 6), "count": counts.get(i, 0)}
            for i in range(buckets)
        ]

    def pattern_hints(self, column: ColumnSpec) -> list[dict[str, Any]]:
        assert self.sample is not None
        rows = self._query(q.distinct_values_sql(column, self.sample, self.shape.engine, PATTERN_VALUES))
        values = [str(r[0]) for r in rows if isinstance(r[0], str)]
        if not values:
            return []
        hints = []
        for name, pattern in PATTERNS:
            share = sum(1 for v in values if pattern.match(v)) / len(values)
            if share >= PATTERN_SHARE:
                hints.append({"pattern": name, "share": round(share, 3)})
        json_share = sum(1 for v in values if _is_json(v)) / len(values)
        if json_share >= PATTERN_SHARE:
            hints.append({"pattern": "json", "share": round(json_share, 3)})
        return hints


def _is_json(value: str) -> bool:
    text = value.strip()
    if not text or text[0] not in "{[":
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def column_summary(
    column: ColumnSpec,
    *,
    sampled: bool,
    n: int,
    rows: int,
    agg: dict[str, Any],
    top: list[dict[str, Any]],
    shape: dict[str, int],
) -> dict[str, Any]:
    """One column's figures: null ratio over the sample, distinct estimated for the table."""
    non_null = agg["non_null"]
    null_ratio = (n - non_null) / n if n else None
    total_non_null = rows * (1 - null_ratio) if null_ratio is not None else 0
    if shape["d"] < 0:  # a single-column key: every non-null value differs
        shape = {**shape, "d": non_null, "f1": non_null}
        distinct = int(round(total_non_null))
    else:
        distinct = q.estimate_distinct(sampled=sampled, n=non_null, total_non_null=total_non_null, **shape)
    d = shape["d"]
    return {
        "name": column.name,
        "type": column.type,
        "family": column.family,
        "null_ratio": round(null_ratio, 6) if null_ratio is not None else None,
        "non_null_in_sample": non_null,
        "distinct_in_sample": d,
        "distinct_estimate": distinct,
        "distinct_exact": not sampled,
        "min": agg["min"],
        "max": agg["max"],
        "avg_length": agg["avg_length"],
        "top_values": [{**t, "share": round(t["count"] / non_null, 6) if non_null else None} for t in top],
    }
