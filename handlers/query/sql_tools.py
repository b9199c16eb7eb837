"""The SQL-executing tools of /mcp/query: run_sql_readonly, explain_sql, sample_rows and
sample_distinct, for MySQL/MariaDB, PostgreSQL and SQLite targets.

Every statement takes one path (`_run`): resolve the target -> MCP query rules (block,
answer, rewrite, lower the timeout) -> the read-only parser allowlist, which regenerates the
text that runs (readonly.py) -> the engine's read-only transaction with a server-side
timeout, one statement per call, row and byte caps (execute.py) -> digest and rule-hit
statistics. The sampling tools build their statement as a sqlglot tree from parsed
expressions and quoted identifiers, then take the same path.

`SqlTools` is a mixin: QueryHandler inherits from it and owns the pools
(services.shared["pools"], a gateway.pools.TargetPools).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field
from sqlglot import exp

from gateway.errors import InvalidArgument, Unavailable
from gateway.store import ConfigModule
from gateway.variables import Variable
from handlers.base import CallContext, ToolHandler, ToolInput, ToolOutput, tool
from handlers.query.digest import DigestRecorder, normalize_text
from handlers.query.execute import ResultSet, execute_readonly, explain_prefix
from handlers.query.readonly import CheckedStatement, check_readonly, dialect_of, parse_fragment, refuse, table_ref
from handlers.query.rules import QUERY_RULES_MODULE, RuleHits, RuleSet

if TYPE_CHECKING:
    from gateway.services import Services

log = logging.getLogger("mcp_gateway.query")

SQL_VARIABLES: tuple[Variable, ...] = (
    Variable(
        "mcp-query_max_response_bytes",
        "int",
        "1000000",
        "Most bytes of row data (as JSON) one SQL tool call returns; more sets truncated=true.",
        minimum=1024,
        maximum=256 * 1024 * 1024,
    ),
    Variable(
        "mcp-query_refuse_privileged_targets",
        "bool",
        "false",
        "Refuse SQL on a target whose account can write or reach server files (see privilege warnings) instead of only warning.",
    ),
)
MAX_SQL_CHARS = 65_536


def _var(ctx: CallContext, declaration: Variable) -> Any:
    """The runtime value; the declaration's default while a runtime predates the declaration."""
    if declaration.name in ctx.runtime.variables:
        return ctx.runtime.var(declaration.name)
    return declaration.parse(None)


# -- inputs and outputs ------------------------------------------------------------------------


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


class SqlResult(ToolOutput):
    target_id: str
    columns: list[Column]
    rows: list[list[Any]] = Field(
        description='Values are JSON: decimals as strings, dates ISO 8601, bytes as {"$bytes_b64": ...}, intervals as {"$interval_s": ...}.'
    )
    row_count: int
    truncated: bool
    truncated_reason: str | None = Field(default=None, description="max_rows or max_bytes when truncated.")
    message: str | None = Field(default=None, description="Set when a query rule answered instead of running the statement.")
    stats: SqlStats


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


class ExplainSqlIn(ToolInput):
    sql: str = Field(min_length=1, max_length=MAX_SQL_CHARS, description="The SELECT to explain (without EXPLAIN).")
    schema_: str | None = Field(default=None, alias="schema", max_length=256)
    target_id: str | None = Field(default=None, max_length=64)
    analyze: bool = Field(
        default=False, description="Run the statement to get actual timings (EXPLAIN ANALYZE); only on targets that allow it."
    )


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


class SampleDistinctIn(ToolInput):
    table: str = Field(min_length=1, max_length=256)
    column: str = Field(min_length=1, max_length=2048, description="A column or expression whose distinct values to count.")
    schema_: str | None = Field(default=None, alias="schema", max_length=256)
    where: str | None = Field(default=None, max_length=8192)
    limit: int = Field(default=20, ge=1, le=10_000, description="Most distinct values, the most frequent first.")
    target_id: str | None = Field(default=None, max_length=64)


# -- the mixin ---------------------------------------------------------------------------------


