"""The SQL-executing tools of /mcp/query: run_sql_readonly, explain_sql, sample_rows and
sample_distinct, for MySQL/MariaDB, PostgreSQL and SQLite targets.

Every statement takes the one read-only SQL path, services.sql (backends/sql.py: query
rules, the read-only allowlist, caps, execution, digests). The sampling tools build their
statement as a sqlglot tree from parsed expressions and quoted identifiers, then take the
same path.

run_sql_readonly and the sampling tools are async: when the query result cache may answer (an
embedded store, a cache TTL for the target or a rule), the rules, the check and the lookup
run on the event loop; so does the statement itself on an engine that executes on the loop
(PostgreSQL: gateway/loop_io.py) when a pooled connection is ready; anything else takes a
worker thread to the database.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import Field
from sqlglot import exp

from backends.readonly import parse_fragment, table_ref
from backends.sql import ReadOnlySql, Statement
from backends.targets import Target
from gateway.errors import InvalidArgument
from gateway.tools import CallContext, Shaped, ToolInput, ToolOutput, tool

MAX_SQL_CHARS = 65_536

# The text block of the answer (gateway/rendering.py); structuredContent is the same either way.
TextFormat = Literal["compact", "json"] | None
FORMAT_HELP = (
    "The text block: compact (a header line, one tab-separated line per row, then the row count and truncated) or "
    "json (the JSON of structuredContent); default: the mcp-text_format variable."
)
STATS_HELP = "Also return stats: timings, the caps applied, digest, matched query rules, result cache state."

# ToolHandler.in_thread: run blocking work on the handler's threads.
InThread = Callable[..., Awaitable[Any]]


# -- inputs and outputs ------------------------------------------------------------------------


def _is_none(value: Any) -> bool:
    return value is None


def _answer(model: SqlResult, args: Any) -> SqlResult:
    """What the caller asked to see: stats only with stats=true (the answer stays small)."""
    if not args.stats:
        model.stats = None
    return model


def _shaped(answer: dict[str, Any], args: Any) -> Shaped[SqlResult]:
    """A result set from ReadOnlySql.run as SqlResult's JSON, built directly: every value in it is
    JSON already (backends/values.py encoded the rows). Stats only with stats=true."""
    out: Shaped[SqlResult] = Shaped(
        target_id=answer["target_id"],
        columns=answer["columns"],
        rows=answer["rows"],
        row_count=answer["row_count"],
        truncated=answer["truncated"],
    )
    for key in ("truncated_reason", "message"):
        if answer.get(key) is not None:
            out[key] = answer[key]
    if args.stats:
        stats = SqlStats.model_validate(answer["stats"])
        out["stats"] = stats.__pydantic_serializer__.to_python(stats, mode="json", by_alias=True)
    return out


class Column(ToolOutput):
    name: str
    type: str


class SqlStats(ToolOutput):
    ms: float = Field(description="Time of the whole call in milliseconds.")
    db_ms: float = Field(description="Time spent in the database (transaction, statement, fetch).")
    max_rows: int = Field(description="The row cap applied (the smaller of the request and the target's max_rows).")
    max_bytes: int
    result_bytes: int
    timeout_ms: int = Field(description="The server-side statement timeout applied.")
    digest: str | None = None
    rules: list[int] = Field(default_factory=list, description="rule_ids of the MCP query rules that matched.")
    cache: Literal["hit", "miss", "bypass", "refresh", "off", "unavailable"] = Field(
        default="off",
        description="The query result cache: hit (answered from it; db_ms is 0), miss, bypass or refresh (as asked), "
        "off (no cache TTL applies: the target's cache_ttl_ms and the matching rules' cache_ttl are 0), "
        "unavailable (its store could not be reached; answered uncached).",
    )
    cache_age_ms: int | None = Field(default=None, description="On a hit: how old the cached result is.")
    cache_store: Literal["stored", "too_large", "unavailable"] | None = Field(
        default=None, description="What became of this result in the cache (null: not offered to it)."
    )


class SqlResult(ToolOutput):
    target_id: str
    columns: list[Column]
    rows: list[list[Any]] = Field(
        description='Values are JSON: decimals as strings, dates ISO 8601, bytes as {"$bytes_b64": ...}, intervals as {"$interval_s": ...}.'
    )
    row_count: int
    truncated: bool
    truncated_reason: str | None = Field(
        default=None, exclude_if=_is_none, description="max_rows or max_bytes when truncated (absent otherwise)."
    )
    message: str | None = Field(
        default=None, exclude_if=_is_none, description="Set when a query rule answered instead of running the statement."
    )
    stats: SqlStats | None = Field(default=None, exclude_if=_is_none, description="With stats=true.")


class ExplainResult(SqlResult):
    analyze: bool = False
    plan: Any = Field(
        default=None, description="The plan as JSON (PostgreSQL, MySQL/MariaDB) or the EXPLAIN QUERY PLAN rows (SQLite)."
    )


class RunSqlIn(ToolInput):
    sql: str = Field(
        min_length=1,
        max_length=MAX_SQL_CHARS,
        description="One SELECT, WITH ... SELECT, SHOW, DESCRIBE or plain EXPLAIN statement.",
    )
    schema_: str | None = Field(
        default=None, alias="schema", max_length=256, description="Database (MySQL) or search_path schema (PostgreSQL) to run in."
    )
    target_id: str | None = Field(default=None, max_length=64, description="Target to run on; omitted: the default target.")
    max_rows: int | None = Field(default=None, ge=1, le=1_000_000, description="Row cap; never above the target's max_rows.")
    timeout_sec: float | None = Field(
        default=None, gt=0, le=3600, description="Statement timeout; never above the target's timeout_ms."
    )
    cache: Literal["use", "bypass", "refresh"] = Field(
        default="use",
        description="use: answer from the query result cache when the target or a query rule enables it; "
        "bypass: ask the database and leave the cache alone; refresh: ask the database and store the result.",
    )
    format: TextFormat = Field(default=None, description=FORMAT_HELP)
    stats: bool = Field(default=False, description=STATS_HELP)


class ExplainSqlIn(ToolInput):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS, description="The SELECT to explain (without EXPLAIN).")
    schema_: str | None = Field(default=None, alias="schema", max_length=256)
    target_id: str | None = Field(default=None, max_length=64)
    analyze: bool = Field(
        default=False, description="Run the statement to get actual timings (EXPLAIN ANALYZE); only on targets that allow it."
    )
    format: TextFormat = Field(default=None, description=FORMAT_HELP)
    stats: bool = Field(default=False, description=STATS_HELP)


class SampleRowsIn(ToolInput):
    table: str = Field(min_length=1, max_length=256, description="Table or view name (quoted for you).")
    schema_: str | None = Field(
        default=None, alias="schema", max_length=256, description="Database (MySQL), schema (PostgreSQL) or 'main' (SQLite)."
    )
    columns: list[str] | None = Field(
        default=None, max_length=100, description="Column expressions, e.g. ['id', 'lower(name)']; default all."
    )
    where: str | None = Field(
        default=None, max_length=8192, description="A boolean expression, e.g. \"price > 10 AND title LIKE 'A%'\"."
    )
    order_by: str | None = Field(default=None, max_length=2048, description="Sort expressions, e.g. 'price DESC, id'.")
    limit: int = Field(default=20, ge=1, le=10_000, description="Rows to return; never above the target's max_rows.")
    target_id: str | None = Field(default=None, max_length=64)
    cache: Literal["use", "bypass", "refresh"] = Field(
        default="use",
        description="use: answer from the query result cache when the target or a query rule enables it; "
        "bypass: ask the database and leave the cache alone; refresh: ask the database and store the result.",
    )
    format: TextFormat = Field(default=None, description=FORMAT_HELP)
    stats: bool = Field(default=False, description=STATS_HELP)


class SampleDistinctIn(ToolInput):
    table: str = Field(min_length=1, max_length=256)
    column: str = Field(min_length=1, max_length=2048, description="A column or expression whose distinct values to count.")
    schema_: str | None = Field(default=None, alias="schema", max_length=256)
    where: str | None = Field(default=None, max_length=8192)
    limit: int = Field(default=20, ge=1, le=10_000, description="Most distinct values, the most frequent first.")
    target_id: str | None = Field(default=None, max_length=64)
    cache: Literal["use", "bypass", "refresh"] = Field(
        default="use",
        description="use: answer from the query result cache when the target or a query rule enables it; "
        "bypass: ask the database and leave the cache alone; refresh: ask the database and store the result.",
    )
    format: TextFormat = Field(default=None, description=FORMAT_HELP)
    stats: bool = Field(default=False, description=STATS_HELP)


# -- the tools ----------------------------------------------------------------------------------


class SqlTools:
    """run_sql_readonly, explain_sql, sample_rows, sample_distinct: the read-only SQL path, and
    the handler's threads for the blocking part of the async ones."""

    def __init__(self, sql: ReadOnlySql, in_thread: InThread) -> None:
        self.sql = sql
        self.in_thread = in_thread

    def _target(self, target_id: str | None) -> Target:
        return self.sql.targets.resolve(target_id)

    def _run(self, ctx: CallContext, statement: Statement) -> dict[str, Any]:
        return self.sql.run(ctx, statement)

    async def _run_cached(
        self, ctx: CallContext, *, target_id: str | None, size: int, cache: str, statement: Callable[[], Statement]
    ) -> dict[str, Any]:
        """The one path, on the event loop where it never blocks there: a result cache hit, and
        a statement on an engine that executes on the loop (ReadOnlySql.execute_from_loop); the
        database, and anything else, in a worker thread. `statement()` builds the Statement;
        `size` is what the read-only check will parse."""
        sql = self.sql
        if not sql.inline_ok(ctx.runtime, target_id, size, cache):
            return await self.in_thread(lambda: sql.run(ctx, statement()))
        prepared = sql.prepare(ctx, statement())
        answer = sql.answer_early(prepared)
        if answer is not None:
            return answer
        return await sql.execute_from_loop(prepared, self.in_thread)

    # -- tools -------------------------------------------------------------------------------
    @tool("run_sql_readonly", title="Run read-only SQL", read_only=True, idempotent=True)
    async def run_sql_readonly(self, args: RunSqlIn, ctx: CallContext) -> Shaped[SqlResult]:
        """Run one read-only SQL statement (SELECT, WITH ... SELECT, SHOW, DESCRIBE or plain EXPLAIN) on a target.

        Writes, locking reads (FOR UPDATE), INTO OUTFILE, several statements, and file, sleep,
        lock or network functions are refused with INVALID_ARGUMENT and the reason; the
        statement also runs in a read-only transaction with a server-side timeout. At most
        max_rows rows (the target's max_rows at most) and mcp-query_max_response_bytes bytes
        are returned; truncated=true says more existed. Values are JSON: decimals as strings,
        dates as ISO 8601, bytes as {"$bytes_b64": ...}. Use sample_rows for a quick look at
        a table and explain_sql for a query plan. When the target or a query rule enables the
        result cache, a repeated statement is answered from it: with stats=true, stats.cache says hit (with
        cache_age_ms) or miss; cache="bypass" asks the database."""
        timeout_ms = int(args.timeout_sec * 1000) if args.timeout_sec else None
        statement = Statement(
            sql=args.sql, target_id=args.target_id, schema=args.schema_, max_rows=args.max_rows, timeout_ms=timeout_ms,
            tool_name="run_sql_readonly", cache=args.cache,
        )  # fmt: skip
        return _shaped(
            await self._run_cached(
                ctx, target_id=args.target_id, size=len(args.sql), cache=args.cache, statement=lambda: statement
            ),
            args,
        )

    @tool("explain_sql", title="Explain a query plan", read_only=True, idempotent=True)
    def explain_sql(self, args: ExplainSqlIn, ctx: CallContext) -> ExplainResult:
        """Show the execution plan of one SELECT without running it (PostgreSQL and MySQL/MariaDB: JSON plan; SQLite: EXPLAIN QUERY PLAN).

        analyze=true runs the statement to measure it (EXPLAIN ANALYZE; MariaDB's ANALYZE) and is
        refused unless the target allows it. The statement passes the same read-only checks as
        run_sql_readonly. Refused when the target's allow_explain is off."""
        target = self._target(args.target_id)
        if not target.allow_explain:
            raise InvalidArgument(f"target {target.target_id} does not allow EXPLAIN (allow_explain=0)")
        if args.analyze and not target.allow_explain_analyze:
            raise InvalidArgument(
                f"target {target.target_id} does not allow EXPLAIN ANALYZE (allow_explain_analyze=0); plain EXPLAIN only (analyze=false)"
            )
        if args.analyze and not target.engine.explain_analyze:
            raise InvalidArgument(f"{target.engine.title} has no EXPLAIN ANALYZE")
        out = self._run(
            ctx, Statement(sql=args.sql, target_id=target.target_id, schema=args.schema_, tool_name="explain_sql",
                           explain="analyze" if args.analyze else "plan"),
        )  # fmt: skip
        return _answer(ExplainResult.model_validate({**out, "analyze": args.analyze, "plan": target.engine.plan_of(out)}), args)

    @tool("sample_rows", title="Sample rows of a table", read_only=True, idempotent=True)
    async def sample_rows(self, args: SampleRowsIn, ctx: CallContext) -> Shaped[SqlResult]:
        """Return up to `limit` rows of a table, optionally only some columns, filtered by `where` and sorted by `order_by`.

        The table and schema are identifiers (quoted for you, any name works); columns, where
        and order_by are SQL expressions, parsed and rebuilt (never pasted into SQL), and
        checked like run_sql_readonly. Same result shape, caps and result cache as run_sql_readonly."""

        def statement() -> Statement:
            dialect = self._target(args.target_id).engine.dialect
            columns = [parse_fragment(c, "column", dialect) for c in args.columns] if args.columns else [exp.Star()]
            query = exp.Select(expressions=columns).from_(table_ref(args.table, args.schema_), copy=False)
            if args.where:
                query = query.where(parse_fragment(args.where, "where", dialect), copy=False)
            if args.order_by:
                query.set("order", exp.Order(expressions=parse_fragment(args.order_by, "order_by", dialect)))
            query.set("limit", exp.Limit(expression=exp.Literal.number(args.limit + 1)))  # one more: truncated
            return Statement(
                sql=query.sql(dialect=dialect),
                target_id=args.target_id,
                max_rows=args.limit,
                tool_name="sample_rows",
                cache=args.cache,
            )

        size = len(args.table) + sum(map(len, args.columns or ())) + len(args.where or "") + len(args.order_by or "")
        return _shaped(
            await self._run_cached(ctx, target_id=args.target_id, size=size, cache=args.cache, statement=statement), args
        )

    @tool("sample_distinct", title="Distinct values of a column", read_only=True, idempotent=True)
    async def sample_distinct(self, args: SampleDistinctIn, ctx: CallContext) -> Shaped[SqlResult]:
        """Return the distinct values of a column (or expression) with their counts, the most frequent first.

        Columns of the result: value, count. `where` filters rows first. Parsed, rebuilt and
        checked like sample_rows; at most `limit` values (truncated=true when there are more)."""

        def statement() -> Statement:
            dialect = self._target(args.target_id).engine.dialect
            column = parse_fragment(args.column, "column", dialect)
            value, count = exp.to_identifier("value", quoted=True), exp.to_identifier("count", quoted=True)
            query = exp.Select(expressions=[exp.alias_(column, value), exp.alias_(exp.Count(this=exp.Star()), count)])
            query = query.from_(table_ref(args.table, args.schema_), copy=False)
            if args.where:
                query = query.where(parse_fragment(args.where, "where", dialect), copy=False)
            query.set("group", exp.Group(expressions=[column.copy()]))
            order = [exp.Ordered(this=exp.column(count), desc=True), exp.Ordered(this=exp.column(value))]
            query.set("order", exp.Order(expressions=order))
            query.set("limit", exp.Limit(expression=exp.Literal.number(args.limit + 1)))  # one more: truncated
            return Statement(
                sql=query.sql(dialect=dialect),
                target_id=args.target_id,
                max_rows=args.limit,
                tool_name="sample_distinct",
                cache=args.cache,
            )

        size = len(args.table) + len(args.column) + len(args.where or "")
        return _shaped(
            await self._run_cached(ctx, target_id=args.target_id, size=size, cache=args.cache, statement=statement), args
        )
