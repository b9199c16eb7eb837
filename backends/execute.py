"""Layers 1 and 2 of read-only SQL: one statement per call, run inside the engine's read-only
transaction with a server-side statement timeout, always rolled back.

    PostgreSQL  One round trip: a libpq pipeline (libpq >= 14) of BEGIN READ ONLY; a SELECT of
                set_config(..., true) for statement_timeout, standard_conforming_strings
                [, search_path] (values as parameters, never spliced into text); the caller's
                statement; ROLLBACK; then one Sync. Every query in a pipeline goes through the
                extended protocol, whose Parse refuses a second statement; the statement's rows
                are read in chunks of 16 (libpq >= 17; one by one before), so rows past the
                caps are never all held. The transaction is what makes the settings per call:
                a function in the database that changes a session setting (set_config(...,
                false)) is undone by the ROLLBACK, where with session-level settings and
                autocommit it would outlive the call (a one-round-trip autocommit variant was
                rejected for that reason). After
                a statement error the server skips the rest of the pipeline, so a second round
                trip sends the ROLLBACK. The socket is waited on with poll() (the GIL released)
                against the statement timeout plus a margin; a server that never answers gets
                the connection closed, as does any failure midway through the protocol, so a
                connection is never left in pipeline mode or in a transaction. Measured on a
                point query: ~0.22-0.24 ms wall / ~0.1 ms CPU, against ~0.38-0.41 / 0.17-0.20
                for the three round trips this replaced, and ~0.14 ms for a bare autocommit
                conn.execute() (the rest: three more small statements, and the extended protocol).
                With libpq < 14, the three round trips remain: BEGIN + SET LOCAL ... through
                PQexec, the statement through cursor.stream(), ROLLBACK. Note: an empty params
                tuple does NOT force the extended protocol in psycopg 3 (it checks `if
                params`), so `execute(sql, ())` would still run `SELECT 1; DROP ...`.
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

import contextlib
import itertools
import json
import math
import select
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pymysql
import pymysql.cursors
from psycopg import sql as pgsql
from pymysql.constants import CLIENT, FIELD_TYPE

from backends.connect import needs_rollback
from backends.driver_errors import is_cancelled
from backends.values import encode_row, row_bytes
from gateway.errors import Cancelled, DeadlineExceeded, GatewayError, InvalidArgument, Unavailable

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
_CANCELLED = "the statement was cancelled on the database server (admin_kill_query or the database's own tools)"
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

_PG_PIPELINE = psycopg.Pipeline.is_supported()  # libpq >= 14; otherwise three round trips
_PG_MARGIN_S = 2.0  # past the statement timeout, how long to wait for a server that went silent
_PG_BEGIN = b"BEGIN READ ONLY"
_PG_ROLLBACK = b"ROLLBACK"
# The per-call settings as one statement with parameters: nothing of the caller's is spliced
# into text (quote_ident makes the schema one search_path element, as SET LOCAL would).
_PG_SETTINGS = b"SELECT pg_catalog.set_config('statement_timeout', $1, true), pg_catalog.set_config('standard_conforming_strings', 'on', true)"
_PG_SETTINGS_SCHEMA = _PG_SETTINGS + b", pg_catalog.set_config('search_path', pg_catalog.quote_ident($2), true)"
_PQ = psycopg.pq.ExecStatus
# libpq >= 17 hands rows over in chunks: per-result overhead paid once per chunk, not per row,
# and still never more than a chunk of the rows past the caps in memory.
_PG_CHUNKED = psycopg.capabilities.has_stream_chunked()
_PG_CHUNK_ROWS = 16  # 200 rows: ~0.52 ms against ~0.72 one row at a time; 8: ~0.54, 32: ~0.52
_PG_ROW_RESULTS = (_PQ.SINGLE_TUPLE, _PQ.TUPLES_CHUNK) if _PG_CHUNKED else (_PQ.SINGLE_TUPLE,)


def _pg_error(exc: psycopg.Error, timeout_ms: int) -> GatewayError:
    state = exc.sqlstate or ""
    if is_cancelled(exc):
        return Cancelled(_CANCELLED)
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was cancelled by the server")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return InvalidArgument("the database refused to write: the statement runs in a read-only transaction")
    if state.startswith("42") and exc.diag.message_primary:  # syntax/access: names only what the caller wrote
        return InvalidArgument(f"the database rejected the statement ({state}): {exc.diag.message_primary}")
    if state and not state.startswith("08") and not isinstance(exc, psycopg.OperationalError):
        return InvalidArgument(f"the database could not run the statement (SQLSTATE {state}, {type(exc).__name__})")
    if not state and isinstance(exc, psycopg.DataError):  # raised here, by a loader: the value, not the link
        return InvalidArgument(f"a value in the result has no Python form ({exc}); select it as text, e.g. CAST(column AS text)")
    return Unavailable("the database connection failed during the statement")


def _pg_type_name(conn: psycopg.Connection, oid: int) -> str:
    info = conn.adapters.types.get(oid)
    if info is None:
        return str(oid)
    return f"{info.name}[]" if info.array_oid == oid else info.name


def _run_pgsql(
    conn: psycopg.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
) -> tuple:
    if schema and "\x00" in schema:
        raise InvalidArgument("a schema name cannot contain a NUL character")
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.rollback()
    run = _pg_pipelined if _PG_PIPELINE else _pg_three_trips
    try:
        return run(conn, sql, timeout_ms=timeout_ms, max_rows=max_rows, max_bytes=max_bytes, schema=schema)
    except psycopg.Error as exc:
        raise _pg_error(exc, timeout_ms) from exc
    finally:
        _pg_end(conn)


def _pg_end(conn: psycopg.Connection) -> None:
    """Never leave the transaction open: roll back, or close a session that cannot (the pool
    then discards it). Only an error inside the statement gets here with work to do."""
    if conn.closed:
        return
    if conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
        conn.close()
        return
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        return
    try:
        if _PG_PIPELINE:
            _pg_rollback(conn)
        else:
            _pg_exec(conn, _PG_ROLLBACK)
    except (psycopg.Error, GatewayError):
        conn.close()
    if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.close()


# One round trip (libpq >= 14): BEGIN READ ONLY, the settings, the statement and ROLLBACK go
# out together in a pipeline ended by one Sync, and the answers are read as they come.


class _PgWire:
    """Non-blocking libpq I/O against a deadline. psycopg keeps its connections non-blocking;
    poll/select release the GIL while we wait, the libpq calls never block."""

    def __init__(self, pgconn: psycopg.pq.abc.PGconn, budget_s: float) -> None:
        self.pgconn = pgconn
        self.fd = pgconn.socket
        self.deadline = time.monotonic() + budget_s
        self.poll = select.poll() if hasattr(select, "poll") else None  # select() stops at fd 1024

    def wait(self, *, write: bool = False) -> bool:
        """Until the socket is readable (or writable, if asked); whether it is readable."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded("the database did not answer in time; the connection was closed")
        remaining = min(remaining, 60.0)  # poll() takes at most 2**31 ms; the callers wait again
        if self.poll is None:
            readable, _, _ = select.select([self.fd], [self.fd] if write else [], [], remaining)
            return bool(readable)
        self.poll.register(self.fd, select.POLLIN | (select.POLLOUT if write else 0))
        events = self.poll.poll(math.ceil(remaining * 1000))
        return any(ev & (select.POLLIN | select.POLLERR | select.POLLHUP) for _, ev in events)

    def flush(self) -> None:
        while self.pgconn.flush():  # 1: part of the pipeline is still in libpq's buffer
            if self.wait(write=True):  # the server may be waiting for us to read before it reads more
                self.pgconn.consume_input()

    def result(self) -> psycopg.pq.abc.PGresult | None:
        """The next result; None ends the results of one statement in the pipeline."""
        while self.pgconn.is_busy():
            self.wait()
            self.pgconn.consume_input()
        return self.pgconn.get_result()

    def finish(self) -> psycopg.pq.abc.PGresult | None:
        """Read the rest of the current statement's results; its error, if it had one."""
        failed = None
        while (res := self.result()) is not None:
            if res.status == _PQ.FATAL_ERROR and failed is None:
                failed = res
        return failed

    def sync(self) -> None:
        res = self.result()
        if res is None or res.status != _PQ.PIPELINE_SYNC:
            raise psycopg.OperationalError("the pipeline ended out of step")


