"""/mcp/cache: the query result cache (backends/result_cache) seen and steered by an operator.

ProxySQL declares these tools and answers "to be implemented" for all of them; here each one
acts on the real cache that run_sql_readonly, sample_rows, sample_distinct (and every other
caller of the read-only SQL path) share. The cache is off until a target profile's
`cache_ttl_ms` or a query rule's `cache_ttl` turns it on; set_cache_ttl does that for you.
Invalidations reach every worker and, with cache-redis_url, every instance, before the call
returns.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import Field

from backends.result_cache import ResultCache
from backends.result_cache.store import (
    CLEARED,
    EXPIRED,
    INVALIDATED,
    LRU_BYTES,
    LRU_ENTRIES,
    PROFILE_CHANGED,
    REASONS,
    StoreUnavailable,
)
from backends.sql import ReadOnlySql, Statement
from backends.targets import MAX_CACHE_TTL_MS
from gateway import audit, sqlite
from gateway.errors import GatewayError, InvalidArgument, NotFound, Unavailable
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolHandler, ToolInput, ToolOutput, tool

TARGET_ID = Field(default=None, max_length=64, description="Only this target; omitted: every target.")
MAX_WARM_QUERIES = 100


# -- models ------------------------------------------------------------------------------------


class CacheStatsIn(ToolInput):
    target_id: str | None = TARGET_ID


class TargetCacheStats(ToolOutput):
    target_id: str
    ttl_ms: int | None = Field(
        description="The target profile's cache_ttl_ms (0: off unless a rule's cache_ttl applies); null: no such target now."
    )
    entries: int
    bytes: int
    hits: int
    misses: int
    hit_ratio: float | None = Field(description="hits / (hits + misses); null before any lookup.")
    evictions: int = Field(
        description="Entries dropped to stay within cache-max_entries or cache-max_bytes (least recently used first)."
    )
    expirations: int
    invalidations: int = Field(
        description="Entries dropped by invalidate_cache, clear_cache or a LOAD that changed the target's profile."
    )
    by_reason: dict[str, int] = Field(description=f"Entries dropped, by reason: {', '.join(REASONS)}.")


class CacheStatsOut(ToolOutput):
    store: str = Field(description="embedded (SQLite in the data directory, shared by the workers) or redis (cache-redis_url).")
    entries: int
    bytes: int = Field(description="Bytes of cached results (what cache-max_bytes bounds).")
    store_bytes: int | None = Field(description="Embedded: size of the cache file on disk (with its WAL); redis: null.")
    max_entries: int
    max_bytes: int
    max_entry_bytes: int
    hits: int
    misses: int
    hit_ratio: float | None
    evictions: int
    expirations: int
    invalidations: int
    targets: list[TargetCacheStats]


class CacheEntriesIn(ToolInput):
    target_id: str | None = TARGET_ID
    limit: int = Field(default=50, ge=1, le=1000, description="Most entries to list.")
    order_by: Literal["hits", "age", "size", "recent"] = Field(
        default="hits", description="hits (most first), age (oldest first), size (largest first), recent (last used first)."
    )


class CacheEntry(ToolOutput):
    digest: str
    digest_text: str = Field(description="The statement with its literals as ? (never the rows, never the values).")
    target_id: str
    schema_: str = Field(alias="schema", description="The schema argument of the call ('' when none was given).")
    tables: list[str]
    age_ms: int
    ttl_left_ms: int
    idle_ms: int = Field(description="Since the entry was last served.")
    hits: int
    size: int = Field(description="Bytes of the cached result.")


class CacheEntriesOut(ToolOutput):
    entries: list[CacheEntry]
    truncated: bool = Field(description="True when more entries matched than limit.")


class InvalidateIn(ToolInput):
    target_id: str | None = Field(default=None, max_length=64)
    digest_pattern: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="A regular expression searched (case-insensitive) in the digest text, e.g. 'FROM orders', or a digest id such as 0x1A2B...",
    )
    table: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="Drop entries whose statement reads this table: 'orders' matches it in any schema, 'shop.orders' only there.",
    )


class DroppedOut(ToolOutput):
    dropped: int = Field(description="Entries removed, from every worker and instance.")
    store: str


class SetTtlIn(ToolInput):
    target_id: str | None = Field(default=None, max_length=64, description="Set the target profile's cache_ttl_ms.")
    rule_id: int | None = Field(default=None, ge=0, le=2_147_483_647, description="Set this query rule's cache_ttl instead.")
    ttl_ms: int | None = Field(
        ge=0,
        le=MAX_CACHE_TTL_MS,
        description="Milliseconds a result is served from cache; 0 turns caching off (a rule's 0 excludes what it matches); null (rules only) removes the rule's say.",
    )


class SetTtlOut(ToolOutput):
    module: str = Field(description="The admin module written and loaded: MCP PROFILES or MCP QUERY RULES.")
    target_ids: list[str] = Field(
        description="Targets whose cache_ttl_ms was set (every target when neither target_id nor rule_id was given)."
    )
    rule_id: int | None
    ttl_ms: int | None
    runtime_version: int = Field(description="The runtime version the LOAD produced; every worker serves it within a second.")


class WarmIn(ToolInput):
    target_id: str = Field(max_length=64)
    queries: list[str] = Field(
        min_length=1, max_length=MAX_WARM_QUERIES, description="Statements to run and cache, as run_sql_readonly would."
    )
    schema_: str | None = Field(default=None, alias="schema", max_length=256)


class WarmResult(ToolOutput):
    sql: str
    status: Literal["cached", "refused", "failed", "not_cacheable", "too_large", "unavailable"] = Field(
        description="cached; refused (a rule or the read-only check); failed (the database); not_cacheable (its TTL is 0); too_large (above cache-max_entry_bytes); unavailable (the store)."
    )
    digest: str | None = None
    row_count: int | None = None
    error: dict[str, Any] | None = Field(default=None, description="{code, message} when refused or failed.")


class WarmOut(ToolOutput):
    target_id: str
    cached: int
    results: list[WarmResult]


# -- the tools and the handler -----------------------------------------------------------------


class CacheTools:
    """The cache's tools: the result cache, the read-only SQL path that fills it (warm_cache), and
    the config store that TTLs are set in and changes audited to."""

    def __init__(self, cache: ResultCache, sql: ReadOnlySql, store: ConfigStore) -> None:
        self.cache = cache
        self.sql = sql
        self.store = store

    @tool("get_cache_stats", title="Cache statistics", read_only=True)
    def get_cache_stats(self, args: CacheStatsIn, ctx: CallContext) -> CacheStatsOut:
        """Report the result cache's entries, bytes, hits, misses, hit ratio, evictions, expirations and invalidations, in total and per target.

        Counts cover every worker of this server (and every instance sharing the Redis store);
        a worker's latest hits reach them within half a second."""
        cache = self.cache
        stats = _guard(lambda: cache.stats(args.target_id))
        ttls = {row["target_id"]: int(row.get("cache_ttl_ms") or 0) for row in ctx.runtime.table("runtime_mcp_target_profiles")}
        targets = []
        for target_id, row in sorted(stats["targets"].items()):
            by_reason = {reason: row.get(reason, 0) for reason in REASONS}
            targets.append(
                TargetCacheStats(
                    target_id=target_id,
                    ttl_ms=ttls.get(target_id),
                    entries=row["entries"],
                    bytes=row["bytes"],
                    hits=row["hits"],
                    misses=row["misses"],
                    hit_ratio=_ratio(row["hits"], row["misses"]),
                    evictions=by_reason[LRU_ENTRIES] + by_reason[LRU_BYTES],
                    expirations=by_reason[EXPIRED],
                    invalidations=by_reason[INVALIDATED] + by_reason[CLEARED] + by_reason[PROFILE_CHANGED],
                    by_reason=by_reason,
                )  # fmt: skip
            )
        hits, misses = sum(t.hits for t in targets), sum(t.misses for t in targets)
        return CacheStatsOut(
            store=stats["store"], entries=stats["entries"], bytes=stats["bytes"], store_bytes=cache.store_bytes(),
            max_entries=stats["max_entries"], max_bytes=stats["max_bytes"], max_entry_bytes=stats["max_entry_bytes"],
            hits=hits, misses=misses, hit_ratio=_ratio(hits, misses), evictions=sum(t.evictions for t in targets),
            expirations=sum(t.expirations for t in targets), invalidations=sum(t.invalidations for t in targets), targets=targets,
        )  # fmt: skip

    @tool("get_cache_entries", title="List cached results", read_only=True)
    def get_cache_entries(self, args: CacheEntriesIn, ctx: CallContext) -> CacheEntriesOut:
        """List cached results: digest text, target, schema, tables, age, TTL left, hits and size (never the rows).

        order_by: hits (most first), age (oldest first), size (largest first), recent (last served first)."""
        rows = _guard(lambda: self.cache.entries(args.target_id, args.limit + 1, args.order_by))
        return CacheEntriesOut(
            entries=[CacheEntry.model_validate(r) for r in rows[: args.limit]], truncated=len(rows) > args.limit
        )

    @tool("invalidate_cache", title="Invalidate cached results", read_only=False, destructive=True, idempotent=True)
    def invalidate_cache(self, args: InvalidateIn, ctx: CallContext) -> DroppedOut:
        """Drop the cached results that match every condition given: a target, a table the statement reads, a digest pattern.

        table: 'orders' matches entries reading orders in any schema, 'shop.orders' only that
        schema's. digest_pattern: a regular expression searched (case-insensitive) in the digest
        text, or a digest id. At least one condition is required (clear_cache drops everything).
        Returns how many entries were dropped; every worker and instance stops serving them
        before this call returns."""
        if args.target_id is None and args.digest_pattern is None and args.table is None:
            raise InvalidArgument("give target_id, table or digest_pattern (clear_cache drops every entry)")
        if args.digest_pattern is not None:
            try:
                re.compile(args.digest_pattern)
            except re.error as exc:
                raise InvalidArgument(f"digest_pattern is not a valid regular expression ({exc})") from None
        cache = self.cache
        with audit.audited_call(self.store, ctx, args.model_dump()) as entry:
            dropped = _guard(
                lambda: cache.invalidate(target_id=args.target_id, table=args.table, digest_pattern=args.digest_pattern)
            )
            entry.after = {"dropped": dropped}
        return DroppedOut(dropped=dropped, store=cache.store.kind)

    @tool("clear_cache", title="Clear the cache", read_only=False, destructive=True, idempotent=True)
    def clear_cache(self, args: CacheStatsIn, ctx: CallContext) -> DroppedOut:
        """Drop every cached result, or those of one target; returns how many were dropped."""
        cache = self.cache
        with audit.audited_call(self.store, ctx, args.model_dump()) as entry:
            entry.after = {"dropped": _guard(lambda: cache.clear(args.target_id))}
        return DroppedOut(dropped=entry.after["dropped"], store=cache.store.kind)

    @tool("set_cache_ttl", title="Set a cache TTL", read_only=False, idempotent=True)
    def set_cache_ttl(self, args: SetTtlIn, ctx: CallContext) -> SetTtlOut:
        """Set how long results are cached, for a target profile (cache_ttl_ms) or a query rule (cache_ttl), and load it to runtime.

        Like set_config: writes the memory layer, then LOAD MCP PROFILES (or MCP QUERY RULES)
        TO RUNTIME, which applies every pending edit of that module; SAVE ... TO DISK keeps it.
        ttl_ms 0 turns caching off (on a rule: the statements it matches are never cached).
        Neither target_id nor rule_id: every target profile. A lowered TTL applies to entries
        already cached too."""
        with audit.audited_call(self.store, ctx, args.model_dump()) as entry:
            out = self._set_ttl(args)
            entry.after = out.model_dump()
        return out

    def _set_ttl(self, args: SetTtlIn) -> SetTtlOut:
        store = self.store
        conn = store.conn()
        if args.target_id is not None and args.rule_id is not None:
            raise InvalidArgument("give target_id or rule_id, not both")
        if args.rule_id is None and args.ttl_ms is None:
            raise InvalidArgument("ttl_ms null only removes a rule's cache_ttl; a target needs a number (0: off)")
        if args.rule_id is not None:
            if not sqlite.rows(conn, "SELECT 1 FROM main.mcp_query_rules WHERE rule_id = ?", (args.rule_id,)):
                raise NotFound(f"no query rule {args.rule_id} in the memory layer")
            conn.execute("UPDATE main.mcp_query_rules SET cache_ttl = ? WHERE rule_id = ?", (args.ttl_ms, args.rule_id))
            version = store.load_to_runtime("MCP QUERY RULES")
            return SetTtlOut(
                module="MCP QUERY RULES", target_ids=[], rule_id=args.rule_id, ttl_ms=args.ttl_ms, runtime_version=version
            )
        where, params = ("WHERE target_id = ?", (args.target_id,)) if args.target_id is not None else ("", ())
        targets = [
            r["target_id"]
            for r in sqlite.rows(conn, f"SELECT target_id FROM main.mcp_target_profiles {where} ORDER BY target_id", params)
        ]
        if args.target_id is not None and not targets:
            raise NotFound(f"no target profile {args.target_id!r} in the memory layer")
        conn.execute(f"UPDATE main.mcp_target_profiles SET cache_ttl_ms = ? {where}", (args.ttl_ms, *params))
        version = store.load_to_runtime("MCP PROFILES")
        return SetTtlOut(module="MCP PROFILES", target_ids=targets, rule_id=None, ttl_ms=args.ttl_ms, runtime_version=version)

    @tool("warm_cache", title="Warm the cache", read_only=False, idempotent=True)  # writes the cache, never the database
    def warm_cache(self, args: WarmIn, ctx: CallContext) -> WarmOut:
        """Run statements on a target through the full read-only path (query rules, read-only check, caps) and cache their results.

        Each is run as run_sql_readonly with default arguments would run it (the same rules
        apply, and a later identical call is a hit), even if a result is already cached.
        Reports per statement: cached, refused, failed, not_cacheable (its TTL is 0: set one
        with set_cache_ttl), too_large or unavailable. Stops at the call's deadline."""
        sql_path = self.sql
        target_id = sql_path.targets.resolve(args.target_id).target_id  # NOT_FOUND for the whole call
        results = []
        for text in args.queries:
            ctx.check_deadline()
            try:  # as run_sql_readonly with default arguments: the same rules, the same cache key
                statement = Statement(
                    sql=text, target_id=target_id, schema=args.schema_, tool_name="run_sql_readonly", cache="refresh"
                )
                prepared = sql_path.prepare(ctx, statement)
            except GatewayError as exc:
                results.append(WarmResult(sql=text, status="refused", error={"code": exc.code, "message": exc.message}))
                continue
            if prepared.cache_key is None:  # no TTL (or a rule's OK_msg answers it): nothing to keep
                results.append(WarmResult(sql=text, status="not_cacheable"))
                continue
            try:
                out = sql_path.execute(prepared)
            except GatewayError as exc:
                results.append(WarmResult(sql=text, status="failed", error={"code": exc.code, "message": exc.message}))
                continue
            stats = out["stats"]
            status = {"stored": "cached", "too_large": "too_large"}.get(stats.get("cache_store") or "", "unavailable")
            results.append(WarmResult(sql=text, status=status, digest=stats.get("digest"), row_count=out["row_count"]))
        sql_path.flush_due()
        return WarmOut(target_id=target_id, cached=sum(r.status == "cached" for r in results), results=results)


class CacheHandler(ToolHandler):
    endpoint = "cache"
    title = "Query result cache"
    instructions = (
        "The query result cache shared by /mcp/query's SQL tools. get_cache_stats and get_cache_entries show it; "
        "set_cache_ttl turns it on per target or query rule; invalidate_cache and clear_cache drop entries; warm_cache fills it."
    )
    tool_groups: ClassVar[tuple[type, ...]] = (CacheTools,)

    def make_groups(self) -> list[object]:
        services = self.services
        if services.result_cache is None or services.sql is None:  # gateway.assembly.share_backends builds both
            raise Unavailable("the result cache is not initialised")
        return [CacheTools(services.result_cache, services.sql, services.store)]


def _ratio(hits: int, misses: int) -> float | None:
    return round(hits / (hits + misses), 4) if hits + misses else None


def _guard(action: Any) -> Any:
    try:
        return action()
    except StoreUnavailable as exc:
        raise Unavailable(str(exc)) from None
