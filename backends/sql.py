"""`ReadOnlySql`: the one path every caller's SQL takes, whichever tool asks.

resolve the target -> MCP query rules (block, answer, rewrite, lower the timeout; rules.py)
-> the read-only parser allowlist, which regenerates the text that runs (readonly.py) -> the
engine's read-only transaction with a server-side timeout, one statement per call, row and
byte caps (execute.py) -> digest and rule-hit statistics (digest.py, rules.py).

run_sql_readonly, explain_sql and the sampling tools of /mcp/query call `run`; so must any
other tool that runs SQL for a caller (profiling, llm.query, cache warm-up): there is no
second path. The app builds one per worker over its `TargetPools` (gateway.assembly).
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from typing import Any

import orjson

from backends.digest import DigestRecorder, digest_of, normalize_text
from backends.execute import ResultSet, execute_readonly, explain_prefix
from backends.pools import TargetPools
from backends.readonly import CheckedStatement, check_readonly, refuse
from backends.rules import RuleHits, RuleSet
from backends.targets import Target
from gateway.call import CallContext
from gateway.errors import InvalidArgument, Unavailable
from gateway.evidence import EvidenceRecorder
from gateway.runtime import Runtime
from gateway.store import ConfigStore
from gateway.variables import Variable

log = logging.getLogger("mcp_gateway.query")

MAX_RESPONSE_BYTES = Variable(
    "mcp-query_max_response_bytes",
    "int",
    "1000000",
    "Most bytes of row data (as JSON) one SQL tool call returns; more sets truncated=true.",
    minimum=1024,
    maximum=256 * 1024 * 1024,
)
REFUSE_PRIVILEGED = Variable(
    "mcp-query_refuse_privileged_targets",
    "bool",
    "false",
    "Refuse SQL on a target whose account can write or reach server files (see privilege warnings) instead of only warning.",
)
SQL_VARIABLES: tuple[Variable, ...] = (MAX_RESPONSE_BYTES, REFUSE_PRIVILEGED)
RESULT_HASH_MAX_BYTES = 262_144  # larger results are not hashed (cache-candidate evidence): not worth the CPU


def _var(runtime: Runtime, declaration: Variable) -> Any:
    """The runtime value; the declaration's default while a runtime predates the declaration."""
    if declaration.name in runtime.variables:
        return runtime.var(declaration.name)
    return declaration.parse(None)


