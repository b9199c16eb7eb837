"""MySQL and MariaDB: the `ENGINE` object and everything the gateway knows of them (pymysql).

Sessions: SET SESSION TRANSACTION READ ONLY and the target's timeout as max_statement_time
(MariaDB) / max_execution_time (MySQL). pymysql never gets CLIENT.MULTI_STATEMENTS, and runs
in autocommit: a statement's transaction ends with it, so returning a connection to the pool
needs no ROLLBACK round trip unless the server reported a transaction open (`needs_rollback`).

Execution:
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
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import io
import json
import math
import re
import socket
import ssl
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
    no_settings_scope,
    readonly_execute,
)
from backends.engines.catalog import Table, add_key, empty_constraints, like_substring, new_table, with_view_dependencies
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
    import pymysql
    import pymysql.converters
    import pymysql.cursors
    from pymysql.constants import CLIENT, FIELD_TYPE, SERVER_STATUS
else:  # imported by the first MySQL/MariaDB target (backends/drivers.py)
    pymysql = LazyDriver("pymysql")
    CLIENT = LazyDriver("pymysql.constants.CLIENT")
    FIELD_TYPE = LazyDriver("pymysql.constants.FIELD_TYPE")
    SERVER_STATUS = LazyDriver("pymysql.constants.SERVER_STATUS")

# A key's kind from key_column_usage alone (MariaDB shows table_constraints to no account with
# SELECT only): PRIMARY is the primary key's name, a foreign key references a table, the rest are unique.
KEY_KIND = (
    "CASE WHEN k.constraint_name = 'PRIMARY' THEN 'PRIMARY KEY' "
    "WHEN k.referenced_table_name IS NOT NULL THEN 'FOREIGN KEY' ELSE 'UNIQUE' END"
)
SYSTEM_SCHEMAS = ("information_schema", "mysql", "performance_schema", "sys")
KINDS = {"BASE TABLE": "table", "VIEW": "view", "SYSTEM VIEW": "view", "SEQUENCE": "sequence"}


@functools.cache
def _types() -> dict[int, str]:
    """pymysql's type codes by name (built at the first result, when pymysql is loaded)."""
    from pymysql.constants import FIELD_TYPE as field_types

    return {v: k.lower() for k, v in vars(field_types).items() if k.isupper() and isinstance(v, int)}


# -- the read-only check's part (backends/readonly.py) ------------------------------------------

READONLY = ReadOnlyRules(
    dialect="mysql",
    # files, sleep, locks, replication waits, known UDF backdoors
    denied_functions=frozenset(
        {
            "load_file",
            "sleep",
            "benchmark",
            "get_lock",
            "release_lock",
            "release_all_locks",
            "is_free_lock",
            "is_used_lock",
            "master_pos_wait",
            "source_pos_wait",
            "master_gtid_wait",
            "wait_for_executed_gtid_set",
            "wait_until_sql_thread_after_gtids",
            "sys_exec",
            "sys_eval",
            "sys_get",
            "sys_set",
            "lib_mysqludf_sys_info",
        }
    ),  # fmt: skip
    denied_schemas=frozenset({"mysql"}),  # mysql.user, mysql.global_priv: password hashes
    show_and_describe=True,
)

# -- driver errors: the one table of what pymysql's exceptions mean for the gateway --------------

TIMEOUT_CODES = frozenset({1969, 3024})  # MariaDB max_statement_time, MySQL max_execution_time
KILLED_CODE = 1317  # ER_QUERY_INTERRUPTED: KILL QUERY (admin_kill_query), not a timeout
READ_ONLY_CODES = frozenset({1792, 1290, 1836})
# Errors whose text only names what the caller wrote (columns, tables, syntax near ...).
NO_SUCH_TABLE_CODE = 1146  # ER_NO_SUCH_TABLE: the caller named a table the database does not have
USER_ERROR_CODES = frozenset(
    {1044, 1049, 1051, 1052, 1054, 1060, 1064, 1109, 1142, 1143, 1146, 1222, 1241, 1242, 1248, 1305, 1582, 1583, 1630}
)
# The account's grants refuse it (table, column, database access denied): PERMISSION_DENIED.
PRIVILEGE_CODES = frozenset({1044, 1142, 1143})
# The value sent cannot be compared or stored: illegal mix of collations (a character outside
# utf8mb3 against the catalog), incorrect string value, invalid character string.
BAD_VALUE_CODES = frozenset({1267, 1270, 1271, 1300, 1366})


