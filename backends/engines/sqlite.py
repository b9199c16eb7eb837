"""SQLite: the `ENGINE` object and everything the gateway knows of it (the stdlib's sqlite3).

A target is a local file, opened read-only (`file:...?mode=ro` and PRAGMA query_only). SQLite
has no statement timeout: the pool's connections carry a deadline (`SqliteConnection`) that a
progress handler polls, armed as a connection is borrowed and cleared as it comes back. A
statement runs inside BEGIN ... ROLLBACK.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp

from backends.engines.admin import TargetAdmin, not_supported
from backends.engines.base import ReadOnlyRules, TargetSettings, collect, no_settings_scope, readonly_execute
from backends.engines.catalog import Table, empty_constraints, key_of, like_substring, new_table, with_view_dependencies
from backends.engines.plans import FullScan
from backends.engines.profiling import Profiling
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, NotFound

KINDS = {"table": "table", "view": "view", "virtual": "virtual_table"}
_TYPES = {int: "integer", float: "real", str: "text", dict: "blob"}  # of encoded values

# -- the read-only check's part (backends/readonly.py) ------------------------------------------

READONLY = ReadOnlyRules(
    dialect="sqlite",
    # extensions and the fileio / zipfile helpers of the sqlite3 shell
    denied_functions=frozenset(
        {
            "load_extension",
            "readfile",
            "writefile",
            "edit",
            "fsdir",
            "zipfile",
            "sqlar_compress",
            "sqlar_uncompress",
            "fts3_tokenizer",
            "lsmode",
        }
    ),  # fmt: skip
    denied_prefixes=("sqlar_",),
    explain_query_plan=True,
)

# -- driver errors: the one table of what sqlite3's exceptions mean for the gateway --------------


def translate(exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
    """sqlite3's exception -> the gateway's, by its text (sqlite3 has no error codes before 3.11):

    "interrupted" (the progress handler's deadline)   DeadlineExceeded
    "readonly" / "read-only"                          InvalidArgument (a write was refused)
    "no such table"                                   NotFound naming it
    any other                                         InvalidArgument naming it (a local file: no secrets in it)
    """
    if not isinstance(exc, sqlite3.Error):
        return GatewayError(f"the database call failed ({type(exc).__name__})")
    text = str(exc)
    if "interrupted" in text:
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was interrupted")
    if "readonly" in text or "read-only" in text:
        return InvalidArgument("the database refused to write: the connection is read-only")
    if text.startswith("no such table"):
        return NotFound(f"the database rejected the statement: {text}")
    return InvalidArgument(f"the database rejected the statement: {text}")


# -- connections ---------------------------------------------------------------------------------


class SqliteConnection(sqlite3.Connection):
    """Carries a deadline the progress handler enforces (sqlite has no statement timeout)."""

    deadline: float = math.inf
    file_id: tuple[int, int] = (0, 0)


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def _connect(target: TargetSettings, *, timeout_s: float) -> SqliteConnection:
    path = os.path.abspath(target.database)
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False, factory=SqliteConnection)
    assert isinstance(conn, SqliteConnection)
    conn.file_id = _file_id(path)
    conn.execute("PRAGMA query_only = ON")
    conn.set_progress_handler(lambda: int(time.monotonic() > conn.deadline), 10_000)
    return conn


def _ping(conn: SqliteConnection, path: str) -> None:
    if _file_id(os.path.abspath(path)) != conn.file_id:  # the file was replaced: reopen
        raise OSError("sqlite file replaced")
    conn.execute("SELECT 1").fetchall()


# -- RAG source reader (retrieval ingestion) ------------------------------------------------------

# A file has no connect timeout: how long a read waits on a writer's lock (gateway/sqlite.py's).
SOURCE_BUSY_TIMEOUT_S = 10.0


class SqliteSourceSession:
    """A sync's session on a source file (backends/retrieval/ingest/sources.py SourceSession):
    rows through a lazily stepped statement, so memory stays bounded by the batch."""

    def __init__(self, conn: SqliteConnection) -> None:
        self.conn = conn

    def scalar(self, sql: str, params: list[Any]) -> Any:
        return self.conn.execute(sql, params).fetchall()[0][0]

    def stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        cur = self.conn.execute(sql, params)
        names: list[str] = []
        batch: list[tuple] = []
        for row in cur:
            if not names:
                names = [d[0] for d in cur.description]
            batch.append(row)
            if len(batch) >= batch_rows:
                yield names, batch
                batch = []
        if batch:
            yield names, batch

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def _source_session(target: TargetSettings, *, connect_timeout_s: float) -> SqliteSourceSession:
    # The engine's read-only connection; its deadline is never armed (no pool borrows it), so a
    # sync reads for as long as the table takes.
    conn = _connect(target, timeout_s=SOURCE_BUSY_TIMEOUT_S)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # a file that is not a database fails here
    except BaseException:
        conn.close()
        raise
    return SqliteSourceSession(conn)


# -- read-only execution ---------------------------------------------------------------------------


def _sqlite_value(value: Any) -> Any:
    """A bound value as sqlite3 takes it without its deprecated adapters: dates as ISO 8601 text."""
    return value.isoformat() if isinstance(value, (datetime.date, datetime.datetime)) else value


def _run_sqlite(
    conn: sqlite3.Connection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    params: Sequence[Any] | None = None,
) -> tuple:
    if schema not in (None, "", "main"):
        raise InvalidArgument("a SQLite target has one schema, 'main'")
    deadline = time.monotonic() + timeout_ms / 1000
    own_handler = not hasattr(conn, "deadline")  # the pool's connections carry one
    previous = getattr(conn, "deadline", math.inf)
    if own_handler:
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    else:
        conn.deadline = min(previous, deadline)
    try:
        conn.execute("PRAGMA query_only = ON")
        if not conn.in_transaction:
            conn.execute("BEGIN")
        # sqlite3 refuses a second statement in execute(); bound values (dates as ISO text) go with ? placeholders
        cur = conn.execute(sql) if params is None else conn.execute(sql, [_sqlite_value(v) for v in params])
        if cur.description is None:
            return [], [], None, 2
        rows, reason, size = collect(cur, max_rows=max_rows, max_bytes=max_bytes)
        columns = [{"name": d[0], "type": ""} for d in cur.description]
        for i, column in enumerate(columns):
            sample = next((r[i] for r in rows if r[i] is not None), None)
            column["type"] = _TYPES.get(type(sample), "")
        cur.close()
        return columns, rows, reason, size
    except sqlite3.Error as exc:
        raise translate(exc, timeout_ms=timeout_ms) from exc
    finally:
        conn.rollback()
        if own_handler:
            conn.set_progress_handler(None, 0)
        else:
            conn.deadline = previous


# -- plans and index advice (handlers/ai) --------------------------------------------------------

# "SCAN t", "SCAN TABLE t AS a" (older SQLite); "SCAN t USING [COVERING] INDEX i" is no full scan.
_FULL_SCAN = re.compile(r"^SCAN (?:TABLE )?(?P<table>\S+)(?: AS (?P<alias>\S+))?(?! USING)", re.I)


def _full_scans(plan: Any) -> list[FullScan]:
    """Tables EXPLAIN QUERY PLAN's rows (plan_of's dicts) read whole: SCAN without an index; no estimates."""
    found: list[FullScan] = []
    for row in plan if isinstance(plan, list) else []:
        detail = str(row.get("detail", "")) if isinstance(row, dict) else str(row)
        match = _FULL_SCAN.match(detail)
        if match and "USING" not in detail.upper():
            found.append(FullScan(match["table"], match["alias"] or match["table"], None))
    return found


# -- catalogs ------------------------------------------------------------------------------------


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
        return [{"name": r["name"], "type": KINDS[r["type"]], "comment": None, "rows_estimate": None} for r in rows]

    def table_kind(self, schema: str, table: str) -> str | None:
        rows = self._rows("SELECT type FROM pragma_table_list WHERE schema = ? AND name = ?", (schema, table))
        return KINDS.get(rows[0]["type"], rows[0]["type"]) if rows else None

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


def _table_facts(conn: sqlite3.Connection, schema: str, table: str) -> dict[str, Any]:
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


def _has_rowid(conn: sqlite3.Connection, schema: str, table: str) -> bool:
    """Whether a SQLite table has a rowid (not WITHOUT ROWID, not a view)."""
    row = conn.execute("SELECT type, wr FROM pragma_table_list WHERE schema = ? AND name = ?", (schema, table)).fetchone()
    return bool(row) and row[0] == "table" and not row[1]


def _snapshot(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
    out: dict[str, Table] = {}
    listed = conn.execute(
        "SELECT t.name, t.type, s.sql FROM pragma_table_list t LEFT JOIN sqlite_schema s ON s.name = t.name AND t.schema = 'main' "
        "WHERE t.schema = ? AND t.type IN ('table', 'view', 'virtual') AND t.name NOT LIKE 'sqlite!_%' ESCAPE '!'",
        (schema,),
    ).fetchall()
    for name, kind, sql in listed:
        if only is not None and name not in only:
            continue
        table = new_table(name, KINDS.get(kind, kind), None, None, sql if kind == "view" else None)
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


# -- profiling (handlers/query) ------------------------------------------------------------------


def _type_family(declared: str) -> str:
    """SQLite's affinity rules, with dates, booleans and JSON told apart by their declared names."""
    t = (declared or "").lower().strip()
    if "bool" in t:
        return "boolean"
    if "int" in t:
        return "integer"
    if "date" in t or "time" in t:
        return "temporal"
    if "json" in t:
        return "json"
    if any(word in t for word in ("char", "clob", "text")):
        return "string"
    if "blob" in t:
        return "binary"
    if not t:
        return "other"
    if any(word in t for word in ("real", "floa", "doub", "num", "dec")):
        return "decimal"
    return "other"


