"""Structured edits of the memory layer: target and auth profiles, query rules, RAG sources.

Each upsert writes only the fields given (a new row takes the table's defaults for the rest),
then validates the whole module exactly as LOAD ... TO RUNTIME would, and keeps the edit only
if it validates: an invalid edit changes nothing and the error names the field. Nothing here
touches the runtime; `admin.load_to_runtime` applies, `admin.save_to_disk` keeps.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from backends.engines import PROTOCOLS
from gateway import sqlite
from gateway.errors import InvalidArgument
from gateway.store import ConfigStore
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.admin import rows
from handlers.admin.shared import AuditTrail, module_named

PROFILES, RULES, SOURCES, TOOLS = "MCP PROFILES", "MCP QUERY RULES", "RAG SOURCES", "MCP TOOLS"
FLAG_COLUMNS = {"use_ssl", "allow_explain", "allow_explain_analyze", "allow_discovery", "active", "enabled"}


def _db_values(args: ToolInput, *, json_columns: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields the caller set, as admin-table values (flags 0/1, JSON columns as text)."""
    values = args.model_dump(exclude_unset=True, by_alias=True)
    for column, value in values.items():
        if column in FLAG_COLUMNS and isinstance(value, bool):
            values[column] = int(value)
        elif column in json_columns and value is not None:
            values[column] = json.dumps(value)
    return values


def password_source(stored: str | None) -> str:
    """How an auth profile gets its password, never the password: none, literal, env:NAME, file:PATH."""
    if not stored:
        return "none"
    if stored.startswith(("env:", "file:")):
        return stored
    return "literal"


# -- models ---------------------------------------------------------------------------------------


class TargetProfileIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64, description="Logical name clients route to.")
    protocol: str | None = Field(default=None, description=f"One of {', '.join(PROTOCOLS)} (required for a new target).")
    host: str | None = None
    port: int | None = Field(default=None, ge=0, le=65535, description="0: the protocol's default port.")
    database: str | None = Field(default=None, description="Database name, or the file path for sqlite.")
    auth_profile_id: str | None = Field(default=None, description="Credentials to connect with (an auth profile).")
    description: str | None = None
    max_rows: int | None = Field(default=None, ge=1, le=1_000_000)
    timeout_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    allow_explain: bool | None = None
    allow_explain_analyze: bool | None = None
    allow_discovery: bool | None = None
    active: bool | None = None
    comment: str | None = None


class AuthProfileIn(ToolInput):
    auth_profile_id: str = Field(min_length=1, max_length=64)
    db_username: str | None = None
    db_password: str | None = Field(
        default=None,
        description="Write-only: a literal password, env:NAME (an environment variable) or file:/abs/path (its first line). Never returned.",
    )
    default_schema: str | None = None
    use_ssl: bool | None = None
    ssl_mode: str | None = Field(default=None, description="disable, prefer, require, verify-ca or verify-full.")
    comment: str | None = None


class QueryRuleIn(ToolInput):
    rule_id: int = Field(ge=0, le=2_147_483_647, description="Rules are evaluated in rule_id order.")
    active: bool | None = None
    username: str | None = None
    target_id: str | None = None
    schemaname: str | None = None
    tool_name: str | None = None
    match_pattern: str | None = Field(default=None, description="Python regular expression searched in the SQL.")
    negate_match_pattern: bool | None = None
    re_modifiers: str | None = Field(default=None, description="CASELESS, GLOBAL (comma separated).")
    flagIN: int | None = Field(default=None, ge=0, le=2_147_483_647)
    flagOUT: int | None = Field(default=None, ge=0, le=2_147_483_647)
    replace_pattern: str | None = None
    timeout_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    error_msg: str | None = None
    OK_msg: str | None = None
    log: bool | None = None
    apply: bool | None = None
    comment: str | None = None