def translate(exc: BaseException, *, timeout_ms: int = 0) -> GatewayError:
    """pymysql's exception -> the gateway's, by error number, first match wins:

    1317 (KILL QUERY)                      Cancelled
    TIMEOUT_CODES                          DeadlineExceeded
    READ_ONLY_CODES                        InvalidArgument (a write was refused)
    1146 (no such table)                   NotFound naming it
    PRIVILEGE_CODES                        PermissionDenied naming the privilege and object
    USER_ERROR_CODES                       InvalidArgument naming it (the caller's own words)
    OperationalError, client side (>= 2000, 0)   Unavailable
    DataError, BAD_VALUE_CODES             BadValue (the number and class only)
    anything else                          InvalidArgument (the number and class only)
    """
    if not isinstance(exc, pymysql.err.MySQLError):
        return GatewayError(f"the database call failed ({type(exc).__name__})")
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if errno == KILLED_CODE and isinstance(exc, pymysql.err.OperationalError):
        return Cancelled(CANCELLED)
    if errno in TIMEOUT_CODES:
        return DeadlineExceeded(f"the statement ran past its timeout of {timeout_ms} ms and was interrupted by the server")
    if errno in READ_ONLY_CODES:
        return InvalidArgument("the database refused to write: the statement runs in a read-only transaction")
    if errno == NO_SUCH_TABLE_CODE and len(exc.args) > 1:
        return NotFound(f"the database rejected the statement ({errno}): {exc.args[1]}")
    if errno in PRIVILEGE_CODES and len(exc.args) > 1:  # the account's grants refuse it
        return PermissionDenied(f"the target's account lacks the privilege ({errno}): {exc.args[1]}")
    if errno in USER_ERROR_CODES and len(exc.args) > 1:
        return InvalidArgument(f"the database rejected the statement ({errno}): {exc.args[1]}")
    if isinstance(exc, pymysql.err.OperationalError) and (errno >= 2000 or errno == 0):
        return Unavailable("the database connection failed during the statement")
    bad_value = isinstance(exc, pymysql.err.DataError) or (
        isinstance(exc, pymysql.err.OperationalError) and errno in BAD_VALUE_CODES
    )
    kind = BadValue if bad_value else InvalidArgument
    return kind(f"the database could not run the statement (error {errno}, {type(exc).__name__})")


# -- connections ---------------------------------------------------------------------------------


def _is_mariadb(conn: pymysql.connections.Connection) -> bool:
    return "mariadb" in conn.get_server_info().lower()


def _uses_tls(target: TargetSettings) -> bool:
    return target.use_ssl and target.ssl_mode != "disable"


def ssl_context(target: TargetSettings) -> ssl.SSLContext | None:
    if not _uses_tls(target):
        return None
    context = ssl.create_default_context()
    if target.ssl_mode != "verify-full":
        context.check_hostname = False
    if target.ssl_mode not in ("verify-ca", "verify-full"):
        context.verify_mode = ssl.CERT_NONE  # require: encrypt, do not verify (libpq's meaning)
    return context


def connect_session(
    target: TargetSettings, *, connect_timeout_s: float, io_timeout_s: float | None
) -> pymysql.connections.Connection:
    conn = pymysql.connect(
        host=target.host,
        port=target.port,
        user=target.username,
        password=target.password,
        database=target.database or target.default_schema or None,
        charset="utf8mb4",
        autocommit=True,
        client_flag=0,  # no MULTI_STATEMENTS: one statement per call, whatever the caller sends
        connect_timeout=max(1, math.ceil(connect_timeout_s)),
        read_timeout=io_timeout_s,
        write_timeout=io_timeout_s,
        ssl=ssl_context(target),
    )
    if conn.client_flag & CLIENT.MULTI_STATEMENTS:  # pragma: no cover - a pymysql default change
        conn.close()
        raise RuntimeError("pymysql enabled MULTI_STATEMENTS")
    if not conn._secure:  # plain TCP: its reads may wait on the event loop (executes_on_loop)
        conn._rfile.close()
        conn._rfile = io.BufferedReader(_LoopWaitingSocketIO(conn._sock, "rb"))
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION READ ONLY")
        if _is_mariadb(conn):
            cur.execute("SET SESSION max_statement_time = %s", (target.timeout_ms / 1000,))
        else:
            cur.execute("SET SESSION max_execution_time = %s", (target.timeout_ms,))
    return conn


