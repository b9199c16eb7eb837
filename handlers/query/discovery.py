"""Schema discovery on /mcp/query: list_targets, list_schemas, list_tables, describe_table,
get_constraints. Targets are logical names; hosts, ports and credentials never leave.

Page tokens are opaque to the caller: base64 of {after: last name, scope: hash of the
request that made it}. A token altered, truncated or replayed against another target,
schema or filter is refused with INVALID_ARGUMENT rather than silently restarting.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, Field

from backends.pools import TargetPools
from backends.targets import Target, default_schema
from gateway.call import Caller
from gateway.errors import BadValue, DeadlineExceeded, GatewayError, InvalidArgument
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.query.lookup import require_schema, require_table
from handlers.query.variables import SUMMARY_THRESHOLD, variable

log = logging.getLogger("mcp_gateway.query")

NAME = Field(min_length=1, max_length=256)


class Stats(BaseModel):
    ms: int


def _ms_since(started: float) -> Stats:
    return Stats(ms=int((time.monotonic() - started) * 1000))


# -- page tokens ----------------------------------------------------------------------------


def _scope(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def encode_page_token(after: str, *scope: Any) -> str:
    payload = json.dumps({"after": after, "scope": _scope(*scope)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def decode_page_token(token: str | None, *scope: Any) -> str:
    """The `after` key of a token minted for this same request, '' for the first page."""
    if not token:
        return ""
    try:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token is not a token this server issued") from None
    if not isinstance(payload, dict) or set(payload) != {"after", "scope"} or not isinstance(payload["after"], str):
        raise InvalidArgument("page_token is not a token this server issued")
    if payload["scope"] != _scope(*scope):
        raise InvalidArgument("page_token belongs to a different request (target, schema or filter changed)")
    return payload["after"]


# -- models ---------------------------------------------------------------------------------


class TargetInfo(BaseModel):
    target_id: str
    description: str
    protocol: str
    capabilities: list[str]


class ListTargetsIn(ToolInput):
    pass


class ListTargetsOut(ToolOutput):
    targets: list[TargetInfo]
    default_target_id: str | None


class ListSchemasIn(ToolInput):
    target_id: str | None = Field(None, max_length=64, description="Target to query; omitted: the default target.")
    page_token: str | None = Field(None, max_length=4096, description="next_page_token of the previous page.")
    page_size: int = Field(100, ge=1, le=1000, description="Schemas per page.")


class ListSchemasOut(ToolOutput):
    target_id: str
    schemas: list[str]
    next_page_token: str | None
    truncated: bool = Field(description="True when more schemas follow (see next_page_token).")
    stats: Stats


class ListTablesIn(ToolInput):
    schema_: str | None = Field(
        None, alias="schema", max_length=256, description="Schema (MySQL: database); omitted: the target's default."
    )
    target_id: str | None = Field(None, max_length=64)
    name_filter: str | None = Field(
        None, max_length=256, description="Case-insensitive substring of the table name (no wildcards)."
    )
    page_token: str | None = Field(None, max_length=4096)
    page_size: int = Field(100, ge=1, le=1000)
    summarize: bool | None = Field(
        None,
        description="null: a summary instead of the list when the schema has more than mcp-query_summary_threshold tables "
        "(first page, no name_filter); false: always list; true: always summarize.",
    )


class TableInfo(BaseModel):
    name: str
    type: str  # table | view | materialized_view | foreign_table | virtual_table | sequence
    comment: str | None
    rows_estimate: int | None


class ListTablesOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    tables: list[TableInfo]
    next_page_token: str | None
    truncated: bool
    summarized: bool = Field(False, description="true: `summary` replaces the list (a big schema); see suggested_calls.")
    summary: dict[str, Any] | None = Field(None, description="total, per_type counts and the biggest tables by row estimate.")
    suggested_calls: list[dict[str, Any]] = Field(default_factory=list)
    stats: Stats


class TableIn(ToolInput):
    schema_: str | None = Field(None, alias="schema", max_length=256)
    table: str = NAME
    target_id: str | None = Field(None, max_length=64)


class ColumnInfo(BaseModel):
    name: str
    type: str
    nullable: bool
    default: str | None
    key: str | None = Field(
        description="PRI (primary key), UNI (first column of a unique key), MUL (first column of an index) or null."
    )
    comment: str | None


class DescribeTableOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    table: str
    type: str
    columns: list[ColumnInfo]
    stats: Stats


class KeyInfo(BaseModel):
    name: str | None
    columns: list[str]


class ForeignKeyInfo(BaseModel):
    name: str | None
    columns: list[str]
    referenced_schema: str | None
    referenced_table: str | None
    referenced_columns: list[str]
    on_update: str | None
    on_delete: str | None


class CheckInfo(BaseModel):
    name: str | None
    expression: str


class GetConstraintsOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    table: str
    primary_key: KeyInfo | None
    foreign_keys: list[ForeignKeyInfo]
    unique: list[KeyInfo]
    checks: list[CheckInfo]
    stats: Stats


# -- the tools ------------------------------------------------------------------------------


SUMMARY_SCAN_TABLES = 100_000  # tables read to summarize one schema
BIGGEST_TABLES = 20


def summarize_tables(tables: list[dict[str, Any]]) -> dict[str, Any]:
    per_type: dict[str, int] = {}
    for t in tables:
        per_type[t["type"]] = per_type.get(t["type"], 0) + 1
    biggest = sorted((t for t in tables if t["rows_estimate"]), key=lambda t: -t["rows_estimate"])[:BIGGEST_TABLES]
    return {
        "total": len(tables),
        "complete": len(tables) < SUMMARY_SCAN_TABLES,
        "per_type": per_type,
        "biggest_tables": [{"name": t["name"], "type": t["type"], "rows_estimate": t["rows_estimate"]} for t in biggest],
    }


def suggested_calls(target_id: str, schema: str, tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What an agent can do next instead of paging through every name."""
    where = {"target_id": target_id, "schema": schema}
    prefixes: dict[str, int] = {}
    for t in tables:
        head = t["name"].split("_")[0]
        prefixes[head] = prefixes.get(head, 0) + 1
    common = [p for p, n in sorted(prefixes.items(), key=lambda kv: -kv[1]) if n > 1][:3]
    calls: list[dict[str, Any]] = [{"tool": "list_tables", "arguments": {**where, "name_filter": p}} for p in common]
    calls.append({"tool": "catalog.search", "arguments": {"target_id": target_id, "query": "<words from names or comments>"}})
    calls.append({"tool": "discovery.run_static", "arguments": {"target_id": target_id, "schema_filter": schema}})
    if tables:
        biggest = max(tables, key=lambda t: t["rows_estimate"] or 0)
        calls.append({"tool": "table_profile", "arguments": {**where, "table": biggest["name"]}})
    calls.append({"tool": "list_tables", "arguments": {**where, "summarize": False, "page_size": 1000}})
    return calls


