"""The admin lifecycle through the official MCP client, on a two-worker gateway:

upsert an auth and a target profile -> diff shows memory != runtime -> load -> the query
endpoint serves the new target on every worker at once -> an invalid edit changes nothing
and names the field -> save -> restart -> still there; every other endpoint's token is
refused on /mcp/admin; the audit trail has each step and no password, nor has the log."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import psycopg
import pytest
from server_process import ENDPOINTS, GatewayProcess, post_rpc, start_gateway

from admin.support import audit_actions, audit_table_text, ok, restarted, sdk

WORKERS = 2


@pytest.fixture(scope="module")
def pg_items(postgres_db: dict) -> dict:
    with psycopg.connect(**postgres_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 5) g")
    return postgres_db


def _structured(result: Any) -> dict:
    return result.structured_content


@pytest.mark.slow
def test_admin_lifecycle_through_the_sdk(pg_items: dict) -> None:
    password = f"pw-{uuid.uuid4().hex}"  # trust auth ignores it; it must still never be shown or logged
    target_id = f"t_{uuid.uuid4().hex[:8]}"
    auth_id = f"ap_{uuid.uuid4().hex[:8]}"
    with start_gateway(workers=WORKERS) as gateway:
        with gateway.client() as http:
            for endpoint in ENDPOINTS:
                if endpoint != "admin":
                    refused = post_rpc(http, gateway, "admin", "tools/list", {}, token=gateway.tokens[endpoint])
                    assert refused.status_code == 401, endpoint

        async def first_run() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in exception groups
                async with sdk(gateway, "admin", token=gateway.tokens["query"]) as client:
                    await client.list_tools()
            async with sdk(gateway, "admin") as admin:
                names = {t.name for t in (await admin.list_tools()).tools}
                assert {"admin.upsert_target_profile", "admin.diff", "admin.rotate_token", "admin_kill_query"} <= names
                put = await admin.call_tool(
                    "admin.upsert_auth_profile",
                    {"auth_profile_id": auth_id, "db_username": pg_items["user"], "db_password": password},
                )
                assert put.is_error is False, _structured(put)
                assert _structured(put)["row"]["password_source"] == "literal" and password not in str(_structured(put))
                put = await admin.call_tool(
                    "admin.upsert_target_profile",
                    {
                        "target_id": target_id,
                        "protocol": "pgsql",
                        "host": pg_items["host"],
                        "port": pg_items["port"],
                        "database": pg_items["dbname"],
                        "auth_profile_id": auth_id,
                    },
                )
                assert put.is_error is False and _structured(put)["action"] == "inserted", _structured(put)
                diff = _structured(await admin.call_tool("admin.diff", {"module": "MCP PROFILES"}))
                assert diff["memory_equals_runtime"] is False and password not in str(diff)
                assert {(r["table"], r["key"], r["memory_vs_runtime"]) for r in diff["rows"]} >= {
                    ("mcp_target_profiles", target_id, "added"),
                    ("mcp_auth_profiles", auth_id, "added"),
                }
                started = time.monotonic()
                loaded = _structured(await admin.call_tool("admin.load_to_runtime", {"module": "profiles"}))
                seen["load_s"] = time.monotonic() - started
                assert loaded["workers_applied"] == loaded["workers"] == WORKERS, loaded
                seen["loaded_at"] = time.monotonic()
            return seen

        seen = anyio.run(first_run)
        # Every call after the load answered serves the target, whichever worker takes it.
        for _ in range(12):
            with gateway.client() as fresh:  # a new connection each time: the kernel spreads them over workers
                rows = ok(
                    fresh,
                    gateway,
                    "query",
                    "run_sql_readonly",
                    {"sql": "SELECT count(*) AS n FROM items", "target_id": target_id},
                )
                assert rows["rows"] == [[5]]
        print(f"load_to_runtime answered in {seen['load_s']:.3f} s with {WORKERS} workers serving")
        with gateway.client() as http:  # those statements filled the read-only checker's cache of the workers that took them
            flushed = ok(http, gateway, "admin", "admin_flush_cache", {"cache_type": "readonly_shapes"})
            # Every worker flushed; how many entries there were depends on how the kernel spread the
            # 12 connections (on a quiet machine one worker may accept them all).
            assert flushed["workers_flushed"] == flushed["workers"] == WORKERS and flushed["flushed"]["readonly_shapes"] >= 1

        async def invalid_edits() -> None:
            async with sdk(gateway, "admin") as admin:
                bad = await admin.call_tool("admin.upsert_target_profile", {"target_id": target_id, "port": 70000})
                assert bad.is_error is True
                error = _structured(bad)["error"]
                assert error["code"] == "INVALID_ARGUMENT" and "port" in error["message"], error
                # The same rules at LOAD: an edit made through admin.sql that does not validate.
                edit = await admin.call_tool(
                    "admin.sql", {"statement": f"UPDATE mcp_target_profiles SET max_rows = 0 WHERE target_id = '{target_id}'"}
                )
                assert edit.is_error is False
                refused = await admin.call_tool("admin.load_to_runtime", {"module": "MCP PROFILES"})
                assert refused.is_error is True and "max_rows" in _structured(refused)["error"]["message"]
                listed = _structured(await admin.call_tool("admin.list_targets", {}))
                row = next(r for r in listed["targets"] if r["key"] == target_id)
                assert row["runtime"]["max_rows"] == 200 and row["runtime"]["port"] == 5432 and row["runtime"]["effective"] == 1
                assert row["memory"]["max_rows"] == 0 and row["pending_load"] is True
                fixed = await admin.call_tool("admin.upsert_target_profile", {"target_id": target_id, "max_rows": 200})
                assert fixed.is_error is False, _structured(fixed)
                saved = await admin.call_tool("admin.save_to_disk", {"module": "profiles"})
                assert saved.is_error is False
                diff = _structured(await admin.call_tool("admin.diff", {"module": "profiles"}))
                assert diff["memory_equals_runtime"] and diff["memory_equals_disk"], diff

        anyio.run(invalid_edits)
        with gateway.client() as http:
            ok(http, gateway, "query", "run_sql_readonly", {"sql": "SELECT 1 AS one", "target_id": target_id})

        with restarted(gateway, workers=WORKERS) as again:

            async def after_restart() -> dict:
                async with sdk(again, "admin") as admin:
                    listed = _structured(await admin.call_tool("admin.list_targets", {}))
                    return next(r for r in listed["targets"] if r["key"] == target_id)

            row = anyio.run(after_restart)
            assert row["runtime"]["effective"] == 1 and not row["pending_load"] and not row["pending_save"]
            assert any("superuser" in warning for warning in row["runtime"]["privilege_warnings"])  # the postgres account
            with again.client() as http:
                assert ok(
                    http, again, "query", "run_sql_readonly", {"sql": "SELECT count(*) AS n FROM items", "target_id": target_id}
                )["rows"] == [[5]]
                actions = audit_actions(http, again)
            expected = {
                ("admin.upsert_auth_profile", "ok"),
                ("admin.upsert_target_profile", "ok"),
                # (port 70000 is refused by the tool's input schema before the tool runs: no change, no row)
                ("admin.sql", "ok"),
                ("admin.load_to_runtime", "ok"),
                ("admin.load_to_runtime", "INVALID_ARGUMENT"),
                ("admin.save_to_disk", "ok"),
            }
            assert expected <= set(actions), actions
            assert ("admin.diff", "ok") not in set(actions)  # reads are not changes
        assert password not in audit_table_text(gateway.data_dir)
        assert password not in gateway.log_path.read_text(errors="replace")


def test_every_admin_change_tool_has_an_audit_row_with_actor(gateway_admin: GatewayProcess) -> None:
    """Actor columns: endpoint, the caller's token fingerprint, client address."""
    with gateway_admin.client() as http:
        ok(
            http,
            gateway_admin,
            "admin",
            "admin.upsert_query_rule",
            {"rule_id": 9001, "active": False, "match_pattern": "^SELECT"},
        )
        bad = post_rpc(
            http,
            gateway_admin,
            "admin",
            "tools/call",
            {"name": "admin.upsert_query_rule", "arguments": {"rule_id": 9002, "match_pattern": "(unclosed"}},
        )
        assert bad.json()["result"]["isError"] is True
        assert "9002" in bad.json()["result"]["structuredContent"]["error"]["message"]
        ok(http, gateway_admin, "admin", "admin.delete_query_rule", {"rule_id": 9001})
        rows = ok(http, gateway_admin, "admin", "admin.audit", {"since": time.time() - 60, "limit": 10})["rows"]
    from gateway.tokens import fingerprint

    mine = [r for r in rows if r["action"] in ("admin.upsert_query_rule", "admin.delete_query_rule")]
    assert [(r["action"], r["outcome"]) for r in mine] == [
        ("admin.delete_query_rule", "ok"),
        ("admin.upsert_query_rule", "INVALID_ARGUMENT"),
        ("admin.upsert_query_rule", "ok"),
    ]
    assert all(r["endpoint"] == "admin" and r["client"] == "127.0.0.1" for r in mine)
    assert all(r["token_fingerprint"] == fingerprint(gateway_admin.tokens["admin"]) for r in mine)
    assert mine[0]["before"]["match_pattern"] == "^SELECT" and mine[2]["after"]["rule_id"] == 9001


