"""DuckDB: the `ENGINE` object and everything the gateway knows of it (the duckdb package).

A target is analytical data on this machine, in one of two forms (its `database`):

- the path of a DuckDB database file, opened `read_only=True`;
- a comma-separated list of Parquet/CSV files (`/data/sales.parquet, /data/regions.csv`): an
  in-memory database with one view per file, named after the file (`sales`, `regions`).

Either way the session is sandboxed by DuckDB's own configuration, locked once set
(`lock_configuration`): no file or network access beyond the listed files
(`enable_external_access=false`, `allowed_paths`), no extension installed or loaded, so
read_csv('/etc/passwd'), ATTACH, COPY ... TO, INSTALL/LOAD and SET of a locked option fail in
the database whatever the read-only check let through. The check (READONLY below) refuses
them first, with the gateway's own message.

DuckDB has no statement timeout: a timer interrupts the connection (`conn.interrupt()`) at the
statement's deadline, and the interrupt becomes the DEADLINE_EXCEEDED the other engines give.
A statement runs inside BEGIN ... ROLLBACK, after `SET schema` to the schema it runs in.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from backends.drivers import LazyDriver, driver_loaded
from backends.engines.admin import TargetAdmin, not_supported
from backends.engines.base import ReadOnlyRules, TargetSettings, collect, no_settings_scope, readonly_execute
from backends.engines.catalog import (
    Table,
    empty_constraints,
    key_of,
    like_substring,
    new_table,
    view_dependencies,
    with_view_dependencies,
)
from backends.engines.plans import FullScan, plan_objects, row_estimate
from backends.engines.profiling import Profiling, declared_family
from gateway.errors import Cancelled, DeadlineExceeded, GatewayError, InvalidArgument, Unavailable

if TYPE_CHECKING:
    import duckdb
else:
    duckdb = LazyDriver("duckdb")  # imported by the first DuckDB target: ~12 MiB RSS (backends/drivers.py)

FETCH_CHUNK = 256  # rows fetched per call: a capped read never materialises the whole result
DATA_FILE_SUFFIXES = (".parquet", ".csv", ".tsv", ".csv.gz", ".tsv.gz")
# The sandbox, applied as the database opens; lock_configuration makes it final for the session.
SANDBOX: dict[str, Any] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "python_enable_replacements": False,  # a table name never reads a Python object of the gateway's frames
    "lock_configuration": True,
}
SYSTEM_SCHEMAS = ("information_schema", "pg_catalog")

# -- the read-only check's part (backends/readonly.py) ------------------------------------------

READONLY = ReadOnlyRules(
    dialect="duckdb",
    # Readers of files and URLs, the scanners of other databases (and their SQL runners), a SQL
    # string run as a table (query(): it would skip the check), secrets, the environment, sequences.
    # Every engine refuses these names as calls; as table names only DuckDB does (backends/readonly.py).
    denied_functions=frozenset(
        {
            "read_csv",
            "read_csv_auto",
            "read_parquet",
            "parquet_scan",
            "parquet_metadata",
            "parquet_schema",
            "parquet_file_metadata",
            "parquet_kv_metadata",
            "parquet_bloom_probe",
            "read_json",
            "read_json_auto",
            "read_json_objects",
            "read_json_objects_auto",
            "read_ndjson",
            "read_ndjson_auto",
            "read_ndjson_objects",
            "read_text",
            "read_blob",
            "read_xlsx",
            "read_duckdb",
            "glob",
            "sniff_csv",
            "iceberg_scan",
            "iceberg_metadata",
            "iceberg_snapshots",
            "delta_scan",
            "sqlite_scan",
            "sqlite_attach",
            "sqlite_query",
            "postgres_scan",
            "postgres_scan_pushdown",
            "postgres_attach",
            "postgres_query",
            "postgres_execute",
            "mysql_scan",
            "mysql_query",
            "mysql_execute",
            "mysql_attach",
            "st_read",
            "st_read_meta",
            "st_readosm",
            "query",
            "query_table",
            "duckdb_secrets",
            "which_secret",
            "load_aws_credentials",
            "getenv",
            "nextval",
            "setval",
        }
    ),  # fmt: skip
    # EXPLAIN (FORMAT JSON) / EXPLAIN (ANALYZE): parentheses after EXPLAIN are options, never a query
    explain_options_in_parentheses=True,
    replacement_scans=True,  # FROM '/etc/passwd', FROM "x.csv": refused by the check, not only the sandbox
)

# -- driver errors: the one table of what duckdb's exceptions mean for the gateway --------------

REFUSED = (
    "the database refused: a DuckDB target reads only its own data "
    "(no file or network access, extensions, ATTACH, COPY or settings)"
)


def translate(exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
    """duckdb's exception -> the gateway's, by class (duckdb has no error codes):

    InterruptException                                DeadlineExceeded (the deadline timer interrupted it)
    PermissionException                               InvalidArgument REFUSED (the sandbox: files, network, extensions)
    InvalidInputException "read-only" / "locked"      InvalidArgument (a write, or a locked setting, was refused)
    CatalogException, BinderException, ParserException,
    ConversionException, other DatabaseError          InvalidArgument naming it (a local file: no secrets in it)
    IOException                                       Unavailable (the file is missing, locked by a writer, unreadable)
    OutOfMemoryException, FatalException              Unavailable (a fatal error invalidates the database: reopened)
    any other                                         GatewayError naming the class only
    """
    if isinstance(exc, duckdb.InterruptException):
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was interrupted")
    if isinstance(exc, duckdb.PermissionException):
        return InvalidArgument(REFUSED)
    text = str(exc).split("\n", 1)[0]
    if isinstance(exc, duckdb.InvalidInputException):
        if "read-only" in text:
            return InvalidArgument("the database refused to write: the connection is read-only")
        if "configuration has been locked" in text:
            return InvalidArgument(REFUSED)
    if isinstance(exc, (duckdb.IOException, duckdb.OutOfMemoryException, duckdb.FatalException)):
        return Unavailable(f"the DuckDB database could not serve the statement ({type(exc).__name__})")
    if isinstance(exc, duckdb.DatabaseError):
        return InvalidArgument(f"the database rejected the statement: {text}")
    return GatewayError(f"the database call failed ({type(exc).__name__})")


# -- connections ---------------------------------------------------------------------------------


def data_files(database: str) -> list[str] | None:
    """The Parquet/CSV files a target lists, or None when `database` names a DuckDB file."""
    paths = [p.strip() for p in database.split(",") if p.strip()]
    if paths and all(p.lower().endswith(DATA_FILE_SUFFIXES) for p in paths):
        return [os.path.abspath(p) for p in paths]
    return None


def view_name(path: str) -> str:
    """The view a listed file becomes: its name up to the first dot (sales.parquet -> sales)."""
    return os.path.basename(path).split(".", 1)[0]


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class DuckDBConnection:
    """A DuckDB connection and the identity of the file it opened (a replaced file is reopened)."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, file_id: tuple[int, ...], default_schema: str) -> None:
        self.conn = conn
        self.file_id = file_id
        self.default_schema = default_schema  # where a statement that names no schema runs
        self.invalidated = False  # a FatalException: DuckDB refuses every later statement

    def close(self) -> None:
        self.conn.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A DB-API cursor of the connection, for a caller's own keyed lookup (rag.fetch_from_source)."""
        return self.conn.cursor()

    def rollback(self) -> None:  # the pool's contract; every statement already ends in ROLLBACK
        with contextlib.suppress(duckdb.Error):
            self.conn.execute("ROLLBACK")