PROFILING = Profiling(
    exact_count_max_rows=5_000_000,
    epoch="(JULIANDAY({}) - 2440587.5) * 86400.0",
    implicit_key="rowid",
    untyped_columns=True,  # a column may be declared without a type
    type_family=_type_family,
)


# -- least privilege (backends/privileges.py) -----------------------------------------------------


def _privilege_warnings(conn: Any) -> list[str]:
    # Rewrite user_version with its own value inside a transaction we roll back: the write is
    # refused on a read-only (mode=ro or query_only) connection and never persists otherwise.
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    try:
        if not conn.in_transaction:
            conn.execute("BEGIN")
        conn.execute(f"PRAGMA user_version = {int(version)}")
    except Exception:  # noqa: BLE001 - sqlite3 raises OperationalError: read-only, as wanted
        return []
    finally:
        conn.rollback()
    return ["the SQLite file is opened writable (expected mode=ro)"]


# -- vector columns (similarity_search) ----------------------------------------------------------
# sqlite-vec's vec0 tables need the extension loaded into the connection; this engine's driver is
# Python's sqlite3, which (here, as in many builds) is compiled without extension loading. Until
# the engine can load it, similarity_search says so instead of pretending the tables are absent.
VECTOR_SEARCH_REFUSAL = (
    "this gateway's SQLite engine cannot load sqlite-vec (Python's sqlite3 is built without extension "
    "loading), so vec0 tables cannot be searched; similarity_search runs on PostgreSQL targets with pgvector"
    if not hasattr(sqlite3.Connection, "enable_load_extension")
    else "similarity_search over sqlite-vec (vec0) tables is not implemented yet; it runs on PostgreSQL targets with pgvector"
)


