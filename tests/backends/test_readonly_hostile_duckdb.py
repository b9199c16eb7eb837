"""The hostile corpus of tests/backends/test_readonly_hostile.py, as it applies to DuckDB: every
statement is refused through run_sql_readonly and explain_sql (INVALID_ARGUMENT), the database
file is byte-for-byte unchanged and no file is written where COPY ... TO, EXPORT DATABASE or
ATTACH would have written one. Then the second layer alone: the same file, network, extension
and settings escapes sent straight to the engine (past the check) are refused by DuckDB's locked
configuration. A long-running statement is interrupted at its timeout (DEADLINE_EXCEEDED).

A control proves the file detector can fail: a file DuckDB writes itself (outside the gateway)
is found.
"""

from __future__ import annotations

import glob
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from backends.engines import duckdb as duck
from gateway.errors import InvalidArgument
from handlers.query import QueryHandler
from tests.query import add_target, error, make_services, make_store, ok

MARK = f"/tmp/mcpgw_duck_hostile_{uuid.uuid4().hex[:12]}"

FILE_AND_NETWORK = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_csv_auto('/etc/passwd')",
    "SELECT * FROM read_csv(['/etc/passwd', '/etc/hosts'])",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM read_json('/etc/passwd')",
    "SELECT * FROM read_json_auto('/etc/passwd')",
    "SELECT * FROM read_ndjson_objects('/etc/passwd')",
    "SELECT * FROM read_parquet('/tmp/x.parquet')",
    "SELECT * FROM parquet_scan('/tmp/x.parquet')",
    "SELECT * FROM parquet_metadata('/tmp/x.parquet')",
    "SELECT * FROM parquet_schema('/tmp/x.parquet')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM read_csv('https://example.com/x.csv')",
    "SELECT * FROM sqlite_scan('/tmp/x.db', 't')",
    "SELECT * FROM postgres_query('host=127.0.0.1', 'SELECT 1')",
    "SELECT * FROM items, LATERAL read_csv(items.name)",
    "SELECT (SELECT count(*) FROM read_text('/etc/passwd'))",
    "WITH f AS (SELECT * FROM read_text('/etc/shadow')) SELECT * FROM f",
    "SELECT * FROM query('SELECT * FROM read_csv(''/etc/passwd'')')",
    "SELECT * FROM query_table('items')",
    "SELECT * FROM duckdb_secrets()",
    "SELECT getenv('HOME')",
]
STATEMENTS = [
    f"COPY items TO '{MARK}_copy.csv'",
    f"COPY (SELECT * FROM items) TO '{MARK}_copy2.parquet' (FORMAT parquet)",
    "COPY items FROM '/etc/passwd'",
    f"EXPORT DATABASE '{MARK}_export'",
    f"IMPORT DATABASE '{MARK}_export'",
    f"ATTACH '{MARK}_attached.duckdb' AS pwn",
    f"ATTACH '{MARK}_attached.db' AS pwn (TYPE sqlite)",
    "DETACH shop",
    "USE pwn",
    "INSTALL httpfs",
    "LOAD httpfs",
    "FORCE INSTALL httpfs FROM 'http://127.0.0.1/'",
    "SET enable_external_access = true",
    "SET GLOBAL enable_external_access = true",
    "RESET enable_external_access",
    "SET lock_configuration = false",
    "SET allowed_paths = ['/']",
    "PRAGMA enable_profiling",
    f"PRAGMA profiling_output = '{MARK}_profile.json'",
    "PRAGMA force_checkpoint",
    "CALL pragma_version()",
    "CALL checkpoint()",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "SELECT nextval('seq')",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "UPDATE items SET name = 'pwned'",
    "DELETE FROM items",
    "DROP TABLE items",
    "CREATE TABLE pwned AS SELECT * FROM items",
    "CREATE TEMP TABLE pwned (a int)",
    "CREATE MACRO pwn() AS 1",
    "CREATE SECRET (TYPE s3, KEY_ID 'x', SECRET 'y')",
    "ALTER TABLE items ADD COLUMN pwned int",
    "TRUNCATE items",
    "BEGIN",
    "COMMIT",
    "ROLLBACK",
    "SELECT 1; DROP TABLE items",
    "SELECT 1; INSTALL httpfs",
    "SUMMARIZE items",
    "DESCRIBE items",
    "SHOW TABLES",
    "PIVOT items ON name USING count(*)",
    "EXPLAIN ANALYZE SELECT 1",
    "EXPLAIN (ANALYZE) SELECT 1",
    "EXPLAIN COPY items TO '/tmp/x.csv'",
]
HOSTILE = FILE_AND_NETWORK + STATEMENTS

# Sent to the engine directly (no read-only check): DuckDB's own sandbox must refuse them.
SANDBOX_REFUSES = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM '/etc/hosts.csv'",
    "SELECT * FROM query('SELECT * FROM read_text(''/etc/passwd'')')",
    "SELECT * FROM duckdb_secrets()",
    f"COPY items TO '{MARK}_direct.csv'",
    f"EXPORT DATABASE '{MARK}_direct_export'",
    f"ATTACH '{MARK}_direct.duckdb' AS pwn",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "INSERT INTO items (id, name) VALUES (999, 'pwned')",
    "CREATE TABLE pwned (a int)",
]