def _file_id(paths: list[str]) -> tuple[int, ...]:
    ids: list[int] = []
    for path in paths:
        st = os.stat(path)
        ids += (st.st_dev, st.st_ino)
    return tuple(ids)


def _reader(path: str) -> str:
    function = "read_parquet" if path.lower().endswith(".parquet") else "read_csv"
    return f"{function}({_literal(path)})"


def _connect(target: TargetSettings) -> DuckDBConnection:
    files = data_files(target.database)
    if files is None:
        path = os.path.abspath(target.database)
        conn = duckdb.connect(path, read_only=True, config=dict(SANDBOX))
        return DuckDBConnection(conn, _file_id([path]), _default_schema(target))
    # Listed files: open the sandbox only as wide as they are, define the views, then lock it.
    opening = {name: value for name, value in SANDBOX.items() if name not in ("enable_external_access", "lock_configuration")}
    conn = duckdb.connect(":memory:", config=opening)
    try:
        conn.execute(f"SET allowed_paths = [{', '.join(_literal(p) for p in files)}]")
        conn.execute("SET enable_external_access = false")
        for path in files:
            conn.execute(f"CREATE VIEW {_quote(view_name(path))} AS SELECT * FROM {_reader(path)}")
        conn.execute("SET lock_configuration = true")
    except BaseException:
        conn.close()
        raise
    return DuckDBConnection(conn, _file_id(files), _default_schema(target))