class RagSourceIn(ToolInput):
    """A rag_sources row (README: "Indexing your own tables"); fields left out keep their value."""

    name: str = Field(
        min_length=1,
        max_length=128,
        description="The source's unique name (the key of the upsert): 1-64 letters, digits or _ - . "
        "A new source gets the next free source_id.",
    )
    enabled: bool | None = Field(default=None, description="False: not synced, and its documents leave search results.")
    target_id: str | None = Field(
        default=None, description="An MCP PROFILES target: where the rows are read, with its account (required for a new source)."
    )
    table_name: str | None = Field(default=None, description="The table read: table or schema.table (required for a new source).")
    pk_column: str | None = Field(
        default=None, description="Primary key column(s), comma separated: one document per key (required for a new source)."
    )
    watermark_column: str | None = Field(
        default=None,
        description="An updated-at column the sync cursor follows (rows whose value is at or after the cursor are "
        "re-read, so edits are picked up); empty: append-only, the cursor is the primary key.",
    )
    where_sql: str | None = Field(
        default=None, description="Optional condition ANDed to every read (no ';'); rows that stop matching leave the index."
    )
    doc_map_json: dict[str, Any] | None = Field(
        default=None,
        description='Row to document: {"doc_id": {"format": "article:{id}"} (every key column), "title": {"concat": '
        '[{"col": ...} | {"lit": ...}]}, "body": {"concat": [...]} (required), "metadata": {"pick": [columns], '
        '"rename": {column: key}}, "max_doc_chars": n}.',
    )
    chunking_json: dict[str, Any] | None = Field(
        default=None,
        description='Document to chunks: {"unit": "chars" | "tokens", "chunk_size", "overlap", "min_chunk_size"} '
        "(defaults 4000/400/800 characters; about 1000/100/200 suit the local model, which reads ~1000 characters).",
    )
    embedding_json: dict[str, Any] | None = Field(
        default=None,
        description='Optional: {"input": "{title}\\n\\n{body}"} (the text embedded per chunk) and this source\'s embedding '
        "settings (provider, model, dim, api_base, api_key, batch_size, timeout_ms, max_retries, backoff_ms, "
        "intra_op_threads); the model must be the index's.",
    )
    sync_interval_s: int | None = Field(
        default=None, ge=0, le=31_536_000, description="> 0: synced in the background this often; 0: on demand only."
    )
    key_scan_interval_s: int | None = Field(
        default=None, ge=0, le=31_536_000, description="How often a sync also scans the keys for deleted rows; 0: every sync."
    )
    comment: str | None = Field(default=None, description="Free text.")


class CustomToolIn(ToolInput):
    tool_name: str = Field(min_length=1, max_length=64, description="The tool's name: [a-z][a-z0-9_]*, unique.")
    endpoint: str | None = Field(
        default=None, max_length=32, description="One of the seven endpoints or a toolset (default query)."
    )
    target_id: str | None = Field(
        default=None, max_length=64, description="The MCP PROFILES target it runs on (required for a new tool)."
    )
    description: str | None = Field(
        default=None, max_length=2000, description="What the model reads: what the tool answers, when to use it."
    )
    statement: str | None = Field(
        default=None, max_length=65_536, description="One read-only statement with :named placeholders."
    )
    parameters: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=32,
        description="Parameter specs: {name, type (string, integer, number, boolean, date, array, identifier), items, "
        "required, default, description, minimum, maximum, min_length, max_length, enum, pattern, max_items}.",
    )
    max_rows: int | None = Field(default=None, ge=1, le=1_000_000)
    timeout_ms: int | None = Field(default=None, ge=1, le=3_600_000)
    cache_ttl_ms: int | None = Field(default=None, ge=0, le=86_400_000)
    active: bool | None = None
    comment: str | None = Field(default=None, max_length=2000)


class ToolsetIn(ToolInput):
    endpoint: str = Field(min_length=1, max_length=32, description="Served at /mcp/<endpoint>; not one of the seven.")
    title: str | None = Field(default=None, max_length=200)
    instructions: str | None = Field(default=None, max_length=8000)
    builtin_tools: str | None = Field(
        default=None,
        max_length=8000,
        description="Built-in tools it serves: 'query/run_sql_readonly@target query/list_tables', space separated.",
    )
    auth_tokens: str | None = Field(
        default=None, max_length=4000, description="Write-only: its bearer token(s), comma separated."
    )
    tools_disabled: str | None = Field(default=None, max_length=4000, description="Tool names or globs it does not serve.")
    active: bool | None = None
    comment: str | None = Field(default=None, max_length=2000)


class CustomToolKeyIn(ToolInput):
    tool_name: str = Field(min_length=1, max_length=64)