class _PgRows:
    """The statement's rows, from results of one row (or a few: chunked), loaded as psycopg would."""

    def __init__(self, conn: psycopg.Connection, wire: _PgWire) -> None:
        self.wire = wire
        self.tx = psycopg.adapt.Transformer.from_context(conn)
        self.described: psycopg.pq.abc.PGresult | None = None  # first row, or the final TUPLES_OK
        self.failed: psycopg.pq.abc.PGresult | None = None
        self.load_error: Exception | None = None  # a value psycopg could not load
        self.done = False

    def next_rows(self) -> psycopg.pq.abc.PGresult | None:
        """The next result with rows; None once the statement's results are all read."""
        while not self.done:
            res = self.wire.result()
            if res is None:
                self.done = True
            elif res.status in _PG_ROW_RESULTS:
                return res
            elif res.status == _PQ.FATAL_ERROR and self.failed is None:
                self.failed = res
            elif res.status == _PQ.TUPLES_OK and self.described is None:
                self.described = res  # zero rows: still carries the columns
        return None

    def __iter__(self) -> Iterator[tuple]:
        while (res := self.next_rows()) is not None:
            first = self.described is None
            if first:
                self.described = res
            self.tx.set_pgresult(res, set_loaders=first)
            for i in range(res.ntuples):
                try:
                    row = self.tx.load_row(i, tuple)
                except Exception as exc:  # the wire is fine: finish reading, raise it afterwards
                    self.load_error = exc
                    return
                yield row

    def skip(self, count: int) -> bool:
        """Read (without loading) about count more rows; whether the results are all read."""
        while count > 0 and (res := self.next_rows()) is not None:
            count -= res.ntuples
        return self.done


