"""admin.sql: ProxySQL verbs and SQL confined to admin tables, secrets never readable."""

from __future__ import annotations

import pytest

from gateway.admin_sql import AdminSQL
from gateway.assembly import open_store
from gateway.errors import ConfigError, InvalidArgument
from gateway.variables import MASK

SECRET = "s3cret-token-abcdefghijklmnop"


@pytest.fixture
def admin(tmp_path):
    store = open_store(tmp_path / "data")
    store.initialize()
    store.set_variable("mcp-config_endpoint_auth", SECRET)
    store.load_to_runtime("MCP VARIABLES")
    return AdminSQL(store)


def _flat(result) -> str:
    return repr(result)


def test_select_masks_secret_variables_in_memory_and_runtime(admin):
    for table in ("global_variables", "runtime_global_variables"):
        result = admin.execute(
            f"SELECT variable_name, variable_value FROM {table} WHERE variable_name = 'mcp-config_endpoint_auth'"
        )
        assert result["rows"] == [["mcp-config_endpoint_auth", MASK]]
        assert SECRET not in _flat(result)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT variable_value FROM main.global_variables",
        "SELECT variable_value FROM main.runtime_global_variables",
        "SELECT variable_value FROM disk.global_variables",
        "SELECT count(*) FROM global_variables WHERE variable_value = 's3cret-token-abcdefghijklmnop'",
    ],
)
def test_secrets_cannot_be_read_or_probed(admin, statement):
    try:
        result = admin.execute(statement)
    except InvalidArgument:
        return
    assert SECRET not in _flat(result)
    assert result["rows"] in ([[0]], [])


@pytest.mark.parametrize(
    "statement",
    [
        "ATTACH DATABASE '/tmp/x.db' AS x",
        "PRAGMA writable_schema = 1",
        "CREATE TABLE evil (x)",
        "DROP TABLE global_variables",
        "DELETE FROM runtime_global_variables",
        "INSERT INTO disk.global_variables VALUES ('mcp-port', '1')",
        "SELECT load_extension('/tmp/x.so')",
        "SELECT 1; DELETE FROM global_variables",
        "SELECT 1;\nDELETE FROM global_variables;",
        "BEGIN",
        "VACUUM",
    ],
)
def test_statements_outside_the_admin_tables_are_refused(admin, statement):
    with pytest.raises(InvalidArgument):
        admin.execute(statement)


def test_edit_through_masked_view_then_load_and_save(admin):
    admin.execute("UPDATE global_variables SET variable_value = '4000' WHERE variable_name = 'mcp-timeout_ms'")
    admin.execute("REPLACE INTO global_variables VALUES ('mcp-tools_page_size', '7')")
    out = admin.execute("LOAD MCP VARIABLES TO RUNTIME")
    assert out["ok"] and out["runtime_version"] >= 2
    runtime = admin.store.read_runtime()
    assert runtime.var("mcp-timeout_ms") == 4000 and runtime.var("mcp-tools_page_size") == 7
    admin.execute("SAVE MCP VARIABLES TO DISK")
    assert admin.store.disk_variables()["mcp-timeout_ms"] == "4000"
    # a secret edited through the masked view is stored for real, never shown
    admin.execute(
        "UPDATE global_variables SET variable_value = 'rotated-token-0123456789' WHERE variable_name = 'mcp-config_endpoint_auth'"
    )
    assert admin.store.memory_variables()["mcp-config_endpoint_auth"] == "rotated-token-0123456789"


def test_set_and_proxysql_aliases(admin):
    admin.execute("SET mcp-timeout_ms = '2500'")
    admin.execute("LOAD MCP VARIABLES FROM MEMORY")  # alias of TO RUNTIME
    assert admin.store.read_runtime().var("mcp-timeout_ms") == 2500
    admin.execute("SAVE MCP VARIABLES FROM MEMORY")  # alias of TO DISK
    admin.execute("SET mcp-timeout_ms = 3000")
    admin.execute("LOAD MCP VARIABLES TO MEMORY")  # alias of FROM DISK
    assert admin.store.memory_variables()["mcp-timeout_ms"] == "2500"
    with pytest.raises(ConfigError):
        admin.execute("SET mcp-timeout_ms = 'soon'")


def test_row_cap_sets_truncated(admin):
    result = admin.execute("SELECT * FROM runtime_global_variables", max_rows=3)
    assert result["row_count"] == 3 and result["truncated"] is True


def test_unknown_statement_kind_is_a_clear_error(admin):
    with pytest.raises(InvalidArgument, match="unsupported admin statement"):
        admin.execute("SHOW TABLES")