class ToolsetKeyIn(ToolInput):
    endpoint: str = Field(min_length=1, max_length=32)


class TargetKeyIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)


class AuthKeyIn(ToolInput):
    auth_profile_id: str = Field(min_length=1, max_length=64)


class RuleKeyIn(ToolInput):
    rule_id: int = Field(ge=0, le=2_147_483_647)


class SourceKeyIn(ToolInput):
    name: str = Field(min_length=1, max_length=128)


class NoArgs(ToolInput):
    pass


class EditOut(ToolOutput):
    table: str
    action: str = Field(description="inserted, updated or deleted (in the memory layer).")
    row: dict[str, Any] = Field(description="The memory row now (deleted: as it was); secrets masked.")
    pending: str = Field(
        default="memory only: admin.load_to_runtime applies it, admin.save_to_disk keeps it",
        description="What is left to do for the edit to serve and to survive a restart.",
    )


class LayeredRow(ToolOutput):
    key: str
    memory: dict[str, Any] | None
    runtime: dict[str, Any] | None
    disk: dict[str, Any] | None
    pending_load: bool = Field(description="Memory differs from runtime for this row.")
    pending_save: bool = Field(description="Memory differs from disk for this row.")


class ListTargetsOut(ToolOutput):
    targets: list[LayeredRow] = Field(description="runtime carries effective, skip_reason and privilege_warnings.")
    auth_profiles: list[LayeredRow] = Field(description="Passwords appear only as password_source.")


class ListRowsOut(ToolOutput):
    rows: list[LayeredRow]


# -- the tools ------------------------------------------------------------------------------------


