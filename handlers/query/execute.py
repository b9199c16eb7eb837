"""Layers 1 and 2 of read-only SQL: one statement per call, run inside the engine's read-only
transaction with a server-side statement timeout, always rolled back.

    PostgreSQL  BEGIN READ ONLY + SET LOCAL statement_timeout, standard_conforming_strings
                [, search_path] (our own text, one round trip), then the statement through
                cursor.stream(): the extended protocol, whose Parse refuses a second statement,
                rows read one by one; then ROLLBACK. Three round trips. The transaction is
                what makes the settings per call: a function in the database that changes a
                session setting (set_config(..., false)) is undone by the ROLLBACK, where with
                session-level settings and autocommit it would outlive the call (a
                one-round-trip variant measured ~40 us against ~65 us for these three, with
                the two texts of our own sent straight through libpq: PQexec, which releases
                the GIL; through psycopg cursors the three cost ~125 us). Note: an empty
                params tuple does NOT force the extended protocol in psycopg 3 (it checks
                `if params`), so `execute(sql, ())` would still run `SELECT 1; DROP ...`. (A
                pipeline does the same in one round trip but measured slower: psycopg polls
                through it.)
    MariaDB     SET STATEMENT max_statement_time=<s>, tx_read_only=1 FOR <stmt>: the
                statement's own transaction is read-only and timed, in one round trip, and the
                variables are restored after it even if a stored function changed them. Unlike
                START TRANSACTION READ ONLY this also refuses DDL, which would otherwise commit
                implicitly and run outside the read-only transaction. The pool's sessions are
                autocommit, so nothing stays open after the statement (no ROLLBACK round trip;
                the server's transaction flag is still checked before and after). The
                connection must not have CLIENT_MULTI_STATEMENTS.
    MySQL       SET SESSION transaction_read_only / max_execution_time + START TRANSACTION
                READ ONLY (MySQL has no SET STATEMENT), then ROLLBACK. Not exercised in CI: no
                MySQL server.
    SQLite      PRAGMA query_only, BEGIN ... ROLLBACK, and a progress-handler deadline; the
                pool opens files read-only (mode=ro).

The caller (sql_tools) has already checked and regenerated the statement; this module does not
trust that and is tested on its own with writes. Driver errors are translated here into the
gateway's codes with a safe message (never the driver's full text).
"""

from __future__ import annotations

import itertools
import math
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
import pymysql.cursors
from psycopg import sql as pgsql
from pymysql.constants import CLIENT, FIELD_TYPE

from gateway.backends import needs_rollback
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, Unavailable
from handlers.query.values import encode_row, row_bytes

_MYSQL_TYPES = {v: k.lower() for k, v in vars(FIELD_TYPE).items() if k.isupper() and isinstance(v, int)}
# MySQL errors whose text only names what the caller wrote (columns, tables, syntax near ...).
_MYSQL_USER_ERRORS = {
    1044,
    1049,
    1051,
    1052,
    1054,
    1060,
    1064,
    1109,
    1142,
    1143,
    1146,
    1222,
    1241,
    1242,
    1248,
    1305,
    1582,
    1583,
    1630,
}
_MYSQL_TIMEOUT = {1969, 3024}  # MariaDB max_statement_time, MySQL max_execution_time
_MYSQL_READ_ONLY = {1792, 1290, 1836}


@dataclass
class ResultSet:
    columns: list[dict[str, str]]
    rows: list[list[Any]]
    truncated: bool
    truncated_reason: str | None  # "max_rows" | "max_bytes" | None
    result_bytes: int
    db_ms: float


def collect(raw_rows: Iterable[Any], *, max_rows: int, max_bytes: int) -> tuple[list[list[Any]], str | None, int]:
    """Encode rows until a cap: reading one row past max_rows is how we know more existed."""
    rows: list[list[Any]] = []
    total = 2  # the enclosing brackets
    for raw in raw_rows:
        if len(rows) >= max_rows:
            return rows, "max_rows", total
        encoded = encode_row(raw)
        size = row_bytes(encoded) + 1
        if total + size > max_bytes:
            return rows, "max_bytes", total
        rows.append(encoded)
        total += size
    return rows, None, total