def _pg_pipelined(
    conn: psycopg.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
) -> tuple:
    encoding = conn.info.encoding
    try:
        text = sql.encode(encoding)
        settings, params = _PG_SETTINGS, [str(timeout_ms).encode()]
        if schema:
            settings, params = _PG_SETTINGS_SCHEMA, [*params, schema.encode(encoding)]
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"the statement or schema has characters the database's encoding ({encoding}) cannot hold"
        ) from None
    wire = _PgWire(conn.pgconn, timeout_ms / 1000 + _PG_MARGIN_S)
    with conn.lock:  # as psycopg's own operations: one user of the connection at a time
        outcome = _pg_pipeline(conn, wire, text, settings, params, max_rows=max_rows, max_bytes=max_bytes)
    if isinstance(outcome, Exception):
        # After a statement error the server skipped our ROLLBACK; _pg_end sends it (a second
        # round trip, on errors only).
        raise outcome
    return outcome


def _pg_pipeline(
    conn: psycopg.Connection, wire: _PgWire, sql: bytes, settings: bytes, params: list[bytes], *, max_rows: int, max_bytes: int
) -> tuple | Exception:
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    try:
        # Our BEGIN opens the transaction, so psycopg sends none of its own, whatever the
        # connection's autocommit setting. Every query in a pipeline uses the extended
        # protocol, whose Parse refuses a second statement in the caller's text.
        pgconn.send_query_params(_PG_BEGIN, None)
        pgconn.send_query_params(settings, params)
        pgconn.send_query_params(sql, None)
        pgconn.send_query_params(_PG_ROLLBACK, None)
        pgconn.pipeline_sync()
        wire.flush()
        begun, set_up = wire.finish(), wire.finish()  # each read to its end, failed or not
        failed = begun if begun is not None else set_up
        if failed is None:
            outcome = _pg_statement(conn, wire, max_rows=max_rows, max_bytes=max_bytes)
        else:
            wire.finish()  # the statement, aborted unrun
            outcome = psycopg.errors.error_from_result(failed, encoding=conn.info.encoding)
        wire.finish()  # ROLLBACK: undoes whatever a function in the statement set, even set_config(..., false)
        wire.sync()
        pgconn.exit_pipeline_mode()
    except BaseException:
        # Cut off inside the protocol (connection lost, no answer in time, interrupted): the
        # session's state is unknown, so it is closed and the pool discards it.
        conn.close()
        raise
    return outcome


