"""The two servers bench/gateway_overhead.py measures the gateway against.

Both answer `tools/call` of `get_config {"variable_name": "mcp-timeout_ms"}` on POST
/mcp/config with the result the gateway returns (a text block plus structuredContent, the
same seven fields: the floor's response body is byte for byte the gateway's), so the three
servers send, and the load generator parses, the same work per request:

- `floor_app`: a bare Starlette app that parses the JSON-RPC body and answers it. No auth,
  no validation, no tool dispatch: the least any Python ASGI server can do for this request.
- `fastmcp_app`: the official SDK's server (mcp 2.x `MCPServer`, formerly FastMCP) with an
  equivalent tool, streamable HTTP in stateless JSON-response mode (its fastest mode).

Run under uvicorn as factories (`uvicorn overhead_peers:floor_app --factory`), so uvicorn
can fork several workers exactly as the gateway does.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

TIMEOUT_VALUE = "30000"  # what the gateway stores for mcp-timeout_ms by default


def _tool_payload(variable_name: str) -> dict[str, Any]:
    # The fields and values the gateway's get_config answers for mcp-timeout_ms, so all three
    # servers send (and the load generator parses) the same bytes.
    return {
        "variable_name": variable_name,
        "value": TIMEOUT_VALUE,
        "type": "int",
        "default": TIMEOUT_VALUE,
        "description": "Deadline of one tool call, in milliseconds.",
        "secret": False,
        "restart_required": False,
        "origin": "default",
    }


def floor_app() -> Starlette:
    async def call(request: Request) -> Response:
        message = orjson.loads(await request.body())
        payload = _tool_payload(message["params"]["arguments"]["variable_name"])
        result = {
            "content": [{"type": "text", "text": orjson.dumps(payload).decode()}],
            "structuredContent": payload,
            "isError": False,
        }
        return Response(orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), media_type="application/json")

    return Starlette(routes=[Route("/mcp/config", call, methods=["POST"])])


def fastmcp_app() -> Starlette:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

    server = MCPServer("fastmcp-peer", log_level="WARNING")

    @server.tool()
    def get_config(variable_name: str) -> dict[str, Any]:
        """Read one configuration variable."""
        return _tool_payload(variable_name)

    return server.streamable_http_app(
        streamable_http_path="/mcp/config",
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
