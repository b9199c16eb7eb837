"""PostgreSQL: the `ENGINE` object and everything the gateway knows of it (psycopg 3).

Sessions: read-only at the server (default_transaction_read_only) with the target's timeout
as statement_timeout; TCP keepalives so a vanished peer is noticed in about a minute.

Execution, one round trip: a libpq pipeline (libpq >= 14) of BEGIN READ ONLY; a SELECT of
set_config(..., true) for statement_timeout, standard_conforming_strings [, search_path]
(values as parameters, never spliced into text); the caller's statement; ROLLBACK; then one
Sync. Every query in a pipeline goes through the extended protocol, whose Parse refuses a
second statement; the statement's rows are read in chunks of 16 (libpq >= 17; one by one
before), so rows past the caps are never all held. The transaction is what makes the settings
per call: a function in the database that changes a session setting (set_config(..., false))
is undone by the ROLLBACK, where with session-level settings and autocommit it would outlive
the call (a one-round-trip autocommit variant was rejected for that reason). After a statement
error the server skips the rest of the pipeline, so a second round trip sends the ROLLBACK.
The socket is waited on with poll() (the GIL released) against the statement timeout plus a
margin; a server that never answers gets the connection closed, as does any failure midway
through the protocol, so a connection is never left in pipeline mode or in a transaction.
Measured on a point query: ~0.22-0.24 ms wall / ~0.1 ms CPU, against ~0.38-0.41 / 0.17-0.20
for the three round trips this replaced, and ~0.14 ms for a bare autocommit conn.execute()
(the rest: three more small statements, and the extended protocol). With libpq < 14, the
three round trips remain: BEGIN + SET LOCAL ... through PQexec, the statement through
cursor.stream(), ROLLBACK. Note: an empty params tuple does NOT force the extended protocol in
psycopg 3 (it checks `if params`), so `execute(sql, ())` would still run `SELECT 1; DROP ...`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import hmac
import itertools
import math
import os
import re
import select
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from backends.drivers import LazyDriver, driver_loaded
from backends.engines.admin import (
    CONNECT_TIMEOUT_S,
    PROCESS_NEEDS,
    STATEMENT_CHARS,
    STATEMENT_TIMEOUT_MS,
    Account,
    Privileges,
    Process,
    cancel_until_stopped,
    opened,
    scrubbed,
)
from backends.engines.base import (
    CANCELLED,
    ReadOnlyRules,
    TargetSettings,
    collect,
    json_plan,
    readonly_execute,
)
from backends.engines.catalog import Table, add_key, empty_constraints, key_of, like_substring, new_table, with_view_dependencies
from backends.engines.plans import FullScan, plan_objects, row_estimate
from backends.engines.profiling import Profiling
from gateway import loop_io
from gateway.errors import (
    BadValue,
    Cancelled,
    DeadlineExceeded,
    GatewayError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unavailable,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg import adapt as pgadapt
    from psycopg import rows as pgrows
    from psycopg import sql as pgsql
    from psycopg.types import json as pgjson
    from psycopg.types import string as pgstring
else:  # imported by the first PostgreSQL target or cluster link (backends/drivers.py)
    psycopg = LazyDriver("psycopg")
    pgadapt = LazyDriver("psycopg.adapt")
    pgrows = LazyDriver("psycopg.rows")
    pgsql = LazyDriver("psycopg.sql")
    pgjson = LazyDriver("psycopg.types.json")
    pgstring = LazyDriver("psycopg.types.string")

KINDS = {"r": "table", "p": "table", "v": "view", "m": "materialized_view", "f": "foreign_table"}
ACTIONS = {"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}

# -- the read-only check's part (backends/readonly.py) ------------------------------------------

READONLY = ReadOnlyRules(
    dialect="postgres",
    # server files, large objects, other connections, settings, signals, sleep
    denied_functions=frozenset(
        {
            "pg_read_file",
            "pg_read_binary_file",
            "pg_ls_dir",
            "pg_stat_file",
            "pg_current_logfile",
            "lo_import",
            "lo_export",
            "lo_open",
            "lo_close",
            "loread",
            "lowrite",
            "lo_get",
            "lo_put",
            "lo_from_bytea",
            "lo_create",
            "lo_creat",
            "lo_unlink",
            "lo_truncate",
            "lo_lseek",
            "lo_tell",
            "pg_terminate_backend",
            "pg_cancel_backend",
            "pg_reload_conf",
            "pg_rotate_logfile",
            "pg_promote",
            "pg_switch_wal",
            "pg_create_restore_point",
            "pg_backup_start",
            "pg_backup_stop",
            "pg_start_backup",
            "pg_stop_backup",
            "pg_notify",
            "set_config",
            "pg_import_system_collations",
            "query_to_xml",
            "query_to_xml_and_xmlschema",
            "query_to_xmlschema",
            "cursor_to_xml",
            "cursor_to_xmlschema",
            "table_to_xml",
            "table_to_xml_and_xmlschema",
            "schema_to_xml",
            "database_to_xml",
            "database_to_xml_and_xmlschema",
            "nextval",
            "setval",
            "txid_current",
            "pg_current_xact_id",
            "pg_log_backend_memory_contexts",
            "pg_file_write",
            "pg_file_rename",
            "pg_file_unlink",
            "pg_logdir_ls",
        }
    ),  # fmt: skip
    denied_prefixes=(
        "pg_sleep",
        "dblink",
        "pg_advisory",
        "pg_try_advisory",
        "pg_ls_",
        "pg_read_",
        "pg_file",
        "pg_logical_",
        "pg_replication_",
        "pg_create_",
        "pg_drop_",
        "pg_copy_",
        "pg_wal_replay",
        "lo_",
    ),  # fmt: skip
    denied_tables=frozenset({"pg_authid", "pg_shadow", "pg_user_mapping", "pg_user_mappings"}),
    show_setting=True,
    explain_options_in_parentheses=True,
    misread_tokens=(
        (
            "NULLSAFE_EQ",
            "`<=>` is pgvector's cosine distance on PostgreSQL, which the check would read as another "
            "engine's null-safe equality; write `embedding OPERATOR(<=>) query_vector` (or use rag.similarity_search)",
        ),
    ),
)

# -- driver errors: the one table of what psycopg's exceptions mean for the gateway --------------

# PostgreSQL raises QueryCanceled (57014) for both a statement timeout and pg_cancel_backend; only
# the (English) message tells them apart. A server with translated messages reads as a timeout.
CANCELLED_BY_REQUEST = "canceling statement due to user request"


def translate(exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
    """psycopg's exception -> the gateway's, by class and SQLSTATE, first match wins:

    QueryCanceled, "due to user request"   Cancelled
    QueryCanceled                          DeadlineExceeded (the statement timeout)
    ReadOnlySqlTransaction                 InvalidArgument (a write was refused)
    UndefinedTable (42P01)                 NotFound naming it
    42501 (insufficient_privilege)         PermissionDenied naming the object
    42xxx with a primary message           InvalidArgument naming it (syntax, access: the caller's own words)
    DataError                              BadValue (a value sent or loaded)
    any other SQLSTATE but 08xxx           InvalidArgument (SQLSTATE and class only)
    connection-level (08xxx, none)         Unavailable
    """
    if not isinstance(exc, psycopg.Error):
        return GatewayError(f"the database call failed ({type(exc).__name__})")
    state = exc.sqlstate or ""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        if (exc.diag.message_primary or "") == CANCELLED_BY_REQUEST:
            return Cancelled(CANCELLED)
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was cancelled by the server")
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return InvalidArgument("the database refused to write: the statement runs in a read-only transaction")
    if isinstance(exc, psycopg.errors.UndefinedTable) and exc.diag.message_primary:  # 42P01: the caller's table
        return NotFound(f"the database rejected the statement ({state}): {exc.diag.message_primary}")
    if state == "42501" and exc.diag.message_primary:  # insufficient_privilege: the account's grants refuse it
        return PermissionDenied(f"the target's account lacks the privilege (PostgreSQL 42501): {exc.diag.message_primary}")
    if state.startswith("42") and exc.diag.message_primary:  # syntax/access: names only what the caller wrote
        return InvalidArgument(f"the database rejected the statement ({state}): {exc.diag.message_primary}")
    bad_value = isinstance(exc, psycopg.DataError)
    if state and not state.startswith("08") and not isinstance(exc, psycopg.OperationalError):
        kind = BadValue if bad_value else InvalidArgument
        return kind(f"the database could not run the statement (SQLSTATE {state}, {type(exc).__name__})")
    if bad_value:  # raised here, by a loader: the value, not the link
        return BadValue(f"a value in the result has no Python form ({exc}); select it as text, e.g. CAST(column AS text)")
    return Unavailable("the database connection failed during the statement")


# -- connections ---------------------------------------------------------------------------------


def connect_kwargs(target: TargetSettings, *, connect_timeout_s: float) -> dict[str, Any]:
    """psycopg.connect's arguments for a target's session (read-only, timed, with keepalives)."""
    return {
        "host": target.host,
        "port": target.port,
        "dbname": target.database or None,
        "user": target.username,
        "password": target.password or None,
        "sslmode": (target.ssl_mode or "require") if target.use_ssl else "disable",
        "connect_timeout": max(2, math.ceil(connect_timeout_s)),  # libpq's minimum is 2 s
        "application_name": "mcp-gateway",
        # DateStyle ISO: a date's text is what backends/values.py writes (_WireTextContext reads it as is).
        "options": f"-c statement_timeout={target.timeout_ms} -c default_transaction_read_only=on -c DateStyle=ISO",
        # A peer that vanished without a reset (network partition) is noticed in about a minute
        # instead of the kernel's two hours, so a health check cannot hang on it for long.
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }


def _ping(conn: psycopg.Connection) -> None:
    """An empty query, outside any transaction: one round trip (what psycopg_pool's check did)."""
    if conn.closed or conn.broken:
        raise psycopg.OperationalError("the connection is closed")
    if conn.autocommit:
        conn.execute("")
        return
    conn.autocommit = True
    try:
        conn.execute("")
    finally:
        conn.autocommit = False


# -- RAG source reader (retrieval ingestion) ------------------------------------------------------

SOURCE_APPLICATION_NAME = "mcp-gateway-rag-sync"  # what pg_stat_activity shows for a sync


class PostgresSourceSession:
    """A sync's session on a source (backends/retrieval/ingest/sources.py SourceSession): rows
    through a named (server-side) cursor, so memory stays bounded by the batch. Each read ends
    its transaction; a failed one is rolled back."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def scalar(self, sql: str, params: list[Any]) -> Any:
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                value = cur.fetchone()[0]
            self.conn.commit()
            return value
        except psycopg.Error:
            self._rollback()
            raise

    def stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        try:
            with self.conn.cursor(name="rag_sync_stream") as cur:
                cur.itersize = batch_rows
                cur.execute(sql, params)
                names = [d.name for d in cur.description]
                while True:
                    batch = cur.fetchmany(batch_rows)
                    if not batch:
                        break
                    yield names, batch
            self.conn.commit()
        except psycopg.Error:
            self._rollback()
            raise

    def _rollback(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.rollback()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def _source_session(target: TargetSettings, *, connect_timeout_s: float) -> PostgresSourceSession:
    conn = psycopg.connect(**connect_kwargs(target, connect_timeout_s=connect_timeout_s))
    try:
        conn.read_only = True
        conn.execute("SELECT pg_catalog.set_config('application_name', %s, false)", (SOURCE_APPLICATION_NAME,))
        conn.commit()
    except BaseException:
        conn.close()
        raise
    return PostgresSourceSession(conn)


# -- read-only execution ---------------------------------------------------------------------------


class _Libpq:
    """What the libpq psycopg runs on can do, asked at the first PostgreSQL statement (not at
    import: psycopg is loaded lazily)."""

    @functools.cached_property
    def pipeline(self) -> bool:  # libpq >= 14; otherwise three round trips
        return psycopg.Pipeline.is_supported()

    @functools.cached_property
    def status(self) -> type[psycopg.pq.ExecStatus]:
        return psycopg.pq.ExecStatus

    # libpq >= 17 hands rows over in chunks: per-result overhead paid once per chunk, not per row,
    # and still never more than a chunk of the rows past the caps in memory.
    @functools.cached_property
    def chunked(self) -> bool:
        return psycopg.capabilities.has_stream_chunked()

    @functools.cached_property
    def row_results(self) -> tuple[psycopg.pq.ExecStatus, ...]:
        status = self.status  # asks libpq itself: `chunked` is what a statement uses (a test may set it)
        return (status.SINGLE_TUPLE, status.TUPLES_CHUNK) if psycopg.capabilities.has_stream_chunked() else (status.SINGLE_TUPLE,)


_LIBPQ = _Libpq()
_PG_MARGIN_S = 2.0  # past the statement timeout, how long to wait for a server that went silent
_PG_BEGIN = b"BEGIN READ ONLY"
_PG_ROLLBACK = b"ROLLBACK"
# The per-call settings as one statement with parameters: nothing of the caller's is spliced
# into text (quote_ident makes the schema one search_path element, as SET LOCAL would).
_PG_SETTINGS = b"SELECT pg_catalog.set_config('statement_timeout', $1, true), pg_catalog.set_config('standard_conforming_strings', 'on', true)"
_PG_SETTINGS_SCHEMA = _PG_SETTINGS + b", pg_catalog.set_config('search_path', pg_catalog.quote_ident($2), true)"
_PG_CHUNK_ROWS = 16  # 200 rows: ~0.52 ms against ~0.72 one row at a time; 8: ~0.54, 32: ~0.52


def _pg_type_name(conn: psycopg.Connection, oid: int) -> str:
    info = conn.adapters.types.get(oid)
    if info is None:
        return str(oid)
    return f"{info.name}[]" if info.array_oid == oid else info.name


def _run_pgsql(
    conn: psycopg.Connection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    params: Sequence[Any] | None = None,
    settings: Mapping[str, str] | None = None,
) -> tuple:
    if schema and "\x00" in schema:
        raise InvalidArgument("a schema name cannot contain a NUL character")
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        loop_io.blocking(conn.rollback)
    run = _pg_pipelined if _LIBPQ.pipeline else _pg_three_trips
    if params is not None and not _LIBPQ.pipeline:
        raise Unavailable("custom SQL tools on PostgreSQL need libpq 14 or later (pipeline mode)")
    try:
        if params is not None:  # bound values need the pipeline (checked above)
            return _pg_pipelined(
                conn, sql, timeout_ms=timeout_ms, max_rows=max_rows, max_bytes=max_bytes, schema=schema, params=params,
                settings=settings,
            )  # fmt: skip
        if settings:
            return run(conn, sql, timeout_ms=timeout_ms, max_rows=max_rows, max_bytes=max_bytes, schema=schema, settings=settings)
        return run(conn, sql, timeout_ms=timeout_ms, max_rows=max_rows, max_bytes=max_bytes, schema=schema)
    except psycopg.Error as exc:
        raise translate(exc, timeout_ms=timeout_ms) from exc
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
        if _LIBPQ.pipeline:
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
    poll/select release the GIL while we wait, the libpq calls never block. Run on the event loop
    (gateway/loop_io.py), the loop does the waiting instead."""

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
        if loop_io.on_loop():  # run on the event loop (ENGINE.executes_on_loop): the loop waits, others run meanwhile
            return loop_io.wait_socket(self.fd, write=write, timeout_s=remaining)
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
            if res.status == _LIBPQ.status.FATAL_ERROR and failed is None:
                failed = res
        return failed

    def sync(self) -> None:
        res = self.result()
        if res is None or res.status != _LIBPQ.status.PIPELINE_SYNC:
            raise psycopg.OperationalError("the pipeline ended out of step")


class _WireTextContext:
    """The adapters a read-only result is loaded with: the connection's own, except that numeric
    and date stay the text the server sent. That text is already what backends/values.py would
    make of the parsed value (a Decimal's digits, an ISO date under the session's DateStyle=ISO),
    so parsing it only to write it back cost ~1 us a row; and 'infinity' or a BC date, which
    psycopg cannot load into a Python date, no longer fails the whole statement.
    tests/backends/test_pg_values.py holds the values equal on edge cases. One per connection."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.connection = conn
        self.adapters = pgadapt.AdaptersMap(conn.adapters)
        for name in ("numeric", "date"):
            self.adapters.register_loader(name, pgstring.TextLoader)


_WIRE_TEXT: weakref.WeakKeyDictionary[psycopg.Connection, _WireTextContext] = weakref.WeakKeyDictionary()


def _wire_text_context(conn: psycopg.Connection) -> _WireTextContext:
    context = _WIRE_TEXT.get(conn)
    if context is None:
        context = _WIRE_TEXT[conn] = _WireTextContext(conn)
    return context


class _PgRows:
    """The statement's rows, from results of one row (or a few: chunked), loaded as psycopg would."""

    def __init__(self, conn: psycopg.Connection, wire: _PgWire) -> None:
        self.wire = wire
        self.tx = pgadapt.Transformer.from_context(_wire_text_context(conn))
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
            elif res.status in _LIBPQ.row_results:
                return res
            elif res.status == _LIBPQ.status.FATAL_ERROR and self.failed is None:
                self.failed = res
            elif res.status == _LIBPQ.status.TUPLES_OK and self.described is None:
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
    conn: psycopg.Connection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    params: Sequence[Any] | None = None,
    settings: Mapping[str, str] | None = None,
) -> tuple:
    encoding = conn.info.encoding
    extra = settings  # the caller's identity; `settings` and `params` below are the preamble's
    bound = None
    if params is not None:  # $n placeholders: psycopg's own dumpers make each value's wire form and type
        transformer = pgadapt.Transformer(conn)
        values = transformer.dump_sequence(list(params), [pgadapt.PyFormat.AUTO] * len(params))
        bound = (values, transformer.types, transformer.formats)
    try:
        text = sql.encode(encoding)
        settings, params = _PG_SETTINGS, [str(timeout_ms).encode()]
        if schema:
            settings, params = _PG_SETTINGS_SCHEMA, [*params, schema.encode(encoding)]
        if extra:  # the caller's identity, in the same transaction-local SELECT: names and values bound
            first = len(params) + 1
            settings += b"".join(
                b", pg_catalog.set_config($%d, $%d, true)" % (first + 2 * i, first + 2 * i + 1) for i in range(len(extra))
            )
            params = [*params, *(item.encode(encoding) for pair in extra.items() for item in pair)]
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"the statement or schema has characters the database's encoding ({encoding}) cannot hold"
        ) from None
    wire = _PgWire(conn.pgconn, timeout_ms / 1000 + _PG_MARGIN_S)
    with conn.lock:  # as psycopg's own operations: one user of the connection at a time
        outcome = _pg_pipeline(conn, wire, text, settings, params, max_rows=max_rows, max_bytes=max_bytes, bound=bound)
    if isinstance(outcome, Exception):
        # After a statement error the server skipped our ROLLBACK; _pg_end sends it (a second
        # round trip, on errors only).
        raise outcome
    return outcome


