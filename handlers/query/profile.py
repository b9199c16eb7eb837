"""table_profile and column_profile on /mcp/query: what a table's data looks like, measured.

The catalog (columns, keys, indexes, the engine's estimates) is read like describe_table; the
data is read only through the shared read-only path, as the statements of table_profile or
column_profile: query rules see them (a rule that blocks a table blocks profiling it), and
they run read-only, capped and timed like run_sql_readonly. The statements themselves are in
profile_sql.py, the budget and the order of work in profile_run.py.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from backends.sql import ReadOnlySql, Statement
from backends.targets import default_schema
from gateway.call import Caller
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.query.discovery import CatalogReaders
from handlers.query.lookup import require_column, require_table
from handlers.query.profile_run import OutOfBudget, Profiler, TableShape, column_summary
from handlers.query.profile_sql import ColumnSpec

MAX_PROFILED_COLUMNS = 200
DEFAULT_SAMPLE_ROWS = 20_000


class TableRef(ToolInput):
    schema_: str | None = Field(
        None, alias="schema", max_length=256, description="Schema (MySQL: database); omitted: the target's default."
    )
    table: str = Field(min_length=1, max_length=256)
    target_id: str | None = Field(None, max_length=64)
    sample_rows: int = Field(
        DEFAULT_SAMPLE_ROWS,
        ge=100,
        le=1_000_000,
        description="Tables with more rows than this are profiled on a sample of about this size.",
    )


class ColumnRef(TableRef):
    column: str = Field(min_length=1, max_length=256)
    top_k: int = Field(20, ge=1, le=100, description="Most frequent values to return.")
    buckets: int = Field(10, ge=2, le=50, description="Histogram buckets (values for numbers and dates, lengths for strings).")


class IndexInfo(BaseModel):
    name: str | None
    columns: list[str]
    unique: bool
    primary: bool
    method: str | None


class TopValue(BaseModel):
    value: Any
    count: int = Field(description="Rows with this value in the sample (the whole table when sampled=false).")
    share: float | None = Field(description="count / non-null values in the sample.")


class ColumnStats(BaseModel):
    name: str
    type: str
    family: str = Field(description="integer, decimal, string, temporal, boolean, uuid, json, binary or other.")
    null_ratio: float | None
    non_null_in_sample: int
    distinct_in_sample: int
    distinct_estimate: int = Field(description="Distinct non-null values in the table (Duj1 estimate when sampled).")
    distinct_exact: bool
    min: Any = Field(description="Smallest value, for numbers and dates.")
    max: Any
    avg_length: float | None = Field(description="Average length of strings (characters) or binaries (bytes).")
    top_values: list[TopValue]


class Sampling(BaseModel):
    sampled: bool
    sample_rows: int = Field(description="Rows the statistics were computed on.")
    sample_method: str = Field(description="full, bernoulli (PostgreSQL TABLESAMPLE), key_windows or first_rows.")


class TableProfileOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    table: str
    type: str
    row_count: int
    row_count_exact: bool = Field(description="false: row_count is the engine's estimate (a COUNT(*) would cost too much).")
    size_bytes: int | None = Field(description="Data and indexes on disk, as the engine reports it; null when it does not.")
    indexes: list[IndexInfo]
    sampled: bool
    sample_rows: int
    sample_method: str
    columns: list[ColumnStats]
    truncated: bool = Field(description="true: the time budget (the target's timeout_ms) ran out; see not_profiled.")
    not_profiled: list[str] = Field(default_factory=list, description="Columns without figures (budget or column cap).")
    notes: list[str] = Field(default_factory=list)
    stats: dict[str, Any]


class Bucket(BaseModel):
    low: float
    high: float
    count: int


class PatternHint(BaseModel):
    pattern: str = Field(description="email, uuid, date, datetime, url, json, integer_text or decimal_text.")
    share: float = Field(description="Share of the distinct values read that match.")


class ColumnProfileOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    table: str
    column: ColumnStats
    row_count: int
    row_count_exact: bool
    sampled: bool
    sample_rows: int
    sample_method: str
    unique_in_sample: bool | None = Field(description="Every non-null value in the sample differs from the others.")
    histogram_axis: str | None = Field(description="value, epoch_seconds or length: what the buckets measure.")
    histogram: list[Bucket]
    pattern_hints: list[PatternHint]
    truncated: bool
    notes: list[str] = Field(default_factory=list)
    stats: dict[str, Any]


def integer_key(constraints: dict[str, Any], columns: list[ColumnSpec], implicit_key: str) -> str | None:
    """A single-column integer primary key, else the engine's implicit row key ('' when the
    table has none) unless a column shadows its name."""
    pk = (constraints.get("primary_key") or {}).get("columns") or []
    if len(pk) == 1:
        family = next((c.family for c in columns if c.name == pk[0]), "")
        if family == "integer":
            return pk[0]
    return implicit_key if implicit_key and not any(c.name.lower() == implicit_key for c in columns) else None


class ProfileTools:
    """table_profile and column_profile: catalog readers for the shape, the shared read-only
    path for the data."""

    def __init__(self, readers: CatalogReaders, sql: ReadOnlySql) -> None:
        self.readers = readers
        self.sql = sql

    def _shape(
        self, args: TableRef, tool_name: str, caller: Caller | None = None
    ) -> tuple[Any, str, str, TableShape, dict[str, Any]]:
        with self.readers.open(args.target_id, tool_name, caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            kind = require_table(catalog, target.target_id, schema, args.table)
            raw = catalog.columns(schema, args.table)
            constraints = catalog.constraints(schema, args.table) if kind == "table" else {}
            known = target.engine.table_facts(catalog.conn, schema, args.table)
            has_rowid = target.engine.has_rowid(catalog.conn, schema, args.table)
        facts = target.engine.profiling
        columns = [ColumnSpec(c["name"], c["type"] or "", facts.type_family(c["type"] or "")) for c in raw]
        shape = TableShape(
            engine=target.engine,
            schema=schema,
            table=args.table,
            columns=columns,
            rows_estimate=known["rows_estimate"] if kind == "table" else None,
            integer_key=integer_key(constraints, columns, facts.implicit_key if has_rowid else "") if kind == "table" else None,
            is_table=kind in ("table", "materialized_view"),
            unique_columns=frozenset(
                k[0]
                for k in [
                    (constraints.get("primary_key") or {}).get("columns") or [],
                    *(u["columns"] for u in constraints.get("unique", [])),
                ]
                if len(k) == 1
            ),
        )
        return target, kind, schema, shape, {**known, "raw_columns": raw}

    def _profiler(self, ctx: CallContext, target: Any, shape: TableShape, tool_name: str) -> Profiler:
        def run(sql: str, timeout_ms: int) -> dict[str, Any]:
            return self.sql.run(ctx, Statement(sql=sql, target_id=target.target_id, timeout_ms=timeout_ms, tool_name=tool_name))

        budget_s = min(target.timeout_ms / 1000, max(0.0, ctx.remaining_s() - 0.05))
        return Profiler(run=run, shape=shape, deadline=time.monotonic() + budget_s)

    @tool("table_profile", title="Profile a table", read_only=True, idempotent=True)
    def table_profile(self, args: TableRef, ctx: CallContext) -> TableProfileOut:
        """Profile a table's data: row count, size on disk, indexes, and per column the null ratio, distinct estimate, min/max, top values and average length.

        Tables with more rows than sample_rows are sampled (PostgreSQL: TABLESAMPLE BERNOULLI;
        MySQL/SQLite: windows spread over the integer key) and say sampled=true with the sample
        size; distinct counts are then estimated for the whole table. row_count is exact when a
        COUNT(*) is cheap, otherwise the engine's estimate (row_count_exact=false). The whole
        profile stays within the target's timeout: past it, truncated=true and not_profiled
        names the columns left. Query rules apply: a rule blocking the table blocks this."""
        started = time.monotonic()
        target, kind, schema, shape, known = self._shape(args, "table_profile", ctx.caller)
        profiler = self._profiler(ctx, target, shape, "table_profile")
        columns = shape.columns[:MAX_PROFILED_COLUMNS]
        if len(shape.columns) > MAX_PROFILED_COLUMNS:
            profiler.notes.append(f"only the first {MAX_PROFILED_COLUMNS} columns are profiled")
        done: list[dict[str, Any]] = []
        n, truncated = 0, False
        try:
            profiler.count_rows()
            sample = profiler.choose_sample(args.sample_rows)
            n, aggregates = profiler.aggregates(columns)
            frequencies = profiler.all_frequencies(columns, 10)
            for column in columns:
                if column.name in frequencies:
                    top, counts = frequencies[column.name]
                    agg = aggregates[column.name]
                    done.append(
                        column_summary(column, sampled=sample.sampled, n=n, rows=profiler.rows, agg=agg, top=top, shape=counts)
                    )
            if len(done) < len(columns):
                raise OutOfBudget
        except OutOfBudget:
            truncated = True
            profiler.notes.append(f"the profile stopped at the target's timeout of {target.timeout_ms} ms")
        sample = profiler.sample
        profiled = {c["name"] for c in done}
        return TableProfileOut(
            target_id=target.target_id,
            schema=schema,
            table=args.table,
            type=kind,
            row_count=profiler.rows,
            row_count_exact=profiler.rows_exact,
            size_bytes=known["size_bytes"],
            indexes=[IndexInfo(**i) for i in known["indexes"]],
            sampled=bool(sample and sample.sampled),
            sample_rows=n,
            sample_method=sample.method if sample else "none",
            columns=[ColumnStats(**c) for c in done],
            truncated=truncated,
            not_profiled=[c.name for c in shape.columns if c.name not in profiled],
            notes=profiler.notes,
            stats={
                "ms": int((time.monotonic() - started) * 1000),
                "statements": profiler.statements,
                "budget_ms": target.timeout_ms,
            },
        )

    @tool("column_profile", title="Profile a column", read_only=True, idempotent=True)
    def column_profile(self, args: ColumnRef, ctx: CallContext) -> ColumnProfileOut:
        """Profile one column in depth: top-k values with counts, a histogram, pattern hints (email, uuid, date, json ...) and whether it is unique in the sample.

        The histogram has `buckets` equal-width buckets over the values (numbers), their epoch
        seconds (dates and times) or their lengths (strings). Sampling, budget and query rules
        as in table_profile; truncated=true when the budget ran out before every part was done."""
        started = time.monotonic()
        target, _, schema, shape, known = self._shape(args, "column_profile", ctx.caller)
        require_column(known["raw_columns"], target.target_id, schema, args.table, args.column)
        column = next(c for c in shape.columns if c.name == args.column)
        profiler = self._profiler(ctx, target, shape, "column_profile")
        summary: dict[str, Any] | None = None
        histogram: list[dict[str, Any]] = []
        hints: list[dict[str, Any]] = []
        n, truncated = 0, False
        axis = {"integer": "value", "decimal": "value", "temporal": "epoch_seconds", "string": "length"}.get(column.family)
        try:
            profiler.count_rows()
            sample = profiler.choose_sample(args.sample_rows)
            n, aggregates = profiler.aggregates([column])
            top, counts = profiler.frequencies(column, args.top_k)
            agg = aggregates[column.name]
            summary = column_summary(column, sampled=sample.sampled, n=n, rows=profiler.rows, agg=agg, top=top, shape=counts)
            if axis:
                histogram = profiler.histogram(column, args.buckets)
            if column.family in ("string", "other", "json"):
                hints = profiler.pattern_hints(column)
        except OutOfBudget:
            truncated = True
            profiler.notes.append(f"the profile stopped at the target's timeout of {target.timeout_ms} ms")
        empty = {
            "name": column.name, "type": column.type, "family": column.family, "null_ratio": None, "non_null_in_sample": 0,
            "distinct_in_sample": 0, "distinct_estimate": 0, "distinct_exact": False, "min": None, "max": None,
            "avg_length": None, "top_values": [],
        }  # fmt: skip
        result = summary or empty
        sample = profiler.sample
        return ColumnProfileOut(
            target_id=target.target_id,
            schema=schema,
            table=args.table,
            column=ColumnStats(**result),
            row_count=profiler.rows,
            row_count_exact=profiler.rows_exact,
            sampled=bool(sample and sample.sampled),
            sample_rows=n,
            sample_method=sample.method if sample else "none",
            unique_in_sample=(result["distinct_in_sample"] == result["non_null_in_sample"])
            if summary and result["non_null_in_sample"]
            else None,
            histogram_axis=axis if histogram else None,
            histogram=[Bucket(**b) for b in histogram],
            pattern_hints=[PatternHint(**h) for h in hints],
            truncated=truncated,
            notes=profiler.notes,
            stats={
                "ms": int((time.monotonic() - started) * 1000),
                "statements": profiler.statements,
                "budget_ms": target.timeout_ms,
            },
        )
