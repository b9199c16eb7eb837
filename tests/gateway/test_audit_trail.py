"""gateway/audit.py on a real data directory: masking, scrubbing, retention, reading back."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway import audit, sqlite
from gateway.admin_sql import AdminSQL
from gateway.errors import InvalidArgument
from gateway.startup import open_store
from gateway.variables import MASK

ACTOR = audit.Actor(endpoint="admin", token_fingerprint="abc123abc123", client="127.0.0.1")


def _store(tmp_path: Path):
    store = open_store(tmp_path / "data")
    store.initialize()
    return store


def test_secrets_are_masked_by_key_in_sql_and_by_value(tmp_path: Path) -> None:
    store = _store(tmp_path)
    audit.record(
        store,
        ACTOR,
        "admin.upsert_auth_profile",
        arguments={"auth_profile_id": "a", "db_password": "hunter2-long", "nested": {"api_key": "k-123456"}},
        after={"embedding_json": '{"provider": "openai", "api_key": "k-123456"}'},
        message="failed near 'quoted-secret-9'",
        secrets=["quoted-secret-9"],
    )
    audit.record(
        store,
        ACTOR,
        "admin.sql",
        arguments={"statement": audit.mask_sql("UPDATE mcp_auth_profiles SET db_password = 'pw''x' WHERE auth_profile_id = 'a'")},
    )
    audit.record(
        store, ACTOR, "admin.sql", arguments={"statement": audit.mask_sql("UPDATE mcp_target_profiles SET host = 'db1'")}
    )
    text = "\n".join(repr(r) for r in store.conn().execute("SELECT * FROM mcp_audit_log"))
    for secret in ("hunter2-long", "k-123456", "quoted-secret-9", "pw''x", "pw'x"):
        assert secret not in text
    rows, truncated = audit.read(store, limit=10)
    assert not truncated and [r["action"] for r in rows] == ["admin.sql", "admin.sql", "admin.upsert_auth_profile"]
    assert rows[0]["arguments"]["statement"] == "UPDATE mcp_target_profiles SET host = 'db1'"  # no secret near: kept
    assert (
        rows[1]["arguments"]["statement"]
        == f"UPDATE mcp_auth_profiles SET db_password = '{MASK}' WHERE auth_profile_id = '{MASK}'"
    )
    assert rows[2]["arguments"]["db_password"] == MASK and rows[2]["arguments"]["nested"]["api_key"] == MASK
    assert rows[2]["token_fingerprint"] == "abc123abc123" and rows[2]["client"] == "127.0.0.1"


def test_retention_bounds_the_table(tmp_path: Path) -> None:
    store = _store(tmp_path)
    conn = store.conn()
    conn.execute(
        "INSERT INTO mcp_audit_log (at, endpoint, action, outcome) VALUES (?, 'admin', 'old', 'ok')", (time.time() - 40 * 86400,)
    )
    settings = {"admin-audit_retention_days": 30, "admin-audit_max_rows": 100}
    for i in range(105):
        audit.record(store, ACTOR, f"a{i}", runtime_variables=settings)
    actions = [r[0] for r in conn.execute("SELECT action FROM mcp_audit_log ORDER BY id")]
    assert len(actions) == 100 and actions[0] == "a5" and "old" not in actions


def test_audited_records_failures_and_reraises(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        with audit.audited(store, ACTOR, "admin.x", {"k": 1}) as entry:
            entry.before = {"v": 1}
            raise InvalidArgument("port must be an integer")
    except InvalidArgument:
        pass
    else:
        raise AssertionError("the error must propagate")
    (row,), _ = audit.read(store, limit=1)
    assert (row["outcome"], row["message"], row["before"]) == ("INVALID_ARGUMENT", "port must be an integer", {"v": 1})


def test_admin_sql_writes_are_audited_reads_are_not(tmp_path: Path) -> None:
    """The CLI on a stopped gateway goes through AdminSQL too: its writes land in the trail."""
    store = _store(tmp_path)
    admin = AdminSQL(store)
    admin.execute("SELECT * FROM global_variables", actor=audit.CLI_ACTOR)
    admin.execute("SET mcp-query_endpoint_auth = 'a-token-of-enough-length'", actor=audit.CLI_ACTOR)
    admin.execute(
        "UPDATE global_variables SET variable_value = '5000' WHERE variable_name = 'mcp-timeout_ms'", actor=audit.CLI_ACTOR
    )
    admin.execute("LOAD MCP VARIABLES TO RUNTIME", actor=audit.CLI_ACTOR)
    with pytest.raises(InvalidArgument):  # refused by the authorizer, audited all the same
        admin.execute("DELETE FROM runtime_global_variables", actor=audit.CLI_ACTOR)
    rows = sqlite.rows(store.conn(), "SELECT * FROM mcp_audit_log ORDER BY id")
    assert [(r["endpoint"], r["outcome"]) for r in rows] == [("cli", "ok")] * 3 + [("cli", "INVALID_ARGUMENT")]
    assert "a-token-of-enough-length" not in repr(rows)
    assert "mcp-timeout_ms" in rows[1]["arguments"] and "LOAD MCP VARIABLES" in rows[2]["arguments"]
