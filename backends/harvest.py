"""Read a whole schema's structure in a few catalog statements per engine: tables and views
with comments and estimates, columns, keys, foreign keys, indexes and view dependencies.

discovery.run_static stores what this returns in the catalog; suggest_joins reads it for the
tables it compares. One statement per kind of object for the whole schema or a batch of its
tables (MySQL information_schema, PostgreSQL pg_catalog), so 200 tables cost the same handful
of round trips as 2; SQLite's pragmas are per table but local. Names are bound as parameters.

`snapshot(protocol, conn, schema, tables=None)` returns {table name: Table}; `tables` limits
the statements to those names (discovery reads a big schema in batches, each statement well
inside the target's timeout).
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

import pymysql
import pymysql.cursors
import sqlglot
from psycopg.rows import dict_row
from sqlglot import exp

from backends.dialects import MYSQL_KINDS, PG_KINDS, SQLITE_KINDS

log = logging.getLogger("mcp_gateway.query")


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


def _table(name: str, kind: str, comment: str | None, rows: int | None, definition: str | None = None) -> Table:
    return Table(
        name=name, type=kind, comment=comment or None, rows_estimate=rows, definition=definition, columns=[], primary_key=[],
        unique=[], foreign_keys=[], indexes=[], depends_on=[],
    )  # fmt: skip


def snapshot(protocol: str, conn: Any, schema: str, tables: list[str] | None = None) -> dict[str, Table]:
    reader = {"mysql": _mysql, "pgsql": _pgsql, "sqlite": _sqlite}[protocol]
    found = reader(conn, schema, set(tables) if tables is not None else None)
    dialect = {"mysql": "mysql", "pgsql": "postgres", "sqlite": "sqlite"}[protocol]
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


# -- MySQL / MariaDB ------------------------------------------------------------------------


def _mysql_rows(conn: Any, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def _mysql(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
    out: dict[str, Table] = {}
    names = tuple(sorted(only)) if only is not None else None
    if names == ():
        return out

    def among(column: str) -> tuple[str, tuple[Any, ...]]:
        """The statement's filter on the tables asked for, and its parameters."""
        return (f" AND {column} IN %s", (names,)) if names is not None else ("", ())

    where, params = among("t.table_name")
    for r in _mysql_rows(
        conn,
        "SELECT t.table_name AS name, t.table_type AS kind, t.table_comment AS comment, t.table_rows AS n, v.view_definition AS def "
        "FROM information_schema.tables t LEFT JOIN information_schema.views v "
        "ON v.table_schema = t.table_schema AND v.table_name = t.table_name WHERE t.table_schema = %s" + where,
        (schema, *params),
    ):
        if only is None or r["name"] in only:
            kind = MYSQL_KINDS.get(r["kind"], str(r["kind"]).lower())
            comment = None if kind == "view" else r["comment"]  # MariaDB says 'VIEW' there
            out[r["name"]] = _table(r["name"], kind, comment, r["n"], r["def"])
    for r in _mysql_rows(
        conn,
        "SELECT table_name AS t, column_name AS name, column_type AS type, is_nullable AS nullable, column_default AS dflt, "
        "column_comment AS comment FROM information_schema.columns WHERE table_schema = %s"
        + among("table_name")[0]
        + " ORDER BY table_name, ordinal_position",
        (schema, *params),
    ):
        if r["t"] in out:
            out[r["t"]]["columns"].append(
                {
                    "name": r["name"],
                    "type": r["type"],
                    "nullable": r["nullable"] == "YES",
                    "default": None if r["dflt"] in (None, "NULL") else str(r["dflt"]),
                    "comment": r["comment"] or None,
                }
            )
    keys: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in _mysql_rows(
        conn,
        "SELECT k.table_name AS t, tc.constraint_type AS kind, tc.constraint_name AS name, k.column_name AS col, "
        "k.referenced_table_schema AS ref_schema, k.referenced_table_name AS ref_table, k.referenced_column_name AS ref_col "
        "FROM information_schema.table_constraints tc JOIN information_schema.key_column_usage k "
        "ON k.constraint_schema = tc.constraint_schema AND k.constraint_name = tc.constraint_name "
        "AND k.table_schema = tc.table_schema AND k.table_name = tc.table_name "
        "WHERE tc.table_schema = %s AND tc.constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY')"
        + among("tc.table_name")[0]
        + " ORDER BY k.table_name, tc.constraint_name, k.ordinal_position",
        (schema, *params),
    ):
        if r["t"] not in out:
            continue
        key = keys.setdefault((r["t"], r["kind"], r["name"]), {"columns": [], "ref_columns": [], "row": r})
        key["columns"].append(r["col"])
        key["ref_columns"].append(r["ref_col"])
    for (table, kind, name), key in keys.items():
        _add_key(out[table], kind, name, key["columns"], key["row"]["ref_schema"], key["row"]["ref_table"], key["ref_columns"])
    indexes: dict[tuple[str, str], dict[str, Any]] = {}
    for r in _mysql_rows(
        conn,
        "SELECT table_name AS t, index_name AS name, non_unique, column_name AS col FROM information_schema.statistics "
        "WHERE table_schema = %s" + among("table_name")[0] + " ORDER BY table_name, index_name, seq_in_index",
        (schema, *params),
    ):
        if r["t"] in out:
            index = indexes.setdefault(
                (r["t"], r["name"]),
                {"name": r["name"], "columns": [], "unique": not r["non_unique"], "primary": r["name"] == "PRIMARY"},
            )
            index["columns"].append(r["col"])
    for (table, _), index in indexes.items():
        out[table]["indexes"].append(index)
    return out