def written_files() -> list[str]:
    return sorted(glob.glob(f"{MARK}*"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("duck_hostile")
    path = tmp / "shop.duckdb"
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR)")
    conn.execute("INSERT INTO items SELECT i, 'item ' || i FROM range(1, 51) t(i)")
    conn.execute("CREATE SEQUENCE seq")
    conn.close()
    store = make_store(tmp / "data")
    add_target(store, "shop", "duckdb", database=str(path), timeout_ms=2000)
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    yield {"handler": handler, "path": path, "sha256": digest(path)}
    handler.pools.close()
    store.close()
    for leftover in written_files():  # only reached if a test failed: leave /tmp clean anyway
        if os.path.isfile(leftover):
            os.remove(leftover)


@pytest.mark.parametrize("sql", HOSTILE)
def test_duckdb_hostile_statement_is_refused(env: dict, sql: str) -> None:
    err = error(env["handler"], "run_sql_readonly", target_id="shop", sql=sql, timeout_sec=2)
    assert err["code"] == "INVALID_ARGUMENT", err
    assert err["message"].startswith("refused:"), err  # by the check, before DuckDB saw it


def test_a_file_named_as_a_table_is_refused_by_the_check_and_the_sandbox(env: dict, tmp_path: Path) -> None:
    """DuckDB reads `FROM 'data.csv'` as the file (a replacement scan): the check refuses a table
    name that looks like a path (ReadOnlyRules.replacement_scans), and past the check the locked
    configuration refuses it too."""
    secret = tmp_path / "secret.csv"
    content = "value-only-in-the-file-7f3c"  # not in any path: the refusal names the path, never the rows
    secret.write_text(f"a\n{content}\n")
    for sql in (
        f"SELECT * FROM '{secret}'",
        f'SELECT * FROM "{secret}"',
        f"FROM '{secret}'",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'secret.csv'",
        "SELECT * FROM main.'secret.csv' AS s",
        "SELECT * FROM 'https://example.com/x.parquet'",
        "SELECT * FROM '/etc/*'",
        "WITH t AS (SELECT 1) SELECT * FROM t, 'data.json'",
    ):
        err = error(env["handler"], "run_sql_readonly", target_id="shop", sql=sql)
        assert err["code"] == "INVALID_ARGUMENT" and "would be read as a file" in err["message"], (sql, err)
        assert content not in err["message"]
        assert error(env["handler"], "explain_sql", target_id="shop", sql=sql)["code"] == "INVALID_ARGUMENT"
    conn = duck.ENGINE.connect(_Settings(str(env["path"])), timeout_s=1, io_timeout_s=1)
    try:
        with pytest.raises(InvalidArgument, match="reads only its own data"):
            duck.ENGINE.execute(conn, f"FROM '{secret}'", timeout_ms=2000, max_rows=5, max_bytes=10_000)
    finally:
        conn.close()
    # a plain or quoted table name without a path in it is still a table
    assert ok(env["handler"], "run_sql_readonly", target_id="shop", sql='SELECT count(*) FROM "items"')["rows"] == [[50]]


def test_hostile_statements_through_explain_sql(env: dict) -> None:
    for sql in HOSTILE:
        assert error(env["handler"], "explain_sql", target_id="shop", sql=sql)["code"] == "INVALID_ARGUMENT", sql


@pytest.mark.parametrize("sql", SANDBOX_REFUSES)
def test_the_locked_sandbox_refuses_what_gets_past_the_check(env: dict, sql: str) -> None:
    settings = _Settings(str(env["path"]))
    conn = duck.ENGINE.connect(settings, timeout_s=1, io_timeout_s=1)
    try:
        with pytest.raises(InvalidArgument, match="refused"):
            duck.ENGINE.execute(conn, sql, timeout_ms=2000, max_rows=5, max_bytes=10_000)
        assert duck.ENGINE.execute(conn, "SELECT count(*) FROM items", timeout_ms=2000, max_rows=5, max_bytes=1000).rows == [[50]]
    finally:
        conn.close()


def test_a_long_running_statement_is_interrupted_at_the_timeout(env: dict) -> None:
    err = error(
        env["handler"], "run_sql_readonly", target_id="shop", sql="SELECT count(*) FROM range(100000000000)", timeout_sec=0.3
    )
    assert err["code"] == "DEADLINE_EXCEEDED" and "300 ms" in err["message"], err


def test_database_unchanged_and_no_file_written(env: dict) -> None:
    """Runs after the corpus (pytest keeps file order): same bytes, no files."""
    env["handler"].pools.close()  # let go of the file before reading it whole
    assert digest(env["path"]) == env["sha256"]
    assert written_files() == []
    assert ok(env["handler"], "run_sql_readonly", target_id="shop", sql="SELECT count(*) FROM items")["rows"] == [[50]]


def test_control_a_file_duckdb_writes_is_found(tmp_path: Path) -> None:
    target = f"{MARK}_control.csv"
    conn = duckdb.connect()
    try:
        conn.execute(f"COPY (SELECT 1 AS a) TO '{target}'")
        assert target in written_files()
    finally:
        conn.close()
        os.remove(target)
    assert written_files() == []


class _Settings:
    """A TargetSettings for direct engine calls."""

    def __init__(self, database: str) -> None:
        self.target_id, self.host, self.port, self.database = "direct", "", 0, database
        self.username = self.password = self.default_schema = self.ssl_mode = ""
        self.timeout_ms, self.use_ssl = 2000, False
