"""explain_sql analyze=true on real MariaDB and PostgreSQL: refused unless the target's
allow_explain_analyze is 1 (default 0); when allowed it runs the statement inside the same
read-only transaction with the same server-side timeout as run_sql_readonly, so a write
hidden in a database function is still refused and a slow statement is still cancelled."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest

from gateway import sqlite as gsqlite
from tests.query import add_auth, add_target, call, count_rows, error, make_services, ok, reload
from tests.query.test_sql_tools import Handler, make_store

SLOW_SQL = {  # a few seconds of work unless the server cancels it
    "maria": "SELECT SUM(seq % 7) FROM seq_1_to_1000000000",
    "pg": "SELECT count(*) FROM generate_series(1, 1000000000)",
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict]:
    maria = pymysql.connect(**mariadb_db, autocommit=True)
    with maria.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
        cur.execute("CREATE TABLE audit (id INT)")
        # A function the parser cannot see into: it writes.
        cur.execute("CREATE FUNCTION w() RETURNS INT MODIFIES SQL DATA BEGIN INSERT INTO audit VALUES (1); RETURN 1; END")
    maria.close()
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        pg.execute("INSERT INTO items VALUES (1, 'one'), (2, 'two')")
        pg.execute("CREATE TABLE audit (id int)")
        pg.execute("CREATE FUNCTION w() RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO audit VALUES (1) RETURNING 1'")
    tmp = tmp_path_factory.mktemp("analyze")
    store = make_store(tmp / "data")
    add_auth(store, "maria_auth", mariadb_db["user"], mariadb_db["password"])
    add_auth(store, "pg_auth", postgres_db["user"], "")
    where = {
        "maria": {"protocol": "mysql", "port": mariadb_db["port"], "database": mariadb_db["database"], "auth_profile_id": "maria_auth"},
        "pg": {"protocol": "pgsql", "port": postgres_db["port"], "database": postgres_db["dbname"], "auth_profile_id": "pg_auth"},
    }  # fmt: skip
    for engine, settings in where.items():
        add_target(store, engine, host="127.0.0.1", timeout_ms=5000, allow_explain_analyze=1, **settings)
        add_target(store, f"{engine}_slow", host="127.0.0.1", timeout_ms=300, allow_explain_analyze=1, **settings)
        add_target(store, f"{engine}_plain", host="127.0.0.1", timeout_ms=5000, **settings)  # the default: 0
    store.load_to_runtime("MCP PROFILES")
    handler = Handler(make_services(store))
    yield {"handler": handler, "store": store, "maria": mariadb_db, "pg": postgres_db}
    handler.pools.close()
    store.close()


def test_the_flag_defaults_to_off_and_shows_as_a_capability(env: dict) -> None:
    rows = {r["target_id"]: r for r in gsqlite.rows(env["store"].conn(), "SELECT * FROM main.runtime_mcp_target_profiles")}
    assert rows["pg_plain"]["allow_explain_analyze"] == 0
    assert rows["pg"]["allow_explain_analyze"] == 1
    caps = {t["target_id"]: t["capabilities"] for t in ok(env["handler"], "list_targets")["targets"]}
    assert caps["pg"] == ["inventory", "readonly_sql", "explain", "explain_analyze"]
    assert caps["maria_plain"] == ["inventory", "readonly_sql", "explain"]


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_refused_unless_the_target_allows_it(env: dict, engine: str) -> None:
    refused = error(env["handler"], "explain_sql", target_id=f"{engine}_plain", sql="SELECT * FROM items", analyze=True)
    assert refused["code"] == "INVALID_ARGUMENT" and "allow_explain_analyze" in refused["message"]
    assert ok(env["handler"], "explain_sql", target_id=f"{engine}_plain", sql="SELECT * FROM items")["analyze"] is False


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_analyze_runs_the_statement_and_returns_actual_figures(env: dict, engine: str) -> None:
    out = ok(env["handler"], "explain_sql", target_id=engine, sql="SELECT * FROM items WHERE id = 2", analyze=True)
    assert out["analyze"] is True
    if engine == "pg":
        assert out["plan"][0]["Plan"]["Actual Rows"] == 1  # measured, not estimated
    else:
        assert "r_loops" in str(out["plan"])  # MariaDB's ANALYZE FORMAT=JSON: r_* are measured


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_a_write_inside_is_still_refused(env: dict, engine: str) -> None:
    """SELECT w() passes the parser (w is not a denied function); ANALYZE runs it, and the
    read-only transaction refuses its INSERT."""
    before = count_rows(env[engine], engine, "audit")
    refused = error(env["handler"], "explain_sql", target_id=engine, sql="SELECT w()", analyze=True)
    assert refused["code"] == "INVALID_ARGUMENT" and "read-only" in refused["message"]
    call(env["handler"], "explain_sql", target_id=engine, sql="SELECT w()")  # a plan only (MariaDB refuses even that)
    assert count_rows(env[engine], engine, "audit") == before == 0


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_the_target_timeout_still_applies(env: dict, engine: str) -> None:
    refused = error(env["handler"], "explain_sql", target_id=f"{engine}_slow", sql=SLOW_SQL[engine], analyze=True)
    assert refused["code"] == "DEADLINE_EXCEEDED"
    # The pooled session is usable afterwards.
    assert ok(env["handler"], "explain_sql", target_id=f"{engine}_slow", sql="SELECT 1", analyze=True)["plan"]


def test_sqlite_has_no_analyze(env: dict, tmp_path: Path) -> None:
    lite = tmp_path / "lite.db"
    sqlite3.connect(lite).close()
    add_target(env["store"], "lite", "sqlite", database=str(lite), allow_explain_analyze=1)
    env["store"].load_to_runtime("MCP PROFILES")
    reload(env["store"], env["handler"])
    refused = error(env["handler"], "explain_sql", target_id="lite", sql="SELECT 1", analyze=True)
    assert "SQLite" in refused["message"]
