"""`initialize` and `server/discover` advertise only what is served: tools everywhere, resources
and prompts only where the endpoint's handler serves them (tests/test_resources_prompts.py checks
those); elsewhere their methods answer -32601 like any method not served. Checked on every
endpoint, in both protocol eras, and with the official SDK client."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, post_rpc, registered_endpoints, start_gateway


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayProcess]:
    with start_gateway() as process:
        yield process


TOOLS_ONLY = ("stats", "admin", "cache", "ai")  # no resources, no prompts (unless an admin defines some)


def test_initialize_and_discover_advertise_tools_only(gateway: GatewayProcess) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}
    with gateway.client() as http:
        for endpoint in registered_endpoints():
            if endpoint not in TOOLS_ONLY:
                continue
            result = post_rpc(http, gateway, endpoint, "initialize", params).json()["result"]
            assert result["capabilities"] == {"tools": {"listChanged": False}}, (endpoint, result)
            modern = post_rpc(http, gateway, endpoint, "server/discover", modern=True).json()["result"]
            assert modern["capabilities"] == {"tools": {"listChanged": False}}, (endpoint, modern)


@pytest.mark.parametrize("method", ["prompts/list", "resources/list", "resources/templates/list", "prompts/get"])
def test_methods_of_capabilities_not_served_are_not_found(gateway: GatewayProcess, method: str) -> None:
    with gateway.client() as http:
        answer = post_rpc(http, gateway, "stats", method).json()
    assert answer["error"]["code"] == -32601, answer


def test_the_sdk_client_sees_tools_and_nothing_else(gateway: GatewayProcess) -> None:
    async def scenario() -> dict:
        headers = {"Authorization": f"Bearer {gateway.tokens['stats']}"}
        async with (
            httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
            Client(streamable_http_client(gateway.url("stats"), http_client=http), mode="auto") as client,
        ):
            capabilities = client.server_capabilities
            tools = (await client.list_tools()).tools
            return {"capabilities": capabilities, "tools": [t.name for t in tools]}

    seen = anyio.run(scenario)
    capabilities = seen["capabilities"]
    assert capabilities.tools is not None and capabilities.prompts is None and capabilities.resources is None, capabilities
    assert "get_health" in seen["tools"]
