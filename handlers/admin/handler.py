"""/mcp/admin: the tools admins run, one module per concern, joined here as mixins.

    config_edits.py  structured edits of profiles, rules and RAG sources (memory layer)
    layers.py        load to runtime, save to disk, load from disk, diff, admin_reload
    tokens.py        rotate, revoke and list bearer tokens
    backend_ops.py   processes, kill, users, create user, grant (engines.py: the engines' SQL)
    audit_tools.py   the audit trail; admin_flush_cache
    handler.py       admin.sql, ProxySQL-style statements over the admin tables

Every change is written to the audit trail (gateway/audit.py) through AdminBase.audited.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from gateway import audit
from gateway.admin_sql import AdminSQL
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from gateway.variables import Variable
from handlers.admin.audit_tools import AuditTools
from handlers.admin.backend_ops import ADMIN_VARIABLES, BackendTools
from handlers.admin.base import AdminBase, known_secrets
from handlers.admin.config_edits import ConfigEditTools
from handlers.admin.layers import LayerTools
from handlers.admin.tokens import TokenTools


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


class AdminSqlTool(AdminBase):
    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self.admin_sql = AdminSQL(services.store)

    @tool("admin.sql", title="Run an admin statement", read_only=False, destructive=True)
    def sql(self, args: AdminSqlIn, ctx: CallContext) -> AdminSqlOut:
        """Run one admin statement against the gateway's configuration store.

        Only admin tables are reachable; secret values (tokens, passwords) are masked or read as NULL.
        Writes are audited. Examples: `SELECT * FROM global_variables`, `SET mcp-timeout_ms=5000`,
        `LOAD MCP VARIABLES TO RUNTIME`, `SAVE MCP VARIABLES TO DISK`."""
        reads_only = args.statement.lstrip()[:6].upper() == "SELECT"
        result = self.admin_sql.execute(
            args.statement,
            max_rows=args.max_rows,
            actor=audit.actor_of(ctx),
            secrets=() if reads_only else known_secrets(self.store, ctx.runtime.variables),
            runtime_variables=ctx.runtime.variables,
        )
        return AdminSqlOut(**result)


# tools/list shows the tools of the last base first: admin.sql, then config edits ... audit.
class AdminHandler(AuditTools, BackendTools, TokenTools, LayerTools, ConfigEditTools, AdminSqlTool):
    endpoint = "admin"
    title = "Gateway administration"
    instructions = (
        "Administer MCP Gateway. Edit target/auth profiles, query rules and RAG sources with admin.upsert_* "
        "(memory layer), check admin.diff, apply with admin.load_to_runtime, keep with admin.save_to_disk. "
        "Rotate tokens with admin.rotate_token then admin.revoke_token. Backend accounts and running statements: "
        "admin_list_users, admin_create_user, admin_grant_permissions, admin_show_processes, admin_kill_query. "
        "Every change is audited (admin.audit). admin.sql runs ProxySQL-style statements on the admin tables."
    )
    variables: ClassVar[tuple[Variable, ...]] = ADMIN_VARIABLES