class _LoopWaitingSocketIO(socket.SocketIO):
    """pymysql's reads of a pooled session (its `_rfile`, all its waits for the server) that,
    run on the event loop (gateway/loop_io.py), wait there for the socket instead of blocking
    in recv: the loop runs other calls meanwhile. Elsewhere, a plain socket file. Writes need
    no such care: a statement run on the loop is at most INLINE_SQL_CHARS (backends/sql.py),
    which the socket's send buffer takes at once. Plain TCP only (executes_on_loop)."""

    def readinto(self, buffer: Any) -> int | None:
        if loop_io.on_loop():
            timeout = self._sock.gettimeout()
            if not loop_io.wait_socket(self._sock.fileno(), write=False, timeout_s=_LOOP_WAIT_S if timeout is None else timeout):
                raise TimeoutError("timed out")  # as the socket's own timeout: pymysql closes the session
        return super().readinto(buffer)


_LOOP_WAIT_S = 86_400.0  # a session opened without a read timeout (the statement timeout still ends it)


def _waits_on_loop(conn: pymysql.connections.Connection) -> bool:
    rfile = conn._rfile
    return isinstance(getattr(rfile, "raw", None), _LoopWaitingSocketIO)


def _ping(conn: pymysql.connections.Connection, *, timeout_s: float) -> None:
    """COM_PING with a short read timeout: a half-open socket must not hold a borrower for
    the whole io timeout. pymysql has no per-call timeout, so its read timeout is lowered
    for the ping (the attribute it applies before each packet read)."""
    saved = getattr(conn, "_read_timeout", None)
    conn._read_timeout = timeout_s
    try:
        conn.ping(reconnect=False)
    finally:
        conn._read_timeout = saved


def _needs_rollback(conn: pymysql.connections.Connection) -> bool:
    """From the status flags of the server's last OK packet (result sets do not update them).
    In autocommit a transaction opens only through a statement answered with an OK packet
    (START TRANSACTION, SET autocommit = 0, ...: refused by the allowlist, never sent by the
    gateway after START TRANSACTION without its ROLLBACK; stored functions may not change
    autocommit), so "autocommit on, no transaction" cannot be stale in the unsafe direction."""
    status = conn.server_status or 0
    return bool(status & SERVER_STATUS.SERVER_STATUS_IN_TRANS) or not status & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT


# -- RAG source reader (retrieval ingestion) ------------------------------------------------------

# The reader may wait on a full pipeline queue while the model embeds: the server must not drop
# a slow-reading client mid-stream.
SOURCE_NET_WRITE_TIMEOUT_S = 3600


class MySQLSourceSession:
    """A sync's session on a source (backends/retrieval/ingest/sources.py SourceSession): rows
    through the unbuffered SSCursor, so memory stays bounded by the batch."""

    def __init__(self, conn: pymysql.connections.Connection) -> None:
        self.conn = conn

    def scalar(self, sql: str, params: list[Any]) -> Any:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchone()[0]

    def stream(self, sql: str, params: list[Any], batch_rows: int) -> Iterator[tuple[list[str], list[tuple]]]:
        cur = self.conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(sql, params)
        names = [d[0] for d in cur.description]
        while True:
            batch = cur.fetchmany(batch_rows)
            if not batch:
                break
            yield names, list(batch)
        cur.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()


def _source_session(target: TargetSettings, *, connect_timeout_s: float) -> MySQLSourceSession:
    # No socket timeout past the connect: a sync waits on the server for as long as its query takes.
    conn = connect_session(target, connect_timeout_s=connect_timeout_s, io_timeout_s=None)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION net_write_timeout = %s", (SOURCE_NET_WRITE_TIMEOUT_S,))
    except BaseException:
        conn.close()
        raise
    return MySQLSourceSession(conn)


# -- read-only execution ---------------------------------------------------------------------------


def _datetime(text: str) -> Any:
    """DATETIME and TIMESTAMP as pymysql reads them (a datetime, or the text of an invalid one
    such as 0000-00-00 00:00:00), through the C parser first: pymysql's regex costs ~2 us a value."""
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return pymysql.converters.convert_datetime(text)


