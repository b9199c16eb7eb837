"""`ReadOnlySql`: the one path every caller's SQL takes, whichever tool asks.

resolve the target -> MCP query rules (block, answer, rewrite, lower the timeout, set a cache
TTL; rules.py) -> the read-only parser allowlist, which regenerates the text that runs
(readonly.py) -> the query result cache (backends/result_cache: a hit answers here) -> the
engine's read-only transaction with a server-side timeout, one statement per call, row and
byte caps (`target.engine.execute`, backends/engines) -> digest and rule-hit statistics
(digest.py, rules.py); a result the cache should keep is stored on the way out. A refused
statement never reaches the cache.

run_sql_readonly, explain_sql and the sampling tools of /mcp/query call `run`; so must any
other tool that runs SQL for a caller (profiling, llm.query, cache warm-up): there is no
second path. A caller describes its statement once, as a `Statement`. `run` takes every step in one call (in a worker thread). A tool on the event
loop may split it: `prepare` and `answer_early` (a rule's OK_msg, or a cache hit) on the
loop, and `execute` in a thread only when the database must answer, so a hit pays no thread
hop (`inline_ok` says when that is worth it). The app builds one per worker (gateway.assembly).
"""

from __future__ import annotations

import json
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from backends import callers
from backends.binding import bind
from backends.digest import DigestRecorder, digest_of, normalize_text
from backends.engines.base import ResultSet
from backends.pools import TargetPools
from backends.readonly import CheckedStatement, check_readonly, refuse
from backends.result_cache import ResultCache
from backends.result_cache.keys import cache_key, tables_of
from backends.result_cache.store import EntryMeta
from backends.rules import RuleHits, RuleSet
from backends.targets import Target
from gateway.call import CallContext, Caller
from gateway.errors import GatewayError, InvalidArgument, Unavailable
from gateway.evidence import EvidenceRecorder
from gateway.loop_io import WouldBlock, run_on_loop
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
CACHE_MODES = ("use", "bypass", "refresh")  # refresh: run and store even when a result is cached
INLINE_SQL_CHARS = 4096  # longer statements are checked in a thread: a first check costs ~0.1 ms per KB
RESULT_HASH_MAX_BYTES = 262_144  # larger results are not hashed (cache-candidate evidence): not worth the CPU


def _params_key(params: Mapping[str, Any]) -> str:
    """Bound values as part of a cache key: the same statement with other values is another entry."""
    return orjson.dumps(dict(params), option=orjson.OPT_SORT_KEYS, default=str).decode()


def _var(runtime: Runtime, declaration: Variable) -> Any:
    """The runtime value; the declaration's default while a runtime predates the declaration."""
    if declaration.name in runtime.variables:
        return runtime.var(declaration.name)
    return declaration.parse(None)


@dataclass(frozen=True, slots=True)
class Statement:
    """One caller's statement and what it asks for; `ReadOnlySql.run` / `prepare` take it."""

    sql: str
    target_id: str | None  # None: the default target
    schema: str | None = None  # None: the target's default
    max_rows: int | None = None  # None: the target's max_rows (never above it)
    timeout_ms: int | None = None  # None: the target's timeout_ms (never above it, nor past the call's deadline)
    tool_name: str | None = None  # what query rules match and digests record; None: the calling tool
    explain: str | None = None  # None, "plan" or "analyze"
    cache: str = "use"  # use | bypass | refresh (CACHE_MODES)
    # A custom tool's bound values by parameter name (backends/binding.py): the driver binds them
    # to the markers of `sql`; None: a statement without parameters.
    params: Mapping[str, Any] | None = None
    cache_ttl_ms: int | None = None  # None: the target's cache_ttl_ms (a query rule's cache_ttl wins over both)


@dataclass
class Prepared:
    """A statement past the rules and the read-only check (or one a rule's OK_msg answers)."""

    tool_name: str
    target: Target
    schema: str | None
    started: float
    stats: dict[str, Any]  # max_rows, max_bytes, timeout_ms, rules, cache
    checked: CheckedStatement | None = None  # None: `message` answers
    message: str | None = None
    explain: str | None = None
    cache_ttl_ms: int = 0  # 0: not cached
    cache_mode: str = "use"
    cache_key: str | None = None  # None: the cache is not consulted nor filled
    params: Mapping[str, Any] | None = None  # bound values (Statement.params)
    identity: dict[str, str] | None = None  # transaction-local settings from the caller (mcp-oauth_db_settings)
    caller: Caller | None = None  # who asks: picks the account (mcp_identity_profiles)


