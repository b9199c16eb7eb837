"""Rows of the admin tables across the three layers: read them, edit one in memory (validated
like a LOAD before the edit commits), and compare layers. Tool-free, used by the config-edit
and layer tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import apsw

from gateway import audit, sqlite
from gateway.errors import ConfigError, NotFound
from gateway.store import VARIABLES_MODULE, ConfigModule, ConfigStore
from gateway.variables import MASK

LAYERS = ("memory", "runtime", "disk")


def key_columns(store: ConfigStore, table: str) -> list[str]:
    info = sqlite.rows(store.conn(), f"PRAGMA main.table_info({table})")
    return [r["name"] for r in sorted((r for r in info if r["pk"]), key=lambda r: r["pk"])]


def columns(store: ConfigStore, table: str) -> list[str]:
    return [r["name"] for r in sqlite.rows(store.conn(), f"PRAGMA main.table_info({table})")]


def layer_tables(store: ConfigStore, module: ConfigModule) -> list[tuple[str, dict[str, str]]]:
    """(memory table, {layer: "schema.table"}) for each table of the module."""
    return [
        (table, {"memory": f"main.{table}", "runtime": f"main.{runtime}", "disk": f"disk.{table}"})
        for table, runtime in zip(module.tables, store.runtime_tables_of(module), strict=True)
    ]


def read_layers(store: ConfigStore, module: ConfigModule) -> dict[str, dict[str, dict[tuple, dict[str, Any]]]]:
    """table -> layer -> key -> row. Disk lacks variables that were never saved: at the next
    start those take their defaults, so that is what the disk layer holds for them."""
    conn = store.conn()
    result: dict[str, dict[str, dict[tuple, dict[str, Any]]]] = {}
    with sqlite.transaction(conn, "DEFERRED"):
        for table, where in layer_tables(store, module):
            keys = key_columns(store, table)
            result[table] = {
                layer: {tuple(row[k] for k in keys): row for row in sqlite.rows(conn, f"SELECT * FROM {qualified}")}
                for layer, qualified in where.items()
            }
    if module is VARIABLES_MODULE:
        disk = result["global_variables"]["disk"]
        for name, decl in store.variables.items():
            disk.setdefault((name,), {"variable_name": name, "variable_value": decl.default})
    return result


def mask_row(store: ConfigStore, module: ConfigModule, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A row as an admin may see it: secret columns and secret variables masked, secrets
    nested in JSON columns (embedding_json's api_key) masked."""
    if row is None:
        return None
    shown: dict[str, Any] = {}
    for column, value in row.items():
        if (
            column in module.secret_columns
            or column == "variable_value"
            and (decl := store.variables.get(row.get("variable_name", "")))
            and decl.secret
        ):
            shown[column] = MASK if value else value
        else:
            shown[column] = audit.mask_value(value)
    return shown


def compare(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, over: list[str]) -> tuple[str, list[str]]:
    """How layer b stands against layer a for one row: same, added (only in a), removed, changed."""
    if a is None and b is None:
        return "same", []
    if b is None:
        return "added", []
    if a is None:
        return "removed", []
    changed = [c for c in over if str(a.get(c)) != str(b.get(c))]
    return ("changed" if changed else "same"), changed


def check_memory(store: ConfigStore, module: ConfigModule) -> None:
    """Validate the module's memory rows as LOAD ... TO RUNTIME would (ConfigError if not),
    without its side effects: a module may offer a `validate` that skips connecting."""
    conn = store.conn()
    memory = {t: sqlite.rows(conn, f"SELECT * FROM main.{t}") for t in (*module.tables, *getattr(module, "reads", ()))}
    validate = getattr(module, "validate", None) or module.build
    validate(memory, store.variables)


def upsert(
    store: ConfigStore, module: ConfigModule, table: str, values: Mapping[str, Any], *, conflict: list[str] | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Insert or update one memory row (only the columns given), validate the whole module as a
    LOAD would, and commit only if it validates. Returns (row before, row after)."""
    keys = conflict or key_columns(store, table)
    missing = [k for k in keys if values.get(k) is None]
    if missing:
        raise ConfigError(f"{table}: {', '.join(missing)} is required")
    where = " AND ".join(f"{k} = ?" for k in keys)
    params = [values[k] for k in keys]
    cols = list(values)
    updates = [c for c in cols if c not in keys]
    conn = store.conn()
    with sqlite.transaction(conn):
        before = sqlite.rows(conn, f"SELECT * FROM main.{table} WHERE {where}", params)
        try:
            if not before:
                marks = ", ".join("?" for _ in cols)
                conn.execute(f"INSERT INTO main.{table} ({', '.join(cols)}) VALUES ({marks})", [values[c] for c in cols])
            elif updates:  # an UPDATE, not an upsert: a partial row must not trip NOT NULL columns
                assignments = ", ".join(f"{c} = ?" for c in updates)
                conn.execute(f"UPDATE main.{table} SET {assignments} WHERE {where}", [*(values[c] for c in updates), *params])
        except apsw.ConstraintError as exc:  # NOT NULL / UNIQUE: SQLite names table.column
            raise ConfigError(f"{table}: {exc}".replace("ConstraintError: ", "")) from None
        check_memory(store, module)  # ConfigError rolls the edit back
        after = sqlite.rows(conn, f"SELECT * FROM main.{table} WHERE {where}", params)
    return (before[0] if before else None), after[0]


def delete(store: ConfigStore, table: str, key: Mapping[str, Any]) -> dict[str, Any]:
    """Delete one memory row; NOT_FOUND when there is none. Returns the deleted row."""
    where = " AND ".join(f"{k} = ?" for k in key)
    conn = store.conn()
    with sqlite.transaction(conn):
        found = sqlite.rows(conn, f"SELECT * FROM main.{table} WHERE {where}", list(key.values()))
        if not found:
            shown = ", ".join(f"{k}={v!r}" for k, v in key.items())
            raise NotFound(f"no row {shown} in {table} (memory layer)")
        conn.execute(f"DELETE FROM main.{table} WHERE {where}", list(key.values()))
    return found[0]