def _pg_pipeline(
    conn: psycopg.Connection,
    wire: _PgWire,
    sql: bytes,
    settings: bytes,
    params: list[bytes],
    *,
    max_rows: int,
    max_bytes: int,
    bound: tuple[Any, Any, Any] | None = None,
) -> tuple | Exception:
    pgconn = conn.pgconn
    pgconn.enter_pipeline_mode()
    try:
        # Our BEGIN opens the transaction, so psycopg sends none of its own, whatever the
        # connection's autocommit setting. Every query in a pipeline uses the extended
        # protocol, whose Parse refuses a second statement in the caller's text.
        pgconn.send_query_params(_PG_BEGIN, None)
        pgconn.send_query_params(settings, params)
        if bound is None:
            pgconn.send_query_params(sql, None)
        else:
            values, types, formats = bound
            pgconn.send_query_params(sql, values, param_types=types, param_formats=formats)
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
    if _LIBPQ.chunked:
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
        loop_io.blocking(functools.partial(conn.cancel_safe, timeout=_PG_MARGIN_S))
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
    conn: psycopg.Connection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    settings: Mapping[str, str] | None = None,
) -> tuple:
    _pg_exec(conn, _pg_setup(conn, timeout_ms, schema))
    if settings:  # inside the read-only transaction, transaction-local, every name and value bound
        names = list(settings)
        query = "SELECT " + ", ".join("pg_catalog.set_config(%s, %s, true)" for _ in names)
        with conn.cursor() as cur:
            cur.execute(query, [item for name in names for item in (name, settings[name])])
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