class ReadOnlySql:
    """Runs one caller's read-only statement on a target, under the rules, caps and deadline."""

    def __init__(self, targets: TargetPools, store: ConfigStore, *, evidence: EvidenceRecorder | None = None) -> None:
        self.targets = targets
        self.store = store
        self.evidence = evidence  # refusals and digest timings, for /mcp/ai (None: not recorded)
        self.digests = DigestRecorder()
        self.rule_hits = RuleHits()
        self._rules: tuple[Any, RuleSet] = ((), RuleSet([]))

    def run(
        self,
        ctx: CallContext,
        *,
        sql: str,
        target_id: str | None,
        schema: str | None,
        max_rows: int | None,
        timeout_ms: int | None,
        tool_name: str | None = None,
        explain: str | None = None,  # None, "plan" or "analyze"
    ) -> dict[str, Any]:
        """Run `sql` and answer the SqlResult shape of /mcp/query: target_id, columns, rows,
        row_count, truncated, truncated_reason, message (a rule's OK_msg), stats.

        `tool_name` is what query rules match and digests record (default: the calling tool);
        `max_rows` and `timeout_ms` are never above the target's own caps nor past ctx's deadline."""
        tool_name = tool_name or ctx.tool_name
        started = time.perf_counter()
        target = self.targets.resolve(target_id)
        rows_cap = min(max_rows or target.max_rows, target.max_rows)
        max_bytes = int(_var(ctx.runtime, MAX_RESPONSE_BYTES))
        outcome = self._ruleset(ctx.runtime).evaluate(
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
                self._refused(ctx, tool_name, sql)
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
                return _answer(target.target_id, None, started, stats, message=outcome.ok_msg)
            try:
                checked = check_readonly(outcome.sql, target.protocol, row_cap=None if explain else rows_cap + 1)
            except InvalidArgument:
                self._refused(ctx, tool_name, sql)
                raise
            if explain and checked.kind != "select":
                raise refuse("explain_sql takes a SELECT without EXPLAIN")
            with self.targets.connection(target.target_id) as (target, conn):
                self._check_privileges(ctx.runtime, target)
                text = (
                    explain_prefix(target.protocol, conn, analyze=explain == "analyze") + checked.sql if explain else checked.sql
                )
                db_started = time.perf_counter()
                try:
                    result = execute_readonly(
                        target.protocol, conn, text, timeout_ms=timeout, max_rows=rows_cap, max_bytes=max_bytes, schema=schema
                    )
                finally:
                    elapsed_us = (time.perf_counter() - db_started) * 1e6
                    stats["digest"] = self._record(tool_name, target.target_id, checked, elapsed_us)
            if self.evidence is not None and not explain:
                self.evidence.digest(
                    stats["digest"],
                    int(elapsed_us),
                    result_hash=_result_hash(result),
                    sample=(target.target_id, schema or "", checked.sql),
                )
            return _answer(target.target_id, result, started, stats)
        finally:
            self._maybe_flush()

    # -- the steps -------------------------------------------------------------------------
    def _ruleset(self, runtime: Runtime) -> RuleSet:
        rows = runtime.table("runtime_mcp_query_rules")
        cached_rows, ruleset = self._rules
        if rows is not cached_rows:
            ruleset = RuleSet.from_rows(rows)
            self._rules = (rows, ruleset)
        return ruleset

    @staticmethod
    def _check_privileges(runtime: Runtime, target: Target) -> None:
        """With mcp-query_refuse_privileged_targets on, refuse a target whose account the LOAD
        of MCP PROFILES found able to write or reach server files (runtime privilege_warnings)."""
        if not _var(runtime, REFUSE_PRIVILEGED):
            return
        row = next((r for r in runtime.table("runtime_mcp_target_profiles") if r["target_id"] == target.target_id), {})
        warnings = json.loads(row.get("privilege_warnings") or "[]")
        if warnings:
            raise Unavailable(
                f"target {target.target_id} is refused because mcp-query_refuse_privileged_targets is on: {'; '.join(warnings)}"
            )

    def _record(self, tool_name: str, target_id: str, checked: CheckedStatement, elapsed_us: float) -> str:
        text = normalize_text(checked.sql)
        return self.digests.record(tool_name=tool_name, target_id=target_id, digest_text=text, elapsed_us=int(elapsed_us))

    def _refused(self, ctx: CallContext, tool_name: str, sql: str) -> None:
        """Evidence of a refused statement: its normalised text (literals as ?), never the values."""
        if self.evidence is not None:
            text = normalize_text(sql)
            self.evidence.event(
                "sql_refused", endpoint=ctx.endpoint, tool=tool_name, token_fp=ctx.token_fp, digest=digest_of(text), text=text
            )

    def _maybe_flush(self) -> None:
        for recorder in (self.digests, self.rule_hits):
            if recorder.due():
                try:
                    recorder.flush(self.store)
                except Exception:  # noqa: BLE001 - statistics must never fail a call
                    log.warning("flushing query statistics failed", exc_info=True)

    def flush_stats(self) -> None:
        """Write pending digests and rule hits now (shutdown, or before show_queries)."""
        self.digests.flush(self.store)
        self.rule_hits.flush(self.store)

    def close(self) -> None:
        """Write what statistics are pending; the app closes the pools after this."""
        try:
            self.flush_stats()
        except Exception:  # noqa: BLE001 - shutting down: log, do not block the rest
            log.warning("flushing query statistics at close failed", exc_info=True)


def _result_hash(result: ResultSet) -> int | None:
    """A hash of the rows, to tell whether a digest's result changed between calls."""
    if result.result_bytes > RESULT_HASH_MAX_BYTES:
        return None
    return zlib.crc32(orjson.dumps(result.rows, default=str))


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
