"""The official MCP Python SDK 2.x client against a real gateway over HTTPS.

Both ways the 2.x client connects: `mode="auto"` (probes `server/discover`, then speaks the
2026-07-28 era: per-request _meta version, Mcp-Method/Mcp-Name headers, resultType) and
`mode="legacy"` (the initialize handshake). Each endpoint is opened with its own token; a
stats and a config tool are called and their structured results checked; the SDK's own
validation of `structuredContent` against `outputSchema` runs on every call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from server_process import GatewayProcess, registered_endpoints

MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@asynccontextmanager
async def connect(gateway: GatewayProcess, endpoint: str, *, mode: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token or gateway.tokens[endpoint]}"}
    async with httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http:
        transport = streamable_http_client(gateway.url(endpoint), http_client=http)
        async with Client(transport, mode=mode, raise_exceptions=True) as client:
            yield client


async def all_tool_names(client: Client) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        names += [tool.name for tool in page.tools]
        cursor = page.next_cursor
        if not cursor:
            return names


def run(coro_fn: Any, *args: Any) -> Any:
    return anyio.run(coro_fn, *args)


@pytest.mark.parametrize("mode", MODES)
def test_config_endpoint_round_trip(gateway_server: GatewayProcess, mode: str) -> None:
    async def scenario() -> None:
        async with connect(gateway_server, "config", mode=mode) as client:
            assert client.protocol_version == MODES[mode]
            names = await all_tool_names(client)
            assert {"get_config", "set_config", "list_variables", "reload_config", "get_status"} <= set(names)
            result = await client.call_tool("get_config", {"variable_name": "mcp-timeout_ms"})
            assert result.is_error is False
            assert result.structured_content["variable_name"] == "mcp-timeout_ms"
            assert result.structured_content["value"] == "30000"
            status = await client.call_tool("get_status", {})
            assert status.is_error is False
            assert {e["endpoint"] for e in status.structured_content["endpoints"]} >= {"config", "stats"}
            bad = await client.call_tool("get_config", {"variable_name": "no-such-variable"})
            assert bad.is_error is True
            assert bad.structured_content["error"]["code"] == "NOT_FOUND"

    run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_stats_endpoint_round_trip(gateway_server: GatewayProcess, mode: str) -> None:
    async def scenario() -> None:
        async with connect(gateway_server, "stats", mode=mode) as client:
            names = set(await all_tool_names(client))
            assert {"list_stats", "get_stats", "get_health", "show_metrics", "show_tool_usage"} <= names
            health = await client.call_tool("get_health", {})
            assert health.is_error is False and health.structured_content
            usage = await client.call_tool("show_tool_usage", {"reset": False})
            assert usage.is_error is False

    run(scenario)


@pytest.mark.parametrize("endpoint", registered_endpoints())
@pytest.mark.parametrize("mode", MODES)
def test_every_endpoint_lists_tools_with_its_own_token(gateway_server: GatewayProcess, endpoint: str, mode: str) -> None:
    async def scenario() -> list[str]:
        async with connect(gateway_server, endpoint, mode=mode) as client:
            assert client.protocol_version == MODES[mode]
            return await all_tool_names(client)

    names = run(scenario)
    assert len(names) == len(set(names)) and all(isinstance(name, str) and name for name in names)


def test_dotted_admin_tool_callable_through_sdk(gateway_server: GatewayProcess) -> None:
    async def scenario() -> None:
        async with connect(gateway_server, "admin", mode="auto") as client:
            names = await all_tool_names(client)
            assert "admin.sql" in names
            result = await client.call_tool(
                "admin.sql", {"statement": "SELECT variable_name FROM global_variables WHERE variable_name = 'mcp-port'"}
            )
            assert result.is_error is False, result.structured_content

    run(scenario)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


@pytest.mark.parametrize("mode", MODES)
def test_another_endpoints_token_is_refused_with_32001(gateway_server: GatewayProcess, mode: str) -> None:
    async def scenario() -> None:
        with anyio.fail_after(30):
            async with connect(gateway_server, "config", mode=mode, token=gateway_server.tokens["stats"]) as client:
                await client.list_tools()

    with pytest.raises(BaseException) as caught:  # noqa: B017 - the SDK wraps the error in task-group exception groups
        run(scenario)
    codes = [leaf.code for leaf in _leaves(caught.value) if isinstance(leaf, MCPError)]
    assert codes == [-32001], repr(caught.value)
