"""What the engine already knows about one table, read from its catalog: the row estimate,
the size on disk and the indexes. Names are bound as parameters, as in dialects.py.

`facts(protocol, conn, schema, table)` returns {rows_estimate, size_bytes, indexes}; each
index is {name, columns, unique, primary, method}. A number the engine does not keep is None.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

import pymysql
import pymysql.cursors
from psycopg.rows import dict_row


def facts(protocol: str, conn: Any, schema: str, table: str) -> dict[str, Any]:
    reader = {"mysql": _mysql, "pgsql": _pgsql, "sqlite": _sqlite}[protocol]
    return reader(conn, schema, table)


def _mysql(conn: Any, schema: str, table: str) -> dict[str, Any]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(
            "SELECT table_rows AS n, data_length + index_length AS size FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = %s",
            (schema, table),
        )
        row = cur.fetchone() or {}
        cur.execute(
            "SELECT index_name AS name, non_unique, column_name AS col, index_type AS method "
            "FROM information_schema.statistics WHERE table_schema = %s AND table_name = %s "
            "ORDER BY index_name, seq_in_index",
            (schema, table),
        )
        indexes: dict[str, dict[str, Any]] = {}
        for r in cur.fetchall():
            index = indexes.setdefault(
                r["name"],
                {
                    "name": r["name"],
                    "columns": [],
                    "unique": not r["non_unique"],
                    "primary": r["name"] == "PRIMARY",
                    "method": (r["method"] or "").lower() or None,
                },
            )
            index["columns"].append(r["col"])
    return {
        "rows_estimate": int(row["n"]) if row.get("n") is not None else None,
        "size_bytes": int(row["size"]) if row.get("size") is not None else None,
        "indexes": list(indexes.values()),
    }


def _pgsql(conn: Any, schema: str, table: str) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "SELECT c.oid::int8 AS oid, c.reltuples::bigint AS n, pg_total_relation_size(c.oid) AS size "
            "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace ns ON ns.oid = c.relnamespace "
            "WHERE ns.nspname = %s AND c.relname = %s",
            (schema, table),
        )
        row = cur.fetchone()
        if row is None:
            return {"rows_estimate": None, "size_bytes": None, "indexes": []}
        cur.execute(
            "SELECT ic.relname::text AS name, i.indisunique AS is_unique, i.indisprimary AS is_primary, am.amname::text AS method, "
            "ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord) "
            "JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord) AS cols "
            "FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid "
            "JOIN pg_catalog.pg_am am ON am.oid = ic.relam WHERE i.indrelid = %s::oid ORDER BY ic.relname",
            (row["oid"],),
        )
        indexes = [
            {"name": r["name"], "columns": r["cols"], "unique": r["is_unique"], "primary": r["is_primary"], "method": r["method"]}
            for r in cur.fetchall()
        ]
    return {
        "rows_estimate": row["n"] if row["n"] >= 0 else None,
        "size_bytes": row["size"],
        "indexes": indexes,
    }  # -1: never analysed


def _sqlite(conn: sqlite3.Connection, schema: str, table: str) -> dict[str, Any]:
    indexes = []
    for name, unique, origin in conn.execute('SELECT name, "unique", origin FROM pragma_index_list(?, ?)', (table, schema)):
        cols = [r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?, ?) ORDER BY seqno", (name, schema))]
        indexes.append({"name": name, "columns": cols, "unique": bool(unique), "primary": origin == "pk", "method": "btree"})
    pk = [r[0] for r in conn.execute("SELECT name FROM pragma_table_info(?, ?) WHERE pk > 0 ORDER BY pk", (table, schema))]
    if pk and not any(i["primary"] for i in indexes):  # INTEGER PRIMARY KEY: the rowid itself, no separate index
        indexes.insert(0, {"name": None, "columns": pk, "unique": True, "primary": True, "method": "rowid"})
    size = None
    with contextlib.suppress(sqlite3.Error):  # only when SQLite was built with the dbstat table
        size = conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE schema = ? AND name = ?", (schema, table)).fetchone()[0]
    estimate = None
    try:  # ANALYZE's figure, when someone ran it: 'rows avg-per-key ...'
        found = conn.execute(f"SELECT stat FROM {_quote(schema)}.sqlite_stat1 WHERE tbl = ? AND idx IS NULL", (table,)).fetchone()
        if found is None:
            found = conn.execute(f"SELECT stat FROM {_quote(schema)}.sqlite_stat1 WHERE tbl = ? LIMIT 1", (table,)).fetchone()
        estimate = int(found[0].split()[0]) if found else None
    except (sqlite3.Error, ValueError):
        pass
    return {"rows_estimate": estimate, "size_bytes": size, "indexes": indexes}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def rowid_table(conn: sqlite3.Connection, schema: str, table: str) -> bool:
    """Whether a SQLite table has a rowid (not WITHOUT ROWID, not a view)."""
    row = conn.execute("SELECT type, wr FROM pragma_table_list WHERE schema = ? AND name = ?", (schema, table)).fetchone()
    return bool(row) and row[0] == "table" and not row[1]