DB_SETTINGS = "mcp-oauth_db_settings"  # declared with the OAuth variables (gateway.variables)
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_.]*")
_identity_specs: tuple[object, tuple[tuple[str, str], ...]] = (None, ())


def identity_settings(ctx: CallContext) -> dict[str, str] | None:
    """The caller's identity as the database settings mcp-oauth_db_settings names
    (`app.user_id=sub, app.tenant=tenant`): a claim's value for an OAuth caller, '' for a static
    token (so policies keyed on them see no user). None when none are configured."""
    global _identity_specs
    runtime = ctx.runtime
    items = runtime.variables[DB_SETTINGS]
    if not items:
        return None
    if _identity_specs[0] is not items:
        specs = []
        for item in items:
            name, _, claim = item.partition("=")
            name, claim = name.strip(), claim.strip() or "sub"
            if not _SETTING_NAME.fullmatch(name):
                raise Unavailable(f"{DB_SETTINGS}: {name!r} is no custom setting name (like app.user_id)")
            specs.append((name, claim))
        _identity_specs = (items, tuple(specs))
    caller = ctx.caller
    oauth = caller.admitted == "oauth"
    return {name: caller.claim(claim) if oauth else "" for name, claim in _identity_specs[1]}


def _execute(
    engine: Any,
    conn: Any,
    text: str,
    settings: Mapping[str, str] | None,
    stats: dict[str, Any],
    schema: str | None,
    bound: dict[str, Any],
) -> ResultSet:
    """The engine's execute under the call's caps, with the caller's transaction-local settings."""
    return engine.execute(
        conn, text, timeout_ms=stats["timeout_ms"], max_rows=stats["max_rows"],
        max_bytes=stats["max_bytes"], schema=schema, settings=settings, **bound,
    )  # fmt: skip


def _session_id(engine: Any, conn: Any) -> int | None:
    """The server's id of a pooled connection (None for an embedded engine)."""
    try:
        return engine.session_id(conn)
    except Exception:  # a dead connection: the statement will say so
        return None


