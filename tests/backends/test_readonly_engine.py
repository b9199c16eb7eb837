"""Layers 1 and 2 on their own (each engine's execute, backends/engines), the parser bypassed: writes sent
straight to an engine's `execute` on ordinary read-write connections are refused by the engine's
read-only transaction; several statements in one call are refused by the protocol; a slow
statement is cancelled by the server. Controls show each refusal is ours, not the driver's
default: the same text through the plain driver does write / does run twice. MariaDB is
tested with autocommit off and on (the pool's sessions are autocommit), and EXPLAIN ANALYZE
forms, which run the statement, are among the writes.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator

import psycopg
import pymysql
import pytest
from pymysql.constants import CLIENT

from backends.engines import engine_for
from gateway.errors import DeadlineExceeded, InvalidArgument, Unavailable
from tests.backends.test_readonly_hostile import mariadb_checksum, postgres_checksum
from tests.query.test_sql_tools import sql_env  # noqa: F401 - the shared module fixture

LIMITS = {"timeout_ms": 3000, "max_rows": 100, "max_bytes": 1_000_000}

MARIADB_WRITES = [
    "DELETE FROM items",
    "UPDATE items SET name = 'pwned'",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "DROP TABLE items",
    "CREATE TABLE pwned (a int)",
    "CREATE TABLE pwned AS SELECT * FROM items",
    "TRUNCATE items",
    "RENAME TABLE items TO pwned",
    "ALTER TABLE items ADD COLUMN pwned int",
    "CREATE DATABASE mcpgw_pwned",
    "CREATE TEMPORARY TABLE pwned (a int)",
    "SELECT * FROM items FOR UPDATE",
    "ANALYZE FORMAT=JSON DELETE FROM items",
    "ANALYZE UPDATE items SET name = 'pwned'",
]
PG_WRITES = [
    "DELETE FROM items",
    "UPDATE items SET name = 'pwned'",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "DROP TABLE items",
    "CREATE TABLE pwned (a int)",
    "CREATE TABLE pwned AS SELECT * FROM items",
    "SELECT * INTO pwned FROM items",
    "TRUNCATE items",
    "ALTER TABLE items ADD COLUMN pwned int",
    "WITH d AS (DELETE FROM items RETURNING *) SELECT * FROM d",
    "SELECT * FROM items FOR UPDATE",
    "SELECT * FROM items FOR SHARE",
    "SELECT set_config('default_transaction_read_only', 'off', false); DELETE FROM items",
    "EXPLAIN (ANALYZE, FORMAT JSON) DELETE FROM items",
]
SQLITE_WRITES = [
    "DELETE FROM items",
    "INSERT INTO items (id, name) VALUES (999, 'x')",
    "DROP TABLE items",
    "CREATE TABLE pwned (a)",
]


@pytest.fixture(scope="module")
def plain(sql_env: dict) -> Iterator[dict]:  # noqa: F811
    """Ordinary read-write connections: none of the pool's session-level protections."""
    maria = pymysql.connect(**sql_env["maria"], autocommit=False)
    maria_ac = pymysql.connect(**sql_env["maria"], autocommit=True)
    pg = psycopg.connect(**sql_env["pg"])
    lite = sqlite3.connect(sql_env["lite"], check_same_thread=False)  # writable: the engine layer must hold alone
    yield {"maria": maria, "maria_ac": maria_ac, "pg": pg, "lite": lite}
    maria.close()
    maria_ac.close()
    pg.close()
    lite.close()


def _lite_count(path: object) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM items").fetchone()[0]
    finally:
        conn.close()


@pytest.mark.parametrize("conn", ["maria", "maria_ac"])
@pytest.mark.parametrize("sql", MARIADB_WRITES)
def test_mariadb_engine_alone_refuses_writes(sql_env: dict, plain: dict, sql: str, conn: str) -> None:  # noqa: F811
    before = mariadb_checksum(sql_env["maria"])
    with pytest.raises(InvalidArgument, match="(read-only|rejected)"):
        engine_for("mysql").execute(plain[conn], sql, **LIMITS)
    assert mariadb_checksum(sql_env["maria"]) == before


@pytest.mark.parametrize("sql", PG_WRITES)
def test_postgres_engine_alone_refuses_writes(sql_env: dict, plain: dict, sql: str) -> None:  # noqa: F811
    before = postgres_checksum(sql_env["pg"])
    with pytest.raises(InvalidArgument):
        engine_for("pgsql").execute(plain["pg"], sql, **LIMITS)
    assert plain["pg"].info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # rolled back
    assert postgres_checksum(sql_env["pg"]) == before


@pytest.mark.parametrize("sql", SQLITE_WRITES)
def test_sqlite_engine_alone_refuses_writes(sql_env: dict, plain: dict, sql: str) -> None:  # noqa: F811
    with pytest.raises(InvalidArgument):
        engine_for("sqlite").execute(plain["lite"], sql, **LIMITS)
    assert _lite_count(sql_env["lite"]) == 50


