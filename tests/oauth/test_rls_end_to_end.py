"""Row-level security end to end: two users of /mcp/query, one PostgreSQL table, RLS policies
keyed on the caller's subject, which the gateway sets transaction-locally from the validated
access token (mcp-oauth_db_settings = app.user_id=sub) inside each read-only transaction.

The target's account is an ordinary role (superusers and BYPASSRLS roles skip RLS; the table
has FORCE ROW LEVEL SECURITY). 1,000 interleaved calls from both users on a 2-worker gateway,
8 at a time, never see the other's rows: a pooled session carries nothing over. With the result
cache on for the target, each user is served their own cached rows. A static token (no user)
sees no row. The README's worked example is this setup.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import psycopg
import pytest
from server_process import GatewayProcess, call_tool, rpc_body, start_gateway

from oauth.oidc import OidcProvider

TARGET = "notes_db"
SQL = "SELECT owner, body FROM notes ORDER BY body"


def _admin(gateway: GatewayProcess, http: httpx.Client, statement: str) -> dict[str, Any]:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, result
    return result["structuredContent"]


@pytest.fixture(scope="module")
def gateway(provider: OidcProvider, rls_db: dict[str, Any]) -> Iterator[GatewayProcess]:
    variables = {"mcp-oauth_issuer": provider.issuer, "mcp-oauth_db_settings": "app.user_id=sub", "mcp-oauth_claims": "groups"}
    with start_gateway(workers=2, variables=variables) as process, process.client() as http:
        _admin(
            process,
            http,
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) "
            f"VALUES ('rls', '{rls_db['role']}', '{rls_db['password']}')",
        )
        _admin(
            process,
            http,
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, cache_ttl_ms) "
            f"VALUES ('{TARGET}', 'pgsql', '127.0.0.1', {rls_db['port']}, '{rls_db['dbname']}', 'rls', 60000)",
        )
        _admin(
            process,
            http,
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) "
            f"VALUES ('interns', '{rls_db['intern_role']}', '{rls_db['password']}')",
        )
        _admin(
            process,
            http,
            "INSERT INTO mcp_identity_profiles (rule_id, target_id, caller, auth_profile_id) "
            f"VALUES (1, '{TARGET}', 'groups=interns', 'interns')",
        )
        assert _admin(process, http, "LOAD MCP PROFILES TO RUNTIME")["ok"] is True
        deadline = time.monotonic() + 10
        while not call_tool(http, process, "query", "list_targets", {})["structuredContent"]["targets"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        yield process


def _call(http: httpx.Client, token: str, sql: str, cache: str = "bypass") -> dict[str, Any]:
    body = rpc_body(
        "tools/call", {"name": "run_sql_readonly", "arguments": {"sql": sql, "target_id": TARGET, "cache": cache, "stats": True}}
    )
    headers = {"Authorization": f"Bearer {token}", "MCP-Protocol-Version": "2025-06-18"}
    answer = http.post("/mcp/query", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def _run(http: httpx.Client, token: str, cache: str = "bypass") -> dict[str, Any]:
    result = _call(http, token, SQL, cache)
    assert result["isError"] is False, result
    return result["structuredContent"]


def _owners(result: dict[str, Any]) -> set[str]:
    return {row[0] for row in result["rows"]}


def test_each_user_sees_their_rows(gateway: GatewayProcess, provider: OidcProvider) -> None:
    alice = provider.token("alice", gateway.url("query"), "mcp:query")
    bob = provider.token("bob", gateway.url("query"), "mcp:query")
    with gateway.client() as http:
        assert _owners(_run(http, alice)) == {"alice"} and _run(http, alice)["row_count"] == 5
        assert _owners(_run(http, bob)) == {"bob"} and _run(http, bob)["row_count"] == 3
        assert _run(http, gateway.tokens["query"])["rows"] == []  # a static token names no user
        # a profile tool goes through the same read-only path: it counts what the caller may see
        for token, count in ((alice, 5), (bob, 3), (gateway.tokens["query"], 0)):
            body = rpc_body("tools/call", {"name": "table_profile", "arguments": {"target_id": TARGET, "table": "notes"}})
            answer = http.post("/mcp/query", json=body, headers={"Authorization": f"Bearer {token}"}).json()["result"]
            assert answer["isError"] is False, answer
            assert answer["structuredContent"]["row_count"] == count


def test_interleaved_calls_never_leak(gateway: GatewayProcess, provider: OidcProvider) -> None:
    tokens = {user: provider.token(user, gateway.url("query"), "mcp:query") for user in ("alice", "bob")}
    clients = [gateway.client(headers={"Connection": "close"} if i % 4 == 0 else {}) for i in range(8)]

    def one(i: int) -> tuple[str, set[str]]:
        user = ("alice", "bob")[i % 2]
        return user, _owners(_run(clients[i % 8], tokens[user]))

    try:
        with ThreadPoolExecutor(8) as pool:
            seen = list(pool.map(one, range(1000)))
    finally:
        for client in clients:
            client.close()
    leaks = [(user, owners) for user, owners in seen if owners != {user}]
    assert not leaks, leaks[:5]
    # the digests say who ran the statement
    deadline = time.monotonic() + 10
    with gateway.client() as http:
        while True:
            rows = _admin(
                gateway,
                http,
                "SELECT subject, count_star FROM stats_mcp_query_digest_callers WHERE tool_name = 'run_sql_readonly'",
            )
            counts = {row[0]: row[1] for row in rows["rows"]} if "rows" in rows else {}
            if counts.get("alice", 0) >= 500 and counts.get("bob", 0) >= 500:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.5)
        # the digest reset zeroes the callers with the digests (admin SQL's _reset twin, then show_queries reset=true)
        _admin(gateway, http, "SELECT COUNT(*) FROM stats_mcp_query_digest_reset")
        left = _admin(gateway, http, "SELECT COUNT(*) FROM stats_mcp_query_digest_callers")["rows"]
        assert left == [[0]], left
        _run(http, tokens["alice"])
        call_tool(http, gateway, "stats", "show_queries", {})  # flushes this worker's digests
        while not _admin(gateway, http, "SELECT COUNT(*) FROM stats_mcp_query_digest_callers")["rows"][0][0]:
            assert time.monotonic() < deadline + 10
            _run(http, tokens["alice"])
            call_tool(http, gateway, "stats", "show_queries", {})
            time.sleep(0.2)
        assert call_tool(http, gateway, "stats", "show_queries", {"reset": True})["isError"] is False
        left = _admin(gateway, http, "SELECT COUNT(*) FROM stats_mcp_query_digest_callers")["rows"]
        assert left == [[0]], left


def test_the_cache_is_keyed_by_identity(gateway: GatewayProcess, provider: OidcProvider) -> None:
    alice = provider.token("alice", gateway.url("query"), "mcp:query")
    bob = provider.token("bob", gateway.url("query"), "mcp:query")
    with gateway.client() as http:
        first = _run(http, alice, cache="refresh")
        assert _owners(first) == {"alice"}
        from_bob = _run(http, bob, cache="use")
        assert _owners(from_bob) == {"bob"}, from_bob
        states = set()
        for _ in range(4):
            again = _run(http, alice, cache="use")
            assert _owners(again) == {"alice"}
            states.add(again["stats"]["cache"])
        assert "hit" in states, states  # the cache does serve alice her own rows


def test_a_claim_picks_the_database_account(gateway: GatewayProcess, provider: OidcProvider) -> None:
    """bob is in groups=interns: mcp_identity_profiles sends his calls through the interns' role,
    whose grants lack SELECT on salaries; alice keeps the target's own account."""
    alice = provider.token("alice", gateway.url("query"), "mcp:query")
    bob = provider.token("bob", gateway.url("query"), "mcp:query")
    with gateway.client() as http:
        mine = _call(http, alice, "SELECT who, amount FROM salaries ORDER BY who")
        assert mine["isError"] is False and len(mine["structuredContent"]["rows"]) == 2
        for cache in ("bypass", "use"):  # never served alice's cached answer either
            refused = _call(http, bob, "SELECT who, amount FROM salaries ORDER BY who", cache)
            assert refused["isError"] is True, refused
            error = refused["structuredContent"]["error"]
            assert error["code"] == "PERMISSION_DENIED" and "salaries" in error["message"], error
        assert _owners(_run(http, bob)) == {"bob"}  # what his grants allow still works, under RLS
        static = _call(http, gateway.tokens["query"], "SELECT count(*) FROM salaries")
        assert static["isError"] is False  # a static token: the target's own account