def _default_schema(target: TargetSettings) -> str:
    return target.default_schema or "main"


def _ping(conn: DuckDBConnection, target: TargetSettings) -> None:
    files = data_files(target.database) or [os.path.abspath(target.database)]
    if _file_id(files) != conn.file_id:  # a file was replaced: reopen
        raise OSError("duckdb file replaced")
    conn.conn.execute("SELECT 1").fetchall()


# -- read-only execution ---------------------------------------------------------------------------


class Deadline:
    """Interrupts a connection's running statement when its time is up (DuckDB has no statement
    timeout). The lock makes `stop` final: no interrupt is sent once it returns."""

    def __init__(self, conn: duckdb.DuckDBPyConnection, timeout_ms: int) -> None:
        self._conn = conn
        self._lock = threading.Lock()
        self._armed = True
        self.fired = False
        self._timer = threading.Timer(timeout_ms / 1000, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._armed:
                self.fired = True
                self._conn.interrupt()

    def stop(self) -> None:
        with self._lock:
            self._armed = False
        self._timer.cancel()


def _fetch(cur: duckdb.DuckDBPyConnection) -> Iterator[tuple[Any, ...]]:
    while True:
        chunk = cur.fetchmany(FETCH_CHUNK)
        if not chunk:
            return
        yield from chunk


# -- RAG source reader (retrieval ingestion) ------------------------------------------------------


class DuckDBSourceSession:
    """A sync's session on a DuckDB source (backends/retrieval/ingest/sources.py SourceSession):
    the engine's own sandboxed, read-only connection (listed files are views), rows fetched in
    chunks so memory stays bounded by the batch. No deadline is armed: a sync reads for as long
    as the table takes."""

    def __init__(self, conn: DuckDBConnection) -> None:
        self.conn = conn

    def scalar(self, sql: str, params: list[Any]) -> Any:
        return self.conn.conn.execute(sql, params).fetchall()[0][0]

    def stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        cur = self.conn.conn.cursor()  # its own cursor: the stream may outlive other statements
        try:
            cur.execute(sql, params)
            names = [d[0] for d in cur.description or ()]
            while batch := cur.fetchmany(batch_rows):
                yield names, batch
        finally:
            cur.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.conn.close()


def _source_session(target: TargetSettings, *, connect_timeout_s: float) -> DuckDBSourceSession:
    conn = _connect(target)
    try:
        conn.conn.execute(f"SET schema = {_literal(conn.default_schema)}")
    except BaseException:
        conn.conn.close()
        raise
    return DuckDBSourceSession(conn)


def _run_duckdb(
    conn: DuckDBConnection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    params: Sequence[Any] | None = None,
) -> tuple:
    db = conn.conn
    deadline = Deadline(db, timeout_ms)
    try:
        db.execute(f"SET schema = {_literal(schema or conn.default_schema)}")
        db.execute("BEGIN TRANSACTION")
        # duckdb runs one statement per prepared call (the check passed only one); values bound by it
        cur = db.execute(sql) if params is None else db.execute(sql, list(params))
        if cur.description is None:
            return [], [], None, 2
        columns = [{"name": d[0], "type": str(d[1]).lower()} for d in cur.description]
        rows, reason, size = collect(_fetch(cur), max_rows=max_rows, max_bytes=max_bytes)
        return columns, rows, reason, size
    except duckdb.Error as exc:
        conn.invalidated = conn.invalidated or isinstance(exc, duckdb.FatalException)
        if isinstance(exc, duckdb.InterruptException) and not deadline.fired:
            raise Cancelled("the statement was interrupted") from exc
        raise translate(exc, timeout_ms=timeout_ms) from exc
    finally:
        deadline.stop()
        conn.rollback()


# -- plans and index advice (handlers/ai) --------------------------------------------------------

# What EXPLAIN (FORMAT JSON) calls a read of a stored table (a Parquet/CSV view reads through
# READ_PARQUET / READ_CSV nodes instead: no index could serve those, so they are never named).
_TABLE_SCANS = ("SEQ_SCAN", "TABLE_SCAN")
_PLAN_NAME_PART = re.compile(r'"((?:[^"]|"")*)"|([^."]+)')


def _plan_table(qualified: str) -> str:
    """The table of a plan's "Table" (database.schema.table, each part quoted when it needs it)."""
    parts = [(quoted.replace('""', '"') if quoted else plain) for quoted, plain in _PLAN_NAME_PART.findall(qualified)]
    return parts[-1] if parts else qualified


def _full_scans(plan: Any) -> list[FullScan]:
    """Tables an EXPLAIN (FORMAT JSON) plan reads whole: its SEQ_SCAN / TABLE_SCAN nodes of a
    stored table, unless the scan is an Index Scan. The plan names no alias (the table only).

    DuckDB chooses an ART index scan when the statement starts, so a planned (not analyzed)
    EXPLAIN shows a Sequential Scan even where an index will serve an equality filter."""
    found: list[FullScan] = []
    for node in plan_objects(plan):
        info = node.get("extra_info")
        if node.get("name") not in _TABLE_SCANS or not isinstance(info, dict) or not info.get("Table"):
            continue
        if str(info.get("Type", "")).lower() == "index scan":
            continue
        table = _plan_table(str(info["Table"]))
        found.append(FullScan(table, table, row_estimate(info.get("Estimated Cardinality"))))
    return found


# -- catalogs ------------------------------------------------------------------------------------

# The current database's own schemas (not the system and temp catalogs', nor the SQL-standard views).
_IN_DATABASE = "database_name = current_database()"


class DuckDBCatalog:
    def __init__(self, conn: DuckDBConnection) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        cur = self.conn.conn.execute(sql, params)
        names = [d[0] for d in cur.description or ()]
        return [dict(zip(names, row)) for row in cur.fetchall()]

    def schemas(self, after: str, limit: int) -> list[str]:
        rows = self._rows(
            f"SELECT DISTINCT schema_name FROM duckdb_schemas() WHERE {_IN_DATABASE} AND schema_name NOT IN ?"
            " AND schema_name > ? ORDER BY schema_name LIMIT ?",
            (list(SYSTEM_SCHEMAS), after, limit),
        )
        return [r["schema_name"] for r in rows]

    def schema_exists(self, schema: str) -> bool:
        return bool(
            self._rows(
                f"SELECT 1 AS found FROM duckdb_schemas() WHERE {_IN_DATABASE} AND schema_name = ? AND schema_name NOT IN ?",
                (schema, list(SYSTEM_SCHEMAS)),
            )
        )

    def tables(self, schema: str, after: str, limit: int, name_filter: str | None) -> list[dict[str, Any]]:
        rows = self._rows(
            "SELECT name, kind, comment, rows_estimate FROM ("
            f" SELECT table_name AS name, 'table' AS kind, comment, estimated_size AS rows_estimate, schema_name"
            f" FROM duckdb_tables() WHERE {_IN_DATABASE} AND NOT internal"
            " UNION ALL"
            f" SELECT view_name, 'view', comment, NULL, schema_name FROM duckdb_views() WHERE {_IN_DATABASE} AND NOT internal"
            ") WHERE schema_name = ? AND name > ? AND name ILIKE ? ESCAPE '!' ORDER BY name LIMIT ?",
            (schema, after, like_substring(name_filter), limit),
        )
        return [
            {"name": r["name"], "type": r["kind"], "comment": r["comment"], "rows_estimate": r["rows_estimate"]} for r in rows
        ]

    def table_kind(self, schema: str, table: str) -> str | None:
        found = self._rows(
            f"SELECT 'table' AS kind FROM duckdb_tables() WHERE {_IN_DATABASE} AND schema_name = ? AND table_name = ?"
            f" UNION ALL SELECT 'view' FROM duckdb_views() WHERE {_IN_DATABASE} AND schema_name = ? AND view_name = ?"
            " AND NOT internal",
            (schema, table, schema, table),
        )
        return found[0]["kind"] if found else None

    def _constraints(self, schema: str, table: str) -> list[dict[str, Any]]:
        return self._rows(
            "SELECT constraint_type AS kind, constraint_name AS name, constraint_column_names AS cols, expression,"
            " referenced_table, referenced_column_names AS ref_cols FROM duckdb_constraints()"
            f" WHERE {_IN_DATABASE} AND schema_name = ? AND table_name = ? ORDER BY constraint_index",
            (schema, table),
        )

    def columns(self, schema: str, table: str) -> list[dict[str, Any]]:
        info = _columns(self.conn.conn, schema, table)
        constraints = self._constraints(schema, table)
        primary = {c for k in constraints if k["kind"] == "PRIMARY KEY" for c in k["cols"]}
        unique_first = {k["cols"][0] for k in constraints if k["kind"] == "UNIQUE" and k["cols"]}
        index_first = {i["columns"][0] for i in _indexes(self.conn.conn, schema, table) if i["columns"]}
        return [
            {
                "name": c["name"],
                "type": c["type"],
                "nullable": c["nullable"],
                "default": c["default"],
                "key": key_of(c["name"], primary, unique_first, index_first),
                "comment": c["comment"],
            }
            for c in info
        ]

    def constraints(self, schema: str, table: str) -> dict[str, Any]:
        result = empty_constraints()
        for k in self._constraints(schema, table):
            if k["kind"] == "PRIMARY KEY":
                result["primary_key"] = {"name": k["name"], "columns": list(k["cols"])}
            elif k["kind"] == "UNIQUE":
                result["unique"].append({"name": k["name"], "columns": list(k["cols"])})
            elif k["kind"] == "FOREIGN KEY":
                result["foreign_keys"].append(
                    {
                        "name": k["name"],
                        "columns": list(k["cols"]),
                        "referenced_schema": schema,  # DuckDB keys stay within one schema
                        "referenced_table": k["referenced_table"],
                        "referenced_columns": list(k["ref_cols"] or []),
                        "on_update": "NO ACTION",  # the only action DuckDB has
                        "on_delete": "NO ACTION",
                    }
                )
            elif k["kind"] == "CHECK":
                result["checks"].append({"name": k["name"], "expression": k["expression"] or ""})
        return result


def _columns(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[dict[str, Any]]:
    cur = conn.execute(
        "SELECT column_name, data_type, is_nullable, column_default, comment FROM duckdb_columns()"
        f" WHERE {_IN_DATABASE} AND schema_name = ? AND table_name = ? ORDER BY column_index",
        (schema, table),
    )
    return [
        {"name": name, "type": kind, "nullable": bool(nullable), "default": default, "comment": comment}
        for name, kind, nullable, default, comment in cur.fetchall()
    ]


_INDEX_COLUMNS = re.compile(r'"((?:[^"]|"")*)"|([^,\s\[\]]+)')


def _index_columns(expressions: str | None) -> list[str]:
    """duckdb_indexes().expressions is text ('[a, "b c"]'): the column names in it."""
    return [(quoted.replace('""', '"') if quoted else plain) for quoted, plain in _INDEX_COLUMNS.findall(expressions or "")]


def _indexes(conn: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[dict[str, Any]]:
    """Declared indexes (CREATE INDEX); primary keys and UNIQUE constraints are indexed too (ART)."""
    cur = conn.execute(
        "SELECT index_name, is_unique, is_primary, expressions FROM duckdb_indexes()"
        f" WHERE {_IN_DATABASE} AND schema_name = ? AND table_name = ? ORDER BY index_name",
        (schema, table),
    )
    return [
        {"name": name, "columns": _index_columns(expressions), "unique": bool(unique), "primary": bool(primary), "method": "art"}
        for name, unique, primary, expressions in cur.fetchall()
    ]


def _table_facts(conn: DuckDBConnection, schema: str, table: str) -> dict[str, Any]:
    catalog = DuckDBCatalog(conn)
    indexes = [
        {"name": k["name"], "columns": list(k["cols"]), "unique": True, "primary": k["kind"] == "PRIMARY KEY", "method": "art"}
        for k in catalog._constraints(schema, table)
        if k["kind"] in ("PRIMARY KEY", "UNIQUE")
    ]
    indexes += _indexes(conn.conn, schema, table)
    found = conn.conn.execute(
        f"SELECT estimated_size FROM duckdb_tables() WHERE {_IN_DATABASE} AND schema_name = ? AND table_name = ?",
        (schema, table),
    ).fetchone()
    # DuckDB keeps no per-table size on disk (storage is shared row groups): size_bytes is None.
    return {"rows_estimate": found[0] if found else None, "size_bytes": None, "indexes": indexes}


def _snapshot(conn: DuckDBConnection, schema: str, only: set[str] | None) -> dict[str, Table]:
    db = conn.conn
    catalog = DuckDBCatalog(conn)
    listed = db.execute(
        f"SELECT table_name, 'table', comment, estimated_size, NULL FROM duckdb_tables() WHERE {_IN_DATABASE}"
        " AND schema_name = ? AND NOT internal UNION ALL "
        f"SELECT view_name, 'view', comment, NULL, sql FROM duckdb_views() WHERE {_IN_DATABASE}"
        " AND schema_name = ? AND NOT internal",
        (schema, schema),
    ).fetchall()
    out: dict[str, Table] = {}
    for name, kind, comment, rows, sql in listed:
        if only is not None and name not in only:
            continue
        table = new_table(name, kind, comment, rows, sql)
        if sql:  # the definition is the whole CREATE VIEW: the view is not its own dependency
            table["depends_on"] = [pair for pair in view_dependencies(sql, "duckdb", schema) if pair != [schema, name]]
        table["columns"] = [
            {k: c[k] for k in ("name", "type", "nullable", "default", "comment")} for c in _columns(db, schema, name)
        ]
        keys = catalog.constraints(schema, name)
        table["primary_key"] = keys["primary_key"]["columns"] if keys["primary_key"] else []
        table["unique"] = [u["columns"] for u in keys["unique"]]
        table["foreign_keys"] = [
            {k: fk[k] for k in ("name", "columns", "referenced_schema", "referenced_table", "referenced_columns")}
            for fk in keys["foreign_keys"]
        ]
        table["indexes"] = [
            {k: i[k] for k in ("name", "columns", "unique", "primary")} for i in _table_facts(conn, schema, name)["indexes"]
        ]
        out[name] = table
    return out


# -- profiling (handlers/query) ------------------------------------------------------------------

# Integer types beyond the shared names (unsigned, 128-bit, arbitrary precision).
_WIDE_INTEGERS = ("hugeint", "uhugeint", "ubigint", "uinteger", "usmallint", "utinyint", "varint", "bignum")


def _type_family(declared: str) -> str:
    """DuckDB's type names (duckdb_columns().data_type): nested values (lists INTEGER[],
    arrays INTEGER[3], STRUCT, MAP, UNION) are "other", read as text; the rest as the servers'."""
    t = (declared or "").lower().strip()
    if t.endswith("]") or t.startswith(("struct", "map", "union")):
        return "other"
    if t.split("(")[0].strip() in _WIDE_INTEGERS:
        return "integer"
    if t == "bit":
        return "other"  # a bit string, not bytes
    return declared_family(t)


PROFILING = Profiling(
    # COUNT(*) of a table is answered from its row groups' counts: ~1 ms at 3M rows.
    exact_count_max_rows=1_000_000_000,
    epoch="EPOCH({})",  # seconds, fractions kept: DATE, TIME, TIMESTAMP (all precisions), WITH TIME ZONE
    length="LENGTH({})",  # characters
    byte_length="OCTET_LENGTH({})",
    as_text="CAST({} AS VARCHAR)",  # lists, structs, maps: grouped and measured as their text
    # Seeded and repeatable whatever the thread count; TABLESAMPLE (not USING SAMPLE) is a clause
    # of the FROM item, so WHERE and GROUP BY may follow it.
    bernoulli_sample="TABLESAMPLE BERNOULLI ({percent:.6f} PERCENT) REPEATABLE ({seed})",
    type_family=_type_family,
)


# -- least privilege (backends/privileges.py) -----------------------------------------------------


def _privilege_warnings(conn: DuckDBConnection) -> list[str]:
    """What the session could do beyond reading: DuckDB says so in its settings and its catalog."""
    db = conn.conn
    settings = dict(
        db.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', 'lock_configuration')"
        ).fetchall()
    )
    warnings = []
    if settings.get("enable_external_access") != "false":
        warnings.append("the DuckDB session can read and write files and the network (expected enable_external_access=false)")
    if settings.get("lock_configuration") != "true":
        warnings.append("the DuckDB session can change its own settings (expected lock_configuration=true)")
    found = db.execute("SELECT readonly, path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    if found and found[1] is not None and not found[0]:  # an in-memory database (listed files) holds nothing to protect
        warnings.append("the DuckDB file is opened writable (expected read_only=True)")
    return warnings


# -- the engine --------------------------------------------------------------------------------------


class DuckDB:
    name = "duckdb"
    title = "DuckDB"
    default_port = 0
    needs_auth_profile = False  # local files: no credentials
    dialect = "duckdb"
    readonly = READONLY
    placeholder = "?"
    vector_search = None
    vector_search_refusal = "similarity_search needs a PostgreSQL target with pgvector columns"

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        return (duckdb.Error,) if driver_loaded("duckdb") else ()

    quote = staticmethod(_quote)

    @staticmethod
    def config_problem(row: Mapping[str, Any]) -> str:
        database = str(row.get("database") or "")
        if not database.strip():
            return "duckdb path is empty"
        files = data_files(database)
        for path in files or [database]:
            if not os.path.isfile(path):
                return f"duckdb file missing: {os.path.basename(path)}"
            if not os.access(path, os.R_OK):
                return f"duckdb file not readable: {os.path.basename(path)}"
        names = [view_name(path) for path in files or []]
        if len(set(names)) != len(names):
            return "duckdb data files must have distinct names (each becomes a view named after its file)"
        return ""

    @staticmethod
    def default_schema(target: TargetSettings) -> str:
        return _default_schema(target)

    # -- connections and the pool policy
    @staticmethod
    def connect(target: TargetSettings, *, timeout_s: float, io_timeout_s: float) -> DuckDBConnection:
        return _connect(target)

    @staticmethod
    def ping(conn: DuckDBConnection, target: TargetSettings, *, timeout_s: float) -> None:
        _ping(conn, target)

    @staticmethod
    def broken(conn: DuckDBConnection) -> bool:
        return conn.invalidated  # a local file does not drop the connection, but a fatal error ends it

    @staticmethod
    def needs_rollback(conn: DuckDBConnection) -> bool:
        return False  # every statement ends in its own ROLLBACK

    @staticmethod
    def borrowed(conn: DuckDBConnection, target: TargetSettings) -> None:
        return None  # the deadline is armed per statement (Deadline)

    @staticmethod
    def returned(conn: DuckDBConnection) -> None:
        return None

    # -- read-only execution
    execute = staticmethod(readonly_execute(_run_duckdb))

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
    def explain_prefix(conn: DuckDBConnection, *, analyze: bool) -> str:
        # ANALYZE as text: DuckDB 2.0.1 answers EXPLAIN (ANALYZE, FORMAT JSON) of most queries
        # with {"result": "error"}; the text profile is correct.
        return "EXPLAIN ANALYZE " if analyze else "EXPLAIN (FORMAT JSON) "

    @staticmethod
    def plan_of(out: dict[str, Any]) -> Any:
        """EXPLAIN's one row is (explain_key, explain_value): the plan is the value, JSON when asked."""
        rows = out["rows"]
        if not rows:
            return None
        value = rows[0][-1]
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value

    translate = staticmethod(translate)

    # -- catalogs
    @staticmethod
    def catalog(conn: DuckDBConnection) -> DuckDBCatalog:
        return DuckDBCatalog(conn)

    table_facts = staticmethod(_table_facts)

    @staticmethod
    def has_rowid(conn: DuckDBConnection, schema: str, table: str) -> bool:
        return False  # DuckDB's rowid is a position, not a key that survives a rewrite

    @staticmethod
    def snapshot(conn: DuckDBConnection, schema: str, tables: list[str] | None = None) -> dict[str, Table]:
        found = _snapshot(conn, schema, set(tables) if tables is not None else None)
        return with_view_dependencies(found, "duckdb", schema)

    privilege_warnings = staticmethod(_privilege_warnings)

    # -- profiling SQL (handlers/query) --
    profiling = PROFILING
    explain_analyze = True  # as DuckDB's text profile (explain_prefix)
    database_is_schema = False  # a file holds schemas (main, ...)

    # -- accounts, processes, kill (handlers/admin) --
    def admin(self, target: TargetSettings) -> TargetAdmin:
        raise not_supported(target.target_id, self.title, self.name)  # local files: no accounts, no other sessions

    # -- plans and index advice (handlers/ai) --
    full_scans = staticmethod(_full_scans)

    # -- RAG source reader (retrieval ingestion) --
    source_session = staticmethod(_source_session)

    @staticmethod
    def source_refused(exc: BaseException) -> bool:
        # A table or column the source does not have, or SQL it cannot read as written, as
        # against a file that cannot be opened or read.
        return isinstance(exc, duckdb.CatalogException | duckdb.BinderException | duckdb.ParserException)


ENGINE = DuckDB()
