"""/mcp/query through a real gateway process: profiles edited and loaded with admin.sql over
HTTPS, then the discovery tools called with the official MCP SDK client (which validates each
structuredContent against the tool's outputSchema), and the pools seen in show_connections."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

pytestmark = pytest.mark.skipif(
    "query" not in registered_endpoints(), reason="QueryHandler is not in handlers.HANDLER_CLASSES yet"
)


@asynccontextmanager
async def connect(gateway: GatewayProcess, endpoint: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {gateway.tokens[endpoint]}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
        Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode="auto", raise_exceptions=True) as client,
    ):
        yield client


def admin(gateway: GatewayProcess, http: Any, statement: str) -> dict[str, Any]:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, result
    return result["structuredContent"]


@pytest.fixture(scope="module")
def gateway(postgres_db: dict) -> Iterator[GatewayProcess]:
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute("CREATE TABLE parts (id int PRIMARY KEY, name text NOT NULL UNIQUE, weight_g numeric CHECK (weight_g > 0))")
    with start_gateway() as process, process.client() as http:
        admin(
            process,
            http,
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'not-needed-trust')",
        )
        admin(
            process,
            http,
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, description) "
            f"VALUES ('inventory', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg', 'parts catalogue')",
        )
        admin(
            process,
            http,
            "INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('broken', 'sqlite', '/nonexistent/x.db')",
        )
        assert admin(process, http, "LOAD MCP PROFILES TO RUNTIME")["ok"] is True
        deadline = time.monotonic() + 10  # workers follow the runtime within about a second
        while time.monotonic() < deadline:
            targets = call_tool(http, process, "query", "list_targets", {})["structuredContent"]["targets"]
            if targets:
                break
            time.sleep(0.2)
        yield process


def test_discovery_over_the_sdk(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"list_targets", "list_schemas", "list_tables", "describe_table", "get_constraints"} <= names
            targets = await client.call_tool("list_targets", {})
            assert targets.is_error is False
            assert targets.structured_content == {
                "targets": [
                    {
                        "target_id": "inventory",
                        "description": "parts catalogue",
                        "protocol": "pgsql",
                        "capabilities": ["inventory", "readonly_sql", "explain"],
                    }
                ],
                "default_target_id": "inventory",
            }
            tables = await client.call_tool("list_tables", {"name_filter": "part"})
            assert [t["name"] for t in tables.structured_content["tables"]] == ["parts"]
            described = await client.call_tool("describe_table", {"table": "parts", "target_id": "inventory"})
            assert [(c["name"], c["key"]) for c in described.structured_content["columns"]] == [
                ("id", "PRI"),
                ("name", "UNI"),
                ("weight_g", None),
            ]
            constraints = await client.call_tool("get_constraints", {"table": "parts"})
            assert constraints.structured_content["primary_key"]["columns"] == ["id"]
            assert [c["name"] for c in constraints.structured_content["checks"]] == ["parts_weight_g_check"]
            missing = await client.call_tool("describe_table", {"table": "nope"})
            assert missing.is_error is True and missing.structured_content["error"]["code"] == "NOT_FOUND"
            broken = await client.call_tool("list_schemas", {"target_id": "broken"})
            assert broken.is_error is True and "sqlite file missing" in broken.structured_content["error"]["message"]

    anyio.run(scenario)


def test_pools_in_show_connections_and_no_secrets_anywhere(gateway: GatewayProcess) -> None:
    with gateway.client() as http:
        call_tool(http, gateway, "query", "list_schemas", {})
        pools = call_tool(http, gateway, "stats", "show_connections", {})["structuredContent"]["pools"]
        (inventory,) = [p for p in pools if p["target_id"] == "inventory"]
        assert inventory["protocol"] == "pgsql" and inventory["size"] >= 1
        shown = json.dumps(pools) + json.dumps(admin(gateway, http, "SELECT * FROM runtime_mcp_auth_profiles"))
        assert "not-needed-trust" not in shown and "127.0.0.1" not in json.dumps(pools)
        runtime = admin(
            gateway, http, "SELECT target_id, effective, skip_reason FROM runtime_mcp_target_profiles ORDER BY target_id"
        )
        assert runtime["rows"] == [["broken", 0, "sqlite file missing"], ["inventory", 1, ""]]
