"""admin.sql: one ProxySQL-style statement over the admin tables (gateway/admin_sql.py runs it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from gateway import audit
from gateway.admin_sql import AdminSQL
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.admin.shared import known_secrets

if TYPE_CHECKING:
    from backends.sql import ReadOnlySql


class AdminSqlIn(ToolInput):
    statement: str = Field(
        max_length=65536,
        description="One statement: SET var = value; LOAD|SAVE <MODULE> TO|FROM RUNTIME|DISK|MEMORY; or SELECT/INSERT/UPDATE/DELETE/REPLACE on admin tables.",
    )
    max_rows: int = Field(default=1000, ge=1, le=10000)


class AdminSqlOut(ToolOutput):
    ok: bool = True
    message: str | None = None
    runtime_version: int | None = None
    warnings: list[str] | None = Field(
        default=None,
        description="LOAD ... TO RUNTIME: what serves but deserves a look (a target whose account can write, a skipped target).",
    )
    columns: list[str] | None = None
    rows: list[list[Any]] | None = None
    row_count: int | None = None
    truncated: bool = False
    changes: int | None = None


class AdminSqlTool:
    def __init__(self, store: ConfigStore, sql_path: ReadOnlySql | None) -> None:
        self.store = store
        self.sql_path = sql_path  # the read-only SQL path: a *_reset read flushes its pending statistics first
        self.admin_sql = AdminSQL(store)

    @tool("admin.sql", title="Run an admin statement", read_only=False, destructive=True)
    def sql(self, args: AdminSqlIn, ctx: CallContext) -> AdminSqlOut:
        """Run one admin statement against the gateway's configuration store.

        Only admin tables are reachable; secret values (tokens, passwords) are masked or read as NULL.
        Writes are audited. Examples: `SELECT * FROM global_variables`, `SET mcp-timeout_ms=5000`,
        `LOAD MCP VARIABLES TO RUNTIME`, `SAVE MCP VARIABLES TO DISK`. `SELECT * FROM stats_mcp_query_digest_reset`
        (or stats_mcp_query_rules_reset) returns the statistics and zeroes them."""
        if self.sql_path is not None and "_reset" in args.statement.lower():
            self.sql_path.flush_stats()  # this worker's pending digests and rule hits belong to what is read and zeroed
        reads_only = args.statement.lstrip()[:6].upper() == "SELECT"
        result = self.admin_sql.execute(
            args.statement,
            max_rows=args.max_rows,
            actor=audit.actor_of(ctx),
            secrets=() if reads_only else known_secrets(self.store, ctx.runtime.variables),
            runtime_variables=ctx.runtime.variables,
        )
        return AdminSqlOut(**result)