def execute_readonly(
    protocol: str,
    conn: Any,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None = None,
) -> ResultSet:
    """Run one statement read-only on `conn` and return at most max_rows rows / max_bytes bytes."""
    timeout_ms = max(1, int(timeout_ms))
    runner = {"pgsql": _run_pgsql, "mysql": _run_mysql, "sqlite": _run_sqlite}.get(protocol)
    if runner is None:
        raise InvalidArgument(f"unknown protocol {protocol!r}")
    started = time.perf_counter()
    columns, rows, reason, size = runner(conn, sql, timeout_ms=timeout_ms, max_rows=max_rows, max_bytes=max_bytes, schema=schema)
    return ResultSet(
        columns=columns,
        rows=rows,
        truncated=reason is not None,
        truncated_reason=reason,
        result_bytes=size,
        db_ms=(time.perf_counter() - started) * 1000,
    )


def explain_prefix(protocol: str, conn: Any, *, analyze: bool) -> str:
    """The EXPLAIN form explain_sql puts before a checked SELECT (JSON plans where there are)."""
    if protocol == "pgsql":
        return "EXPLAIN (ANALYZE, FORMAT JSON) " if analyze else "EXPLAIN (FORMAT JSON) "
    if protocol == "mysql":
        if "mariadb" in conn.get_server_info().lower():
            return "ANALYZE FORMAT=JSON " if analyze else "EXPLAIN FORMAT=JSON "
        return "EXPLAIN ANALYZE " if analyze else "EXPLAIN FORMAT=JSON "
    return "EXPLAIN QUERY PLAN "


# -- PostgreSQL --------------------------------------------------------------------------------


def _pg_error(exc: psycopg.Error, timeout_ms: int) -> GatewayError:
    state = exc.sqlstate or ""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was cancelled by the server")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return InvalidArgument("the database refused to write: the statement runs in a read-only transaction")
    if state.startswith("42") and exc.diag.message_primary:  # syntax/access: names only what the caller wrote
        return InvalidArgument(f"the database rejected the statement ({state}): {exc.diag.message_primary}")
    if state and not state.startswith("08") and not isinstance(exc, psycopg.OperationalError):
        return InvalidArgument(f"the database could not run the statement (SQLSTATE {state}, {type(exc).__name__})")
    return Unavailable("the database connection failed during the statement")


def _pg_type_name(conn: psycopg.Connection, oid: int) -> str:
    info = conn.adapters.types.get(oid)
    if info is None:
        return str(oid)
    return f"{info.name}[]" if info.array_oid == oid else info.name


def _pg_exec(conn: psycopg.Connection, command: bytes) -> None:
    """Run one of our own fixed commands through libpq: one round trip, no cursor."""
    result = conn.pgconn.exec_(command)
    if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)


def _pg_setup(conn: psycopg.Connection, timeout_ms: int, schema: str | None) -> bytes:
    # Our own text (an int and a libpq-quoted identifier), one round trip on the simple protocol.
    # standard_conforming_strings: backslashes in '...' are plain characters, as sqlglot reads
    # and writes them; with it off, a string ending in a backslash would swallow its quote.
    setup = f"BEGIN READ ONLY; SET LOCAL statement_timeout = {int(timeout_ms)}; SET LOCAL standard_conforming_strings = on"
    if not schema:
        return setup.encode()
    return pgsql.SQL("{}; SET LOCAL search_path = {}").format(pgsql.SQL(setup), pgsql.Identifier(schema)).as_bytes(conn)


def _run_pgsql(
    conn: psycopg.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
) -> tuple:
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.rollback()
    try:
        # Our BEGIN opens the transaction, so psycopg sends none of its own, whatever the
        # connection's autocommit setting.
        _pg_exec(conn, _pg_setup(conn, timeout_ms, schema))
        with conn.cursor() as cur:
            # stream() always uses the extended protocol (Parse takes exactly one statement)
            # and hands rows over one by one, so rows past the caps are never held.
            rows_iter = cur.stream(sql)
            rows, reason, size = collect(rows_iter, max_rows=max_rows, max_bytes=max_bytes)
            for _ in itertools.islice(rows_iter, max_rows + 2):
                pass  # finish reading what the LIMIT let through; abandoning a stream costs a cancel
            rows_iter.close()
            if cur.description is None:
                return [], [], None, 2
            columns = [{"name": d.name, "type": _pg_type_name(conn, d.type_code)} for d in cur.description]
            return columns, rows, reason, size
    except psycopg.Error as exc:
        raise _pg_error(exc, timeout_ms) from exc
    finally:
        _pg_end(conn)


