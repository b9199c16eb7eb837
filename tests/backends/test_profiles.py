"""MCP PROFILES through the real ConfigStore layers: validation, skip reasons, secrets by
reference, default target, save/load across a restart of the store."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from gateway import sqlite as gsqlite
from gateway.errors import ConfigError, NotFound
from handlers.query import QueryHandler
from tests.query import add_auth, add_target, error, insert, make_services, make_store, ok, reload


def runtime_targets(store) -> dict[str, dict]:
    return {r["target_id"]: r for r in gsqlite.rows(store.conn(), "SELECT * FROM main.runtime_mcp_target_profiles")}


@pytest.fixture()
def lite_file(tmp_path: Path) -> Path:
    path = tmp_path / "lite.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(scope="module")
def maria_user(mariadb_db: dict) -> Iterator[dict]:
    """A real MariaDB account with a password, so secret resolution is proven by a login."""
    user, password = f"mcpgw_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    admin = pymysql.connect(**mariadb_db, autocommit=True)
    with admin.cursor() as cur:
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (user, password))
        cur.execute(f"GRANT SELECT ON `{mariadb_db['database']}`.* TO %s@'%%'", (user,))
        cur.execute("CREATE TABLE secret_probe (id INT PRIMARY KEY)")
    try:
        yield {"user": user, "password": password, **{k: mariadb_db[k] for k in ("host", "port", "database")}}
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP USER IF EXISTS %s@'%%'", (user,))
        admin.close()


def test_every_target_loads_effective_or_says_why(tmp_path: Path, lite_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MCPGW_TEST_UNSET_PW", raising=False)
    store = make_store(tmp_path / "data")
    add_auth(store, "a1", "root")
    add_auth(store, "needs_env", "root", "env:MCPGW_TEST_UNSET_PW")
    add_target(store, "good", "sqlite", database=str(lite_file))
    add_target(store, "off", "sqlite", database=str(lite_file), active=0)
    add_target(store, "orphan", "mysql", host="127.0.0.1", auth_profile_id="missing")
    add_target(store, "noauth", "pgsql", host="127.0.0.1")
    add_target(store, "weird", "oracle", host="127.0.0.1", auth_profile_id="a1")
    add_target(store, "gone", "sqlite", database=str(tmp_path / "nope.db"))
    add_target(store, "hostless", "mysql", auth_profile_id="a1")
    add_target(store, "envpw", "mysql", host="127.0.0.1", auth_profile_id="needs_env")
    store.load_to_runtime("MCP PROFILES")
    rows = runtime_targets(store)
    assert len(rows) == 8  # nothing vanishes
    reasons = {tid: (r["effective"], r["skip_reason"]) for tid, r in rows.items()}
    assert reasons == {
        "good": (1, ""),
        "off": (0, "inactive"),
        "orphan": (0, "auth_profile_id 'missing' not found"),
        "noauth": (0, "auth_profile_id not found"),
        "weird": (0, "bad protocol 'oracle' (expected mysql, pgsql, sqlite or duckdb)"),
        "gone": (0, "sqlite file missing"),
        "hostless": (0, "host is empty"),
        "envpw": (0, "db_password env:MCPGW_TEST_UNSET_PW is not set"),
    }
    assert rows["good"]["max_rows"] == 200 and rows["good"]["timeout_ms"] == 2000  # the documented defaults
    handler = QueryHandler(make_services(store))
    try:
        assert [t["target_id"] for t in ok(handler, "list_targets")["targets"]] == ["good"]
        err = error(handler, "list_tables", target_id="envpw")
        assert err["code"] == "NOT_FOUND" and "env:MCPGW_TEST_UNSET_PW is not set" in err["message"]
        # The environment gains the variable: the next LOAD makes the target effective.
        monkeypatch.setenv("MCPGW_TEST_UNSET_PW", "")
        store.load_to_runtime("MCP PROFILES")
        reload(store, handler)
        assert runtime_targets(store)["envpw"]["effective"] == 1
        assert "envpw" in [t["target_id"] for t in ok(handler, "list_targets")["targets"]]
    finally:
        handler.pools.close()
        store.close()


@pytest.mark.parametrize(
    ("table", "row", "message"),
    [
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "port": "abc"}, "port must be an integer"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "port": 70000}, "port must be an integer"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "max_rows": 0}, "max_rows"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "cache_ttl_ms": -5}, "cache_ttl_ms"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "active": 2}, "active must be 0 or 1"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "allow_explain": "maybe"}, "allow_explain"),
        ("mcp_target_profiles", {"target_id": "t", "protocol": "mysql", "allow_explain_analyze": 2}, "allow_explain_analyze"),
        ("mcp_target_profiles", {"target_id": "bad id!", "protocol": "mysql"}, "target_id must be"),
        ("mcp_auth_profiles", {"auth_profile_id": "x", "ssl_mode": "sometimes"}, "ssl_mode"),
        ("mcp_auth_profiles", {"auth_profile_id": "x", "db_password": "env:1BAD"}, "env: reference"),
        ("mcp_auth_profiles", {"auth_profile_id": "x", "db_password": "file:relative/path"}, "absolute path"),
    ],
)
def test_a_malformed_row_refuses_the_whole_load(tmp_path: Path, lite_file: Path, table: str, row: dict, message: str) -> None:
    store = make_store(tmp_path / "data")
    add_target(store, "good", "sqlite", database=str(lite_file))
    store.load_to_runtime("MCP PROFILES")
    before_version, before_rows = store.runtime_version(), runtime_targets(store)
    add_target(store, "second", "sqlite", database=str(lite_file))  # a valid edit in the same LOAD
    insert(store, table, **row)
    with pytest.raises(ConfigError, match=message):
        store.load_to_runtime("MCP PROFILES")
    assert store.runtime_version() == before_version
    assert runtime_targets(store) == before_rows  # atomic: not even the valid edit landed
    store.close()


def test_secrets_by_reference_stay_references_and_resolve_on_login(
    tmp_path: Path, maria_user: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "maria.pw"
    secret_file.write_text(maria_user["password"] + "\n")
    monkeypatch.setenv("MCPGW_TEST_PW", maria_user["password"])
    store = make_store(tmp_path / "data")
    common = {"host": maria_user["host"], "port": maria_user["port"], "database": maria_user["database"]}
    add_auth(store, "by_file", maria_user["user"], f"file:{secret_file}")
    add_auth(store, "by_env", maria_user["user"], "env:MCPGW_TEST_PW")
    add_auth(store, "literal_wrong", maria_user["user"], "definitely-wrong-password")
    add_target(store, "f", "mysql", auth_profile_id="by_file", **common)
    add_target(store, "e", "mysql", auth_profile_id="by_env", **common)
    add_target(store, "w", "mysql", auth_profile_id="literal_wrong", **common)
    store.load_to_runtime("MCP PROFILES")
    stored = {
        r["auth_profile_id"]: r["db_password"] for r in gsqlite.rows(store.conn(), "SELECT * FROM runtime_mcp_auth_profiles")
    }
    assert stored["by_file"] == f"file:{secret_file}" and stored["by_env"] == "env:MCPGW_TEST_PW"  # not resolved in the table
    handler = QueryHandler(make_services(store))
    try:
        target = handler.pools.resolve("f")
        assert target.password == maria_user["password"]
        assert maria_user["password"] not in repr(target)
        for target_id in ("f", "e"):
            names = [t["name"] for t in ok(handler, "list_tables", target_id=target_id)["tables"]]
            assert "secret_probe" in names
        err = error(handler, "list_tables", target_id="w")
        assert err["code"] == "UNAVAILABLE" and err["message"] == "target w is unreachable"
        stats = handler.pools.stats()
        assert {s["target_id"] for s in stats} == {"e", "f", "w"}
        assert maria_user["user"] not in str(stats) and "127.0.0.1" not in str(stats)
    finally:
        handler.pools.close()
        store.close()


def test_default_target_variable(tmp_path: Path, lite_file: Path) -> None:
    store = make_store(tmp_path / "data")
    handler = QueryHandler(make_services(store))
    try:
        assert ok(handler, "list_targets") == {"targets": [], "default_target_id": None}
        assert error(handler, "list_schemas")["code"] == "NOT_FOUND"
        add_target(store, "a", "sqlite", database=str(lite_file))
        add_target(store, "b", "sqlite", database=str(lite_file))
        add_target(store, "c", "sqlite", database=str(lite_file), active=0)
        store.load_to_runtime("MCP PROFILES")
        reload(store, handler)
        assert ok(handler, "list_targets")["default_target_id"] == "a"
        store.set_variable("mcp-query_default_target", "b")
        store.load_to_runtime("MCP VARIABLES")
        reload(store, handler)
        assert ok(handler, "list_targets")["default_target_id"] == "b"
        assert ok(handler, "list_schemas")["target_id"] == "b"
        store.set_variable("mcp-query_default_target", "c")
        store.load_to_runtime("MCP VARIABLES")
        reload(store, handler)
        err = error(handler, "list_schemas")
        assert err["code"] == "NOT_FOUND" and "'c'" in err["message"] and "inactive" in err["message"]
        with pytest.raises(NotFound):
            handler.pools.resolve(None)
    finally:
        handler.pools.close()
        store.close()


def test_profiles_survive_save_and_reload_from_disk(tmp_path: Path, lite_file: Path) -> None:
    data = tmp_path / "data"
    store = make_store(data)
    add_auth(store, "a1", "reader", "env:SOME_PW", default_schema="app", use_ssl=1, ssl_mode="verify-full", comment="prod reader")
    add_target(store, "lite", "sqlite", database=str(lite_file), description="local", max_rows=50, timeout_ms=900, comment="c")
    add_target(store, "pg", "pgsql", host="db.internal", port=5433, database="app", auth_profile_id="a1", allow_explain=0)
    store.load_to_runtime("MCP PROFILES")
    store.save_to_disk("MCP PROFILES")
    memory = {
        t: gsqlite.rows(store.conn(), f"SELECT * FROM main.{t} ORDER BY 1") for t in ("mcp_auth_profiles", "mcp_target_profiles")
    }
    store.close()

    # A new store on the same directory; an admin's unsaved edits are dropped by LOAD FROM DISK.
    again = make_store(data)
    again.conn().execute("DELETE FROM main.mcp_target_profiles")
    again.conn().execute("UPDATE main.mcp_auth_profiles SET db_password = 'changed'")
    again.conn().execute("DELETE FROM main.runtime_mcp_target_profiles")
    again.load_from_disk("MCP PROFILES")
    for table, rows in memory.items():
        assert gsqlite.rows(again.conn(), f"SELECT * FROM main.{table} ORDER BY 1") == rows
    assert runtime_targets(again) == {}  # LOAD FROM DISK goes to memory only (ProxySQL bug 6171)
    again.load_to_runtime("MCP PROFILES")
    rows = runtime_targets(again)
    assert rows["lite"]["effective"] == 1 and rows["lite"]["max_rows"] == 50 and rows["lite"]["timeout_ms"] == 900
    assert rows["pg"]["skip_reason"] == "db_password env:SOME_PW is not set"
    # And SAVE ... FROM RUNTIME brings the runtime back into memory after an unloaded edit.
    again.conn().execute("DELETE FROM main.mcp_target_profiles")
    again.save_from_runtime("MCP PROFILES")
    assert {r["target_id"] for r in gsqlite.rows(again.conn(), "SELECT * FROM main.mcp_target_profiles")} == {"lite", "pg"}
    again.close()


def test_boolean_words_from_a_bootstrap_file_are_normalised(tmp_path: Path, lite_file: Path) -> None:
    store = make_store(tmp_path / "data")
    add_auth(store, "a", "u", use_ssl="true")
    add_target(store, "on", "sqlite", database=str(lite_file), active="true", allow_explain="false", allow_discovery="1")
    add_target(store, "off", "sqlite", database=str(lite_file), active="false")
    store.load_to_runtime("MCP PROFILES")
    rows = runtime_targets(store)
    assert (rows["on"]["active"], rows["on"]["allow_explain"], rows["on"]["allow_discovery"], rows["on"]["effective"]) == (
        1,
        0,
        1,
        1,
    )
    assert (rows["off"]["effective"], rows["off"]["skip_reason"]) == (0, "inactive")
    assert gsqlite.rows(store.conn(), "SELECT use_ssl FROM runtime_mcp_auth_profiles") == [{"use_ssl": 1}]
    store.close()


def test_admin_statements_edit_load_and_never_show_passwords(tmp_path: Path, lite_file: Path) -> None:
    from gateway.admin_sql import AdminSQL

    store = make_store(tmp_path / "data")
    admin = AdminSQL(store)
    admin.execute(
        "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('a', 'reader', 'hunter2-secret')"
    )
    admin.execute(f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('lite', 'sqlite', '{lite_file}')")
    admin.execute(
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, auth_profile_id) VALUES ('my', 'mysql', 'db', 'zz')"
    )
    assert admin.execute("LOAD MCP PROFILES TO RUNTIME")["ok"] is True
    shown = json.dumps([admin.execute(f"SELECT * FROM {t}") for t in ("mcp_auth_profiles", "runtime_mcp_auth_profiles")])
    assert "hunter2-secret" not in shown and "reader" in shown
    out = admin.execute("SELECT target_id, effective, skip_reason FROM runtime_mcp_target_profiles ORDER BY target_id")
    assert "auth_profile_id 'zz' not found" in json.dumps(out) and "lite" in json.dumps(out)
    # The runtime still holds the stored value for the pools (admin.sql only hides it).
    assert gsqlite.scalar(store.conn(), "SELECT db_password FROM runtime_mcp_auth_profiles") == "hunter2-secret"
    admin.execute("UPDATE mcp_target_profiles SET port = 'x' WHERE target_id = 'my'")
    with pytest.raises(ConfigError, match="port must be an integer"):
        admin.execute("LOAD MCP PROFILES TO RUNTIME")
    store.close()