def _pg_statement(conn: psycopg.Connection, wire: _PgWire, *, max_rows: int, max_bytes: int) -> tuple | Exception:
    """Read the caller's statement: (columns, rows, reason, size), or the error to raise once
    the pipeline is over (the server's, or a loader's). Never leaves its results half read."""
    # For the query now at the head of the pipeline: a few rows per result, never all of them.
    if _PG_CHUNKED:
        conn.pgconn.set_chunked_rows_mode(_PG_CHUNK_ROWS)
    else:
        conn.pgconn.set_single_row_mode()
    reader = _PgRows(conn, wire)
    rows, reason, size = collect(reader, max_rows=max_rows, max_bytes=max_bytes)
    _pg_drain(conn, reader, max_rows)
    if reader.load_error is not None:
        return reader.load_error
    if reader.failed is not None:
        return psycopg.errors.error_from_result(reader.failed, encoding=conn.info.encoding)
    if reader.described is None:  # not a row-returning statement
        return [], [], None, 2
    res = reader.described
    columns = [
        {"name": (res.fname(i) or b"").decode(conn.info.encoding), "type": _pg_type_name(conn, res.ftype(i))}
        for i in range(res.nfields)
    ]
    return columns, rows, reason, size


def _pg_drain(conn: psycopg.Connection, reader: _PgRows, max_rows: int) -> None:
    """Finish reading what the LIMIT let through; past that, cancel the statement rather than
    read an unbounded result, and take the cancellation as the end of it."""
    if reader.skip(max_rows + 2):
        return
    with contextlib.suppress(psycopg.Error):  # still bounded: the wire's deadline, the statement timeout
        conn.cancel_safe(timeout=_PG_MARGIN_S)
    while reader.next_rows() is not None:
        pass
    if reader.failed is not None and reader.failed.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"57014":
        reader.failed = None  # our own cancel, not the statement's error


def _pg_rollback(conn: psycopg.Connection) -> None:
    """ROLLBACK outside the pipeline, as non-blocking as the rest and with its own deadline."""
    pgconn = conn.pgconn
    wire = _PgWire(pgconn, _PG_MARGIN_S)
    pgconn.send_query(_PG_ROLLBACK)
    wire.flush()
    failed = wire.finish()
    if failed is not None:
        raise psycopg.errors.error_from_result(failed, encoding=conn.info.encoding)


# Three round trips (libpq < 14): the settings, then the statement through cursor.stream(),
# then ROLLBACK.


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


def _pg_three_trips(
    conn: psycopg.Connection, sql: str, *, timeout_ms: int, max_rows: int, max_bytes: int, schema: str | None
) -> tuple:
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


# -- MySQL / MariaDB ---------------------------------------------------------------------------


def _mysql_error(exc: pymysql.err.MySQLError, timeout_ms: int) -> GatewayError:
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if is_cancelled(exc):
        return Cancelled(_CANCELLED)
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


def plan_of(protocol: str, out: dict[str, Any]) -> Any:
    """The plan in an explain run's result (ReadOnlySql.run with explain=...): JSON, or SQLite's rows as dicts."""
    rows = out["rows"]
    if not rows:
        return None
    if protocol == "sqlite":
        names = [c["name"] for c in out["columns"]]
        return [dict(zip(names, row)) for row in rows]
    value = rows[0][0]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value