def test_catalog_tools_read_as_the_callers_account(gateway: GatewayProcess, provider: OidcProvider, rls_db: dict) -> None:
    """The catalog tools borrow the same per-user account: a schema the interns' role may not
    use (no USAGE) is not listed for bob, and is for alice (the target's account)."""
    settings = {k: v for k, v in rls_db.items() if k not in ("role", "intern_role", "password")}
    with psycopg.connect(**settings, autocommit=True) as pg:
        pg.execute("CREATE SCHEMA IF NOT EXISTS ledger")
        pg.execute("CREATE TABLE IF NOT EXISTS ledger.entries (n int)")
        pg.execute(f"GRANT USAGE ON SCHEMA ledger TO {rls_db['role']}")
    try:
        _catalog_as_callers(gateway, provider)
    finally:
        with psycopg.connect(**settings, autocommit=True) as pg:
            pg.execute("DROP SCHEMA ledger CASCADE")


def _catalog_as_callers(gateway: GatewayProcess, provider: OidcProvider) -> None:
    alice = provider.token("alice", gateway.url("query"), "mcp:query")
    bob = provider.token("bob", gateway.url("query"), "mcp:query")
    with gateway.client() as http:

        def schemas(token: str) -> list[str]:
            result = call_tool(http, gateway, "query", "list_schemas", {"target_id": TARGET}, token=token)
            assert result["isError"] is False, result
            return result["structuredContent"]["schemas"]

        assert "ledger" in schemas(alice) and "public" in schemas(alice)
        assert "ledger" not in schemas(bob) and "public" in schemas(bob)
        assert "ledger" in schemas(gateway.tokens["query"])  # a static token: the target's own account
        shown = call_tool(http, gateway, "query", "describe_table", {"target_id": TARGET, "table": "notes"}, token=bob)
        assert shown["isError"] is False, shown  # what his grants show is described