@pytest.fixture
def gateway_admin(gateway_server: GatewayProcess) -> GatewayProcess:
    """The session's shared gateway: these tests put back what they change."""
    return gateway_server


def test_config_set_config_is_audited_without_the_secret(gateway_admin: GatewayProcess) -> None:
    secret = f"metrics-{uuid.uuid4().hex}"
    with gateway_admin.client() as http:
        ok(http, gateway_admin, "config", "set_config", {"variable_name": "mcp-metrics_auth", "value": secret})
        ok(http, gateway_admin, "config", "set_config", {"variable_name": "mcp-metrics_auth", "value": ""})
        ok(http, gateway_admin, "admin", "admin.sql", {"statement": f"SET mcp-metrics_auth = '{secret}'"})
        ok(http, gateway_admin, "admin", "admin.sql", {"statement": "SET mcp-metrics_auth = ''"})
        ok(http, gateway_admin, "admin", "admin.sql", {"statement": "LOAD MCP VARIABLES TO RUNTIME"})
        rows = ok(http, gateway_admin, "admin", "admin.audit", {"action": "set_config"})["rows"]
        assert [r["endpoint"] for r in rows[:2]] == ["config", "config"] and rows[0]["outcome"] == "ok"
        assert rows[1]["arguments"]["variable_name"] == "mcp-metrics_auth"
    text = audit_table_text(gateway_admin.data_dir)
    assert "SET mcp-metrics_auth" in text and secret not in text
    assert secret not in gateway_admin.log_path.read_text(errors="replace")


