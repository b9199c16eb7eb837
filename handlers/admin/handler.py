"""/mcp/admin: the tools admins run, one group per concern, each a plain class given what it uses.

    sql_tool.py      admin.sql, ProxySQL-style statements over the admin tables
    config_edits.py  structured edits of profiles, rules and RAG sources (memory layer)
    layers.py        load to runtime, save to disk, load from disk, diff, admin_reload
    tokens.py        rotate, revoke and list bearer tokens
    backend_ops.py   processes, kill, users, create user, grant (each engine's SQL: backends/engines/admin.py)
    audit_tools.py   the audit trail; admin_flush_cache

Every change is written to the audit trail (gateway/audit.py) through shared.AuditTrail.audited.
"""

from __future__ import annotations

from typing import ClassVar

from gateway.tools import ToolHandler
from gateway.variables import Variable
from handlers.admin.audit_tools import AuditTools
from handlers.admin.backend_ops import ADMIN_VARIABLES, BackendTools
from handlers.admin.config_edits import ConfigEditTools
from handlers.admin.layers import LayerTools
from handlers.admin.shared import AuditTrail
from handlers.admin.sql_tool import AdminSqlTool
from handlers.admin.tokens import TokenTools


class AdminHandler(ToolHandler):
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
    # tools/list shows admin.sql first, then config edits, layers, tokens, backend operations, the audit trail.
    tool_groups: ClassVar[tuple[type, ...]] = (AdminSqlTool, ConfigEditTools, LayerTools, TokenTools, BackendTools, AuditTools)

    def make_groups(self) -> list[object]:
        services = self.services
        store = services.store
        trail = AuditTrail(store)
        return [
            AdminSqlTool(store, services.sql),
            ConfigEditTools(store, trail),
            LayerTools(store, trail),
            TokenTools(store, trail, services.token_use),
            BackendTools(trail),
            AuditTools(store, trail, services.cache_flushers),
        ]