class CatalogReaders:
    """Catalog readers (backends.dialects) on the targets' pooled connections: how discovery,
    profiling and join tools read a target's schema."""

    def __init__(self, pools: TargetPools) -> None:
        self.pools = pools

    @contextmanager
    def open(self, target_id: str | None, tool_name: str, caller: Caller | None = None) -> Iterator[tuple[Target, Any]]:
        """A catalog reader on a pooled connection, with driver errors translated here. With an
        OAuth `caller` an mcp_identity_profiles rule maps to an account, that account reads the
        catalog: the caller sees the schemas and tables its own grants show."""
        target = self.pools.resolve(target_id)
        if not target.allow_discovery:
            raise InvalidArgument(f"discovery is disabled for target {target.target_id} (allow_discovery=0)")
        with self.pools.connection(target.target_id, caller) as (target, conn):
            try:
                yield target, target.engine.catalog(conn)
            except GatewayError:
                raise
            except target.engine.errors as exc:
                if target.engine.broken(conn):
                    raise  # the pool turns a lost connection into UNAVAILABLE
                failure = target.engine.translate(exc)
                if isinstance(failure, DeadlineExceeded):
                    raise DeadlineExceeded(f"{tool_name} exceeded the timeout_ms of target {target.target_id}") from exc
                if isinstance(failure, BadValue):
                    raise InvalidArgument(
                        f"{tool_name}: target {target.target_id} cannot look up a name with these characters (NUL, or outside its catalog's character set)"
                    ) from exc
                log.warning("%s on target %s failed: %s", tool_name, target.target_id, type(exc).__name__)
                raise GatewayError(f"{tool_name} failed on target {target.target_id} ({type(exc).__name__})") from exc