def _pg_end(conn: psycopg.Connection) -> None:
    """Never leave the transaction open: roll back, or close a session that cannot (the pool
    then discards it)."""
    if conn.closed or conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        _pg_exec(conn, b"ROLLBACK")
    except psycopg.Error:
        conn.close()


# -- MySQL / MariaDB ---------------------------------------------------------------------------


def _mysql_error(exc: pymysql.err.MySQLError, timeout_ms: int) -> GatewayError:
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if errno in _MYSQL_TIMEOUT:
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was interrupted by the server")
    if errno in _MYSQL_READ_ONLY:
        return InvalidArgument("the database refused to write: the statement runs in a read-only transaction")
    if errno in _MYSQL_USER_ERRORS and len(exc.args) > 1:
        return InvalidArgument(f"the database rejected the statement ({errno}): {exc.args[1]}")
    if isinstance(exc, pymysql.err.OperationalError) and (errno >= 2000 or errno == 0):
        return Unavailable("the database connection failed during the statement")
    return InvalidArgument(f"the database could not run the statement (error {errno}, {type(exc).__name__})")


def _run_mysql(
    conn: pymysql.connections.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
) -> tuple:
    if conn.client_flag & CLIENT.MULTI_STATEMENTS:
        raise Unavailable("refusing a MySQL connection opened with CLIENT_MULTI_STATEMENTS")
    mariadb = "mariadb" in conn.get_server_info().lower()
    cur = conn.cursor(pymysql.cursors.SSCursor)  # unbuffered: rows past the cap are never held
    try:
        if needs_rollback(conn):
            conn.rollback()  # tx_read_only only governs a transaction the statement itself starts
        if schema:
            conn.select_db(schema)  # COM_INIT_DB: the name is never part of SQL text
        if mariadb:
            # The statement's own transaction is read-only and timed, in one round trip.
            sql = f"SET STATEMENT max_statement_time = {timeout_ms / 1000:.3f}, tx_read_only = 1 FOR {sql}"
        else:
            cur.execute(f"SET SESSION transaction_read_only = 1, SESSION max_execution_time = {timeout_ms}")
            cur.execute("START TRANSACTION READ ONLY")
        cur.execute(sql)  # no args: pymysql does no %-formatting
        if cur.description is None:
            return [], [], None, 2
        columns = [{"name": d[0], "type": _MYSQL_TYPES.get(d[1], str(d[1]))} for d in cur.description]
        rows, reason, size = collect(cur, max_rows=max_rows, max_bytes=max_bytes)
        return columns, rows, reason, size
    except pymysql.err.MySQLError as exc:
        raise _mysql_error(exc, timeout_ms) from exc
    finally:
        try:
            cur.close()  # drains what the LIMIT let through
            if needs_rollback(conn):  # free in autocommit (the pool's sessions): no round trip
                conn.rollback()
            if schema and conn.db:
                conn.select_db(conn.db)  # the pooled session keeps its default database
        except pymysql.err.MySQLError:
            pass  # the pool sees the broken connection and discards it


# -- SQLite ------------------------------------------------------------------------------------

_SQLITE_TYPES = {int: "integer", float: "real", str: "text", dict: "blob"}  # of encoded values


def _run_sqlite(
    conn: sqlite3.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
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
        cur = conn.execute(sql)  # sqlite3 refuses a second statement in execute()
        if cur.description is None:
            return [], [], None, 2
        rows, reason, size = collect(cur, max_rows=max_rows, max_bytes=max_bytes)
        columns = [{"name": d[0], "type": ""} for d in cur.description]
        for i, column in enumerate(columns):
            sample = next((r[i] for r in rows if r[i] is not None), None)
            column["type"] = _SQLITE_TYPES.get(type(sample), "")
        cur.close()
        return columns, rows, reason, size
    except sqlite3.Error as exc:
        text = str(exc)
        if "interrupted" in text:
            raise DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was interrupted") from exc
        if "readonly" in text or "read-only" in text:
            raise InvalidArgument("the database refused to write: the connection is read-only") from exc
        raise InvalidArgument(f"the database rejected the statement: {text}") from exc
    finally:
        conn.rollback()
        if own_handler:
            conn.set_progress_handler(None, 0)
        else:
            conn.deadline = previous