def test_flush_cache(gateway_admin: GatewayProcess) -> None:
    with gateway_admin.client() as http:
        ok(http, gateway_admin, "query", "list_targets", {})
        flushed = ok(http, gateway_admin, "admin", "admin_flush_cache", {"cache_type": "readonly_shapes"})
        assert flushed["workers_flushed"] == flushed["workers"] == 1 and "readonly_shapes" in flushed["flushed"]
        again = ok(http, gateway_admin, "admin", "admin_flush_cache", {"cache_type": "readonly_shapes"})
        assert again["flushed"]["readonly_shapes"] == 0  # nothing cached since
        everything = ok(http, gateway_admin, "admin", "admin_flush_cache", {"cache_type": "all"})
        assert "readonly_shapes" in everything["flushed"]
        result = post_rpc(
            http,
            gateway_admin,
            "admin",
            "tools/call",
            {"name": "admin_flush_cache", "arguments": {"cache_type": "query_results"}},
        ).json()
        structured = result["result"]["structuredContent"]
        assert ("query_results" in structured.get("flushed", {})) or structured["error"]["code"] == "UNAVAILABLE"
        bad = post_rpc(
            http, gateway_admin, "admin", "tools/call", {"name": "admin_flush_cache", "arguments": {"cache_type": "nope"}}
        ).json()
        assert bad["result"]["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"


def test_reload_and_rag_sources(gateway_admin: GatewayProcess) -> None:
    with gateway_admin.client() as http:
        key = f"key-{uuid.uuid4().hex}"
        put = ok(
            http,
            gateway_admin,
            "admin",
            "admin.upsert_rag_source",
            {
                "name": "docs_src",
                "target_id": "nowhere",
                "table_name": "docs",
                "pk_column": "id",
                "doc_map_json": {"title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}},
                "embedding_json": {"provider": "openai", "api_key": key},
            },
        )
        assert key not in str(put)
        listed = ok(http, gateway_admin, "admin", "admin.list_rag_sources", {})
        assert [r["key"] for r in listed["rows"] if r["memory"] and r["memory"]["name"] == "docs_src"] and key not in str(listed)
        reloaded = ok(http, gateway_admin, "admin", "admin_reload", {"target": "sources"})
        assert reloaded["modules"][0]["module"] == "RAG SOURCES"
        gone = ok(http, gateway_admin, "admin", "admin.list_rag_sources", {})
        assert not [r for r in gone["rows"] if r["memory"]], "the unsaved source was replaced by the (empty) disk layer"
    assert key not in audit_table_text(gateway_admin.data_dir)


def test_auth_profile_in_use_cannot_be_deleted(gateway_admin: GatewayProcess) -> None:
    with gateway_admin.client() as http:
        ok(http, gateway_admin, "admin", "admin.upsert_auth_profile", {"auth_profile_id": "ap_used", "db_username": "x"})
        ok(
            http,
            gateway_admin,
            "admin",
            "admin.upsert_target_profile",
            {"target_id": "t_uses", "protocol": "mysql", "host": "127.0.0.1", "auth_profile_id": "ap_used"},
        )
        refused = post_rpc(
            http,
            gateway_admin,
            "admin",
            "tools/call",
            {"name": "admin.delete_auth_profile", "arguments": {"auth_profile_id": "ap_used"}},
        )
        error = refused.json()["result"]["structuredContent"]["error"]
        assert error["code"] == "INVALID_ARGUMENT" and "t_uses" in error["message"]
        ok(http, gateway_admin, "admin", "admin.delete_target_profile", {"target_id": "t_uses"})
        ok(http, gateway_admin, "admin", "admin.delete_auth_profile", {"auth_profile_id": "ap_used"})
        listed = ok(http, gateway_admin, "admin", "admin.list_targets", {})
        assert "t_uses" not in {r["key"] for r in listed["targets"]} and "ap_used" not in {
            r["key"] for r in listed["auth_profiles"]
        }