class SqlTools(ToolHandler):
    variables: ClassVar[tuple[Variable, ...]] = SQL_VARIABLES
    config_modules: ClassVar[tuple[ConfigModule, ...]] = (QUERY_RULES_MODULE,)

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.digests = DigestRecorder()
        self.rule_hits = RuleHits()
        self._rules: tuple[Any, RuleSet] = ((), RuleSet([]))

    # -- the one path ------------------------------------------------------------------------
    def _ruleset(self, ctx: CallContext) -> RuleSet:
        rows = ctx.runtime.table("runtime_mcp_query_rules")
        cached_rows, ruleset = self._rules
        if rows is not cached_rows:
            ruleset = RuleSet.from_rows(rows)
            self._rules = (rows, ruleset)
        return ruleset

    def _pools(self) -> Any:
        pools = self.services.shared.get("pools")
        if pools is None:
            raise Unavailable("query targets are not initialised")
        return pools

    def _check_privileges(self, ctx: CallContext, target: Any, conn: Any) -> None:
        """With mcp-query_refuse_privileged_targets on, refuse a target whose account the LOAD
        of MCP PROFILES found able to write or reach server files (runtime privilege_warnings)."""
        if not _var(ctx, SQL_VARIABLES[1]):
            return
        row = next((r for r in ctx.runtime.table("runtime_mcp_target_profiles") if r["target_id"] == target.target_id), {})
        warnings = json.loads(row.get("privilege_warnings") or "[]")
        if warnings:
            raise Unavailable(
                f"target {target.target_id} is refused because mcp-query_refuse_privileged_targets is on: {'; '.join(warnings)}"
            )

    def _run(
        self,
        ctx: CallContext,
        *,
        tool_name: str,
        sql: str,
        target_id: str | None,
        schema: str | None,
        max_rows: int | None,
        timeout_ms: int | None,
        explain: str | None = None,  # None, "plan" or "analyze"
    ) -> dict[str, Any]:
        started = time.perf_counter()
        pools = self._pools()
        target = pools.resolve(target_id)
        rows_cap = min(max_rows or target.max_rows, target.max_rows)
        max_bytes = int(_var(ctx, SQL_VARIABLES[0]))
        outcome = self._ruleset(ctx).evaluate(
            sql=sql,
            username=target.username,
            target_id=target.target_id,
            schemaname=schema or target.default_schema,
            tool_name=tool_name,
        )
        if outcome.matched:
            self.rule_hits.count(outcome.matched, username=target.username, target_id=target.target_id)
        if outcome.log:
            log.info(
                "query rule match: rules=%s tool=%s target=%s user=%s",
                outcome.matched,
                tool_name,
                target.target_id,
                target.username,
            )
        try:
            if outcome.error_msg is not None:
                raise InvalidArgument(outcome.error_msg, details={"rule_id": outcome.error_rule})
            timeout = min(timeout_ms or target.timeout_ms, target.timeout_ms, outcome.timeout_ms or target.timeout_ms)
            timeout = max(1, min(timeout, int(ctx.remaining_s() * 1000)))
            stats: dict[str, Any] = {
                "max_rows": rows_cap,
                "max_bytes": max_bytes,
                "timeout_ms": timeout,
                "rules": outcome.matched,
            }
            if outcome.ok_msg is not None:
                return self._answer(target.target_id, None, started, stats, message=outcome.ok_msg)
            checked = check_readonly(outcome.sql, target.protocol, row_cap=None if explain else rows_cap + 1)
            if explain and checked.kind != "select":
                raise refuse("explain_sql takes a SELECT without EXPLAIN")
            with pools.connection(target.target_id) as (target, conn):
                self._check_privileges(ctx, target, conn)
                text = (
                    explain_prefix(target.protocol, conn, analyze=explain == "analyze") + checked.sql if explain else checked.sql
                )
                db_started = time.perf_counter()
                try:
                    result = execute_readonly(
                        target.protocol, conn, text, timeout_ms=timeout, max_rows=rows_cap, max_bytes=max_bytes, schema=schema
                    )
                finally:
                    stats["digest"] = self._record(tool_name, target.target_id, checked, (time.perf_counter() - db_started) * 1e6)
            return self._answer(target.target_id, result, started, stats)
        finally:
            self._maybe_flush()

    def _record(self, tool_name: str, target_id: str, checked: CheckedStatement, elapsed_us: float) -> str:
        text = normalize_text(checked.sql)
        return self.digests.record(tool_name=tool_name, target_id=target_id, digest_text=text, elapsed_us=int(elapsed_us))

    def _maybe_flush(self) -> None:
        store = self.services.store
        for recorder in (self.digests, self.rule_hits):
            if recorder.due():
                try:
                    recorder.flush(store)
                except Exception:  # noqa: BLE001 - statistics must never fail a call
                    log.warning("flushing query statistics failed", exc_info=True)

    async def close(self) -> None:
        """Write what statistics are pending, then let the next class in line close."""
        try:
            self.flush_stats()
        except Exception:  # noqa: BLE001 - shutting down: log, do not block the rest
            log.warning("flushing query statistics at close failed", exc_info=True)
        await super().close()

    def flush_stats(self) -> None:
        """Write pending digests and rule hits now (shutdown, or before show_queries)."""
        self.digests.flush(self.services.store)
        self.rule_hits.flush(self.services.store)

    @staticmethod
    def _answer(
        target_id: str, result: ResultSet | None, started: float, stats: dict[str, Any], *, message: str | None = None
    ) -> dict[str, Any]:
        stats = {
            **stats,
            "db_ms": round(result.db_ms, 3) if result else 0.0,
            "result_bytes": result.result_bytes if result else 0,
        }
        stats["ms"] = round((time.perf_counter() - started) * 1000, 3)
        return {
            "target_id": target_id,
            "columns": result.columns if result else [],
            "rows": result.rows if result else [],
            "row_count": len(result.rows) if result else 0,
            "truncated": result.truncated if result else False,
            "truncated_reason": result.truncated_reason if result else None,
            "message": message,
            "stats": stats,
        }

    # -- tools -------------------------------------------------------------------------------
    @tool("run_sql_readonly", title="Run read-only SQL", read_only=True, idempotent=True)
    def run_sql_readonly(self, args: RunSqlIn, ctx: CallContext) -> SqlResult:
        """Run one read-only SQL statement (SELECT, WITH ... SELECT, SHOW, DESCRIBE or plain EXPLAIN) on a target.

        Writes, locking reads (FOR UPDATE), INTO OUTFILE, several statements, and file, sleep,
        lock or network functions are refused with INVALID_ARGUMENT and the reason; the
        statement also runs in a read-only transaction with a server-side timeout. At most
        max_rows rows (the target's max_rows at most) and mcp-query_max_response_bytes bytes
        are returned; truncated=true says more existed. Values are JSON: decimals as strings,
        dates as ISO 8601, bytes as {"$bytes_b64": ...}. Use sample_rows for a quick look at
        a table and explain_sql for a query plan."""
        timeout_ms = int(args.timeout_sec * 1000) if args.timeout_sec else None
        return SqlResult.model_validate(
            self._run(
                ctx,
                tool_name="run_sql_readonly",
                sql=args.sql,
                target_id=args.target_id,
                schema=args.schema_,
                max_rows=args.max_rows,
                timeout_ms=timeout_ms,
            )
        )

    @tool("explain_sql", title="Explain a query plan", read_only=True, idempotent=True)
    def explain_sql(self, args: ExplainSqlIn, ctx: CallContext) -> ExplainResult:
        """Show the execution plan of one SELECT without running it (PostgreSQL and MySQL/MariaDB: JSON plan; SQLite: EXPLAIN QUERY PLAN).

        analyze=true runs the statement to measure it (EXPLAIN ANALYZE; MariaDB's ANALYZE) and is
        refused unless the target allows it. The statement passes the same read-only checks as
        run_sql_readonly. Refused when the target's allow_explain is off."""
        target = self._pools().resolve(args.target_id)
        if not target.allow_explain:
            raise InvalidArgument(f"target {target.target_id} does not allow EXPLAIN (allow_explain=0)")
        if args.analyze and not target.allow_explain_analyze:
            raise InvalidArgument(
                f"target {target.target_id} does not allow EXPLAIN ANALYZE (allow_explain_analyze=0); plain EXPLAIN only (analyze=false)"
            )
        if args.analyze and target.protocol == "sqlite":
            raise InvalidArgument("SQLite has no EXPLAIN ANALYZE")
        out = self._run(
            ctx, tool_name="explain_sql", sql=args.sql, target_id=target.target_id, schema=args.schema_, max_rows=None, timeout_ms=None,
            explain="analyze" if args.analyze else "plan",
        )  # fmt: skip
        return ExplainResult.model_validate({**out, "analyze": args.analyze, "plan": plan_of(target.protocol, out)})

    @tool("sample_rows", title="Sample rows of a table", read_only=True, idempotent=True)
    def sample_rows(self, args: SampleRowsIn, ctx: CallContext) -> SqlResult:
        """Return up to `limit` rows of a table, optionally only some columns, filtered by `where` and sorted by `order_by`.

        The table and schema are identifiers (quoted for you, any name works); columns, where
        and order_by are SQL expressions, parsed and rebuilt (never pasted into SQL), and
        checked like run_sql_readonly. Same result shape and caps as run_sql_readonly."""
        dialect = dialect_of(self._pools().resolve(args.target_id).protocol)
        columns = [parse_fragment(c, "column", dialect) for c in args.columns] if args.columns else [exp.Star()]
        query = exp.Select(expressions=columns).from_(table_ref(args.table, args.schema_), copy=False)
        if args.where:
            query = query.where(parse_fragment(args.where, "where", dialect), copy=False)
        if args.order_by:
            query.set("order", exp.Order(expressions=parse_fragment(args.order_by, "order_by", dialect)))
        query.set("limit", exp.Limit(expression=exp.Literal.number(args.limit + 1)))  # one more: truncated
        return SqlResult.model_validate(
            self._run(
                ctx,
                tool_name="sample_rows",
                sql=query.sql(dialect=dialect),
                target_id=args.target_id,
                schema=None,
                max_rows=args.limit,
                timeout_ms=None,
            )
        )

    @tool("sample_distinct", title="Distinct values of a column", read_only=True, idempotent=True)
    def sample_distinct(self, args: SampleDistinctIn, ctx: CallContext) -> SqlResult:
        """Return the distinct values of a column (or expression) with their counts, the most frequent first.

        Columns of the result: value, count. `where` filters rows first. Parsed, rebuilt and
        checked like sample_rows; at most `limit` values (truncated=true when there are more)."""
        dialect = dialect_of(self._pools().resolve(args.target_id).protocol)
        column = parse_fragment(args.column, "column", dialect)
        value, count = exp.to_identifier("value", quoted=True), exp.to_identifier("count", quoted=True)
        query = exp.Select(expressions=[exp.alias_(column, value), exp.alias_(exp.Count(this=exp.Star()), count)])
        query = query.from_(table_ref(args.table, args.schema_), copy=False)
        if args.where:
            query = query.where(parse_fragment(args.where, "where", dialect), copy=False)
        query.set("group", exp.Group(expressions=[column.copy()]))
        query.set(
            "order", exp.Order(expressions=[exp.Ordered(this=exp.column(count), desc=True), exp.Ordered(this=exp.column(value))])
        )
        query.set("limit", exp.Limit(expression=exp.Literal.number(args.limit + 1)))  # one more: truncated
        return SqlResult.model_validate(
            self._run(
                ctx,
                tool_name="sample_distinct",
                sql=query.sql(dialect=dialect),
                target_id=args.target_id,
                schema=None,
                max_rows=args.limit,
                timeout_ms=None,
            )
        )


def plan_of(protocol: str, out: dict[str, Any]) -> Any:
    rows = out["rows"]
    if not rows:
        return None
    if protocol == "sqlite":
        names = [c["name"] for c in out["columns"]]
        return [dict(zip(names, row)) for row in rows]
    value = rows[0][0]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
