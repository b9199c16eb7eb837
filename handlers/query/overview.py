"""A target's schema in one call: get_schema_info (names / summary / full, automatically a summary
with suggested next calls past mcp-query_summary_threshold tables), and the reads the query
endpoint's MCP resources share with it (handlers/query/resources.py).

What a caller is shown follows the target's profile and the query rules: a target with
allow_discovery=0 shows no schema, and a table a rule blocks (`ReadOnlySql.hides_table`: a rule's
error_msg matches a plain SELECT of it) is left out of every list and is NOT_FOUND when named.
Everything is bounded: schemas read, tables per schema, tables described in full, and the JSON
bytes of one answer (mcp-query_max_response_bytes), with `truncated` when a bound cut it.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field

from backends.sql import MAX_RESPONSE_BYTES, ReadOnlySql
from backends.targets import Target
from gateway.call import CallContext
from gateway.errors import NotFound
from gateway.tools import ToolInput, ToolOutput, tool
from handlers.query.discovery import CatalogReaders, summarize_tables
from handlers.query.discovery import suggested_calls as listing_calls
from handlers.query.lookup import SCAN_NAMES, closest, require_schema
from handlers.query.variables import SUMMARY_THRESHOLD, variable

MAX_SCHEMAS = 50  # schemas one overview of a whole target covers
SCAN_TABLES = 100_000  # tables read per schema (to count and summarize)
MAX_NAMES = 5_000  # names per schema in detail=names
MAX_FULL_TABLES = 500  # tables described in detail=full
ENVELOPE_BYTES = 4096  # room kept for the rest of the answer under the byte cap


def visible_tables(
    sql: ReadOnlySql, ctx: CallContext, target: Target, catalog: Any, schema: str, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """The tables of a schema a caller may see (name order, at most `limit` read), and how many rules hid."""
    rows = catalog.tables(schema, "", limit, None)
    shown = [r for r in rows if not sql.hides_table(ctx.runtime, target, schema, r["name"])]
    return shown, len(rows) - len(shown)


def require_visible(sql: ReadOnlySql, ctx: CallContext, target: Target, catalog: Any, schema: str, table: str) -> str:
    """The table's kind; NOT_FOUND when it does not exist or a rule hides it (the same answer).
    The rules are asked about the name as given and as the catalog spells it (SQLite matches
    names without regard to case: SECRETS reads secrets), and the closest names an error
    suggests never include a hidden table."""
    kind = catalog.table_kind(schema, table)
    spelled = {t["name"] for t in catalog.tables(schema, "", 50, table) if t["name"].lower() == table.lower()}
    if any(sql.hides_table(ctx.runtime, target, schema, name) for name in {table, *spelled}):
        raise NotFound(f"table {schema}.{table} not found on target {target.target_id}", details={"closest": []})
    if kind is not None:
        return kind
    require_schema(catalog, target.target_id, schema)
    shown, _hidden = visible_tables(sql, ctx, target, catalog, schema, SCAN_NAMES)
    names = closest(table, [t["name"] for t in shown])
    nearby = f"; closest: {', '.join(names)}" if names else ""
    raise NotFound(f"table {schema}.{table} not found on target {target.target_id}{nearby}", details={"closest": names})


def full_tables(target: Target, catalog: Any, schema: str, names: list[str]) -> list[dict[str, Any]]:
    """Each named table's structure (engine.snapshot: a few statements for the whole list)."""
    found = target.engine.snapshot(catalog.conn, schema, names)
    described = []
    for name in names:
        t = found.get(name)
        if t is None:
            continue
        described.append({
            "name": t["name"], "type": t["type"], "comment": t["comment"], "rows_estimate": t["rows_estimate"],
            "columns": [
                {"name": c["name"], "type": c["type"], "nullable": c.get("nullable"), **({"comment": c["comment"]} if c.get("comment") else {})}
                for c in t["columns"]
            ],
            "primary_key": t["primary_key"], "unique": t["unique"], "foreign_keys": t["foreign_keys"],
            "indexes": t["indexes"],
        })  # fmt: skip
    return described


def _json_bytes(value: Any) -> int:
    return len(orjson.dumps(value, default=str))


# -- get_schema_info ------------------------------------------------------------------------


class SchemaInfoIn(ToolInput):
    target_id: str | None = Field(None, max_length=64, description="Target to describe; omitted: the default target.")
    schema_: str | None = Field(
        None,
        alias="schema",
        max_length=256,
        description=f"One schema; omitted: every schema of the target (at most {MAX_SCHEMAS}).",
    )
    detail: Literal["names", "summary", "full"] | None = Field(
        None,
        description="names: table names per schema; summary: counts per type and the biggest tables, with suggested next "
        "calls; full: every table's columns, keys and indexes. Omitted: full up to mcp-query_summary_threshold tables, "
        "summary past it.",
    )
    name_filter: str | None = Field(None, max_length=256, description="Only tables whose name contains this (case-insensitive).")


