"""The structured edits and layer tools in process, on a real data directory: validation like a
LOAD (the error names the field, nothing changes), write-only passwords and references, diff
with secrets masked, load from disk, and the audit rows they leave."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway import sqlite
from gateway.assembly import open_store
from gateway.services import Services
from gateway.variables import MASK
from handlers.admin import AdminHandler


@pytest.fixture
def admin(tmp_path: Path) -> AdminHandler:
    store = open_store(tmp_path / "data")
    store.initialize()
    for module in store.modules:
        store.load_to_runtime(module)
    services = Services(data_dir=store.data_dir, store=store, runtime=store.read_runtime(), stats=None, metrics=None)  # type: ignore[arg-type]
    return AdminHandler(services)


def call(handler: AdminHandler, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    spec = handler.find_tool(name)
    assert spec is not None, name
    handler.services.runtime = handler.services.store.read_runtime()  # as the runtime follower would
    result = asyncio.run(handler.execute_tool(spec, arguments, handler.context(spec, handler.services.runtime)))
    return result["isError"], result["structuredContent"]


def ok(handler: AdminHandler, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, payload = call(handler, name, **arguments)
    assert not is_error, payload
    return payload


def error(handler: AdminHandler, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, payload = call(handler, name, **arguments)
    assert is_error, payload
    return payload["error"]


def test_password_references_and_write_only_passwords(admin: AdminHandler) -> None:
    put = ok(admin, "admin.upsert_auth_profile", auth_profile_id="a", db_username="u", db_password="env:DB_PASSWORD")
    assert put["row"]["password_source"] == "env:DB_PASSWORD" and "db_password" not in put["row"]
    secret = "s3cret-literal-password"
    put = ok(admin, "admin.upsert_auth_profile", auth_profile_id="a", db_password=secret)
    assert put["action"] == "updated" and put["row"]["password_source"] == "literal" and put["row"]["db_username"] == "u"
    bad = error(admin, "admin.upsert_auth_profile", auth_profile_id="a", db_password="file:relative/path")
    assert bad["code"] == "INVALID_ARGUMENT" and "db_password" in bad["message"] and "absolute" in bad["message"]
    stored = sqlite.scalar(
        admin.services.store.conn(), "SELECT db_password FROM main.mcp_auth_profiles WHERE auth_profile_id = 'a'"
    )
    assert stored == secret  # the refused edit changed nothing
    diff = ok(admin, "admin.diff", module="profiles")
    assert secret not in str(diff) and diff["rows"][0]["memory"]["db_password"] == MASK
    listed = ok(admin, "admin.list_targets")
    assert secret not in str(listed) and listed["auth_profiles"][0]["memory"]["password_source"] == "literal"
    audit = ok(admin, "admin.audit", limit=10)["rows"]
    assert [r["outcome"] for r in audit] == ["INVALID_ARGUMENT", "ok", "ok"] and secret not in str(audit)


def test_invalid_edits_name_the_field_and_change_nothing(admin: AdminHandler) -> None:
    ok(admin, "admin.upsert_target_profile", target_id="t1", protocol="mysql", host="db", max_rows=50)
    for field, value in (("max_rows", 0), ("timeout_ms", -1), ("port", 70000)):
        bad = error(admin, "admin.upsert_target_profile", target_id="t1", **{field: value})
        assert bad["code"] == "INVALID_ARGUMENT" and field in bad["message"], bad
    missing = error(admin, "admin.upsert_target_profile", target_id="t2", host="db")
    assert "protocol" in missing["message"]
    row = ok(admin, "admin.list_targets")["targets"][0]
    assert row["memory"]["max_rows"] == 50 and row["memory"]["port"] == 0 and row["runtime"] is None and row["pending_load"]
    rule = error(admin, "admin.upsert_query_rule", rule_id=7, match_pattern="(unclosed")
    assert "7" in rule["message"] and not ok(admin, "admin.list_query_rules")["rows"]


def test_diff_masks_secret_variables_and_load_from_disk_restores_memory(admin: AdminHandler) -> None:
    token = "a-brand-new-token-value-123"
    ok(admin, "admin.sql", statement=f"SET mcp-stats_endpoint_auth = '{token}'")
    ok(admin, "admin.sql", statement="SET mcp-timeout_ms = 1234")
    diff = ok(admin, "admin.diff", module="variables")
    assert not diff["memory_equals_runtime"] and token not in str(diff)
    changed = {r["key"]: r for r in diff["rows"] if r["memory_vs_runtime"] == "changed"}
    assert set(changed) == {"mcp-stats_endpoint_auth", "mcp-timeout_ms"}
    assert changed["mcp-stats_endpoint_auth"]["memory"]["variable_value"] == MASK
    restored = ok(admin, "admin.load_from_disk", module="MCP VARIABLES")
    assert "global_variables/mcp-timeout_ms (changed)" in restored["changed"]
    assert ok(admin, "admin.diff", module="variables")["memory_equals_runtime"] is True
    statements = [r["arguments"]["statement"] for r in ok(admin, "admin.audit", action="admin.sql")["rows"]]
    assert statements == ["SET mcp-timeout_ms = 1234", f"SET mcp-stats_endpoint_auth = '{MASK}'"]
    assert token not in str(sqlite.rows(admin.services.store.conn(), "SELECT * FROM mcp_audit_log"))


def test_unknown_module_and_endpoint_are_clear_errors(admin: AdminHandler) -> None:
    assert error(admin, "admin.diff", module="nope")["code"] == "NOT_FOUND"
    assert error(admin, "admin.rotate_token", endpoint="nope")["code"] == "INVALID_ARGUMENT"
    assert error(admin, "admin_reload", target="nope")["code"] == "INVALID_ARGUMENT"
