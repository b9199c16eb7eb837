"""What an admin hit (issue 29, items 3 and 4), in process on a real data directory and a real
MariaDB: admin.load_to_runtime answers the same warnings as admin.sql's LOAD ... TO RUNTIME, and
an unknown protocol is refused at edit time, naming the field and the engines' protocols."""

from __future__ import annotations

from backends.engines import PROTOCOLS
from gateway import sqlite
from handlers.admin import AdminHandler
from tests.admin.test_edits import admin, error, ok  # noqa: F401 - the shared fixture


def test_load_to_runtime_returns_the_warnings_admin_sql_returns(admin: AdminHandler, mariadb_db: dict) -> None:  # noqa: F811
    ok(
        admin,
        "admin.upsert_auth_profile",
        auth_profile_id="i29_root",
        db_username=mariadb_db["user"],
        db_password=mariadb_db["password"] or "",
    )
    ok(admin, "admin.upsert_target_profile", target_id="i29_shop", protocol="mysql", host="127.0.0.1",
       port=mariadb_db["port"], database=mariadb_db["database"], auth_profile_id="i29_root")  # fmt: skip
    ok(admin, "admin.upsert_target_profile", target_id="i29_off", protocol="mysql", host="127.0.0.1", active=False)
    loaded = ok(admin, "admin.load_to_runtime", module="MCP PROFILES")
    warnings = loaded["warnings"]
    assert any(w.startswith("target i29_shop: ") and "ALL PRIVILEGES" in w for w in warnings), warnings
    assert any(w.startswith("target i29_off: not served: inactive") for w in warnings), warnings
    by_sql = ok(admin, "admin.sql", statement="LOAD MCP PROFILES TO RUNTIME")
    assert by_sql["warnings"] == warnings
    assert ok(admin, "admin.load_to_runtime", module="MCP VARIABLES")["warnings"] == []


def test_an_unknown_protocol_is_refused_at_edit_time_naming_the_field(admin: AdminHandler) -> None:  # noqa: F811
    refused = error(admin, "admin.upsert_target_profile", target_id="i29_x", protocol="mysqlx", host="127.0.0.1")
    assert refused["code"] == "INVALID_ARGUMENT"
    assert refused["message"].startswith("protocol: 'mysqlx'") and all(p in refused["message"] for p in PROTOCOLS), refused
    conn = admin.services.store.conn()
    assert sqlite.scalar(conn, "SELECT COUNT(*) FROM main.mcp_target_profiles WHERE target_id = 'i29_x'") == 0
    # an existing target keeps its protocol when an edit names a bad one
    ok(admin, "admin.upsert_target_profile", target_id="i29_y", protocol=PROTOCOLS[0], host="127.0.0.1")
    error(admin, "admin.upsert_target_profile", target_id="i29_y", protocol="postgres")
    assert sqlite.scalar(conn, "SELECT protocol FROM main.mcp_target_profiles WHERE target_id = 'i29_y'") == PROTOCOLS[0]
    # the tool's schema names the registry's protocols
    schema = admin.find_tool("admin.upsert_target_profile").input_schema
    assert all(p in str(schema["properties"]["protocol"]) for p in PROTOCOLS)
