"""Catalog queries per engine, for the discovery tools: MySQL/MariaDB (information_schema),
PostgreSQL (pg_catalog) and SQLite (table-valued pragmas).

Every name a caller supplies (schema, table, filter, page key) is bound as a parameter,
never spliced into SQL. Paging is keyset on the name in binary order (`after`), with the
same collation in WHERE and ORDER BY so no name is skipped or repeated between pages.
Each function returns plain JSON-safe dicts; `None` from `table_kind` means "no such table".
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg
import pymysql
import pymysql.cursors
import sqlglot
from psycopg.rows import dict_row
from sqlglot import exp

MYSQL_SYSTEM_SCHEMAS = ("information_schema", "mysql", "performance_schema", "sys")
MYSQL_KINDS = {"BASE TABLE": "table", "VIEW": "view", "SYSTEM VIEW": "view", "SEQUENCE": "sequence"}
PG_KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized_view", "f": "foreign_table"}
PG_ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}
SQLITE_KINDS = {"table": "table", "view": "view", "virtual": "virtual_table"}


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


# -- MySQL / MariaDB ------------------------------------------------------------------------


class MySQLCatalog:
    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        with self.conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def schemas(self, after: str, limit: int) -> list[str]:
        rows = self._rows(
            "SELECT schema_name AS name FROM information_schema.schemata "
            "WHERE schema_name NOT IN %s AND CAST(schema_name AS BINARY) > CAST(%s AS BINARY) "
            "ORDER BY CAST(schema_name AS BINARY) LIMIT %s",
            (MYSQL_SYSTEM_SCHEMAS, after, limit),
        )
        return [r["name"] for r in rows]

    def schema_exists(self, schema: str) -> bool:
        return bool(self._rows("SELECT 1 AS found FROM information_schema.schemata WHERE schema_name = %s", (schema,)))

    def tables(self, schema: str, after: str, limit: int, name_filter: str | None) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT table_name AS name, table_type AS kind, table_comment AS comment, table_rows AS rows_estimate "
            "FROM information_schema.tables WHERE table_schema = %s "
            "AND CAST(table_name AS BINARY) > CAST(%s AS BINARY) AND table_name LIKE %s ESCAPE '!' "
            "ORDER BY CAST(table_name AS BINARY) LIMIT %s",
            (schema, after, like_substring(name_filter), limit),
        )
        return [
            {
                "name": r["name"],
                "type": MYSQL_KINDS.get(r["kind"], r["kind"].lower()),
                "comment": r["comment"] or None,
                "rows_estimate": r["rows_estimate"],
            }
            for r in rows
        ]

    def table_kind(self, schema: str, table: str) -> str | None:
        rows = self._rows(
            "SELECT table_type AS kind FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (schema, table),
        )
        return MYSQL_KINDS.get(rows[0]["kind"], rows[0]["kind"].lower()) if rows else None

    def columns(self, schema: str, table: str) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT column_name AS name, column_type AS type, is_nullable AS nullable, column_default AS dflt, "
            "column_key AS ckey, column_comment AS comment FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, table),
        )
        return [
            {
                "name": r["name"],
                "type": r["type"],
                "nullable": r["nullable"] == "YES",
                "default": None if r["dflt"] in (None, "NULL") else str(r["dflt"]),  # MariaDB spells no default 'NULL'
                "key": r["ckey"] or None,
                "comment": r["comment"] or None,
            }
            for r in rows
        ]

    def constraints(self, schema: str, table: str) -> dict[str, Any]:
        result = empty_constraints()
        keys = self._rows(
            "SELECT tc.constraint_name AS name, tc.constraint_type AS kind, k.column_name AS col, "
            "k.referenced_table_schema AS ref_schema, k.referenced_table_name AS ref_table, k.referenced_column_name AS ref_col "
            "FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k "
            "ON k.constraint_schema = tc.constraint_schema AND k.constraint_name = tc.constraint_name "
            "AND k.table_schema = tc.table_schema AND k.table_name = tc.table_name "
            "WHERE tc.table_schema = %s AND tc.table_name = %s AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY') "
            "ORDER BY tc.constraint_type, tc.constraint_name, k.ordinal_position",
            (schema, table),
        )
        rules = {
            r["name"]: r
            for r in self._rows(
                "SELECT constraint_name AS name, update_rule AS on_update, delete_rule AS on_delete "
                "FROM information_schema.referential_constraints WHERE constraint_schema = %s AND table_name = %s",
                (schema, table),
            )
        }
        grouped: dict[tuple[str, str], dict[str, Any]] = {}
        for r in keys:
            entry = grouped.setdefault((r["kind"], r["name"]), {"name": r["name"], "columns": [], "ref": [], "row": r})
            entry["columns"].append(r["col"])
            entry["ref"].append(r["ref_col"])
        for (kind, name), entry in grouped.items():
            if kind == "PRIMARY KEY":
                result["primary_key"] = {"name": name, "columns": entry["columns"]}
            elif kind == "UNIQUE":
                result["unique"].append({"name": name, "columns": entry["columns"]})
            else:
                rule = rules.get(name, {})
                result["foreign_keys"].append(
                    {
                        "name": name,
                        "columns": entry["columns"],
                        "referenced_schema": entry["row"]["ref_schema"],
                        "referenced_table": entry["row"]["ref_table"],
                        "referenced_columns": entry["ref"],
                        "on_update": rule.get("on_update"),
                        "on_delete": rule.get("on_delete"),
                    }
                )
        result["checks"] = self._checks(schema, table)
        return result

    def _checks(self, schema: str, table: str) -> list[dict[str, Any]]:
        if "mariadb" in self.conn.get_server_info().lower():
            sql = (
                "SELECT constraint_name AS name, check_clause AS expression FROM information_schema.check_constraints "
                "WHERE constraint_schema = %s AND table_name = %s ORDER BY constraint_name"
            )
        else:  # MySQL 8.0.16+: check_constraints has no table_name, table_constraints does
            sql = (
                "SELECT cc.constraint_name AS name, cc.check_clause AS expression FROM information_schema.check_constraints cc "
                "JOIN information_schema.table_constraints tc ON tc.constraint_schema = cc.constraint_schema "
                "AND tc.constraint_name = cc.constraint_name AND tc.constraint_type = 'CHECK' "
                "WHERE tc.table_schema = %s AND tc.table_name = %s ORDER BY cc.constraint_name"
            )
        try:
            return [{"name": r["name"], "expression": r["expression"]} for r in self._rows(sql, (schema, table))]
        except pymysql.err.ProgrammingError:  # a server too old to expose check constraints
            return []


# -- PostgreSQL -----------------------------------------------------------------------------


class PostgresCatalog:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    def schemas(self, after: str, limit: int) -> list[str]:
        rows = self._rows(
            "SELECT nspname::text AS name FROM pg_catalog.pg_namespace "
            "WHERE nspname !~ '^pg_' AND nspname <> 'information_schema' AND has_schema_privilege(oid, 'USAGE') "
            'AND nspname::text COLLATE "C" > %s ORDER BY nspname::text COLLATE "C" LIMIT %s',
            (after, limit),
        )
        return [r["name"] for r in rows]

    def schema_exists(self, schema: str) -> bool:
        return bool(self._rows("SELECT 1 AS found FROM pg_catalog.pg_namespace WHERE nspname = %s", (schema,)))

    def tables(self, schema: str, after: str, limit: int, name_filter: str | None) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT c.relname::text AS name, c.relkind::text AS kind, obj_description(c.oid, 'pg_class') AS comment, "
            "c.reltuples::bigint AS rows_estimate FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') "
            "AND c.relname::text COLLATE \"C\" > %s AND c.relname::text ILIKE %s ESCAPE '!' "
            'ORDER BY c.relname::text COLLATE "C" LIMIT %s',
            (schema, after, like_substring(name_filter), limit),
        )
        return [
            {
                "name": r["name"],
                "type": PG_KINDS[r["kind"]],
                "comment": r["comment"],
                "rows_estimate": r["rows_estimate"]
                if r["kind"] in "rpm" and r["rows_estimate"] >= 0
                else None,  # -1: never analysed
            }
            for r in rows
        ]

    def _relation(self, schema: str, table: str) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT c.oid::int8 AS oid, c.relkind::text AS kind FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
            (schema, table),
        )
        return rows[0] if rows else None

    def table_kind(self, schema: str, table: str) -> str | None:
        relation = self._relation(schema, table)
        return PG_KINDS[relation["kind"]] if relation else None

    def columns(self, schema: str, table: str) -> list[dict[str, Any]]:
        relation = self._relation(schema, table)
        if relation is None:
            return []
        oid = relation["oid"]
        indexes = self._rows(
            "SELECT i.indisprimary AS is_primary, i.indisunique AS is_unique, "
            "ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord) AS cols "
            "FROM pg_catalog.pg_index i WHERE i.indrelid = %s::oid",
            (oid,),
        )
        primary = {c for i in indexes if i["is_primary"] for c in i["cols"]}
        unique_first = {i["cols"][0] for i in indexes if i["is_unique"] and i["cols"]}
        index_first = {i["cols"][0] for i in indexes if i["cols"]}
        rows = self._rows(
            "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, NOT a.attnotnull AS nullable, "
            "pg_get_expr(d.adbin, d.adrelid) AS dflt, col_description(a.attrelid, a.attnum) AS comment "
            "FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %s::oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (oid,),
        )
        return [
            {
                "name": r["name"],
                "type": r["type"],
                "nullable": r["nullable"],
                "default": r["dflt"],
                "key": key_of(r["name"], primary, unique_first, index_first),
                "comment": r["comment"],
            }
            for r in rows
        ]

    def constraints(self, schema: str, table: str) -> dict[str, Any]:
        result = empty_constraints()
        relation = self._relation(schema, table)
        if relation is None:
            return result
        rows = self._rows(
            "SELECT con.conname::text AS name, con.contype::text AS kind, "
            "ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum ORDER BY k.ord) AS cols, "
            "fn.nspname::text AS ref_schema, fc.relname::text AS ref_table, "
            "ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum ORDER BY k.ord) AS ref_cols, "
            "con.confupdtype::text AS on_update, con.confdeltype::text AS on_delete, "
            "pg_get_constraintdef(con.oid) AS definition "
            "FROM pg_catalog.pg_constraint con LEFT JOIN pg_catalog.pg_class fc ON fc.oid = con.confrelid "
            "LEFT JOIN pg_catalog.pg_namespace fn ON fn.oid = fc.relnamespace "
            "WHERE con.conrelid = %s::oid AND con.contype IN ('p', 'u', 'f', 'c') ORDER BY con.contype, con.conname",
            (relation["oid"],),
        )
        for r in rows:
            if r["kind"] == "p":
                result["primary_key"] = {"name": r["name"], "columns": r["cols"]}
            elif r["kind"] == "u":
                result["unique"].append({"name": r["name"], "columns": r["cols"]})
            elif r["kind"] == "c":
                result["checks"].append({"name": r["name"], "expression": r["definition"]})
            else:
                result["foreign_keys"].append(
                    {
                        "name": r["name"],
                        "columns": r["cols"],
                        "referenced_schema": r["ref_schema"],
                        "referenced_table": r["ref_table"],
                        "referenced_columns": r["ref_cols"],
                        "on_update": PG_ACTIONS.get(r["on_update"]),
                        "on_delete": PG_ACTIONS.get(r["on_delete"]),
                    }
                )
        return result


# -- SQLite ---------------------------------------------------------------------------------


class SqliteCatalog:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        cur = self.conn.execute(sql, params)
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def schemas(self, after: str, limit: int) -> list[str]:
        rows = self._rows(
            "SELECT name FROM pragma_database_list WHERE name <> 'temp' AND name > ? ORDER BY name LIMIT ?", (after, limit)
        )
        return [r["name"] for r in rows]

    def schema_exists(self, schema: str) -> bool:
        return bool(self._rows("SELECT 1 AS found FROM pragma_database_list WHERE name = ? AND name <> 'temp'", (schema,)))

    def tables(self, schema: str, after: str, limit: int, name_filter: str | None) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT name, type FROM pragma_table_list WHERE schema = ? AND type IN ('table', 'view', 'virtual') "
            "AND name NOT LIKE 'sqlite!_%' ESCAPE '!' AND name > ? AND name LIKE ? ESCAPE '!' ORDER BY name LIMIT ?",
            (schema, after, like_substring(name_filter), limit),
        )
        return [{"name": r["name"], "type": SQLITE_KINDS[r["type"]], "comment": None, "rows_estimate": None} for r in rows]

    def table_kind(self, schema: str, table: str) -> str | None:
        rows = self._rows("SELECT type FROM pragma_table_list WHERE schema = ? AND name = ?", (schema, table))
        return SQLITE_KINDS.get(rows[0]["type"], rows[0]["type"]) if rows else None

    def _indexes(self, schema: str, table: str) -> list[dict[str, Any]]:
        indexes = self._rows('SELECT name, "unique" AS is_unique, origin FROM pragma_index_list(?, ?)', (table, schema))
        for index in indexes:
            cols = self._rows("SELECT name FROM pragma_index_info(?, ?) ORDER BY seqno", (index["name"], schema))
            index["cols"] = [c["name"] for c in cols]
        return indexes

    def _table_info(self, schema: str, table: str) -> list[dict[str, Any]]:
        return self._rows(
            'SELECT name, type, "notnull" AS not_null, dflt_value, pk FROM pragma_table_info(?, ?) ORDER BY cid', (table, schema)
        )

    def columns(self, schema: str, table: str) -> list[dict[str, Any]]:
        info = self._table_info(schema, table)
        indexes = self._indexes(schema, table)
        primary = {c["name"] for c in info if c["pk"]}
        unique_first = {i["cols"][0] for i in indexes if i["is_unique"] and i["cols"]}
        index_first = {i["cols"][0] for i in indexes if i["cols"]}
        return [
            {
                "name": c["name"],
                "type": c["type"],
                "nullable": not c["not_null"] and not c["pk"],
                "default": c["dflt_value"],
                "key": key_of(c["name"], primary, unique_first, index_first),
                "comment": None,
            }
            for c in info
        ]

    def constraints(self, schema: str, table: str) -> dict[str, Any]:
        result = empty_constraints()
        info = self._table_info(schema, table)
        pk = [c["name"] for c in sorted((c for c in info if c["pk"]), key=lambda c: c["pk"])]
        if pk:
            result["primary_key"] = {"name": None, "columns": pk}
        result["unique"] = [{"name": i["name"], "columns": i["cols"]} for i in self._indexes(schema, table) if i["origin"] == "u"]
        fks: dict[int, dict[str, Any]] = {}
        for r in self._rows(
            'SELECT id, "table" AS ref_table, "from" AS col, "to" AS ref_col, on_update, on_delete FROM pragma_foreign_key_list(?, ?) ORDER BY id, seq',
            (table, schema),
        ):
            fk = fks.setdefault(
                r["id"],
                {
                    "name": None,
                    "columns": [],
                    "referenced_schema": schema,
                    "referenced_table": r["ref_table"],
                    "referenced_columns": [],
                    "on_update": r["on_update"],
                    "on_delete": r["on_delete"],
                },
            )
            fk["columns"].append(r["col"])
            fk["referenced_columns"].append(r["ref_col"])
        for fk in fks.values():
            if any(col is None for col in fk["referenced_columns"]):  # REFERENCES parent: the parent's primary key
                parent = self._table_info(schema, fk["referenced_table"])
                fk["referenced_columns"] = [c["name"] for c in sorted((c for c in parent if c["pk"]), key=lambda c: c["pk"])]
        result["foreign_keys"] = list(fks.values())
        result["checks"] = self._checks(schema, table)
        return result

    def _checks(self, schema: str, table: str) -> list[dict[str, Any]]:
        """SQLite keeps CHECKs only in the CREATE TABLE text: parse it (sqlglot), best effort."""
        rows = self._rows("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)) if schema == "main" else []
        if not rows or not rows[0]["sql"]:
            return []
        try:
            tree = sqlglot.parse_one(rows[0]["sql"], read="sqlite")
        except sqlglot.errors.ParseError:
            return []
        checks = []
        for node in tree.find_all(exp.CheckColumnConstraint):
            name = node.parent.this.name if isinstance(node.parent, exp.Constraint) else None
            checks.append({"name": name, "expression": node.this.sql("sqlite") if node.this else ""})
        return checks


def catalog_for(protocol: str, conn: Any) -> MySQLCatalog | PostgresCatalog | SqliteCatalog:
    if protocol == "mysql":
        return MySQLCatalog(conn)
    if protocol == "pgsql":
        return PostgresCatalog(conn)
    return SqliteCatalog(conn)