class ReadOnlySql:
    """Runs one caller's read-only statement on a target, under the rules, caps and deadline."""

    def __init__(
        self,
        targets: TargetPools,
        store: ConfigStore,
        *,
        cache: ResultCache | None = None,
        evidence: EvidenceRecorder | None = None,
    ) -> None:
        self.targets = targets
        self.store = store
        self.cache = cache  # the query result cache (None: nothing is cached)
        self.evidence = evidence  # refusals and digest timings, for /mcp/ai (None: not recorded)
        self.digests = DigestRecorder()
        self.rule_hits = RuleHits()
        self._rules: tuple[Any, RuleSet] = ((), RuleSet([]))
        self._refusals: tuple[Any, dict[str, list[str]]] = ((), {})  # runtime_mcp_target_profiles -> warnings

    def run(self, ctx: CallContext, statement: Statement) -> dict[str, Any]:
        """Run the statement and answer the SqlResult shape of /mcp/query: target_id, columns, rows,
        row_count, truncated, truncated_reason, message (a rule's OK_msg), stats.

        `tool_name` is what query rules match and digests record (default: the calling tool);
        `max_rows` and `timeout_ms` are never above the target's own caps nor past ctx's deadline.
        `cache`: use the result cache when the target or a rule gives the statement a TTL; bypass
        it; or refresh it (run, then store). stats.cache says what happened."""
        try:
            prepared = self.prepare(ctx, statement)
            return self.answer_early(prepared) or self.execute(prepared)
        finally:
            self.flush_due()

    def inline_ok(self, runtime: Runtime, target_id: str | None, sql_chars: int, cache: str = "use") -> bool:
        """Whether `prepare` and `answer_early` are worth running on the event loop: the statement
        is short enough that checking it the first time does not stall the loop, a cache that
        could apply is a local file (a lookup never waits on the network), and either the
        result may be cached or the engine executes on the loop as well (`loop_ok`)."""
        if sql_chars > INLINE_SQL_CHARS:
            return False
        try:
            target = self.targets.resolve(target_id)
        except GatewayError:
            return False  # the thread path answers with the error
        caches = self.cache is not None and (target.cache_ttl_ms > 0 or self._ruleset(runtime).caches)
        if caches and not self.cache.local:
            return False
        return target.engine.executes_on_loop(target) or (caches and cache == "use")

    def loop_ok(self, prepared: Prepared) -> bool:
        """Whether `execute(prepared, block=False)` may run on the event loop (gateway/loop_io.py):
        the engine waits only through the loop, and what else it does never waits on the network
        (a result to keep goes to a local cache file). EXPLAIN asks the server first: a thread."""
        cache_local = prepared.cache_key is None or self.cache is None or self.cache.local
        target = prepared.target
        return target.engine.executes_on_loop(target) and cache_local and not prepared.explain

    def prepare(self, ctx: CallContext, statement: Statement) -> Prepared:
        """Resolve the target, apply the rules, check the statement: raises what refuses it."""
        sql, schema, explain, cache = statement.sql, statement.schema, statement.explain, statement.cache
        if cache not in CACHE_MODES:
            raise InvalidArgument(f"cache must be one of {', '.join(CACHE_MODES)}, got {cache!r}")
        tool_name = statement.tool_name or ctx.tool_name
        started = time.perf_counter()
        target = self.targets.resolve_for(statement.target_id, ctx.caller)  # a per-user account, if mapped
        rows_cap = min(statement.max_rows or target.max_rows, target.max_rows)
        max_bytes = int(_var(ctx.runtime, MAX_RESPONSE_BYTES))
        outcome = self._ruleset(ctx.runtime).evaluate(
            sql=sql,
            username=target.username,
            target_id=target.target_id,
            schemaname=schema or target.default_schema,
            tool_name=tool_name,
            caller=ctx.caller,
        )
        if outcome.matched:
            self.rule_hits.count(outcome.matched, username=target.username, target_id=target.target_id)
        if outcome.log:
            log.info(
                "query rule match: rules=%s tool=%s target=%s user=%s caller=%s",
                outcome.matched,
                tool_name,
                target.target_id,
                target.username,
                ctx.caller.subject or ctx.token_fingerprint,
            )
        if outcome.error_msg is not None:
            self._refused(ctx, tool_name, sql)
            raise InvalidArgument(outcome.error_msg, details={"rule_id": outcome.error_rule})
        timeout = min(statement.timeout_ms or target.timeout_ms, target.timeout_ms, outcome.timeout_ms or target.timeout_ms)
        timeout = max(1, min(timeout, int(ctx.remaining_s() * 1000)))
        stats: dict[str, Any] = {"max_rows": rows_cap, "max_bytes": max_bytes, "timeout_ms": timeout, "rules": outcome.matched}
        prepared = Prepared(
            tool_name=tool_name, target=target, schema=schema, started=started, stats=stats, explain=explain,
            params=statement.params,
        )  # fmt: skip
        prepared.caller = ctx.caller
        if target.engine.local_settings:
            prepared.identity = identity_settings(ctx)
        if outcome.ok_msg is not None:
            prepared.message = outcome.ok_msg
            return prepared
        try:
            prepared.checked = checked = check_readonly(outcome.sql, target.engine, row_cap=None if explain else rows_cap + 1)
        except InvalidArgument:
            self._refused(ctx, tool_name, sql)
            raise
        if explain and checked.kind != "select":
            raise refuse("explain_sql takes a SELECT without EXPLAIN")
        self._check_privileges(ctx.runtime, target)
        ttl = outcome.cache_ttl
        if ttl is None:
            ttl = target.cache_ttl_ms if statement.cache_ttl_ms is None else statement.cache_ttl_ms
        stats["cache"] = "off"
        if self.cache is not None and ttl > 0 and not explain:
            prepared.cache_ttl_ms, prepared.cache_mode = ttl, cache
            stats["cache"] = {"use": "miss", "bypass": "bypass", "refresh": "refresh"}[cache]
            if cache != "bypass":
                fingerprint = self.cache.fingerprint(ctx.runtime, target.target_id)
                if prepared.identity:  # the rows depend on who asks (row-level security): one entry per identity
                    fingerprint += "|" + json.dumps(prepared.identity, sort_keys=True)
                if target is not self.targets.resolve(target.target_id):  # a per-user account: its own grants
                    fingerprint += "|account:" + target.username
                prepared.cache_key = cache_key(
                    target_id=target.target_id, fingerprint=fingerprint,
                    schema=schema or "", max_rows=rows_cap, max_bytes=max_bytes,
                    sql=checked.sql if statement.params is None else checked.sql + "\x00" + _params_key(statement.params),
                )  # fmt: skip
        return prepared

    def answer_early(self, prepared: Prepared) -> dict[str, Any] | None:
        """The answer without the database: a rule's OK_msg, or a cached result. None: execute."""
        if prepared.message is not None:
            return _answer(prepared, None)
        if prepared.cache_key is None or prepared.cache_mode != "use" or self.cache is None:
            return None
        looked_up = time.perf_counter()
        state, hit = self.cache.lookup(prepared.cache_key, prepared.target.target_id, prepared.cache_ttl_ms)
        prepared.stats["cache"] = state
        if hit is None:
            return None
        cached = self.cache.decode(hit)
        result = ResultSet(
            columns=cached["columns"], rows=cached["rows"], truncated=cached["truncated"],
            truncated_reason=cached["truncated_reason"], result_bytes=cached["result_bytes"], db_ms=0.0,
        )  # fmt: skip
        prepared.stats["cache_age_ms"] = hit.age_ms
        prepared.stats["digest"] = self._record(prepared, (time.perf_counter() - looked_up) * 1e6)
        return _answer(prepared, result)

    async def execute_from_loop(self, prepared: Prepared, in_thread: Callable[..., Awaitable[Any]]) -> dict[str, Any]:
        """`execute` from the event loop: on the loop itself when it never blocks there
        (`loop_ok`), at most the pool's size of such calls per target at once, the others queued
        on the loop; in a thread (`in_thread`) otherwise, or when no pooled connection is ready
        (the pool still filling, a ping due). The thread hop cost more CPU per call than the
        driver itself (issue 30)."""
        if not self.loop_ok(prepared):
            return await in_thread(self.execute, prepared)
        async with self.targets.loop_gate(prepared.target):
            try:
                return await run_on_loop(self.execute, prepared, False)
            except WouldBlock:  # raised before anything was sent
                return await in_thread(self.execute, prepared)

    def execute(self, prepared: Prepared, block: bool = True) -> dict[str, Any]:
        """Run the prepared statement on the database (blocking), and keep its result if due.
        block=False (on the event loop, `loop_ok`): WouldBlock before anything is sent when no
        pooled connection is ready without waiting."""
        target, checked, explain = prepared.target, prepared.checked, prepared.explain
        assert checked is not None, "a prepared statement without a checked text is answered early"
        stats = prepared.stats
        with self.targets.connection(target.target_id, prepared.caller, block=block) as (target, conn):
            engine = target.engine
            text = engine.explain_prefix(conn, analyze=explain == "analyze") + checked.sql if explain else checked.sql
            values = None
            if prepared.params is not None:
                text, values = bind(text, engine, prepared.params)
            db_started = time.perf_counter()
            try:
                bound = {} if values is None else {"params": values}
                settings = prepared.identity
                caller = prepared.caller
                if caller is not None and caller.admitted == "oauth":  # who is connected (backends/callers.py)
                    with callers.RUNNING.running(target.target_id, _session_id(engine, conn), caller.subject):
                        if engine.local_settings:
                            settings = {**(settings or {}), "application_name": callers.label_for(caller.subject)}
                        result = _execute(engine, conn, text, settings, stats, prepared.schema, bound)
                else:
                    result = _execute(engine, conn, text, settings, stats, prepared.schema, bound)
            finally:
                elapsed_us = (time.perf_counter() - db_started) * 1e6
                stats["digest"] = self._record(prepared, elapsed_us)
        if self.evidence is not None and not explain:
            self.evidence.digest(
                stats["digest"],
                int(elapsed_us),
                result_hash=_result_hash(result),
                sample=(target.target_id, prepared.schema or "", checked.sql),
            )
        if prepared.cache_key is not None and self.cache is not None and stats["cache"] != "unavailable":
            meta = EntryMeta(
                key=prepared.cache_key, target_id=target.target_id, schema=prepared.schema or "", digest=stats["digest"],
                digest_text=normalize_text(checked.sql), tables=tables_of(checked.sql, checked.dialect),
            )  # fmt: skip
            kept = {k: getattr(result, k) for k in ("columns", "rows", "truncated", "truncated_reason", "result_bytes")}
            stats["cache_store"] = self.cache.save(meta, kept, prepared.cache_ttl_ms)
        return _answer(prepared, result)

    # -- the steps -------------------------------------------------------------------------
    def hides_table(self, runtime: Runtime, target: Target, schema: str, table: str) -> bool:
        """Whether the query rules block reading this table: a rule's error_msg matches a plain
        `SELECT * FROM <table>` (or `<schema>.<table>`) as read_resource or run_sql_readonly would
        send it. What lists tables for a caller (resources, get_schema_info) leaves such tables out."""
        ruleset = self._ruleset(runtime)
        if not ruleset.rules:
            return False
        # Without a rule naming a tool, one tool's answer is every tool's.
        tools = ("read_resource", "run_sql_readonly") if any(r.tool_name for r in ruleset.rules) else ("read_resource",)
        for sql in (f"SELECT * FROM {schema}.{table}", f"SELECT * FROM {table}"):
            for tool_name in tools:
                outcome = ruleset.evaluate(
                    sql=sql, username=target.username, target_id=target.target_id, schemaname=schema, tool_name=tool_name
                )
                if outcome.error_msg is not None:
                    return True
        return False

    def _ruleset(self, runtime: Runtime) -> RuleSet:
        rows = runtime.table("runtime_mcp_query_rules")
        cached_rows, ruleset = self._rules
        if rows is not cached_rows:
            ruleset = RuleSet.from_rows(rows)
            self._rules = (rows, ruleset)
        return ruleset

    def _check_privileges(self, runtime: Runtime, target: Target) -> None:
        """With mcp-query_refuse_privileged_targets on, refuse a target whose account the LOAD
        of MCP PROFILES found able to write or reach server files (runtime privilege_warnings)."""
        if not _var(runtime, REFUSE_PRIVILEGED):
            return
        rows = runtime.table("runtime_mcp_target_profiles")
        cached_rows, refusals = self._refusals
        if rows is not cached_rows:  # once per runtime, not a scan and a JSON parse per call
            refusals = {row["target_id"]: json.loads(row.get("privilege_warnings") or "[]") for row in rows}
            self._refusals = (rows, refusals)
        warnings = refusals.get(target.target_id)
        if warnings:
            raise Unavailable(
                f"target {target.target_id} is refused because mcp-query_refuse_privileged_targets is on: {'; '.join(warnings)}"
            )

    def _record(self, prepared: Prepared, elapsed_us: float) -> str:
        assert prepared.checked is not None
        text = normalize_text(prepared.checked.sql)
        return self.digests.record(
            tool_name=prepared.tool_name,
            target_id=prepared.target.target_id,
            digest_text=text,
            elapsed_us=int(elapsed_us),
            subject=prepared.caller.subject if prepared.caller is not None else "",
        )

    def _refused(self, ctx: CallContext, tool_name: str, sql: str) -> None:
        """Evidence of a refused statement: its normalised text (literals as ?), never the values."""
        if self.evidence is not None:
            text = normalize_text(sql)
            self.evidence.event(
                "sql_refused",
                endpoint=ctx.endpoint,
                tool=tool_name,
                token_fp=ctx.caller.evidence_key or ctx.token_fingerprint,
                digest=digest_of(text),
                text=text,
            )

    def flush_due(self) -> None:
        """Write digests and rule hits when a second has passed (after a call; and from the app
        every second, since calls answered on the event loop do not)."""
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


def _answer(prepared: Prepared, result: ResultSet | None) -> dict[str, Any]:
    stats = {
        **prepared.stats,
        "db_ms": round(result.db_ms, 3) if result else 0.0,
        "result_bytes": result.result_bytes if result else 0,
    }
    stats["ms"] = round((time.perf_counter() - prepared.started) * 1000, 3)
    return {
        "target_id": prepared.target.target_id,
        "columns": result.columns if result else [],
        "rows": result.rows if result else [],
        "row_count": len(result.rows) if result else 0,
        "truncated": result.truncated if result else False,
        "truncated_reason": result.truncated_reason if result else None,
        "message": prepared.message,
        "stats": stats,
    }
