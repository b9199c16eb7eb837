"""Per-call settings stay per call. A function in the database can change session settings
(what SET or set_config would do, out of the parser's sight); it must not loosen the
read-only transaction or the timeout of later calls on the same pooled connection.
PostgreSQL: the settings are SET LOCAL in a transaction that is always rolled back, which
also undoes a set_config(..., false) made inside it. MariaDB: SET STATEMENT ... FOR restores
its variables after the statement. Controls show the same functions do loosen a plain
session. Also: pooled MariaDB sessions are autocommit with no transaction open between calls,
and a session a borrower took out of autocommit is not handed out again."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pymysql
import pytest

from tests.query import add_auth, add_target, count_rows, error, make_services, ok
from tests.query.test_sql_tools import Handler, make_store

TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict]:
    maria = pymysql.connect(**mariadb_db, autocommit=True)
    with maria.cursor() as cur:
        cur.execute("CREATE TABLE audit (id INT)")
        cur.execute("CREATE FUNCTION w() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO audit VALUES (1); RETURN 1; END")
        cur.execute(
            "CREATE FUNCTION loosen() RETURNS INT BEGIN SET SESSION tx_read_only = 0; SET SESSION max_statement_time = 0;"
            " RETURN 1; END"
        )
    maria.close()
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute("CREATE TABLE audit (id int)")
        pg.execute("CREATE FUNCTION w() RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO audit VALUES (1) RETURNING 1'")
        pg.execute(
            "CREATE FUNCTION loosen() RETURNS text LANGUAGE sql VOLATILE AS"
            " $$ SELECT set_config('statement_timeout', '0', false) || set_config('default_transaction_read_only', 'off', false) $$"
        )
    store = make_store(tmp_path_factory.mktemp("session") / "data")
    store.set_variable("mcp-query_pool_max", "1")  # every call of a target on the same session
    store.load_to_runtime("MCP VARIABLES")
    add_auth(store, "maria_auth", mariadb_db["user"], mariadb_db["password"])
    add_auth(store, "pg_auth", postgres_db["user"], "")
    common = {"host": "127.0.0.1", "timeout_ms": TIMEOUT_MS}
    add_target(store, "maria", "mysql", port=mariadb_db["port"], database=mariadb_db["database"], auth_profile_id="maria_auth", **common)  # fmt: skip
    add_target(store, "pg", "pgsql", port=postgres_db["port"], database=postgres_db["dbname"], auth_profile_id="pg_auth", **common)  # fmt: skip
    store.load_to_runtime("MCP PROFILES")
    handler = Handler(make_services(store))
    yield {"handler": handler, "maria": mariadb_db, "pg": postgres_db}
    handler.pools.close()
    store.close()


def _session(env: dict, engine: str) -> tuple:
    """The pooled session's own settings, read on the connection the calls use."""
    with env["handler"].pools.connection(engine) as (_, conn):
        if engine == "maria":
            with conn.cursor() as cur:
                cur.execute("SELECT @@session.tx_read_only, @@session.max_statement_time, @@in_transaction, @@autocommit")
                return tuple(cur.fetchone())
        timeout = conn.execute("SHOW statement_timeout").fetchone()[0]
        read_only = conn.execute("SHOW default_transaction_read_only").fetchone()[0]
        return timeout, read_only


EXPECTED = {"maria": (1, TIMEOUT_MS / 1000, 0, 1), "pg": (f"{TIMEOUT_MS // 1000}s", "on")}


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_a_function_cannot_loosen_later_calls(env: dict, engine: str) -> None:
    handler = env["handler"]
    assert _session(env, engine) == EXPECTED[engine]
    ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT loosen()")  # it does try, inside the call
    assert _session(env, engine) == EXPECTED[engine]
    refused = error(handler, "run_sql_readonly", target_id=engine, sql="SELECT w()")
    assert refused["code"] == "INVALID_ARGUMENT" and "read-only" in refused["message"]
    assert count_rows(env[engine], engine, "audit") == 0


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_control_the_function_does_loosen_a_plain_session(env: dict, engine: str) -> None:
    """Why the per-call form matters: in a plain autocommit session the change outlives the call."""
    if engine == "maria":
        conn = pymysql.connect(**env["maria"], autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION READ ONLY")
                cur.execute("SELECT loosen()")
                cur.execute("SELECT @@session.tx_read_only, @@session.max_statement_time")
                assert cur.fetchone() == (0, 0.0)
        finally:
            conn.close()
        return
    options = f"-c statement_timeout={TIMEOUT_MS} -c default_transaction_read_only=on"
    with psycopg.connect(**env["pg"], autocommit=True, options=options) as conn:
        conn.execute("SELECT loosen()")
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"
        assert conn.info.parameter_status("default_transaction_read_only") == "off"


def test_pooled_mariadb_sessions_are_autocommit_and_a_loosened_one_is_dropped(env: dict) -> None:
    handler = env["handler"]
    ok(handler, "run_sql_readonly", target_id="maria", sql="SELECT count(*) FROM audit")
    with handler.pools.connection("maria") as (_, conn):
        assert conn.get_autocommit()
        first = conn
        conn.autocommit(False)  # a borrower's mistake must not reach the next borrower
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM audit")
    with handler.pools.connection("maria") as (_, conn):
        assert conn is not first and conn.get_autocommit()
    assert _session(env, "maria") == EXPECTED["maria"]
