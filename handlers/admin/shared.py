"""What every group of admin tools shares: the audit trail their changes go to (who is calling,
secrets masked: no audit row or answer carries a value that is secret right now), and the module
names admins may type (`MCP PROFILES`, or just `profiles`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from backends.targets import SecretError, resolve_secret
from gateway import audit
from gateway.call import CallContext
from gateway.errors import NotFound
from gateway.store import ConfigModule, ConfigStore

# Short names for the modules, as admin_reload{target} spells them.
MODULE_ALIASES = {
    "variables": "MCP VARIABLES",
    "profiles": "MCP PROFILES",
    "rules": "MCP QUERY RULES",
    "query rules": "MCP QUERY RULES",
    "sources": "RAG SOURCES",
    "rag sources": "RAG SOURCES",
}
AUTH_TABLES = ("mcp_auth_profiles", "runtime_mcp_auth_profiles")


def module_named(store: ConfigStore, name: str) -> ConfigModule:
    key = " ".join(name.lower().split())
    return store.module(MODULE_ALIASES.get(key, name))


def known_secrets(store: ConfigStore, runtime_variables: Mapping[str, Any]) -> list[str]:
    """Every secret value configured now: tokens and keys (runtime and memory), database
    passwords (as stored, and resolved when stored as env:/file: references)."""
    found: set[str] = set()
    secret_names = {name for name, decl in store.variables.items() if decl.secret}
    for name in secret_names:
        value = runtime_variables.get(name)
        found.update(value if isinstance(value, tuple) else [str(value or "")])
    for name, value in store.memory_variables().items():
        if name in secret_names:
            found.update(part.strip() for part in value.split(","))
    conn = store.conn()
    for table in AUTH_TABLES:
        for (stored,) in conn.execute(f"SELECT db_password FROM main.{table}"):
            found.add(stored)
            with contextlib.suppress(SecretError):
                found.add(resolve_secret(stored))
    return [s for s in found if s and not s.startswith(("env:", "file:"))]


def require_module(store: ConfigStore, name: str) -> ConfigModule:
    """The module an admin named, or NOT_FOUND listing the short names too."""
    try:
        return module_named(store, name)
    except NotFound as exc:
        aliases = ", ".join(sorted(MODULE_ALIASES))
        raise NotFound(f"{exc.message} (short names: {aliases})") from None


class AuditTrail:
    """Where the admin tool groups record their changes: one per handler, over its config store."""

    def __init__(self, store: ConfigStore) -> None:
        self.store = store

    @contextlib.contextmanager
    def audited(self, ctx: CallContext, arguments: Mapping[str, Any]) -> Iterator[audit.Entry]:
        """Record this call's change (or its failure) in the audit trail, secrets masked."""
        with audit.audited_call(self.store, ctx, arguments, secrets=known_secrets(self.store, ctx.runtime.variables)) as entry:
            yield entry
