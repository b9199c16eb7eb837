"""Find a schema, table or column a caller named, or say NOT_FOUND with the closest names that exist.

An agent that guessed `customer` when the table is `customers` should learn the right name
from the error instead of listing the schema again.
"""

from __future__ import annotations

import difflib
from typing import Any

from gateway.errors import NotFound

NEARBY = 5  # closest names named in an error
SCAN_NAMES = 5000  # names read to find the closest ones


def closest(name: str, candidates: list[str]) -> list[str]:
    lowered = {c.lower(): c for c in candidates}
    found = difflib.get_close_matches(name.lower(), list(lowered), n=NEARBY, cutoff=0.5)
    prefix = [c for c in candidates if c.lower().startswith(name.lower()[:3])] if len(name) >= 3 else []
    return list(dict.fromkeys([lowered[f] for f in found] + prefix))[:NEARBY]


def _nearby(names: list[str]) -> str:
    return f"; closest: {', '.join(names)}" if names else ""


def require_schema(catalog: Any, target_id: str, schema: str) -> None:
    if catalog.schema_exists(schema):
        return
    names = closest(schema, catalog.schemas("", SCAN_NAMES))
    raise NotFound(f"schema {schema!r} not found on target {target_id}{_nearby(names)}", details={"closest": names})


def require_table(catalog: Any, target_id: str, schema: str, table: str) -> str:
    """The table's kind (table, view, ...); NOT_FOUND naming the closest tables otherwise."""
    kind = catalog.table_kind(schema, table)
    if kind is not None:
        return kind
    require_schema(catalog, target_id, schema)
    names = closest(table, [t["name"] for t in catalog.tables(schema, "", SCAN_NAMES, None)])
    raise NotFound(f"table {schema}.{table} not found on target {target_id}{_nearby(names)}", details={"closest": names})


def require_column(columns: list[dict[str, Any]], target_id: str, schema: str, table: str, column: str) -> dict[str, Any]:
    for c in columns:
        if c["name"] == column:
            return c
    names = closest(column, [c["name"] for c in columns])
    raise NotFound(
        f"column {column!r} not found in {schema}.{table} on target {target_id}{_nearby(names)}", details={"closest": names}
    )