class DiscoveryTools:
    """list_targets, list_schemas, list_tables, describe_table, get_constraints: the targets'
    pools and catalog readers on them."""

    def __init__(self, pools: TargetPools, readers: CatalogReaders) -> None:
        self.pools = pools
        self.readers = readers

    @staticmethod
    def _require_schema(catalog: Any, target: Target, schema: str) -> None:
        require_schema(catalog, target.target_id, schema)  # NOT_FOUND names the closest schemas

    @staticmethod
    def _require_table(catalog: Any, target: Target, schema: str, table: str) -> str:
        return require_table(catalog, target.target_id, schema, table)  # NOT_FOUND names the closest tables

    @tool("list_targets", title="List query targets", read_only=True)
    async def list_targets(self, args: ListTargetsIn, ctx: CallContext) -> ListTargetsOut:
        """List the database targets this endpoint can query: a logical target_id, a description,
        the engine (mysql, pgsql, sqlite) and capabilities (inventory = schema discovery,
        readonly_sql, explain). explain_analyze is listed too when explain_sql may run with
        analyze=true. Pass target_id to the other tools; default_target_id is used
        when you omit it. Connection details are never shown."""
        # async: it only reads memory, and a thread hop cost ~0.12 ms of CPU per call.
        targets = [
            TargetInfo(target_id=t.target_id, description=t.description, protocol=t.protocol, capabilities=t.capabilities)
            for t in self.pools.targets()
        ]
        return ListTargetsOut(targets=targets, default_target_id=self.pools.default_target_id())

    @tool("list_schemas", title="List schemas", read_only=True)
    def list_schemas(self, args: ListSchemasIn, ctx: CallContext) -> ListSchemasOut:
        """List the schemas of a target (databases on MySQL/MariaDB; namespaces on PostgreSQL,
        without pg_* and information_schema; attached databases on SQLite), in name order,
        page_size at a time. Pass next_page_token back as page_token for the next page."""
        started = time.monotonic()
        with self.readers.open(args.target_id, "list_schemas", ctx.caller) as (target, catalog):
            scope = ("list_schemas", target.target_id)
            after = decode_page_token(args.page_token, *scope)
            names = catalog.schemas(after, args.page_size + 1)
        more = len(names) > args.page_size
        names = names[: args.page_size]
        token = encode_page_token(names[-1], *scope) if more else None
        return ListSchemasOut(
            target_id=target.target_id, schemas=names, next_page_token=token, truncated=more, stats=_ms_since(started)
        )

    @tool("list_tables", title="List tables", read_only=True)
    def list_tables(self, args: ListTablesIn, ctx: CallContext) -> ListTablesOut:
        """List the tables and views of one schema (default: the target's default schema) in name
        order, with type, comment and the engine's row estimate. name_filter keeps names
        containing that text (case-insensitive). Paged like list_schemas. A schema with more
        tables than mcp-query_summary_threshold answers the first page with a summary (counts
        per type, the biggest tables) and suggested next calls instead, summarized=true."""
        started = time.monotonic()
        threshold = variable(ctx, SUMMARY_THRESHOLD)
        with self.readers.open(args.target_id, "list_tables", ctx.caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            scope = ("list_tables", target.target_id, schema, args.name_filter or "")
            after = decode_page_token(args.page_token, *scope)
            self._require_schema(catalog, target, schema)
            wants_summary = args.summarize or (args.summarize is None and not args.page_token and not args.name_filter)
            if wants_summary:
                everything = catalog.tables(schema, "", SUMMARY_SCAN_TABLES, None)
                if args.summarize or len(everything) > threshold:
                    return ListTablesOut(
                        target_id=target.target_id, schema=schema, tables=[], next_page_token=None, truncated=True,
                        summarized=True, summary=summarize_tables(everything),
                        suggested_calls=suggested_calls(target.target_id, schema, everything), stats=_ms_since(started),
                    )  # fmt: skip
            rows = catalog.tables(schema, after, args.page_size + 1, args.name_filter)
        more = len(rows) > args.page_size
        rows = rows[: args.page_size]
        token = encode_page_token(rows[-1]["name"], *scope) if more else None
        return ListTablesOut(
            target_id=target.target_id,
            schema=schema,
            tables=[TableInfo(**r) for r in rows],
            next_page_token=token,
            truncated=more,
            stats=_ms_since(started),
        )

    @tool("describe_table", title="Describe a table", read_only=True)
    def describe_table(self, args: TableIn, ctx: CallContext) -> DescribeTableOut:
        """Describe a table or view: each column's name, declared type, nullability, default
        expression, key role (PRI/UNI/MUL) and comment, in column order. NOT_FOUND when the
        schema or table does not exist."""
        started = time.monotonic()
        with self.readers.open(args.target_id, "describe_table", ctx.caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            kind = self._require_table(catalog, target, schema, args.table)
            columns = catalog.columns(schema, args.table)
        return DescribeTableOut(
            target_id=target.target_id,
            schema=schema,
            table=args.table,
            type=kind,
            columns=[ColumnInfo(**c) for c in columns],
            stats=_ms_since(started),
        )

    @tool("get_constraints", title="Get table constraints", read_only=True)
    def get_constraints(self, args: TableIn, ctx: CallContext) -> GetConstraintsOut:
        """The constraints of a table: primary key, foreign keys (with referenced table, columns
        and ON UPDATE/ON DELETE rules), unique constraints and CHECK constraints (their
        expression as the engine reports it). Use it to find join paths between tables."""
        started = time.monotonic()
        with self.readers.open(args.target_id, "get_constraints", ctx.caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            self._require_table(catalog, target, schema, args.table)
            found = catalog.constraints(schema, args.table)
        return GetConstraintsOut(target_id=target.target_id, schema=schema, table=args.table, stats=_ms_since(started), **found)