class SchemaInfo(BaseModel):
    schema_: str = Field(alias="schema")
    table_count: int = Field(description="Tables and views shown (the rules' hidden ones not counted).")
    names: list[str] | None = None
    summary: dict[str, Any] | None = None
    tables: list[dict[str, Any]] | None = None
    truncated: bool = False


class SchemaInfoOut(ToolOutput):
    target_id: str
    detail: str = Field(description="The detail answered (a summary when the tables passed the threshold).")
    summarized: bool = Field(description="true: detail was omitted and the tables passed mcp-query_summary_threshold.")
    schemas: list[SchemaInfo]
    table_total: int
    suggested_calls: list[dict[str, Any]] = Field(default_factory=list)
    truncated: bool = Field(description="true when a bound cut the answer (schemas, names, tables described, bytes).")
    ms: int


class OverviewTools:
    """get_schema_info: a target's catalog readers and the read-only SQL path's rules."""

    def __init__(self, readers: CatalogReaders, sql: ReadOnlySql) -> None:
        self.readers = readers
        self.sql = sql

    @tool("get_schema_info", title="Schema overview in one call", read_only=True)
    def get_schema_info(self, args: SchemaInfoIn, ctx: CallContext) -> SchemaInfoOut:
        """A target's schema in one call: detail=names (table names per schema), summary (counts
        per type, the biggest tables, suggested next calls) or full (each table's columns, primary
        and unique keys, foreign keys and indexes). Without detail it answers full for a small
        database and switches to a summary with suggested next calls past
        mcp-query_summary_threshold tables. Tables a query rule blocks are not shown. Start here
        on an unknown database, then narrow with schema and name_filter."""
        started = time.monotonic()
        threshold = variable(ctx, SUMMARY_THRESHOLD)
        byte_cap = int(variable(ctx, MAX_RESPONSE_BYTES)) - ENVELOPE_BYTES
        truncated = False
        with self.readers.open(args.target_id, "get_schema_info", ctx.caller) as (target, catalog):
            if args.schema_:
                names = [args.schema_]
                require_schema(catalog, target.target_id, args.schema_)
            else:
                names = catalog.schemas("", MAX_SCHEMAS + 1)
                truncated = len(names) > MAX_SCHEMAS
                names = names[:MAX_SCHEMAS]
            per_schema: list[tuple[str, list[dict[str, Any]]]] = []
            for schema in names:
                ctx.check_deadline()
                shown, _hidden = visible_tables(self.sql, ctx, target, catalog, schema, SCAN_TABLES)
                if args.name_filter:
                    shown = [t for t in shown if args.name_filter.lower() in t["name"].lower()]
                per_schema.append((schema, shown))
            total = sum(len(t) for _, t in per_schema)
            detail = args.detail or ("full" if total <= threshold else "summary")
            summarized = args.detail is None and detail == "summary"
            infos: list[SchemaInfo] = []
            used = 0
            described = 0
            for schema, shown in per_schema:
                info = SchemaInfo(schema=schema, table_count=len(shown))
                if detail == "names":
                    info.names = [t["name"] for t in shown[:MAX_NAMES]]
                    info.truncated = len(shown) > MAX_NAMES
                elif detail == "summary":
                    info.summary = summarize_tables(shown)
                else:
                    room = max(0, MAX_FULL_TABLES - described)
                    wanted = [t["name"] for t in shown[:room]]
                    tables = full_tables(target, catalog, schema, wanted) if wanted else []
                    kept = []
                    for t in tables:
                        size = _json_bytes(t)
                        if used + size > byte_cap:
                            break
                        used += size
                        kept.append(t)
                    described += len(kept)
                    info.tables = kept
                    info.truncated = len(kept) < len(shown)
                used += _json_bytes(info.names or info.summary or [])
                truncated |= info.truncated
                infos.append(info)
        calls = self._suggestions(target, per_schema, detail, truncated) if detail != "full" or truncated else []
        return SchemaInfoOut(
            target_id=target.target_id, detail=detail, summarized=summarized, schemas=infos, table_total=total,
            suggested_calls=calls, truncated=truncated, ms=int((time.monotonic() - started) * 1000),
        )  # fmt: skip

    @staticmethod
    def _suggestions(
        target: Target, per_schema: list[tuple[str, list[dict[str, Any]]]], detail: str, truncated: bool
    ) -> list[dict[str, Any]]:
        """The next calls: the biggest schema's listing suggestions, and a full look at a few tables."""
        if not per_schema:
            return []
        schema, tables = max(per_schema, key=lambda item: len(item[1]))
        calls = [
            {
                "tool": "get_schema_info",
                "arguments": {
                    "target_id": target.target_id,
                    "schema": schema,
                    "detail": "full",
                    "name_filter": "<part of a table name>",
                },
            }
        ]
        for t in sorted((t for t in tables if t["rows_estimate"]), key=lambda t: -t["rows_estimate"])[:3]:
            calls.append(
                {"tool": "describe_table", "arguments": {"target_id": target.target_id, "schema": schema, "table": t["name"]}}
            )
        calls += [
            c
            for c in listing_calls(target.target_id, schema, tables)
            if c["tool"] != "list_tables" or "name_filter" in c["arguments"]
        ]
        return calls[:10]
