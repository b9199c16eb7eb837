"""Helpers of the /mcp/admin tests: the official SDK client, plain tool calls, restarts."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, _wait_healthy, call_tool, free_port, gateway_command, stop_gateway

from gateway import sqlite


@asynccontextmanager
async def sdk(gateway: GatewayProcess, endpoint: str, *, token: str | None = None) -> AsyncIterator[Client]:
    """The official MCP client on one endpoint (2026 era, `server/discover` first)."""
    headers = {"Authorization": f"Bearer {token or gateway.tokens[endpoint]}"}
    http = httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(30.0))
    transport = streamable_http_client(gateway.url(endpoint), http_client=http)
    async with http, Client(transport, mode="auto", raise_exceptions=True) as client:
        yield client


def tool(client: httpx.Client, gateway: GatewayProcess, endpoint: str, name: str, arguments: dict[str, Any], **kw: Any) -> dict:
    """tools/call; returns structuredContent (an {"error": ...} when the tool failed)."""
    return call_tool(client, gateway, endpoint, name, arguments, **kw)["structuredContent"]


def ok(client: httpx.Client, gateway: GatewayProcess, endpoint: str, name: str, arguments: dict[str, Any], **kw: Any) -> dict:
    result = call_tool(client, gateway, endpoint, name, arguments, **kw)
    assert result["isError"] is False, (name, result["structuredContent"])
    return result["structuredContent"]


def error_of(client: httpx.Client, gateway: GatewayProcess, endpoint: str, name: str, arguments: dict[str, Any]) -> dict:
    result = call_tool(client, gateway, endpoint, name, arguments)
    assert result["isError"] is True, (name, result["structuredContent"])
    return result["structuredContent"]["error"]


@contextlib.contextmanager
def restarted(gateway: GatewayProcess, *, workers: int) -> Iterator[GatewayProcess]:
    """Stop the gateway and start it again on the same data directory (a new port)."""
    stop_gateway(gateway)
    port = free_port()
    with open(gateway.log_path, "ab") as log_file:
        process = subprocess.Popen(
            gateway_command(gateway.data_dir, gateway.config_path, port, workers=workers),
            cwd=gateway.data_dir.parent,
            env=gateway_env(),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    again = GatewayProcess(
        base_url=f"https://127.0.0.1:{port}",
        tokens=gateway.tokens,
        ca_path=gateway.ca_path,
        data_dir=gateway.data_dir,
        config_path=gateway.config_path,
        log_path=gateway.log_path,
        process=process,
    )
    try:
        _wait_healthy(again, 45.0, workers=workers)
        yield again
    finally:
        stop_gateway(again)


def gateway_env() -> dict[str, str]:
    import os

    from server_process import REPO_ROOT

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    return env


def audit_table_text(data_dir: Path) -> str:
    """Every audit row, as text, read straight from the data directory."""
    conn = sqlite.connect(data_dir / "config.db", readonly=True)
    try:
        return "\n".join(repr(row) for row in conn.execute("SELECT * FROM mcp_audit_log"))
    finally:
        conn.close()


def audit_actions(client: httpx.Client, gateway: GatewayProcess, **arguments: Any) -> list[tuple[str, str]]:
    rows = ok(client, gateway, "admin", "admin.audit", {"limit": 1000, **arguments})["rows"]
    return [(row["action"], row["outcome"]) for row in rows]