def test_control_the_plain_drivers_do_write(sql_env: dict, plain: dict) -> None:  # noqa: F811
    """Without our layer the same DELETE goes through (rolled back here): the tests above can fail."""
    with plain["maria"].cursor() as cur:
        cur.execute("DELETE FROM items")
        assert cur.rowcount == 50
    plain["maria"].rollback()
    assert plain["pg"].execute("DELETE FROM items").rowcount == 50
    plain["pg"].rollback()
    fresh = sqlite3.connect(sql_env["lite"])  # execute leaves query_only on for the plain one
    assert fresh.execute("DELETE FROM items").rowcount == 50
    fresh.rollback()
    fresh.close()


def test_postgres_one_statement_per_call_by_protocol(sql_env: dict, plain: dict) -> None:  # noqa: F811
    conn = plain["pg"]
    with pytest.raises(InvalidArgument, match="multiple commands"):
        engine_for("pgsql").execute(conn, "SELECT 1; SELECT 2", **LIMITS)
    # Layer 1 alone, as the PostgreSQL engine calls the driver: in a pipeline every statement goes through
    # the extended protocol, whose Parse takes one statement (prepare=True would do the same).
    with pytest.raises(psycopg.errors.SyntaxError), conn.pipeline():
        conn.execute("SELECT 1; DELETE FROM items")
    conn.rollback()
    with conn.cursor() as cur, pytest.raises(psycopg.errors.SyntaxError):
        cur.execute("SELECT 1; DELETE FROM items", prepare=True)
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM items").fetchone() == (50,)
    conn.rollback()
    # Why not `execute(sql, ())`: an empty params tuple still uses the simple protocol in psycopg 3.
    with conn.cursor() as cur:
        cur.execute("SELECT 1; SELECT 2", ())
        assert cur.nextset() is True and cur.fetchall() == [(2,)]
    conn.rollback()


def test_mariadb_one_statement_per_call_without_multi_statements(sql_env: dict, plain: dict) -> None:  # noqa: F811
    with plain["maria"].cursor() as cur, pytest.raises(pymysql.err.ProgrammingError):
        cur.execute("SELECT 1; DELETE FROM items")
    plain["maria"].rollback()
    with pytest.raises(InvalidArgument):
        engine_for("mysql").execute(plain["maria"], "SELECT 1; SELECT 2", **LIMITS)
    # Control: with CLIENT_MULTI_STATEMENTS the server runs both, so execute refuses such a connection.
    multi = pymysql.connect(**sql_env["maria"], client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with multi.cursor() as cur:
            cur.execute("SELECT 1; SELECT 2")
            assert cur.nextset() and cur.fetchall() == ((2,),)
        with pytest.raises(Unavailable, match="MULTI_STATEMENTS"):
            engine_for("mysql").execute(multi, "SELECT 1", **LIMITS)
    finally:
        multi.close()


def test_sqlite_one_statement_per_call(plain: dict) -> None:
    with pytest.raises(InvalidArgument, match="one statement"):
        engine_for("sqlite").execute(plain["lite"], "SELECT 1; DELETE FROM items", **LIMITS)


@pytest.mark.parametrize(("protocol", "sql"), [("pgsql", "SELECT pg_sleep(10)"), ("mysql", "SELECT SLEEP(10)")])
def test_server_side_timeout_alone(plain: dict, protocol: str, sql: str) -> None:
    conn = plain["pg" if protocol == "pgsql" else "maria"]
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        engine_for(protocol).execute(conn, sql, timeout_ms=200, max_rows=10, max_bytes=10_000)
    assert time.monotonic() - started < 5  # cancelled by the server, long before the 10 s sleep ends
    assert engine_for(protocol).execute(conn, "SELECT 1", **LIMITS).rows == [[1]]


@pytest.mark.parametrize("conn", ["maria", "maria_ac"])
def test_mariadb_session_is_left_clean(plain: dict, conn: str) -> None:
    engine_for("mysql").execute(plain[conn], "SELECT 1", **LIMITS)
    with plain[conn].cursor() as cur:
        cur.execute("SELECT @@in_transaction, @@tx_read_only, @@max_statement_time")
        assert cur.fetchone() == (0, 0, 0.0)


def test_engine_alone_lets_through_what_only_the_parser_stops(plain: dict) -> None:
    """Why layer 3 exists: a read-only transaction does not stop shared locks, named locks or
    server file reads (all refused by the parser, see test_readonly_parser)."""
    assert engine_for("mysql").execute(plain["maria"], "SELECT id FROM items LOCK IN SHARE MODE", **LIMITS).rows
    assert engine_for("mysql").execute(plain["maria"], "SELECT GET_LOCK('mcpgw_engine', 0)", **LIMITS).rows == [[1]]
    with plain["maria"].cursor() as cur:
        cur.execute("SELECT RELEASE_LOCK('mcpgw_engine')")
    out = engine_for("pgsql").execute(plain["pg"], "SELECT length(pg_read_file('/etc/hostname')) > 0", **LIMITS)
    assert out.rows == [[True]]  # as a superuser: least privilege (layer 4) is the other answer
