"""/mcp/admin: `admin.sql`, ProxySQL-style statements over the admin tables (secrets masked)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.admin_sql import AdminSQL
from gateway.tools import CallContext, ToolHandler, ToolInput, ToolOutput, tool


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
    columns: list[str] | None = None
    rows: list[list[Any]] | None = None
    row_count: int | None = None
    truncated: bool = False
    changes: int | None = None


class AdminHandler(ToolHandler):
    endpoint = "admin"
    title = "Gateway administration"
    instructions = (
        "Administer MCP Gateway like ProxySQL: edit admin tables (memory), LOAD ... TO RUNTIME to apply, "
        "SAVE ... TO DISK to keep. Modules: MCP VARIABLES, MCP PROFILES, MCP QUERY RULES, RAG SOURCES."
    )

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self.admin_sql = AdminSQL(services.store)

    @tool("admin.sql", title="Run an admin statement", read_only=False, destructive=True)
    def sql(self, args: AdminSqlIn, ctx: CallContext) -> AdminSqlOut:
        """Run one admin statement against the gateway's configuration store.

        Only admin tables are reachable; secret values (tokens, passwords) are masked or read as NULL.
        Examples: `SELECT * FROM global_variables`, `SET mcp-timeout_ms=5000`, `LOAD MCP VARIABLES TO RUNTIME`,
        `SAVE MCP VARIABLES TO DISK`. `SELECT * FROM stats_mcp_query_digest_reset` (or stats_mcp_query_rules_reset)
        returns the statistics and zeroes them."""
        if self.services.sql is not None and "_reset" in args.statement.lower():
            self.services.sql.flush_stats()  # this worker's pending digests and rule hits belong to what is read and zeroed
        return AdminSqlOut(**self.admin_sql.execute(args.statement, max_rows=args.max_rows))
