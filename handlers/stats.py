"""/mcp/stats: observability for agents and operators — the same numbers /metrics exports,
plus per-tool usage, query digests and backend pools."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from backends import callers
from backends.digest import query_digest_stats
from gateway.errors import NotFound
from gateway.tools import INT64_MAX, CallContext, ToolHandler, ToolInput, ToolOutput, tool

STAT_NAMES = ("requests_total", "failures_total", "inflight", "auth_failures_total", "workers", "runtime_version", "uptime_s")
METRIC_CATEGORIES = {
    "all": "",
    "requests": "mcp_gateway_requests",
    "errors": "mcp_gateway_errors",
    "operations": "mcp_server_operation_duration_seconds",
    "auth": "mcp_gateway_auth_failures",
    "http": "mcp_gateway_http_responses",
    "process": "mcp_gateway_process",
    "handlers": "mcp_gateway_handler_up",
}


class Empty(ToolInput):
    pass


class ListStatsOut(ToolOutput):
    stats: list[str]
    metric_categories: list[str]


class GetStatsIn(ToolInput):
    names: list[str] = Field(default_factory=list, description="Stat names from list_stats; empty returns all.")


class GetStatsOut(ToolOutput):
    stats: dict[str, float]


class HandlerHealth(ToolOutput):
    endpoint: str
    status: Literal["up", "down"]
    reason: str = ""


class HealthOut(ToolOutput):
    status: Literal["ok", "degraded"]
    handlers: list[HandlerHealth]
    backends: list[dict[str, Any]]


class ShowMetricsIn(ToolInput):
    category: str = Field(default="all", description=f"One of: {', '.join(METRIC_CATEGORIES)}.")
    max_samples: int = Field(default=500, ge=1, le=5000)


class MetricSample(ToolOutput):
    name: str
    labels: dict[str, str]
    value: float


class ShowMetricsOut(ToolOutput):
    samples: list[MetricSample]
    truncated: bool


class ToolUsageIn(ToolInput):
    endpoint: str | None = Field(default=None, description="Only this endpoint's tools.")
    reset: bool = Field(default=False, description="Return the counters and zero them (like ProxySQL's _reset tables).")


class ToolUsageRow(ToolOutput):
    endpoint: str
    tool: str
    schema_: str = Field(alias="schema")
    count: int
    errors: int
    first_seen: float
    last_seen: float
    sum_time_us: int
    min_time_us: int
    max_time_us: int
    avg_time_us: float


class ToolUsageOut(ToolOutput):
    tools: list[ToolUsageRow]
    reset: bool


class ShowQueriesIn(ToolInput):
    sort_by: Literal["count", "sum_time", "avg_time", "max_time", "last_seen"] = "sum_time"
    limit: int = Field(default=50, ge=1, le=10000)
    min_count: int = Field(default=1, ge=1, le=INT64_MAX, description="Only statements run at least this many times.")
    reset: bool = Field(
        default=False,
        description="Return the digests and zero them, like ProxySQL's stats_mcp_query_digest_reset (every digest is zeroed, "
        "also those past limit).",
    )


class ShowQueriesOut(ToolOutput):
    queries: list[dict[str, Any]]
    truncated: bool
    reset: bool = False


class CallerStatements(ToolOutput):
    target_id: str
    subject: str = Field(description="The OAuth caller (token subject).")
    statements: int = Field(description="Its statements running on the target now.")


class ConnectionsOut(ToolOutput):
    pools: list[dict[str, Any]]
    active_requests: float
    callers: list[CallerStatements] = Field(
        default_factory=list,
        description="Who is connected: OAuth callers with statements running now, per target (this worker process; "
        "static-token calls are not listed). admin_show_processes names the caller of each statement.",
    )


class StatsHandler(ToolHandler):
    endpoint = "stats"
    title = "Gateway statistics"
    instructions = "Read MCP Gateway statistics: request totals, per-tool usage, query digests, backend pools and health."

    @tool("list_stats", title="List statistics", read_only=True)
    def list_stats(self, args: Empty, ctx: CallContext) -> ListStatsOut:
        """Names accepted by get_stats and categories accepted by show_metrics."""
        return ListStatsOut(stats=list(STAT_NAMES), metric_categories=list(METRIC_CATEGORIES))

    @tool("get_stats", title="Get statistics", read_only=True)
    def get_stats(self, args: GetStatsIn, ctx: CallContext) -> GetStatsOut:
        """Current values of the named statistics, totalled across all worker processes."""
        unknown = [n for n in args.names if n not in STAT_NAMES]
        if unknown:
            raise NotFound(f"unknown stat(s) {unknown}; list_stats names them")
        import time

        values = self.services.metrics.totals()
        values["runtime_version"] = ctx.runtime.version
        values["uptime_s"] = round(time.time() - self.services.started_at, 3)
        return GetStatsOut(stats={n: values[n] for n in (args.names or STAT_NAMES)})

    @tool("get_health", title="Health", read_only=True)
    def get_health(self, args: Empty, ctx: CallContext) -> HealthOut:
        """Per-handler health (a handler that failed to start says why) and per-backend pool health."""
        handlers = [
            HandlerHealth(endpoint=name, status="down" if h.down_reason else "up", reason=h.down_reason)
            for name, h in self.services.handlers.items()
        ]
        pools = self.services.targets
        backends = pools.stats() if pools is not None else []
        degraded = any(h.status == "down" for h in handlers) or any(b.get("healthy") is False for b in backends)
        return HealthOut(status="degraded" if degraded else "ok", handlers=handlers, backends=backends)

    @tool("show_metrics", title="Show metrics", read_only=True)
    def show_metrics(self, args: ShowMetricsIn, ctx: CallContext) -> ShowMetricsOut:
        """The Prometheus samples of one category, as JSON (the same numbers GET /metrics serves)."""
        if args.category not in METRIC_CATEGORIES:
            raise NotFound(f"unknown category {args.category!r}; one of {', '.join(METRIC_CATEGORIES)}")
        samples = self.services.metrics.samples(METRIC_CATEGORIES[args.category])
        return ShowMetricsOut(samples=samples[: args.max_samples], truncated=len(samples) > args.max_samples)

    @tool("show_tool_usage", title="Tool usage", read_only=False, destructive=False)
    def show_tool_usage(self, args: ToolUsageIn, ctx: CallContext) -> ToolUsageOut:
        """Per-tool call counts, errors and latency (µs) from stats_mcp_query_tools_counters; reset=true zeroes them."""
        rows = self.services.stats.read(reset=args.reset, endpoint=args.endpoint)
        tools = [
            ToolUsageRow(
                endpoint=r["endpoint"],
                tool=r["tool"],
                schema=r["schema"],
                count=r["count"],
                errors=r["errors"],
                first_seen=r["first_seen"],
                last_seen=r["last_seen"],
                sum_time_us=r["sum_time"],
                min_time_us=r["min_time"],
                max_time_us=r["max_time"],
                avg_time_us=round(r["sum_time"] / r["count"], 1) if r["count"] else 0.0,
            )
            for r in rows
        ]
        return ToolUsageOut(tools=tools, reset=args.reset)

    @tool("show_queries", title="Query digests", read_only=False, destructive=False)
    def show_queries(self, args: ShowQueriesIn, ctx: CallContext) -> ShowQueriesOut:
        """Normalised statements run through /mcp/query with counts, total/min/max time and p50/p90/p95/p99; reset=true zeroes them after reading."""
        if self.services.sql is not None:
            self.services.sql.flush_stats()  # this worker's pending digests first, like show_tool_usage
        limit = min(args.limit, ctx.runtime.var("mcp-stats_show_queries_max_rows"))
        rows = query_digest_stats(
            self.services.store, sort_by=args.sort_by, limit=limit + 1, min_count=args.min_count, reset=args.reset
        )
        return ShowQueriesOut(queries=rows[:limit], truncated=len(rows) > limit, reset=args.reset)

    @tool("show_connections", title="Backend connections", read_only=True)
    def show_connections(self, args: Empty, ctx: CallContext) -> ConnectionsOut:
        """Backend connection pools per target (size, in use, idle, waiting, errors) and requests in flight."""
        pools = self.services.targets
        return ConnectionsOut(
            pools=pools.stats() if pools is not None else [],
            active_requests=self.services.metrics.totals()["inflight"],
            callers=[CallerStatements(**row) for row in callers.RUNNING.counts()],  # type: ignore[arg-type]
        )
