"""Helpers of the /mcp/ai end-to-end tests: the official SDK client on a real gateway, and
admin statements over HTTPS to add targets and change variables."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, call_tool


@asynccontextmanager
async def connect(gateway: GatewayProcess, endpoint: str = "ai", token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token or gateway.tokens[endpoint]}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode="auto", raise_exceptions=True) as client,
    ):
        yield client


def with_client(
    gateway: GatewayProcess, scenario: Callable[[Client], Awaitable[Any]], endpoint: str = "ai", token: str | None = None
) -> Any:
    """Run `scenario(client)` with one SDK client session on `endpoint` (its first token unless given)."""

    async def main() -> Any:
        async with connect(gateway, endpoint, token) as client:
            return await scenario(client)

    return anyio.run(main)


async def ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert result.is_error is False, result.structured_content
    return result.structured_content


async def fails(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert result.is_error is True, result.structured_content
    return result.structured_content["error"]


def admin(gateway: GatewayProcess, http: httpx.Client, statement: str) -> dict[str, Any]:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, result
    return result["structuredContent"]


def set_variables(gateway: GatewayProcess, http: httpx.Client, **values: Any) -> None:
    """SET each ai-*/mcp-* variable (underscored keys: ai_max_retries -> ai-max_retries), LOAD, and
    wait until the worker serves them (it polls the runtime every 250 ms)."""
    for key, value in values.items():
        admin(gateway, http, f"SET {key.replace('_', '-', 1)} = '{value}'")
    admin(gateway, http, "LOAD MCP VARIABLES TO RUNTIME")
    time.sleep(0.6)


def add_targets(gateway: GatewayProcess, http: httpx.Client, statements: list[str]) -> None:
    """Insert auth and target profiles, LOAD them, and wait until /mcp/query lists every target."""
    for statement in statements:
        admin(gateway, http, statement)
    assert admin(gateway, http, "LOAD MCP PROFILES TO RUNTIME")["ok"] is True
    wanted = sum(1 for s in statements if "mcp_target_profiles" in s)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        targets = call_tool(http, gateway, "query", "list_targets", {})["structuredContent"]["targets"]
        if len(targets) >= wanted:
            return
        time.sleep(0.2)
    raise AssertionError("the targets did not reach the worker's runtime")
