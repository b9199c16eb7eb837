"""Engine-neutral pieces of the catalog readers (each engine's `catalog()` and `snapshot()`).

Every name a caller supplies (schema, table, filter, page key) is bound as a parameter, never
spliced into SQL; catalog readers return plain JSON-safe dicts, `None` from `table_kind`
meaning "no such table". `Table` is one table of a schema snapshot (discovery.run_static
stores it in the catalog; suggest_joins reads it).
"""

from __future__ import annotations

from typing import Any, TypedDict

import sqlglot
from sqlglot import exp


def like_substring(text: str | None) -> str:
    """A case-insensitive substring filter as a LIKE pattern with '!' as the escape character."""
    escaped = (text or "").replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return f"%{escaped}%"


def key_of(column: str, primary: set[str], unique_first: set[str], index_first: set[str]) -> str | None:
    """MySQL's COLUMN_KEY vocabulary for every engine: PRI, UNI, MUL or None."""
    if column in primary:
        return "PRI"
    if column in unique_first:
        return "UNI"
    if column in index_first:
        return "MUL"
    return None


def empty_constraints() -> dict[str, Any]:
    return {"primary_key": None, "foreign_keys": [], "unique": [], "checks": []}


class Table(TypedDict):
    name: str
    type: str
    comment: str | None
    rows_estimate: int | None
    definition: str | None  # views
    columns: list[dict[str, Any]]  # name, type, nullable, default, comment
    primary_key: list[str]
    unique: list[list[str]]
    foreign_keys: list[dict[str, Any]]  # name, columns, referenced_schema, referenced_table, referenced_columns
    indexes: list[dict[str, Any]]  # name, columns, unique, primary
    depends_on: list[list[str]]  # views: [schema, table] read by the view


def new_table(name: str, kind: str, comment: str | None, rows: int | None, definition: str | None = None) -> Table:
    return Table(
        name=name, type=kind, comment=comment or None, rows_estimate=rows, definition=definition, columns=[], primary_key=[],
        unique=[], foreign_keys=[], indexes=[], depends_on=[],
    )  # fmt: skip


def add_key(
    table: Table,
    kind: str,
    name: str | None,
    columns: list[str],
    ref_schema: str | None,
    ref_table: str | None,
    ref_columns: list[Any],
) -> None:
    if kind in ("PRIMARY KEY", "p"):
        table["primary_key"] = columns
    elif kind in ("UNIQUE", "u"):
        table["unique"].append(columns)
    else:
        table["foreign_keys"].append(
            {
                "name": name,
                "columns": columns,
                "referenced_schema": ref_schema,
                "referenced_table": ref_table,
                "referenced_columns": ref_columns,
            }
        )


def with_view_dependencies(found: dict[str, Table], dialect: str, schema: str) -> dict[str, Table]:
    """Fill depends_on of the views whose engine did not say, from their SQL."""
    for table in found.values():
        if table["definition"] and not table["depends_on"]:
            table["depends_on"] = view_dependencies(table["definition"], dialect, schema)
    return found


def view_dependencies(definition: str, dialect: str, schema: str) -> list[list[str]]:
    """The tables a view reads, from its SQL (CTE names excluded); [] when it does not parse."""
    try:
        tree = sqlglot.parse_one(definition, read=dialect)
    except Exception:  # noqa: BLE001 - a definition sqlglot cannot read: no dependencies, not a failure
        return []
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    found = {(t.db or schema, t.name) for t in tree.find_all(exp.Table) if t.name and t.name not in ctes}
    return [list(pair) for pair in sorted(found)]
