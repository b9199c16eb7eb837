"""The three configuration layers on real SQLite files: LOAD validates then swaps, SAVE persists."""

from __future__ import annotations

import pytest

from gateway import sqlite
from gateway.assembly import open_store
from gateway.errors import ConfigError, NotFound


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "data")
    s.initialize()
    return s


def test_memory_edit_reaches_runtime_only_after_load(store):
    store.set_variable("mcp-timeout_ms", "1234")
    assert store.read_runtime().var("mcp-timeout_ms") == 30000
    version = store.load_to_runtime("MCP VARIABLES")
    runtime = store.read_runtime()
    assert runtime.version == version and runtime.var("mcp-timeout_ms") == 1234


def test_invalid_load_changes_nothing_and_says_what_is_wrong(store):
    store.set_variable("mcp-timeout_ms", "1234")
    store.load_to_runtime("MCP VARIABLES")
    before = store.runtime_version()
    conn = store.conn()
    conn.execute("UPDATE global_variables SET variable_value = 'lots' WHERE variable_name = 'mcp-timeout_ms'")
    conn.execute("UPDATE global_variables SET variable_value = 'weird' WHERE variable_name = 'mcp-tool_name_style'")
    with pytest.raises(ConfigError) as err:
        store.load_to_runtime("MCP VARIABLES")
    assert "mcp-timeout_ms" in str(err.value) and "mcp-tool_name_style" in str(err.value)
    assert store.runtime_version() == before
    assert store.read_runtime().var("mcp-timeout_ms") == 1234


def test_unknown_variable_in_memory_is_refused_at_load(store):
    store.conn().execute("INSERT INTO global_variables VALUES ('mcp-no_such_thing', '1')")
    with pytest.raises(ConfigError, match="mcp-no_such_thing"):
        store.load_to_runtime("MCP VARIABLES")


def test_set_variable_checks_type_and_name_at_once(store):
    with pytest.raises(ConfigError):
        store.set_variable("mcp-port", "not-a-port")
    with pytest.raises(ConfigError):
        store.set_variable("mcp-port", "70000")
    with pytest.raises(NotFound):
        store.set_variable("mcp-nope", "1")


def test_save_to_disk_survives_a_new_store_and_load_from_disk_restores(store, tmp_path):
    store.set_variable("mcp-timeout_ms", "777")
    store.save_to_disk("MCP VARIABLES")
    store.set_variable("mcp-timeout_ms", "888")  # unsaved memory edit
    again = open_store(tmp_path / "data")
    assert again.disk_variables()["mcp-timeout_ms"] == "777"
    again.load_from_disk("mcp variables")  # module names are case- and space-insensitive
    assert again.memory_variables()["mcp-timeout_ms"] == "777"


def test_save_from_runtime_copies_runtime_back_to_memory(store):
    store.set_variable("mcp-timeout_ms", "555")
    store.load_to_runtime("MCP VARIABLES")
    store.set_variable("mcp-timeout_ms", "999")
    store.save_from_runtime("MCP VARIABLES")
    assert store.memory_variables()["mcp-timeout_ms"] == "555"


def test_unknown_module_is_not_found(store):
    with pytest.raises(NotFound, match="MCP NOTHING"):
        store.load_to_runtime("MCP NOTHING")


def test_runtime_has_every_declared_variable_typed(store):
    store.load_to_runtime("MCP VARIABLES")
    runtime = store.read_runtime()
    assert set(runtime.variables) == set(store.variables)
    assert runtime.var("mcp-use_ssl") is True
    assert runtime.var("mcp-config_endpoint_auth") == ()


def test_data_files_are_private(store):
    assert (store.data_dir.stat().st_mode & 0o777) == 0o700
    assert (store.config_path.stat().st_mode & 0o777) == 0o600
    assert (store.disk_path.stat().st_mode & 0o777) == 0o600
    assert sqlite.scalar(store.conn(), "PRAGMA journal_mode") == "wal"


def test_an_older_data_directory_gains_new_columns_on_start(tmp_path):
    # A data directory from before mcp_target_profiles.allow_explain_analyze existed.
    old = open_store(tmp_path / "data")
    old.initialize()
    for db in ("main", "disk"):
        conn = old.conn()
        conn.execute(f"ALTER TABLE {db}.mcp_target_profiles DROP COLUMN allow_explain_analyze")
        conn.execute(f"INSERT INTO {db}.mcp_target_profiles (target_id, protocol, database) VALUES ('t1', 'sqlite', '/tmp/x.db')")
    old.close()
    store = open_store(tmp_path / "data")
    store.initialize()
    for db in ("main", "disk"):
        rows = sqlite.rows(store.conn(), f"SELECT target_id, allow_explain_analyze FROM {db}.mcp_target_profiles")
        assert rows == [{"target_id": "t1", "allow_explain_analyze": 0}]
    store.conn().execute("UPDATE mcp_target_profiles SET allow_explain_analyze = 1")  # and admins can now set it