# -- the engine --------------------------------------------------------------------------------------


class SQLite:
    name = "sqlite"
    title = "SQLite"
    default_port = 0
    needs_auth_profile = False  # a local file: no credentials
    dialect = "sqlite"
    readonly = READONLY
    placeholder = "?"
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    vector_search = None
    vector_search_refusal = VECTOR_SEARCH_REFUSAL  # similarity_search (see its section)

    quote = staticmethod(_quote)

    @staticmethod
    def config_problem(row: Mapping[str, Any]) -> str:
        path = str(row.get("database") or "")
        if not path:
            return "sqlite path is empty"
        if not os.path.isfile(path):
            return "sqlite file missing"
        if not os.access(path, os.R_OK):
            return "sqlite file not readable"
        return ""

    @staticmethod
    def default_schema(target: TargetSettings) -> str:
        return "main"

    # -- connections and the pool policy
    @staticmethod
    def connect(target: TargetSettings, *, timeout_s: float, io_timeout_s: float) -> SqliteConnection:
        return _connect(target, timeout_s=timeout_s)

    @staticmethod
    def ping(conn: SqliteConnection, target: TargetSettings, *, timeout_s: float) -> None:
        _ping(conn, target.database)

    @staticmethod
    def broken(conn: sqlite3.Connection) -> bool:
        return False  # a local file does not drop the connection

    @staticmethod
    def needs_rollback(conn: sqlite3.Connection) -> bool:
        return bool(conn.in_transaction)

    @staticmethod
    def borrowed(conn: SqliteConnection, target: TargetSettings) -> None:
        conn.deadline = time.monotonic() + target.timeout_ms / 1000

    @staticmethod
    def returned(conn: SqliteConnection) -> None:
        conn.deadline = math.inf

    # -- read-only execution
    execute = staticmethod(readonly_execute(_run_sqlite))

    local_settings = False

    @staticmethod
    def executes_on_loop(target: TargetSettings) -> bool:
        return False  # execute waits inside the driver: it runs in a worker thread

    @staticmethod
    def session_id(conn: Any) -> int | None:
        return None  # an embedded database: no server-side session to name

    settings_scope = staticmethod(no_settings_scope)

    @staticmethod
    def bound_placeholder(position: int) -> str:
        return "?"

    @staticmethod
    def explain_prefix(conn: sqlite3.Connection, *, analyze: bool) -> str:
        return "EXPLAIN QUERY PLAN "

    @staticmethod
    def plan_of(out: dict[str, Any]) -> Any:
        """EXPLAIN QUERY PLAN's rows, as dicts."""
        rows = out["rows"]
        if not rows:
            return None
        names = [c["name"] for c in out["columns"]]
        return [dict(zip(names, row)) for row in rows]

    translate = staticmethod(translate)

    # -- catalogs
    @staticmethod
    def catalog(conn: sqlite3.Connection) -> SqliteCatalog:
        return SqliteCatalog(conn)

    table_facts = staticmethod(_table_facts)
    has_rowid = staticmethod(_has_rowid)

    @staticmethod
    def snapshot(conn: sqlite3.Connection, schema: str, tables: list[str] | None = None) -> dict[str, Table]:
        found = _snapshot(conn, schema, set(tables) if tables is not None else None)
        return with_view_dependencies(found, "sqlite", schema)

    privilege_warnings = staticmethod(_privilege_warnings)

    # -- profiling SQL (handlers/query) --
    profiling = PROFILING
    explain_analyze = False  # EXPLAIN QUERY PLAN only
    database_is_schema = False  # the file is schema "main"

    # -- accounts, processes, kill (handlers/admin) --
    def admin(self, target: TargetSettings) -> TargetAdmin:
        raise not_supported(target.target_id, self.title, self.name)  # a local file: no accounts, no other sessions

    # -- plans and index advice (handlers/ai) --
    full_scans = staticmethod(_full_scans)

    # -- RAG source reader (retrieval ingestion) --
    source_session = staticmethod(_source_session)

    @staticmethod
    def source_refused(exc: BaseException) -> bool:
        # SQLITE_ERROR (no such table or column, a syntax error), as against a locked,
        # unreadable or corrupt file.
        return isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF == sqlite3.SQLITE_ERROR


ENGINE = SQLite()