def _add_key(
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


# -- PostgreSQL -----------------------------------------------------------------------------

_PG_COLS = (
    "ARRAY(SELECT a.attname::text FROM unnest({keys}) WITH ORDINALITY k(attnum, ord) "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.attnum ORDER BY k.ord)"
)


def _pg_rows(conn: Any, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _pgsql(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
    out: dict[str, Table] = {}
    oids: dict[int, str] = {}
    for r in _pg_rows(
        conn,
        "SELECT c.oid::int8 AS oid, c.relname::text AS name, c.relkind::text AS kind, obj_description(c.oid, 'pg_class') AS comment, "
        "c.reltuples::bigint AS n, CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END AS def "
        "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f')"
        + (" AND c.relname = ANY(%s)" if only is not None else ""),
        (schema, *([sorted(only)] if only is not None else [])),
    ):
        if only is None or r["name"] in only:
            rows = r["n"] if r["kind"] in "rpm" and r["n"] >= 0 else None
            out[r["name"]] = _table(r["name"], PG_KINDS[r["kind"]], r["comment"], rows, r["def"])
            oids[r["oid"]] = r["name"]
    if not out:
        return out
    oid_list = list(oids)
    for r in _pg_rows(
        conn,
        "SELECT a.attrelid::int8 AS rel, a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, "
        "NOT a.attnotnull AS nullable, pg_get_expr(d.adbin, d.adrelid) AS dflt, col_description(a.attrelid, a.attnum) AS comment "
        "FROM pg_catalog.pg_attribute a LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        "WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attrelid, a.attnum",
        (oid_list,),
    ):
        out[oids[r["rel"]]]["columns"].append(
            {"name": r["name"], "type": r["type"], "nullable": r["nullable"], "default": r["dflt"], "comment": r["comment"]}
        )
    for r in _pg_rows(
        conn,
        "SELECT con.conrelid::int8 AS rel, con.conname::text AS name, con.contype::text AS kind, "
        + _PG_COLS.format(keys="con.conkey", rel="con.conrelid")
        + " AS cols, fn.nspname::text AS ref_schema, fc.relname::text AS ref_table, "
        + _PG_COLS.format(keys="con.confkey", rel="con.confrelid")
        + " AS ref_cols FROM pg_catalog.pg_constraint con LEFT JOIN pg_catalog.pg_class fc ON fc.oid = con.confrelid "
        "LEFT JOIN pg_catalog.pg_namespace fn ON fn.oid = fc.relnamespace "
        "WHERE con.conrelid = ANY(%s::oid[]) AND con.contype IN ('p', 'u', 'f') ORDER BY con.conrelid, con.conname",
        (oid_list,),
    ):
        _add_key(out[oids[r["rel"]]], r["kind"], r["name"], r["cols"], r["ref_schema"], r["ref_table"], r["ref_cols"])
    for r in _pg_rows(
        conn,
        "SELECT i.indrelid::int8 AS rel, ic.relname::text AS name, i.indisunique AS is_unique, i.indisprimary AS is_primary, "
        + _PG_COLS.format(keys="i.indkey::int2[]", rel="i.indrelid")
        + " AS cols FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid "
        "WHERE i.indrelid = ANY(%s::oid[]) ORDER BY i.indrelid, ic.relname",
        (oid_list,),
    ):
        out[oids[r["rel"]]]["indexes"].append(
            {"name": r["name"], "columns": r["cols"], "unique": r["is_unique"], "primary": r["is_primary"]}
        )
    for r in _pg_rows(
        conn,
        "SELECT view_name::text AS v, table_schema::text AS s, table_name::text AS t FROM information_schema.view_table_usage "
        "WHERE view_schema = %s ORDER BY 1, 2, 3",
        (schema,),
    ):
        if r["v"] in out:
            out[r["v"]]["depends_on"].append([r["s"], r["t"]])
    return out


# -- SQLite ---------------------------------------------------------------------------------


def _sqlite(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
    out: dict[str, Table] = {}
    listed = conn.execute(
        "SELECT t.name, t.type, s.sql FROM pragma_table_list t LEFT JOIN sqlite_schema s ON s.name = t.name AND t.schema = 'main' "
        "WHERE t.schema = ? AND t.type IN ('table', 'view', 'virtual') AND t.name NOT LIKE 'sqlite!_%' ESCAPE '!'",
        (schema,),
    ).fetchall()
    for name, kind, sql in listed:
        if only is not None and name not in only:
            continue
        table = _table(name, SQLITE_KINDS.get(kind, kind), None, None, sql if kind == "view" else None)
        info = conn.execute(
            'SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?, ?) ORDER BY cid', (name, schema)
        ).fetchall()
        table["columns"] = [
            {"name": c[0], "type": c[1], "nullable": not c[2] and not c[4], "default": c[3], "comment": None} for c in info
        ]
        table["primary_key"] = [c[0] for c in sorted((c for c in info if c[4]), key=lambda c: c[4])]
        for index_name, unique, origin in conn.execute(
            'SELECT name, "unique", origin FROM pragma_index_list(?, ?)', (name, schema)
        ).fetchall():
            cols = [r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?, ?) ORDER BY seqno", (index_name, schema))]
            table["indexes"].append({"name": index_name, "columns": cols, "unique": bool(unique), "primary": origin == "pk"})
            if origin == "u":
                table["unique"].append(cols)
        fks: dict[int, dict[str, Any]] = {}
        for fk_id, ref_table, col, ref_col in conn.execute(
            'SELECT id, "table", "from", "to" FROM pragma_foreign_key_list(?, ?) ORDER BY id, seq', (name, schema)
        ).fetchall():
            fk = fks.setdefault(
                fk_id,
                {
                    "name": None,
                    "columns": [],
                    "referenced_schema": schema,
                    "referenced_table": ref_table,
                    "referenced_columns": [],
                },
            )
            fk["columns"].append(col)
            fk["referenced_columns"].append(ref_col)
        table["foreign_keys"] = list(fks.values())
        out[name] = table
    for table in out.values():  # REFERENCES parent without columns: the parent's primary key
        for fk in table["foreign_keys"]:
            if any(c is None for c in fk["referenced_columns"]):
                parent = out.get(fk["referenced_table"])
                fk["referenced_columns"] = list(parent["primary_key"]) if parent else []
    return out
