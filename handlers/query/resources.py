"""/mcp/query's MCP resources and prompts.

Resources (gateway/resources.py), per target, following its profile and the query rules:
    db://{target_id}                     the target: engine, description, capabilities, schemas
    db://{target_id}/{schema}            a schema: its tables and views (type, comment, row estimate)
    db://{target_id}/{schema}/{table}    a table: comment, columns, primary/unique/foreign keys,
                                         checks, indexes, row estimate and size
A target with allow_discovery=0 lists no schema; a table a rule blocks is not listed and is
NOT_FOUND when read. resources/list walks targets, schemas and tables until mcp-resources_list_max.

Prompts: `explore_database` (an unknown database in three calls) and, per question template
recorded with llm.question_template_add, `question_template_<id>` with its parameters as
arguments (values put into the SQL as quoted literals; the statement still takes the read-only
path when the agent runs it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from backends.pools import TargetPools
from backends.sql import ReadOnlySql
from gateway.call import CallContext
from gateway.errors import GatewayError, NotFound
from gateway.prompts import Prompt, PromptArgument
from gateway.resources import ResourceTemplate, resource, unknown
from handlers.query.catalog.access import DiscoveryCatalog
from handlers.query.discovery import CatalogReaders
from handlers.query.lookup import require_schema
from handlers.query.overview import require_visible, visible_tables

log = logging.getLogger("mcp_gateway.query")

TARGET = ResourceTemplate(
    "db://{target_id}", "target", "A query target", "A target's engine, description, capabilities and schemas."
)
SCHEMA = ResourceTemplate(
    "db://{target_id}/{schema}", "schema", "A schema", "The tables and views of one schema (type, comment, row estimate)."
)
TABLE = ResourceTemplate(
    "db://{target_id}/{schema}/{table}",
    "table",
    "A table",
    "A table's description: comment, columns, primary/unique/foreign keys, checks, indexes, row estimate and size.",
)
MAX_SCHEMAS = 200  # schemas one target resource lists
MAX_TABLES = 5_000  # tables one schema resource lists
QUESTION_PROMPTS = 100  # question templates offered as prompts (the newest)
LISTING_TTL_S = 5.0  # as tools/list's ttlMs: a new table shows within this


class QueryResources:
    """The query endpoint's resource source: the targets' pools, catalog readers and rules."""

    templates = (TARGET, SCHEMA, TABLE)

    def __init__(self, pools: TargetPools, sql: ReadOnlySql, in_thread: Callable[..., Awaitable[Any]]) -> None:
        self.pools = pools
        self.sql = sql
        self.readers = CatalogReaders(pools)
        self.in_thread = in_thread
        self._listed: tuple[tuple[Any, ...], float, tuple[list[dict[str, Any]], bool]] | None = None

    async def listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """Every page of one listing is cut from the same walk: kept LISTING_TTL_S per runtime
        (a LOAD of rules or profiles makes a new one) instead of walking every catalog per page."""
        caller = ctx.caller  # a per-user account may see other tables (mcp_identity_profiles)
        who = (caller.subject, tuple(sorted(caller.claims.items()))) if caller.admitted == "oauth" else None
        key = (ctx.runtime.version, limit, who)
        cached = self._listed
        if cached is not None and cached[0] == key and time.monotonic() - cached[1] < LISTING_TTL_S:
            return cached[2]
        listed = await self.in_thread(self._listing, ctx, limit)
        self._listed = (key, time.monotonic(), listed)
        return listed

    async def read(self, uri: str, ctx: CallContext) -> Any:
        for template, reader in ((TABLE, self._table), (SCHEMA, self._schema), (TARGET, self._target)):
            values = template.match(uri)
            if values is not None:
                return await self.in_thread(reader, ctx, *values.values())
        raise unknown(uri, self.templates)

    # -- blocking work, in the handler's threads --------------------------------------------
    def _listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        found: list[dict[str, Any]] = []
        for target in self.pools.targets():
            if len(found) >= limit:
                return found, True
            found.append(
                resource(
                    TARGET.expand(target_id=target.target_id), target.target_id, f"Target {target.target_id}", target.description
                )
            )
            if not target.allow_discovery:
                continue
            try:
                with self.readers.open(target.target_id, "resources/list", ctx.caller) as (target, catalog):
                    for schema in catalog.schemas("", MAX_SCHEMAS):
                        ctx.check_deadline()
                        if len(found) >= limit:
                            return found, True
                        found.append(
                            resource(
                                SCHEMA.expand(target_id=target.target_id, schema=schema),
                                f"{target.target_id}/{schema}",
                                f"Schema {schema} of {target.target_id}",
                            )
                        )
                        tables, _hidden = visible_tables(self.sql, ctx, target, catalog, schema, limit - len(found) + 1)
                        for t in tables:
                            if len(found) >= limit:
                                return found, True
                            uri = TABLE.expand(target_id=target.target_id, schema=schema, table=t["name"])
                            found.append(
                                resource(
                                    uri,
                                    f"{target.target_id}/{schema}/{t['name']}",
                                    f"{t['type'].replace('_', ' ').capitalize()} {schema}.{t['name']}",
                                    t["comment"] or "",
                                )
                            )
            except GatewayError as exc:  # an unreachable target is listed alone; the others still are
                log.info("resources/list: target %s not listed further (%s)", target.target_id, exc.code)
        return found, False

    def _target(self, ctx: CallContext, target_id: str) -> dict[str, Any]:
        target = self._resolve(target_id)
        out: dict[str, Any] = {
            "target_id": target.target_id, "engine": target.protocol, "description": target.description,
            "capabilities": target.capabilities, "schemas": [], "truncated": False,
        }  # fmt: skip
        if target.allow_discovery:
            with self.readers.open(target.target_id, "resources/read", ctx.caller) as (target, catalog):
                schemas = catalog.schemas("", MAX_SCHEMAS + 1)
            out["schemas"] = [
                {"schema": s, "uri": SCHEMA.expand(target_id=target.target_id, schema=s)} for s in schemas[:MAX_SCHEMAS]
            ]
            out["truncated"] = len(schemas) > MAX_SCHEMAS
        return out

    def _schema(self, ctx: CallContext, target_id: str, schema: str) -> dict[str, Any]:
        self._resolve(target_id)
        with self.readers.open(target_id, "resources/read", ctx.caller) as (target, catalog):
            require_schema(catalog, target.target_id, schema)
            tables, _hidden = visible_tables(self.sql, ctx, target, catalog, schema, MAX_TABLES + 1)
        listed = [
            {**t, "uri": TABLE.expand(target_id=target.target_id, schema=schema, table=t["name"])} for t in tables[:MAX_TABLES]
        ]
        return {"target_id": target.target_id, "schema": schema, "tables": listed, "truncated": len(tables) > MAX_TABLES}

    def _table(self, ctx: CallContext, target_id: str, schema: str, table: str) -> dict[str, Any]:
        self._resolve(target_id)
        with self.readers.open(target_id, "resources/read", ctx.caller) as (target, catalog):
            kind = require_visible(self.sql, ctx, target, catalog, schema, table)
            columns = catalog.columns(schema, table)
            constraints = catalog.constraints(schema, table)
            facts = target.engine.table_facts(catalog.conn, schema, table)
            listed = [t for t in catalog.tables(schema, "", 50, table) if t["name"] == table]
        return {
            "target_id": target.target_id, "schema": schema, "table": table, "type": kind,
            "comment": listed[0]["comment"] if listed else None,
            "rows_estimate": facts.get("rows_estimate"), "size_bytes": facts.get("size_bytes"),
            "columns": columns, **constraints, "indexes": facts.get("indexes", []),
        }  # fmt: skip

    def _resolve(self, target_id: str) -> Any:
        try:
            return self.pools.resolve(target_id)
        except GatewayError:
            raise NotFound(f"no query target {target_id!r}") from None


# -- prompts --------------------------------------------------------------------------------

EXPLORE = Prompt(
    name="explore_database",
    title="Explore an unknown database in three calls",
    description="Learn an unknown database's shape in three calls, then answer the goal with one read-only query.",
    arguments=(
        PromptArgument("target_id", "The target to explore (list_targets shows them); empty: the default target."),
        PromptArgument("goal", "What you want to find out, in plain words.", required=True),
    ),
    template=(
        "Goal: {goal}\n\n"
        'Explore the database of target "{target_id}" (empty: the default target) in three calls before querying it:\n'
        '1. get_schema_info with target_id="{target_id}" and no detail: the whole schema, or a summary with suggested '
        "next calls when it is large.\n"
        '2. get_schema_info with detail="full" and the schema plus a name_filter for the tables the goal concerns '
        "(columns, keys, foreign keys, indexes); follow suggested_calls if step 1 was summarized.\n"
        "3. sample_rows on the most relevant table to see real values.\n"
        "Then answer the goal with one run_sql_readonly statement that joins on the foreign keys you found, and say which "
        "tables and columns the answer comes from."
    ),
)


def sql_literal(value: str) -> str:
    """A value as a SQL literal: a plain number as it is, anything else single-quoted."""
    try:
        float(value)
        if value.strip() == value and value.lower() not in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return value
    except ValueError:
        pass
    return "'" + value.replace("'", "''") + "'"


def query_prompts(catalog: DiscoveryCatalog) -> list[Prompt]:
    """The built-in prompts and the recorded question templates (the newest QUESTION_PROMPTS)."""
    prompts = [EXPLORE]
    try:
        rows = catalog.memory().question_templates(QUESTION_PROMPTS)
    except Exception:  # noqa: BLE001 - an unreadable catalog must not take the built-in prompts down
        log.warning("prompts/list: the question templates could not be read", exc_info=True)
        return prompts
    for row in rows:
        parameters = [p for p in json.loads(row["parameters_json"] or "[]") if isinstance(p, str)]
        prompts.append(
            Prompt(
                name=f"question_template_{row['template_id']}",
                title=row["question"][:100],
                description=f"Answer a recorded question on target {row['target_id']}: {row['question']}"[:2000],
                arguments=tuple(
                    PromptArgument(p, f"The value of {{{p}}} in the SQL template.", required=True) for p in parameters
                ),
                template=(
                    f"Question: {row['question']}\n\nOn target {row['target_id']}, run this statement with run_sql_readonly "
                    f'(target_id="{row["target_id"]}") and answer the question from its rows:\n\n{row["sql_template"]}'
                ),
                quote=sql_literal,
                origin="question_template",
            )
        )
    return prompts