class ConfigEditTools:
    def __init__(self, store: ConfigStore, trail: AuditTrail) -> None:
        self.store = store
        self.trail = trail

    def _layered(self, module_name: str, table: str) -> list[LayeredRow]:
        store = self.store
        module = module_named(store, module_name)
        by_layer = rows.read_layers(store, module)[table]
        over = rows.columns(store, table)
        keys = sorted(set().union(*(set(v) for v in by_layer.values())), key=lambda k: tuple(str(p) for p in k))
        listed = []
        for key in keys:
            memory, runtime, disk = (by_layer[layer].get(key) for layer in rows.LAYERS)
            listed.append(
                LayeredRow(
                    key="/".join(str(p) for p in key),
                    memory=_shown(store, module_name, memory),
                    runtime=_shown(store, module_name, runtime),
                    disk=_shown(store, module_name, disk),
                    pending_load=rows.compare(memory, runtime, over)[0] != "same",
                    pending_save=rows.compare(memory, disk, over)[0] != "same",
                )
            )
        return listed

    def _edit(self, ctx: CallContext, module_name: str, table: str, args: ToolInput, **kw: Any) -> EditOut:
        store = self.store
        module = module_named(store, module_name)
        values = _db_values(args, json_columns=kw.pop("json_columns", ()))
        with self.trail.audited(ctx, values) as entry:
            before, after = rows.upsert(store, module, table, values, **kw)
            entry.before, entry.after = _shown(store, module_name, before), _shown(store, module_name, after)
            return EditOut(table=table, action="updated" if before else "inserted", row=entry.after or {})

    def _delete(self, ctx: CallContext, module_name: str, table: str, key: dict[str, Any]) -> EditOut:
        with self.trail.audited(ctx, key) as entry:
            deleted = rows.delete(self.store, table, key)
            entry.before = _shown(self.store, module_name, deleted)
            return EditOut(table=table, action="deleted", row=entry.before or {})

    @tool("admin.list_targets", title="List targets in every layer", read_only=True)
    def list_targets(self, args: NoArgs, ctx: CallContext) -> ListTargetsOut:
        """List target and auth profiles with their memory, runtime and disk rows side by side.

        The runtime row says whether the target serves (effective, skip_reason) and what its
        account could do beyond reading (privilege_warnings). Passwords are never shown."""
        return ListTargetsOut(
            targets=self._layered(PROFILES, "mcp_target_profiles"),
            auth_profiles=self._layered(PROFILES, "mcp_auth_profiles"),
        )

    @tool("admin.upsert_target_profile", title="Add or change a target", read_only=False, destructive=True, idempotent=True)
    def upsert_target_profile(self, args: TargetProfileIn, ctx: CallContext) -> EditOut:
        """Add a target profile or change the given fields of one, in the memory layer, validated as LOAD MCP PROFILES would.

        A protocol no engine serves is refused here, naming the field and the known protocols."""
        if args.protocol is not None and args.protocol not in PROTOCOLS:
            with self.trail.audited(ctx, _db_values(args)):
                raise InvalidArgument(
                    f"protocol: {args.protocol!r} is not a protocol the gateway serves; expected one of {', '.join(PROTOCOLS)}",
                    details={"field": "protocol", "expected": list(PROTOCOLS)},
                )
        return self._edit(ctx, PROFILES, "mcp_target_profiles", args)

    @tool("admin.delete_target_profile", title="Delete a target", read_only=False, destructive=True, idempotent=True)
    def delete_target_profile(self, args: TargetKeyIn, ctx: CallContext) -> EditOut:
        """Delete a target profile from the memory layer (the runtime serves it until the next load)."""
        return self._delete(ctx, PROFILES, "mcp_target_profiles", {"target_id": args.target_id})

    @tool("admin.upsert_auth_profile", title="Add or change credentials", read_only=False, destructive=True, idempotent=True)
    def upsert_auth_profile(self, args: AuthProfileIn, ctx: CallContext) -> EditOut:
        """Add an auth profile (database credentials) or change the given fields of one, in the memory layer.

        db_password is write-only (a literal, env:NAME or file:/path): answers and the audit
        trail show only password_source."""
        return self._edit(ctx, PROFILES, "mcp_auth_profiles", args)

    @tool("admin.delete_auth_profile", title="Delete credentials", read_only=False, destructive=True, idempotent=True)
    def delete_auth_profile(self, args: AuthKeyIn, ctx: CallContext) -> EditOut:
        """Delete an auth profile from the memory layer; refused while a target profile (in memory) still uses it."""
        users = [
            r["target_id"]
            for r in sqlite.rows(
                self.store.conn(),
                "SELECT target_id FROM main.mcp_target_profiles WHERE auth_profile_id = ?",
                (args.auth_profile_id,),
            )
        ]
        if users:
            with self.trail.audited(ctx, {"auth_profile_id": args.auth_profile_id}):
                raise InvalidArgument(
                    f"auth profile {args.auth_profile_id!r} is used by target(s) {', '.join(sorted(users))}; "
                    "point them elsewhere or delete them first"
                )
        return self._delete(ctx, PROFILES, "mcp_auth_profiles", {"auth_profile_id": args.auth_profile_id})

    @tool("admin.list_query_rules", title="List query rules in every layer", read_only=True)
    def list_query_rules(self, args: NoArgs, ctx: CallContext) -> ListRowsOut:
        """List MCP query rules with their memory, runtime and disk rows side by side, in rule_id order."""
        return ListRowsOut(rows=sorted(self._layered(RULES, "mcp_query_rules"), key=lambda r: int(r.key)))

    @tool("admin.upsert_query_rule", title="Add or change a query rule", read_only=False, destructive=True, idempotent=True)
    def upsert_query_rule(self, args: QueryRuleIn, ctx: CallContext) -> EditOut:
        """Add a query rule or change the given fields of one, in the memory layer, validated as LOAD MCP QUERY RULES would (the regex must compile)."""
        return self._edit(ctx, RULES, "mcp_query_rules", args)

    @tool("admin.delete_query_rule", title="Delete a query rule", read_only=False, destructive=True, idempotent=True)
    def delete_query_rule(self, args: RuleKeyIn, ctx: CallContext) -> EditOut:
        """Delete a query rule from the memory layer."""
        return self._delete(ctx, RULES, "mcp_query_rules", {"rule_id": args.rule_id})

    @tool("admin.list_rag_sources", title="List RAG sources in every layer", read_only=True)
    def list_rag_sources(self, args: NoArgs, ctx: CallContext) -> ListRowsOut:
        """List RAG sources with their memory, runtime and disk rows side by side (embedding API keys masked)."""
        return ListRowsOut(rows=self._layered(SOURCES, "rag_sources"))

    @tool("admin.upsert_rag_source", title="Add or change a RAG source", read_only=False, destructive=True, idempotent=True)
    def upsert_rag_source(self, args: RagSourceIn, ctx: CallContext) -> EditOut:
        """Add a RAG source (by name) or change the given fields of one, in the memory layer, validated as LOAD RAG SOURCES would."""
        json_columns = ("doc_map_json", "chunking_json", "embedding_json")
        return self._edit(ctx, SOURCES, "rag_sources", args, json_columns=json_columns, conflict=["name"])

    @tool("admin.delete_rag_source", title="Delete a RAG source", read_only=False, destructive=True, idempotent=True)
    def delete_rag_source(self, args: SourceKeyIn, ctx: CallContext) -> EditOut:
        """Delete a RAG source from the memory layer (its indexed documents stay until a sync or purge)."""
        return self._delete(ctx, SOURCES, "rag_sources", {"name": args.name})

    @tool("admin.list_custom_tools", title="List custom SQL tools and toolsets in every layer", read_only=True)
    def list_custom_tools(self, args: NoArgs, ctx: CallContext) -> ListRowsOut:
        """List admin-defined SQL tools (mcp_tools) and toolsets (mcp_endpoints, keys prefixed 'endpoint:') with their memory, runtime and disk rows side by side; toolset tokens masked."""
        toolsets = self._layered(TOOLS, "mcp_endpoints")
        for row in toolsets:
            row.key = f"endpoint:{row.key}"
        return ListRowsOut(rows=[*self._layered(TOOLS, "mcp_tools"), *toolsets])

    @tool("admin.upsert_custom_tool", title="Add or change a custom SQL tool", read_only=False, destructive=True, idempotent=True)
    def upsert_custom_tool(self, args: CustomToolIn, ctx: CallContext) -> EditOut:
        """Add a parameterised SQL tool or change the given fields of one, in the memory layer, validated as LOAD MCP TOOLS would (the statement against its target's dialect and the read-only checks, placeholders against parameters)."""
        return self._edit(ctx, TOOLS, "mcp_tools", args, json_columns=("parameters",))

    @tool("admin.delete_custom_tool", title="Delete a custom SQL tool", read_only=False, destructive=True, idempotent=True)
    def delete_custom_tool(self, args: CustomToolKeyIn, ctx: CallContext) -> EditOut:
        """Delete a custom SQL tool from the memory layer (it serves until the next LOAD MCP TOOLS)."""
        return self._delete(ctx, TOOLS, "mcp_tools", {"tool_name": args.tool_name})

    @tool("admin.upsert_toolset", title="Add or change a toolset endpoint", read_only=False, destructive=True, idempotent=True)
    def upsert_toolset(self, args: ToolsetIn, ctx: CallContext) -> EditOut:
        """Add an admin-defined endpoint (a toolset at /mcp/<endpoint> with its own token) or change the given fields of one, in the memory layer, validated as LOAD MCP TOOLS would."""
        return self._edit(ctx, TOOLS, "mcp_endpoints", args)

    @tool("admin.delete_toolset", title="Delete a toolset endpoint", read_only=False, destructive=True, idempotent=True)
    def delete_toolset(self, args: ToolsetKeyIn, ctx: CallContext) -> EditOut:
        """Delete a toolset from the memory layer; refused while a custom tool (in memory) is served on it."""
        users = [
            r["tool_name"]
            for r in sqlite.rows(self.store.conn(), "SELECT tool_name FROM main.mcp_tools WHERE endpoint = ?", (args.endpoint,))
        ]
        if users:
            with self.trail.audited(ctx, {"endpoint": args.endpoint}):
                raise InvalidArgument(
                    f"toolset {args.endpoint!r} serves custom tool(s) {', '.join(sorted(users))}; move or delete them first"
                )
        return self._delete(ctx, TOOLS, "mcp_endpoints", {"endpoint": args.endpoint})


def _shown(store: ConfigStore, module_name: str, row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row as answers and the audit trail show it: auth passwords as password_source only."""
    if row is None:
        return None
    shown = rows.mask_row(store, module_named(store, module_name), row) or {}
    if "db_password" in row:
        del shown["db_password"]
        shown["password_source"] = password_source(row["db_password"])
    if isinstance(shown.get("privilege_warnings"), str):  # runtime rows keep it as JSON text
        shown["privilege_warnings"] = json.loads(shown["privilege_warnings"])
    return shown