# The converters of a read-only statement's result. DECIMAL and DATE stay the text the server
# sent: it is already what backends/values.py would make of the parsed value (str(Decimal("12.50"))
# is "12.50", date.isoformat() is "2024-05-01", and an invalid date stays its text either way),
# and parsing 100 dates cost more than the rest of a 100-row answer's decoding.
# tests/backends/test_mysql_values.py holds both paths equal on edge values.
@functools.cache
def _wire_text_decoders() -> dict[int, Any]:
    return {
        **pymysql.converters.decoders,
        FIELD_TYPE.DECIMAL: pymysql.converters.through,
        FIELD_TYPE.NEWDECIMAL: pymysql.converters.through,
        FIELD_TYPE.DATE: pymysql.converters.through,
        FIELD_TYPE.DATETIME: _datetime,
        FIELD_TYPE.TIMESTAMP: _datetime,
    }


def _run_mysql(
    conn: pymysql.connections.Connection,
    sql: str,
    *,
    timeout_ms: int,
    max_rows: int,
    max_bytes: int,
    schema: str | None,
    params: Sequence[Any] | None = None,
) -> tuple:
    if conn.client_flag & CLIENT.MULTI_STATEMENTS:
        raise Unavailable("refusing a MySQL connection opened with CLIENT_MULTI_STATEMENTS")
    if loop_io.on_loop() and not _waits_on_loop(conn):  # nothing sent yet: the caller takes a thread
        raise loop_io.WouldBlock()
    mariadb = _is_mariadb(conn)
    cur = conn.cursor(pymysql.cursors.SSCursor)  # unbuffered: rows past the cap are never held
    try:
        if _needs_rollback(conn):
            conn.rollback()  # tx_read_only only governs a transaction the statement itself starts
        if schema:
            conn.select_db(schema)  # COM_INIT_DB: the name is never part of SQL text
        if mariadb:
            # The statement's own transaction is read-only and timed, in one round trip.
            sql = f"SET STATEMENT max_statement_time = {timeout_ms / 1000:.3f}, tx_read_only = 1 FOR {sql}"
        else:
            cur.execute(f"SET SESSION transaction_read_only = 1, SESSION max_execution_time = {timeout_ms}")
            cur.execute("START TRANSACTION READ ONLY")
        # No args: pymysql does no %-formatting. With args (a custom tool's bound values; the text
        # has %s placeholders and every literal % doubled), pymysql escapes each value itself.
        conn.decoders, decoders = _wire_text_decoders(), conn.decoders
        try:  # the result's converters are chosen as its columns are described, inside execute
            cur.execute(sql, None if params is None else tuple(params))
        finally:
            conn.decoders = decoders
        if cur.description is None:
            return [], [], None, 2
        columns = [{"name": d[0], "type": _types().get(d[1], str(d[1]))} for d in cur.description]
        rows, reason, size = collect(cur, max_rows=max_rows, max_bytes=max_bytes)
        return columns, rows, reason, size
    except pymysql.err.MySQLError as exc:
        raise translate(exc, timeout_ms=timeout_ms) from exc
    finally:
        try:
            cur.close()  # drains what the LIMIT let through
            if _needs_rollback(conn):  # free in autocommit (the pool's sessions): no round trip
                conn.rollback()
            if schema and conn.db:
                conn.select_db(conn.db)  # the pooled session keeps its default database
        except pymysql.err.MySQLError:
            pass  # the pool sees the broken connection and discards it


# -- plans and index advice (handlers/ai) --------------------------------------------------------


def _full_scans(plan: Any) -> list[FullScan]:
    """Tables an EXPLAIN FORMAT=JSON plan reads whole: access_type ALL (MariaDB names each by its alias)."""
    return [
        FullScan(node["table_name"], node["table_name"], row_estimate(node.get("rows")))
        for node in plan_objects(plan)
        if node.get("access_type") == "ALL" and node.get("table_name")
    ]


# MariaDB's EXPLAIN FORMAT=JSON writes a condition's text unescaped ("attached_condition":
# "t.name = 'x"y'"), which is not JSON. It writes one key per line, so a value line is repaired
# by escaping the quotes inside its string.
_VALUE_LINE = re.compile(r'^(\s*"[^"\n]+": ")(.*)("(?:,)?)$', re.MULTILINE)


def _escape_inner_quotes(match: re.Match[str]) -> str:
    inner = re.sub(r'(?<!\\)"', r'\\"', match.group(2))
    return f"{match.group(1)}{inner}{match.group(3)}"


def plan_of(out: dict[str, Any]) -> Any:
    """The EXPLAIN FORMAT=JSON plan, parsed: MariaDB's invalid JSON (above) repaired first."""
    plan = json_plan(out)
    if isinstance(plan, str):
        try:
            return json.loads(_VALUE_LINE.sub(_escape_inner_quotes, plan))
        except ValueError:
            return plan
    return plan


