"""What llm.query and llm.analyze learn of a target's schema: table and column names, types,
keys and comments, read through the backends' catalog readers (the same ones list_tables and
describe_table use), never row data.

Describing a table costs a catalog query, so tables are described in order of likely relevance
(names sharing words with the question first) until the context budget is spent, at most
MAX_DESCRIBED of them; prompts.schema_context then lays out what fits.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from backends.pools import TargetPools
from backends.targets import Target, default_schema
from gateway.call import CallContext
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, NotFound
from handlers.ai.prompts import CHARS_PER_TOKEN, TableInfo

log = logging.getLogger("mcp_gateway.ai")

MAX_LISTED = 1000  # tables considered per schema
MAX_DESCRIBED = 60  # tables described per call (one catalog query each)
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    found = set(_WORD.findall(text.lower()))
    return found | {w.rstrip("s") for w in found}


def schema_tables(
    pools: TargetPools, target: Target, schema: str | None, question: str, *, max_tokens: int, ctx: CallContext
) -> tuple[str, list[TableInfo], int]:
    """(the schema used, described tables, tables listed in all) of `target`."""
    if not target.allow_discovery:
        raise InvalidArgument(
            f"target {target.target_id} does not allow schema discovery (allow_discovery=0): llm.query needs it to build its context"
        )
    name = default_schema(target, schema)
    with pools.connection(target.target_id) as (target, conn):
        try:
            catalog = target.engine.catalog(conn)
            if not catalog.schema_exists(name):
                raise NotFound(f"schema {name!r} not found on target {target.target_id}")
            listed = catalog.tables(name, "", MAX_LISTED, None)
            wanted = _words(question)
            listed.sort(key=lambda t: (-len(_words(t["name"]) & wanted), t["name"]))
            budget, used, tables = max_tokens * CHARS_PER_TOKEN, 0, []
            for row in listed[:MAX_DESCRIBED]:
                ctx.check_deadline()
                columns = catalog.columns(name, row["name"])
                info = TableInfo(schema="", name=row["name"], columns=columns, comment=row.get("comment") or "")
                tables.append(info)
                used += len(info.render())
                if used > budget * 1.5:  # enough to fill the budget; the rest would be cut anyway
                    break
        except GatewayError:
            raise
        except target.engine.errors as exc:
            if isinstance(target.engine.translate(exc), DeadlineExceeded):
                raise DeadlineExceeded(f"reading the schema of target {target.target_id} timed out") from exc
            log.warning("reading the schema of target %s failed: %s", target.target_id, type(exc).__name__)
            raise GatewayError(f"reading the schema of target {target.target_id} failed ({type(exc).__name__})") from exc
    return name, tables, len(listed)


def column_names(pools: TargetPools, target: Target, schema: str, table: str) -> list[dict[str, Any]]:
    """The columns of one table (name, type, ...) for profiling; NOT_FOUND when it does not exist."""
    with pools.connection(target.target_id) as (target, conn):
        try:
            catalog = target.engine.catalog(conn)
            if catalog.table_kind(schema, table) is None:
                raise NotFound(f"table {schema}.{table} not found on target {target.target_id}")
            return catalog.columns(schema, table)
        except GatewayError:
            raise
        except target.engine.errors as exc:
            log.warning("describing %s on target %s failed: %s", table, target.target_id, type(exc).__name__)
            raise GatewayError(f"describing table {table} on target {target.target_id} failed ({type(exc).__name__})") from exc
