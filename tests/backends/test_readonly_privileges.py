"""Layer 4, least privilege: `privilege_warnings` on real accounts (superusers warn, a
SELECT-only account does not), and mcp-query_refuse_privileged_targets refusing a target."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator

import psycopg
import pymysql
import pytest

from backends.privileges import privilege_warnings
from backends.targets import Target
from tests.query import add_auth, add_target, error, ok, reload
from tests.query.test_sql_tools import set_variable, sql_env  # noqa: F401 - the shared module fixture

ROLE = f"mcpgw_ro_{uuid.uuid4().hex[:8]}"


def target(protocol: str, target_id: str = "t") -> Target:
    return Target(
        target_id=target_id, protocol=protocol, host="", port=0, database="", username="", password="", default_schema="",
        description="", max_rows=10, timeout_ms=1000, allow_explain=True, allow_discovery=True, use_ssl=False, ssl_mode="",
    )  # fmt: skip


@pytest.fixture(scope="module")
def readonly_accounts(sql_env: dict) -> Iterator[dict]:  # noqa: F811
    maria, pg = sql_env["maria"], sql_env["pg"]
    admin = pymysql.connect(**maria, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE USER '{ROLE}'@'%' IDENTIFIED BY 'pw-{ROLE}'")
        cur.execute(f"GRANT SELECT ON `{maria['database']}`.* TO '{ROLE}'@'%'")
    with psycopg.connect(**pg, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN")
        conn.execute(f"GRANT SELECT ON items TO {ROLE}")
    yield {"maria": {**maria, "user": ROLE, "password": f"pw-{ROLE}"}, "pg": {**pg, "user": ROLE}}
    with admin.cursor() as cur:
        cur.execute(f"DROP USER IF EXISTS '{ROLE}'@'%'")
    admin.close()
    with psycopg.connect(**pg, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {ROLE}")
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}")


def test_mariadb_root_warns_and_select_only_does_not(sql_env: dict, readonly_accounts: dict) -> None:  # noqa: F811
    root = pymysql.connect(**sql_env["maria"])
    limited = pymysql.connect(**readonly_accounts["maria"])
    try:
        warnings = privilege_warnings(target("mysql"), root)
        assert any("ALL PRIVILEGES" in w for w in warnings) and any("can write" in w for w in warnings)
        assert privilege_warnings(target("mysql"), limited) == []
    finally:
        root.close()
        limited.close()


def test_postgres_superuser_warns_and_select_only_does_not(sql_env: dict, readonly_accounts: dict) -> None:  # noqa: F811
    with psycopg.connect(**sql_env["pg"]) as root, psycopg.connect(**readonly_accounts["pg"]) as limited:
        warnings = privilege_warnings(target("pgsql"), root)
        assert "the account is a PostgreSQL superuser" in warnings
        assert any("server files" in w for w in warnings)
        assert privilege_warnings(target("pgsql"), limited) == []


def test_sqlite_writable_file_warns(sql_env: dict) -> None:  # noqa: F811
    path = sql_env["lite"]
    writable = sqlite3.connect(path)
    readonly = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert privilege_warnings(target("sqlite"), writable) == ["the SQLite file is opened writable (expected mode=ro)"]
        assert privilege_warnings(target("sqlite"), readonly) == []
    finally:
        writable.close()
        readonly.close()


def test_refuse_privileged_targets_variable(sql_env: dict, readonly_accounts: dict) -> None:  # noqa: F811
    handler, store = sql_env["handler"], sql_env["store"]
    account = readonly_accounts["maria"]
    add_auth(store, "ro_auth", account["user"], account["password"])
    add_target(
        store,
        "maria_ro",
        "mysql",
        host="127.0.0.1",
        port=account["port"],
        database=account["database"],
        auth_profile_id="ro_auth",
    )
    store.load_to_runtime("MCP PROFILES")
    reload(store, handler)
    # the LOAD checked each effective target's account and says what it found, in runtime
    warnings = {
        r["target_id"]: json.loads(r["privilege_warnings"]) for r in store.read_runtime().table("runtime_mcp_target_profiles")
    }
    assert any("ALL PRIVILEGES" in w for w in warnings["maria"]) and warnings["maria_ro"] == []
    assert ok(handler, "run_sql_readonly", target_id="maria", sql="SELECT 1")["rows"] == [[1]]  # off: warn only
    set_variable(store, handler, "mcp-query_refuse_privileged_targets", "true")
    try:
        refused = error(handler, "run_sql_readonly", target_id="maria", sql="SELECT 1")
        assert refused["code"] == "UNAVAILABLE" and "ALL PRIVILEGES" in refused["message"]
        assert ok(handler, "run_sql_readonly", target_id="maria_ro", sql="SELECT COUNT(*) FROM items")["rows"] == [[50]]
    finally:
        set_variable(store, handler, "mcp-query_refuse_privileged_targets", "false")