# -- catalogs ------------------------------------------------------------------------------------


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
            (SYSTEM_SCHEMAS, after, limit),
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
                "type": KINDS.get(r["kind"], r["kind"].lower()),
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
        return KINDS.get(rows[0]["kind"], rows[0]["kind"].lower()) if rows else None

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
            # key_column_usage alone: MariaDB shows table_constraints to no SELECT-only account
            f"SELECT k.constraint_name AS name, {KEY_KIND} AS kind, k.column_name AS col, "
            "k.referenced_table_schema AS ref_schema, k.referenced_table_name AS ref_table, k.referenced_column_name AS ref_col "
            "FROM information_schema.key_column_usage k WHERE k.table_schema = %s AND k.table_name = %s "
            "ORDER BY kind, k.constraint_name, k.ordinal_position",
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
        if _is_mariadb(self.conn):
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


def _table_facts(conn: Any, schema: str, table: str) -> dict[str, Any]:
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


def _rows(conn: Any, sql: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())


def _snapshot(conn: Any, schema: str, only: set[str] | None) -> dict[str, Table]:
    out: dict[str, Table] = {}
    names = tuple(sorted(only)) if only is not None else None
    if names == ():
        return out

    def among(column: str) -> tuple[str, tuple[Any, ...]]:
        """The statement's filter on the tables asked for, and its parameters."""
        return (f" AND {column} IN %s", (names,)) if names is not None else ("", ())

    where, params = among("t.table_name")
    for r in _rows(
        conn,
        "SELECT t.table_name AS name, t.table_type AS kind, t.table_comment AS comment, t.table_rows AS n, v.view_definition AS def "
        "FROM information_schema.tables t LEFT JOIN information_schema.views v "
        "ON v.table_schema = t.table_schema AND v.table_name = t.table_name WHERE t.table_schema = %s" + where,
        (schema, *params),
    ):
        if only is None or r["name"] in only:
            kind = KINDS.get(r["kind"], str(r["kind"]).lower())
            comment = None if kind == "view" else r["comment"]  # MariaDB says 'VIEW' there
            out[r["name"]] = new_table(r["name"], kind, comment, r["n"], r["def"])
    for r in _rows(
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
    for r in _rows(
        conn,
        f"SELECT k.table_name AS t, {KEY_KIND} AS kind, k.constraint_name AS name, k.column_name AS col, "
        "k.referenced_table_schema AS ref_schema, k.referenced_table_name AS ref_table, k.referenced_column_name AS ref_col "
        "FROM information_schema.key_column_usage k WHERE k.table_schema = %s"
        + among("k.table_name")[0]
        + " ORDER BY k.table_name, k.constraint_name, k.ordinal_position",
        (schema, *params),
    ):
        if r["t"] not in out:
            continue
        key = keys.setdefault((r["t"], r["kind"], r["name"]), {"columns": [], "ref_columns": [], "row": r})
        key["columns"].append(r["col"])
        key["ref_columns"].append(r["ref_col"])
    for (table, kind, name), key in keys.items():
        add_key(out[table], kind, name, key["columns"], key["row"]["ref_schema"], key["row"]["ref_table"], key["ref_columns"])
    indexes: dict[tuple[str, str], dict[str, Any]] = {}
    for r in _rows(
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


# -- profiling (handlers/query) ------------------------------------------------------------------

PROFILING = Profiling(
    exact_count_max_rows=500_000,  # InnoDB walks an index for COUNT(*): ~0.15-0.3 s per million rows
    epoch="UNIX_TIMESTAMP({})",
    length="CHAR_LENGTH({})",  # LENGTH counts bytes
)


# -- least privilege (backends/privileges.py) -----------------------------------------------------

_WRITE = re.compile(
    r"\b(ALL PRIVILEGES|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|INDEX|TRIGGER|EVENT|CREATE ROUTINE|ALTER ROUTINE|EXECUTE)\b"
)
_GRANT = re.compile(r"^GRANT (.+?) ON (\S+) TO", re.IGNORECASE)


def _privilege_warnings(conn: Any) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SHOW GRANTS FOR CURRENT_USER()")
        grants = [row[0] for row in cur.fetchall()]
    conn.rollback()
    warnings: list[str] = []
    for grant in grants:
        match = _GRANT.match(grant)
        if not match:
            continue
        privileges, scope = match.group(1).upper(), match.group(2)
        if "ALL PRIVILEGES" in privileges and scope == "*.*":
            warnings.append("the account has ALL PRIVILEGES on *.* (it can read and write server files)")
        elif re.search(r"\bFILE\b", privileges):
            warnings.append("the account has the FILE privilege (LOAD_FILE, SELECT ... INTO OUTFILE)")
        if re.search(r"\bSUPER\b", privileges):
            warnings.append("the account has the SUPER privilege")
        if _WRITE.search(privileges.replace("GRANT OPTION", "")):
            warnings.append(f"the account can write on {scope}")
        if "WITH GRANT OPTION" in grant.upper():
            warnings.append(f"the account can grant privileges on {scope}")
    return list(dict.fromkeys(warnings))


# -- accounts, processes, kill (handlers/admin; backends/engines/admin.py) --------------------------

_ADMIN_PRIVILEGED = frozenset({
    "SUPER", "FILE", "PROCESS", "RELOAD", "SHUTDOWN", "CREATE USER", "GRANT OPTION", "ALL", "ALL PRIVILEGES",
    "REPLICATION SLAVE", "REPLICATION CLIENT", "BINLOG ADMIN", "CONNECTION ADMIN", "READ_ONLY ADMIN",
})  # fmt: skip
ADMIN_PRIVILEGES = Privileges(
    table_level=frozenset({
        "SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "INDEX", "CREATE VIEW", "SHOW VIEW",
        "TRIGGER", "EXECUTE", "REFERENCES", "CREATE TEMPORARY TABLES", "LOCK TABLES", "EVENT", "CREATE ROUTINE", "ALTER ROUTINE",
    }),
    privileged=_ADMIN_PRIVILEGED,
    # granted ON *.*; ALL and GRANT OPTION also apply per database or table
    role_level=_ADMIN_PRIVILEGED - {"ALL", "ALL PRIVILEGES", "GRANT OPTION"},
)  # fmt: skip
ADMIN_DENIED_CODES = frozenset({1044, 1045, 1142, 1143, 1227, 1095, 1410, 1370})  # "not allowed"
KILL_NEEDS = "CONNECTION ADMIN or SUPER (to kill another account's query)"


def mysql_native_hash(password: str) -> str:
    """mysql_native_password's stored form: '*' + hex(SHA1(SHA1(password))), so that the plain
    text is in no statement (logs, process lists)."""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()  # noqa: S324 - the protocol's own


def admin_error(exc: Exception, *, needs: str, secrets: tuple[str, ...] = ()) -> GatewayError:
    """pymysql's exception during administration -> the gateway's; `needs` names the privilege
    the operation requires. Only the message of a permission error is passed on (scrubbed)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
        if code in ADMIN_DENIED_CODES:
            detail = scrubbed(str(exc.args[1]) if len(exc.args) > 1 else "", secrets)
            return PermissionDenied(f"the target's account lacks {needs} (MariaDB {code}: {detail})")
        if code == 1396:
            return InvalidArgument("the operation failed: the user already exists (or, for a drop, does not)")
        if code == 1094:
            return NotFound("no such process")
        if code == 1133:
            return NotFound("no such user (create it first)")
        return Unavailable(f"the target refused the operation (MariaDB error {code})")
    return Unavailable(f"the operation failed ({type(exc).__name__})")


def _admin_connect(target: TargetSettings) -> pymysql.connections.Connection:
    """The target's session made writable, with the administration statement timeout (MariaDB)."""
    conn = connect_session(target, connect_timeout_s=CONNECT_TIMEOUT_S, io_timeout_s=STATEMENT_TIMEOUT_MS / 1000 + 5)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION READ WRITE")
            if _is_mariadb(conn):
                cur.execute("SET SESSION max_statement_time = %s", (STATEMENT_TIMEOUT_MS / 1000,))
    except BaseException:
        conn.close()
        raise
    return conn


class MySQLAdmin:
    """Accounts (user@host) and threads of a MariaDB/MySQL target."""

    privileges = ADMIN_PRIVILEGES
    accounts_have_hosts = True

    def __init__(self, target: TargetSettings) -> None:
        self.target = target

    @contextlib.contextmanager
    def session(self) -> Iterator[MySQLAdminSession]:
        with opened(self.target.target_id, lambda: _admin_connect(self.target), (pymysql.err.MySQLError,)) as conn:
            yield MySQLAdminSession(self.target, conn)


class MySQLAdminSession:
    """DDL commits at once on MariaDB: a user whose grant fails is dropped again."""

    def __init__(self, target: TargetSettings, conn: pymysql.connections.Connection) -> None:
        self.target = target
        self.conn = conn

    def _running(self) -> list[Process]:
        elapsed = "TIME_MS / 1000" if _is_mariadb(self.conn) else "TIME"
        with self.conn.cursor() as cur:
            cur.execute(
                f"SELECT ID, USER, HOST, DB, COMMAND, STATE, {elapsed}, LEFT(INFO, %s), UNIX_TIMESTAMP(NOW(6)) - {elapsed} "
                "FROM information_schema.PROCESSLIST "
                f"WHERE ID <> CONNECTION_ID() AND COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump') ORDER BY {elapsed} DESC",
                (STATEMENT_CHARS,),
            )
            found = cur.fetchall()
        return [
            Process(
                process_id=int(r[0]),
                user=r[1] or "",
                host=r[2] or "",
                database=r[3] or "",
                state=f"{r[4]}: {r[5] or ''}".strip(": "),
                time_s=float(r[6] or 0),
                statement=r[7] or "",
                started_at=float(r[8] or 0),
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
        def cancel() -> bool:
            with self.conn.cursor() as cur:
                cur.execute("KILL QUERY %s", (running.process_id,))
            return True

        def still_running() -> bool:
            now = self._find(running.process_id)
            # gone, running something else, or started again since
            return now is not None and now.statement == running.statement and now.time_s >= running.time_s

        try:
            cancel_until_stopped(running, cancel=cancel, still_running=still_running)
        except Exception as exc:
            raise admin_error(exc, needs=KILL_NEEDS) from exc

    def accounts(self) -> list[Account]:
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT User, Host, is_role FROM mysql.user ORDER BY User, Host")
                return [Account(r[0], r[1], r[2] != "Y", ["role"] if r[2] == "Y" else []) for r in cur.fetchall()]
        except Exception as exc:
            raise admin_error(exc, needs="SELECT on mysql.user") from exc

    def _scope(self, on: str) -> str:
        if on == "*":
            database = self.target.database or self.target.default_schema
            if not database:
                raise InvalidArgument(
                    f"target {self.target.target_id!r} names no database: give on as <database>.* or <database>.<table>"
                )
            return f"{MySQL.quote(database)}.*"
        if on == "*.*":
            return "*.*"
        schema, _, table = on.partition(".")
        return f"{MySQL.quote(schema)}.*" if table == "*" else f"{MySQL.quote(schema)}.{MySQL.quote(table)}"

    def create_user(self, *, username: str, password: str, host: str, read_only: bool) -> list[str]:
        secrets = (password,)
        scope = self._scope("*") if read_only else ""
        try:
            with self.conn.cursor() as cur:
                if _is_mariadb(self.conn):
                    cur.execute("CREATE USER %s@%s IDENTIFIED BY PASSWORD %s", (username, host, mysql_native_hash(password)))
                else:  # MySQL 8 dropped IDENTIFIED BY PASSWORD; its default plugin salts the hash itself
                    cur.execute("CREATE USER %s@%s IDENTIFIED BY %s", (username, host, password))
        except Exception as exc:
            raise admin_error(exc, needs="the CREATE USER privilege", secrets=secrets) from exc
        if not read_only:
            return []
        try:
            with self.conn.cursor() as cur:
                cur.execute(f"GRANT SELECT ON {scope} TO %s@%s", (username, host))
        except Exception as exc:
            with contextlib.suppress(Exception), self.conn.cursor() as cur:
                cur.execute("DROP USER %s@%s", (username, host))  # nothing half-done
            raise admin_error(exc, needs=f"SELECT with GRANT OPTION on {scope} (the user was not kept)", secrets=secrets) from exc
        return [f"SELECT ON {scope}"]

    def grant(self, *, username: str, host: str, privileges: list[str], on: str, role_privileges: list[str]) -> str:
        scope = self._scope(on)
        try:
            with self.conn.cursor() as cur:
                if privileges:
                    cur.execute(f"GRANT {', '.join(privileges)} ON {scope} TO %s@%s", (username, host))
                if role_privileges:
                    cur.execute(f"GRANT {', '.join(role_privileges)} ON *.* TO %s@%s", (username, host))
        except Exception as exc:
            raise admin_error(exc, needs=f"{', '.join(privileges + role_privileges)} WITH GRANT OPTION on {scope}") from exc
        return scope


# -- the engine --------------------------------------------------------------------------------------


class MySQL:
    """MySQL and MariaDB (told apart per connection where they differ: the server's version text)."""

    name = "mysql"
    title = "MySQL/MariaDB"
    default_port = 3306
    needs_auth_profile = True
    dialect = "mysql"
    readonly = READONLY
    placeholder = "%s"
    vector_search = None
    vector_search_refusal = "similarity_search needs a PostgreSQL target with pgvector columns"

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        return (pymysql.err.Error,) if driver_loaded("pymysql") else ()

    @staticmethod
    def quote(name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    @staticmethod
    def config_problem(row: Mapping[str, Any]) -> str:
        return "" if row.get("host") else "host is empty"

    @staticmethod
    def default_schema(target: TargetSettings) -> str:
        return target.database or target.default_schema

    # -- connections and the pool policy
    @staticmethod
    def connect(target: TargetSettings, *, timeout_s: float, io_timeout_s: float) -> pymysql.connections.Connection:
        return connect_session(target, connect_timeout_s=timeout_s, io_timeout_s=io_timeout_s)

    @staticmethod
    def ping(conn: pymysql.connections.Connection, target: TargetSettings, *, timeout_s: float) -> None:
        _ping(conn, timeout_s=timeout_s)

    @staticmethod
    def broken(conn: pymysql.connections.Connection) -> bool:
        return not conn.open

    needs_rollback = staticmethod(_needs_rollback)

    @staticmethod
    def borrowed(conn: pymysql.connections.Connection, target: TargetSettings) -> None:
        pass

    @staticmethod
    def returned(conn: pymysql.connections.Connection) -> None:
        pass

    # -- read-only execution
    execute = staticmethod(readonly_execute(_run_mysql))

    local_settings = False

    @staticmethod
    def executes_on_loop(target: TargetSettings) -> bool:
        """Over plain TCP every read of a pooled session waits through _LoopWaitingSocketIO. Not
        over TLS: a readable socket may hold only part of a record, and the rest is waited for
        inside the ssl module."""
        return not _uses_tls(target)

    settings_scope = staticmethod(no_settings_scope)

    @staticmethod
    def bound_placeholder(position: int) -> str:
        return "%s"

    @staticmethod
    def session_id(conn: pymysql.connections.Connection) -> int | None:
        """The server's id of the connection (PROCESSLIST.ID): backends/callers.py names its caller."""
        return conn.thread_id()

    @staticmethod
    def explain_prefix(conn: pymysql.connections.Connection, *, analyze: bool) -> str:
        if _is_mariadb(conn):
            return "ANALYZE FORMAT=JSON " if analyze else "EXPLAIN FORMAT=JSON "
        return "EXPLAIN ANALYZE " if analyze else "EXPLAIN FORMAT=JSON "

    plan_of = staticmethod(plan_of)
    translate = staticmethod(translate)

    # -- catalogs
    @staticmethod
    def catalog(conn: pymysql.connections.Connection) -> MySQLCatalog:
        return MySQLCatalog(conn)

    @staticmethod
    def table_facts(conn: pymysql.connections.Connection, schema: str, table: str) -> dict[str, Any]:
        return _table_facts(conn, schema, table)

    @staticmethod
    def has_rowid(conn: pymysql.connections.Connection, schema: str, table: str) -> bool:
        return False

    @staticmethod
    def snapshot(conn: pymysql.connections.Connection, schema: str, tables: list[str] | None = None) -> dict[str, Table]:
        found = _snapshot(conn, schema, set(tables) if tables is not None else None)
        return with_view_dependencies(found, "mysql", schema)

    privilege_warnings = staticmethod(_privilege_warnings)

    # -- profiling SQL (handlers/query) --
    profiling = PROFILING
    explain_analyze = True
    database_is_schema = True  # a target's database is the one schema it reads

    # -- accounts, processes, kill (handlers/admin) --
    @staticmethod
    def admin(target: TargetSettings) -> MySQLAdmin:
        return MySQLAdmin(target)

    # -- plans and index advice (handlers/ai) --
    full_scans = staticmethod(_full_scans)

    # -- RAG source reader (retrieval ingestion) --
    source_session = staticmethod(_source_session)

    @staticmethod
    def source_refused(exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.ProgrammingError | pymysql.err.InternalError)


ENGINE = MySQL()