# -- plans and index advice (handlers/ai) --------------------------------------------------------


def _full_scans(plan: Any) -> list[FullScan]:
    """Tables an EXPLAIN (FORMAT JSON) plan reads whole: its Seq Scan nodes, by relation and alias."""
    return [
        FullScan(node["Relation Name"], node.get("Alias") or node["Relation Name"], row_estimate(node.get("Plan Rows")))
        for node in plan_objects(plan)
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name")
    ]


# -- catalogs ------------------------------------------------------------------------------------


class PostgresCatalog:
    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=pgrows.dict_row) as cur:
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
                "type": KINDS[r["kind"]],
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
        return KINDS[relation["kind"]] if relation else None

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
                        "on_update": ACTIONS.get(r["on_update"]),
                        "on_delete": ACTIONS.get(r["on_delete"]),
                    }
                )
        return result


def _table_facts(conn: Any, schema: str, table: str) -> dict[str, Any]:
    with conn.cursor(row_factory=pgrows.dict_row) as cur:
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


_PG_COLS = (
    "ARRAY(SELECT a.attname::text FROM unnest({keys}) WITH ORDINALITY k(attnum, ord) "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = {rel} AND a.attnum = k.attnum ORDER BY k.ord)"
)


def _pg_rows(conn: Any, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=pgrows.dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _snapshot(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
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
            out[r["name"]] = new_table(r["name"], KINDS[r["kind"]], r["comment"], rows, r["def"])
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
        add_key(out[oids[r["rel"]]], r["kind"], r["name"], r["cols"], r["ref_schema"], r["ref_table"], r["ref_cols"])
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


# -- profiling (handlers/query) ------------------------------------------------------------------

PROFILING = Profiling(
    exact_count_max_rows=5_000_000,  # a million rows counted in ~60 ms
    epoch="EXTRACT(EPOCH FROM {})",
    as_text="CAST({} AS TEXT)",
    # ~20 ms on 1M rows; REPEATABLE: every statement of one profile reads the same rows
    bernoulli_sample="TABLESAMPLE BERNOULLI ({percent:.6f}) REPEATABLE ({seed})",
)


# -- least privilege (backends/privileges.py) -----------------------------------------------------

_PG_CHECK = """
SELECT r.rolsuper, r.rolcreaterole, r.rolcreatedb, r.rolbypassrls,
       pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') AS read_files,
       pg_has_role(current_user, 'pg_write_server_files', 'MEMBER') AS write_files,
       pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') AS run_programs,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND n.nspname NOT LIKE 'pg_toast%'
                 AND has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')) AS can_write_tables,
       EXISTS (SELECT 1 FROM pg_namespace n WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
                 AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'
                 AND has_schema_privilege(n.oid, 'CREATE')) AS can_create
FROM pg_roles r WHERE r.rolname = current_user
"""
_PG_WARNINGS = {
    "rolsuper": "the account is a PostgreSQL superuser",
    "rolcreaterole": "the account can create roles",
    "rolcreatedb": "the account can create databases",
    "rolbypassrls": "the account bypasses row-level security",
    "read_files": "the account can read server files (pg_read_server_files)",
    "write_files": "the account can write server files (pg_write_server_files)",
    "run_programs": "the account can run server programs (pg_execute_server_program)",
    "can_write_tables": "the account can INSERT/UPDATE/DELETE/TRUNCATE tables",
    "can_create": "the account can CREATE objects in a schema",
}


def _privilege_warnings(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(_PG_CHECK)
        row = cur.fetchone()
        names = [d.name for d in cur.description]
    conn.rollback()
    if row is None:
        return ["the account's role could not be found in pg_roles"]
    flags = dict(zip(names, row))
    warnings = [text for key, text in _PG_WARNINGS.items() if flags.get(key)]
    if flags.get("rolsuper"):
        warnings.append("the account can read and write server files (superuser)")
    return warnings


# -- accounts, processes, kill (handlers/admin; backends/engines/admin.py) --------------------------

_ADMIN_PRIVILEGED = frozenset({
    "SUPERUSER", "CREATEROLE", "CREATEDB", "BYPASSRLS", "REPLICATION",
    "PG_READ_SERVER_FILES", "PG_WRITE_SERVER_FILES", "PG_EXECUTE_SERVER_PROGRAM", "PG_SIGNAL_BACKEND",
})  # fmt: skip
ADMIN_PRIVILEGES = Privileges(
    table_level=frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"}),
    privileged=_ADMIN_PRIVILEGED,
    role_level=_ADMIN_PRIVILEGED,  # role attributes (ALTER ROLE ... WITH) and predefined roles (pg_*)
)
_ROLE_ATTRIBUTES = ("superuser", "createrole", "createdb", "replication", "bypassrls")
KILL_NEEDS = "membership in pg_signal_backend or the process's role"


def scram_sha_256(password: str, *, iterations: int = 4096, salt: bytes | None = None) -> str:
    """PostgreSQL's stored SCRAM-SHA-256 verifier (RFC 5802/7677), as `CREATE ROLE ... PASSWORD`
    accepts it, so that the plain text is in no statement (logs, pg_stat_activity)."""
    salt = salt or os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    b64 = base64.b64encode
    return f"SCRAM-SHA-256${iterations}:{b64(salt).decode()}${b64(stored_key).decode()}:{b64(server_key).decode()}"


def admin_error(exc: Exception, *, needs: str, secrets: tuple[str, ...] = ()) -> GatewayError:
    """psycopg's exception during administration -> the gateway's; `needs` names the privilege
    the operation requires. Only the message of a permission error is passed on (scrubbed)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return PermissionDenied(f"the target's account lacks {needs} (PostgreSQL: {scrubbed(str(exc).splitlines()[0], secrets)})")
    if isinstance(exc, psycopg.errors.DuplicateObject):
        return InvalidArgument("the role already exists")
    if isinstance(exc, psycopg.errors.UndefinedObject):
        return NotFound("no such role or object (create it first)")
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return NotFound("no such table or schema")
    if isinstance(exc, psycopg.Error):
        return Unavailable(f"the target refused the operation (PostgreSQL SQLSTATE {exc.sqlstate})")
    return Unavailable(f"the operation failed ({type(exc).__name__})")


def _admin_connect(target: TargetSettings) -> psycopg.Connection:
    """Autocommit, not read-only, with the administration statement timeout; work that must not
    be left half-done runs in an explicit transaction."""
    kwargs = connect_kwargs(target, connect_timeout_s=CONNECT_TIMEOUT_S)
    kwargs.update(options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}", application_name="mcp-gateway-admin")
    return psycopg.connect(**kwargs, autocommit=True)


class PostgresAdmin:
    """Roles and backends of a PostgreSQL target (roles are cluster-wide: no host part)."""

    privileges = ADMIN_PRIVILEGES
    accounts_have_hosts = False

    def __init__(self, target: TargetSettings) -> None:
        self.target = target

    @contextlib.contextmanager
    def session(self) -> Iterator[PostgresAdminSession]:
        with opened(self.target.target_id, lambda: _admin_connect(self.target), (psycopg.Error,)) as conn:
            yield PostgresAdminSession(self.target, conn)


class PostgresAdminSession:
    """Work runs in one transaction and is checked before it commits: a GRANT the account may
    not make is only a WARNING in PostgreSQL."""

    def __init__(self, target: TargetSettings, conn: psycopg.Connection) -> None:
        self.target = target
        self.conn = conn

    def _running(self) -> list[Process]:
        found = self.conn.execute(
            "SELECT pid, usename, COALESCE(client_addr::text, 'local'), datname, state, "
            "EXTRACT(EPOCH FROM clock_timestamp() - query_start), left(query, %s), "
            "EXTRACT(EPOCH FROM COALESCE(xact_start, query_start)), application_name FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle' "
            "ORDER BY query_start",
            (STATEMENT_CHARS,),
        ).fetchall()
        return [
            Process(
                int(r[0]), r[1] or "", r[2], r[3] or "", r[4] or "", float(r[5] or 0), r[6] or "", float(r[7] or 0), r[8] or ""
            )
            for r in found
        ]

    def _find(self, process_id: int) -> Process | None:
        return next((p for p in self._running() if p.process_id == process_id), None)

    def processes(self) -> list[Process]:
        try:
            return self._running()
        except Exception as exc:
            raise admin_error(exc, needs=PROCESS_NEEDS) from exc

    def process(self, process_id: int) -> Process | None:
        try:
            return self._find(process_id)
        except Exception as exc:
            raise admin_error(exc, needs=PROCESS_NEEDS) from exc

    def kill_query(self, running: Process) -> None:
        def cancel() -> bool:  # False: the process is gone
            return bool(self.conn.execute("SELECT pg_cancel_backend(%s)", (running.process_id,)).fetchone()[0])

        def still_running() -> bool:
            now = self._find(running.process_id)
            # query_start restarts at each protocol step of a statement (parse, bind, execute); its
            # transaction start tells one run from the next. The text of a cancelled statement stays
            # while the session sits in the aborted transaction: not running.
            return (
                now is not None
                and now.statement == running.statement
                and now.state == "active"
                and abs(now.started_at - running.started_at) < 0.001
            )

        try:
            cancel_until_stopped(running, cancel=cancel, still_running=still_running)
        except Exception as exc:
            raise admin_error(exc, needs=KILL_NEEDS) from exc

    def accounts(self) -> list[Account]:
        try:
            found = self.conn.execute(
                "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
                "FROM pg_roles WHERE rolname !~ '^pg_' ORDER BY rolname"
            ).fetchall()
        except Exception as exc:
            raise admin_error(exc, needs="read access to pg_roles") from exc
        return [Account(r[0], "", bool(r[1]), [n for n, flag in zip(_ROLE_ATTRIBUTES, r[2:]) if flag]) for r in found]

    def _scope(self, on: str) -> tuple[str, str | None]:
        """`*` -> (default schema, None); `s.*` -> (s, None); `s.t` -> (s, t)."""
        if on == "*":
            return self.target.default_schema or "public", None
        schema, _, table = on.partition(".")
        return schema, (None if table == "*" else table)

    def create_user(self, *, username: str, password: str, host: str, read_only: bool) -> list[str]:
        """USAGE + SELECT on the default schema's tables when read_only; `host` has no meaning here."""
        schema = self.target.default_schema or "public"
        try:
            with self.conn.transaction():
                role = pgsql.Identifier(username)
                self.conn.execute(
                    pgsql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, pgsql.Literal(scram_sha_256(password)))
                )
                if not read_only:
                    return []
                self._grant_checked(username, ["SELECT"], schema, None)
        except Exception as exc:
            raise admin_error(exc, needs="CREATEROLE and the right to grant SELECT", secrets=(password,)) from exc
        return [f"USAGE ON SCHEMA {schema}", f"SELECT ON ALL TABLES IN SCHEMA {schema}"]

    def grant(self, *, username: str, host: str, privileges: list[str], on: str, role_privileges: list[str]) -> str:
        schema, table = self._scope(on)
        try:
            with self.conn.transaction():
                if privileges:
                    self._grant_checked(username, privileges, schema, table)
                role = pgsql.Identifier(username)
                for privilege in role_privileges:
                    if privilege.startswith("PG_"):  # a predefined role
                        self.conn.execute(pgsql.SQL("GRANT {} TO {}").format(pgsql.Identifier(privilege.lower()), role))
                    else:  # a role attribute, from the allowlist
                        self.conn.execute(pgsql.SQL("ALTER ROLE {} WITH " + privilege).format(role))
        except Exception as exc:
            raise admin_error(exc, needs=f"the right to grant {', '.join(privileges + role_privileges)} on {on}") from exc
        return f"{schema}.{table or '*'}"

    def _grant_checked(self, username: str, privileges: list[str], schema: str, table: str | None) -> None:
        """GRANT inside the caller's transaction, then check it took: PostgreSQL answers a GRANT
        the account may not make with a WARNING, not an error. Raises PermissionDenied (rolled back)."""
        role, nsp = pgsql.Identifier(username), pgsql.Identifier(schema)
        privs = pgsql.SQL(", ").join(pgsql.SQL(p) for p in privileges)
        self.conn.execute(pgsql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(nsp, role))
        if table is None:
            self.conn.execute(pgsql.SQL("GRANT {} ON ALL TABLES IN SCHEMA {} TO {}").format(privs, nsp, role))
        else:
            self.conn.execute(pgsql.SQL("GRANT {} ON TABLE {}.{} TO {}").format(privs, nsp, pgsql.Identifier(table), role))
        missing = self.conn.execute(
            "SELECT c.relname, p.priv FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, unnest(%s::text[]) AS p(priv) "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND (%s::text IS NULL OR c.relname = %s) "
            "AND NOT has_table_privilege(%s, c.oid, p.priv) ORDER BY 1, 2 LIMIT 5",
            (privileges, schema, table, table, username),
        ).fetchall()
        if not self.conn.execute("SELECT has_schema_privilege(%s, %s, 'USAGE')", (username, schema)).fetchone()[0]:
            missing.insert(0, (f"schema {schema}", "USAGE"))
        if missing:
            shown = ", ".join(f"{priv} on {name}" for name, priv in missing)
            raise PermissionDenied(
                f"the target's account may not grant {shown} (it needs to own them or hold them WITH GRANT OPTION); nothing was changed"
            )


# -- the cluster's configuration database (gateway/cluster.py) ------------------------------------


class ClusterDatabase:
    """gateway.cluster.ClusterDatabase on psycopg: the cluster's shared configuration lives in
    PostgreSQL, and gateway/ (the bottom layer) does not import the driver."""

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        return (psycopg.Error,) if driver_loaded("psycopg") else ()

    @property
    def unreachable(self) -> tuple[type[Exception], ...]:
        return (psycopg.OperationalError, psycopg.InterfaceError) if driver_loaded("psycopg") else ()

    @staticmethod
    def connect(
        dsn: str, *, autocommit: bool, connect_timeout: int, application_name: str, options: str | None = None
    ) -> psycopg.Connection:
        extra = {"options": options} if options else {}
        return psycopg.connect(
            dsn, autocommit=autocommit, connect_timeout=connect_timeout, application_name=application_name, **extra
        )

    @staticmethod
    def json(value: Any) -> pgjson.Jsonb:
        return pgjson.Jsonb(value)


CLUSTER_DATABASE = ClusterDatabase()


# -- vector columns (similarity_search) ----------------------------------------------------------
# pgvector columns (vector, halfvec) of a target's tables, their ANN indexes, and the statement
# that searches one through its index. Every statement here runs through ReadOnlySql (rules,
# read-only check, caps); the query vector is a bound parameter (a binding marker), never text.
_VECTOR_OPS = {  # an index's operator class -> (its distance operator, the metric)
    "vector_cosine_ops": ("<=>", "cosine"),
    "halfvec_cosine_ops": ("<=>", "cosine"),
    "vector_l2_ops": ("<->", "l2"),
    "halfvec_l2_ops": ("<->", "l2"),
    "vector_ip_ops": ("<#>", "inner_product"),
    "halfvec_ip_ops": ("<#>", "inner_product"),
}
_METRIC_OPS = {"cosine": "<=>", "l2": "<->", "inner_product": "<#>"}


class PgVectorSearch:
    """What similarity_search asks of a PostgreSQL target."""

    types = ("vector", "halfvec")

    @staticmethod
    def columns_sql(schema_marker: str, table_marker: str | None) -> str:
        """Vector columns (schema, table, column, type, dim; -1: not declared) with their ANN
        indexes ("am:opclass:index_name", comma-separated), of one schema (and one table)."""
        table_cond = f" AND c.relname = {table_marker}" if table_marker else ""
        return (
            "SELECT n.nspname AS table_schema, c.relname AS table_name, a.attname AS column_name, t.typname AS type,"
            " a.atttypmod AS dim, (SELECT string_agg(am.amname || ':' || opc.opcname || ':' || ic.relname, ',')"
            " FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid"
            " JOIN pg_catalog.pg_am am ON am.oid = ic.relam JOIN pg_catalog.pg_opclass opc ON opc.oid = i.indclass[0]"
            " WHERE i.indrelid = c.oid AND i.indkey[0] = a.attnum) AS indexes,"
            " (SELECT string_agg(ta.attname, ',' ORDER BY ta.attnum) FROM pg_catalog.pg_attribute ta"
            " JOIN pg_catalog.pg_type tt ON tt.oid = ta.atttypid WHERE ta.attrelid = c.oid AND ta.attnum > 0"
            " AND NOT ta.attisdropped AND tt.typname IN ('text', 'varchar', 'bpchar')) AS text_columns,"
            " (SELECT string_agg(ka.attname, ',' ORDER BY ka.attnum) FROM pg_catalog.pg_index pk"
            " JOIN pg_catalog.pg_attribute ka ON ka.attrelid = c.oid AND ka.attnum = ANY(pk.indkey)"
            " WHERE pk.indrelid = c.oid AND pk.indisprimary) AS key_columns,"
            " (SELECT xn.nspname FROM pg_catalog.pg_extension x JOIN pg_catalog.pg_namespace xn ON xn.oid = x.extnamespace"
            " WHERE x.extname = 'vector') AS vector_schema"
            " FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace JOIN pg_catalog.pg_type t ON t.oid = a.atttypid"
            " WHERE t.typname IN ('vector', 'halfvec') AND a.attnum > 0 AND NOT a.attisdropped"
            f" AND c.relkind IN ('r', 'p', 'm') AND n.nspname = {schema_marker}{table_cond}"
            " ORDER BY c.relname, a.attname"
        )

    @staticmethod
    def metric_of(indexes: str | None, preferred: str | None) -> tuple[str, str, str | None]:
        """(operator, metric, index name) of the search: the metric asked for, else the first ANN
        index's; an index of another metric is not used by the database (the caller is told)."""
        for entry in (indexes or "").split(","):
            if entry.count(":") < 2:
                continue
            am, opclass, name = entry.split(":", 2)
            if am in ("hnsw", "ivfflat") and opclass in _VECTOR_OPS:
                op, metric = _VECTOR_OPS[opclass]
                if preferred in (None, metric):
                    return op, metric, f"{am}:{name}"
        metric = preferred or "cosine"
        return _METRIC_OPS[metric], metric, None

    @staticmethod
    def nearest_sql(
        schema: str,
        table: str,
        column: str,
        type_: str,
        key_columns: list[str],
        text_columns: list[str],
        op: str,
        vector_marker: str,
        limit: int,
        vector_schema: str | None = None,
    ) -> str:
        """The `limit` rows nearest the bound vector, ordered by the index's operator (so the
        database's ANN index answers): their keys, texts and distance (column `_distance`).

        The operator is written OPERATOR(schema.op): the read-only check re-writes the statement
        from its parse, and a bare `<=>` would come back as MySQL's null-safe equality."""
        q = PostgreSQL.quote
        simple = vector_schema is not None and re.fullmatch(r"[a-z_][a-z0-9_]*", vector_schema) is not None
        cast = "halfvec" if type_ == "halfvec" else "vector"
        operator = f"OPERATOR({vector_schema}.{op})" if simple else f"OPERATOR({op})"
        cast = f"{q(vector_schema or '')}.{cast}" if simple else cast
        distance = f"{q(column)} {operator} CAST({vector_marker} AS {cast})"
        selected = ", ".join([*(q(c) for c in key_columns), *(q(c) for c in text_columns), f"{distance} AS _distance"])
        return (
            f"SELECT {selected} FROM {q(schema)}.{q(table)} WHERE {q(column)} IS NOT NULL ORDER BY {distance} LIMIT {int(limit)}"
        )

    @staticmethod
    def vector_literal(values: Any) -> str:
        return "[" + ",".join(repr(float(v)) for v in values) + "]"


# -- the engine --------------------------------------------------------------------------------------


class PostgreSQL:
    name = "pgsql"
    title = "PostgreSQL"
    default_port = 5432
    needs_auth_profile = True
    dialect = "postgres"
    readonly = READONLY
    placeholder = "%s"

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        return (psycopg.Error,) if driver_loaded("psycopg") else ()

    @staticmethod
    def executes_on_loop(target: TargetSettings) -> bool:
        """`execute` may run on the event loop (gateway/loop_io.py): the pipeline's every wait is
        _PgWire.wait. Not the three round trips of libpq < 14, which wait inside psycopg."""
        return _LIBPQ.pipeline

    vector_search = PgVectorSearch()  # similarity_search over pgvector columns
    vector_search_refusal = ""

    @staticmethod
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    @staticmethod
    def config_problem(row: Mapping[str, Any]) -> str:
        return "" if row.get("host") else "host is empty"

    @staticmethod
    def default_schema(target: TargetSettings) -> str:
        return target.default_schema or "public"

    # -- connections and the pool policy
    @staticmethod
    def connect(target: TargetSettings, *, timeout_s: float, io_timeout_s: float) -> psycopg.Connection:
        return psycopg.connect(**connect_kwargs(target, connect_timeout_s=timeout_s))

    @staticmethod
    def ping(conn: psycopg.Connection, target: TargetSettings, *, timeout_s: float) -> None:
        _ping(conn)

    @staticmethod
    def broken(conn: psycopg.Connection) -> bool:
        return conn.closed or conn.broken

    @staticmethod
    def needs_rollback(conn: psycopg.Connection) -> bool:
        return conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE

    @staticmethod
    def borrowed(conn: psycopg.Connection, target: TargetSettings) -> None:
        pass

    @staticmethod
    def returned(conn: psycopg.Connection) -> None:
        pass

    # -- read-only execution
    # settings: held transaction-locally by _run_pgsql (set_config(..., true), bound)
    execute = staticmethod(readonly_execute(_run_pgsql, local_settings=True))

    @staticmethod
    def bound_placeholder(position: int) -> str:
        return f"${position}"

    local_settings = True

    @staticmethod
    def session_id(conn: psycopg.Connection) -> int | None:
        """The server's id of the connection (pg_stat_activity.pid): backends/callers.py names its caller."""
        return conn.info.backend_pid

    @staticmethod
    @contextlib.contextmanager
    def settings_scope(conn: psycopg.Connection, settings: Mapping[str, str]) -> Iterator[None]:
        """A read-only transaction holding `settings` (set_config(..., true), bound) for reads
        outside `execute` (rag.fetch_from_source); rolled back at the end, whatever happened."""
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        conn.execute("BEGIN READ ONLY")
        try:
            names = list(settings)
            conn.execute(
                "SELECT " + ", ".join("pg_catalog.set_config(%s, %s, true)" for _ in names),
                [item for name in names for item in (name, settings[name])],
            )
            yield
        finally:
            _pg_end(conn)

    @staticmethod
    def explain_prefix(conn: psycopg.Connection, *, analyze: bool) -> str:
        return "EXPLAIN (ANALYZE, FORMAT JSON) " if analyze else "EXPLAIN (FORMAT JSON) "

    plan_of = staticmethod(json_plan)

    translate = staticmethod(translate)

    # -- catalogs
    @staticmethod
    def catalog(conn: psycopg.Connection) -> PostgresCatalog:
        return PostgresCatalog(conn)

    @staticmethod
    def table_facts(conn: psycopg.Connection, schema: str, table: str) -> dict[str, Any]:
        return _table_facts(conn, schema, table)

    @staticmethod
    def has_rowid(conn: psycopg.Connection, schema: str, table: str) -> bool:
        return False

    @staticmethod
    def snapshot(conn: psycopg.Connection, schema: str, tables: list[str] | None = None) -> dict[str, Table]:
        found = _snapshot(conn, schema, set(tables) if tables is not None else None)
        return with_view_dependencies(found, "postgres", schema)

    privilege_warnings = staticmethod(_privilege_warnings)

    # -- profiling SQL (handlers/query) --
    profiling = PROFILING
    explain_analyze = True
    database_is_schema = False  # a database holds schemas

    # -- accounts, processes, kill (handlers/admin) --
    @staticmethod
    def admin(target: TargetSettings) -> PostgresAdmin:
        return PostgresAdmin(target)

    # -- plans and index advice (handlers/ai) --
    full_scans = staticmethod(_full_scans)

    # -- RAG source reader (retrieval ingestion) --
    source_session = staticmethod(_source_session)

    @staticmethod
    def source_refused(exc: BaseException) -> bool:
        return isinstance(exc, psycopg.ProgrammingError | psycopg.DataError)


ENGINE = PostgreSQL()
