"""Opening one backend connection per protocol, with the gateway's session settings.

Every session is read-only at the backend (default_transaction_read_only, SET SESSION
TRANSACTION READ ONLY, mode=ro + query_only) and carries the target's timeout_ms as its
statement timeout (statement_timeout, max_statement_time / max_execution_time, and for sqlite
a progress handler polling `SqliteConnection.deadline`), so a safety bug elsewhere still
cannot write or run forever. pymysql never gets CLIENT.MULTI_STATEMENTS, and runs in
autocommit: a statement's transaction ends with it, so returning a connection to the pool
needs no ROLLBACK round trip unless the server reported a transaction open (`needs_rollback`).
"""

from __future__ import annotations

import math
import os
import sqlite3
import ssl
import time
import urllib.parse
from typing import Any

import psycopg
import pymysql
from pymysql.constants import CLIENT, SERVER_STATUS

from backends.targets import Target


def mysql_ssl(target: Target) -> ssl.SSLContext | None:
    if not target.use_ssl or target.ssl_mode == "disable":
        return None
    context = ssl.create_default_context()
    if target.ssl_mode != "verify-full":
        context.check_hostname = False
    if target.ssl_mode not in ("verify-ca", "verify-full"):
        context.verify_mode = ssl.CERT_NONE  # require: encrypt, do not verify (libpq's meaning)
    return context


def connect_mysql(target: Target, *, connect_timeout_s: float, io_timeout_s: float) -> pymysql.connections.Connection:
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
        ssl=mysql_ssl(target),
    )
    if conn.client_flag & CLIENT.MULTI_STATEMENTS:  # pragma: no cover - a pymysql default change
        conn.close()
        raise RuntimeError("pymysql enabled MULTI_STATEMENTS")
    with conn.cursor() as cur:
        cur.execute("SET SESSION TRANSACTION READ ONLY")
        if "mariadb" in conn.get_server_info().lower():
            cur.execute("SET SESSION max_statement_time = %s", (target.timeout_ms / 1000,))
        else:
            cur.execute("SET SESSION max_execution_time = %s", (target.timeout_ms,))
    return conn


def ping_mysql(conn: pymysql.connections.Connection, *, timeout_s: float) -> None:
    """COM_PING with a short read timeout: a half-open socket must not hold a borrower for
    the whole io timeout. pymysql has no per-call timeout, so its read timeout is lowered
    for the ping (the attribute it applies before each packet read)."""
    saved = getattr(conn, "_read_timeout", None)
    conn._read_timeout = timeout_s
    try:
        conn.ping(reconnect=False)
    finally:
        conn._read_timeout = saved


def connect_pgsql(target: Target, *, connect_timeout_s: float) -> psycopg.Connection:
    return psycopg.connect(**pg_kwargs(target, connect_timeout_s=connect_timeout_s))


def ping_pgsql(conn: psycopg.Connection) -> None:
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


def pg_kwargs(target: Target, *, connect_timeout_s: float) -> dict[str, Any]:
    return {
        "host": target.host,
        "port": target.port,
        "dbname": target.database or None,
        "user": target.username,
        "password": target.password or None,
        "sslmode": (target.ssl_mode or "require") if target.use_ssl else "disable",
        "connect_timeout": max(2, math.ceil(connect_timeout_s)),  # libpq's minimum is 2 s
        "application_name": "mcp-gateway",
        "options": f"-c statement_timeout={target.timeout_ms} -c default_transaction_read_only=on",
        # A peer that vanished without a reset (network partition) is noticed in about a minute
        # instead of the kernel's two hours, so a health check cannot hang on it for long.
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }


class SqliteConnection(sqlite3.Connection):
    """Carries a deadline the progress handler enforces (sqlite has no statement timeout)."""

    deadline: float = math.inf
    file_id: tuple[int, int] = (0, 0)


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino)


def connect_sqlite(target: Target, *, timeout_s: float) -> SqliteConnection:
    path = os.path.abspath(target.database)
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout_s, check_same_thread=False, factory=SqliteConnection)
    assert isinstance(conn, SqliteConnection)
    conn.file_id = _file_id(path)
    conn.execute("PRAGMA query_only = ON")
    conn.set_progress_handler(lambda: int(time.monotonic() > conn.deadline), 10_000)
    return conn


def ping_sqlite(conn: SqliteConnection, path: str) -> None:
    if _file_id(os.path.abspath(path)) != conn.file_id:  # the file was replaced: reopen
        raise OSError("sqlite file replaced")
    conn.execute("SELECT 1").fetchall()


def connection_broken(conn: Any) -> bool:
    """True when a borrowed connection died (backend restart, network, killed session)."""
    if isinstance(conn, psycopg.Connection):
        return conn.closed or conn.broken
    if isinstance(conn, pymysql.connections.Connection):
        return not conn.open
    return False  # sqlite: a local file does not drop the connection


def needs_rollback(conn: Any) -> bool:
    """Whether a returned connection may hold an open transaction.

    pymysql: from the status flags of the server's last OK packet (result sets do not update
    them). In autocommit a transaction opens only through a statement answered with an OK
    packet (START TRANSACTION, SET autocommit = 0, ...: refused by the allowlist, never sent by
    the gateway after START TRANSACTION without its ROLLBACK; stored functions may not change
    autocommit), so "autocommit on, no transaction" cannot be stale in the unsafe direction."""
    if isinstance(conn, psycopg.Connection):
        return conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
    if isinstance(conn, pymysql.connections.Connection):
        status = conn.server_status or 0
        return bool(status & SERVER_STATUS.SERVER_STATUS_IN_TRANS) or not status & SERVER_STATUS.SERVER_STATUS_AUTOCOMMIT
    return bool(conn.in_transaction)
