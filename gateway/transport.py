"""Streamable HTTP, JSON responses: the HTTP half of `POST /mcp/<endpoint>`.

Order of checks, cheapest and least revealing first: endpoint exists (404), method is POST
(405; OPTIONS answered), Origin allowed (403), bearer token (401), content type (415), body
size (413, before any parsing), JSON (-32700), protocol-version header (400), batch rules
(400/-32600). Then each message goes to the `Dispatcher`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway import auth
from gateway.errors import INVALID_REQUEST, PARSE_ERROR, SERVER_UNAUTHORIZED, SERVER_UNAVAILABLE, ProtocolError
from gateway.metrics import Metrics
from gateway.protocol import ALL_VERSIONS, Dispatcher, Endpoint, Envelope
from gateway.services import Services

log = logging.getLogger("mcp_gateway.http")
CORS_HEADERS = "Authorization, Content-Type, Accept, MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Session-Id"


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


def _rpc_error(status: int, jsonrpc_code: int, message: str, error_code: str, headers: dict[str, str] | None = None) -> Response:
    error = ProtocolError(jsonrpc_code, message, error_code=error_code).to_error()
    return _json({"jsonrpc": "2.0", "id": None, "error": error}, status, headers)


def not_found_response(path: str, endpoints: list[str]) -> Response:
    return _rpc_error(
        404,
        INVALID_REQUEST,
        f"no MCP endpoint at {path[:200]}; POST to /mcp/<endpoint>, one of: {', '.join(endpoints)}",
        "NOT_FOUND",
    )


class McpTransport:
    def __init__(self, services: Services, endpoints: dict[str, Endpoint], dispatcher: Dispatcher, metrics: Metrics) -> None:
        self.services = services
        self.endpoints = endpoints
        self.dispatcher = dispatcher
        self.metrics = metrics

    async def __call__(self, request: Request) -> Response:
        name = request.path_params["endpoint"]
        endpoint = self.endpoints.get(name)
        if endpoint is None:
            return _rpc_error(
                404, INVALID_REQUEST, f"no MCP endpoint /mcp/{name}; known: {', '.join(self.endpoints)}", "NOT_FOUND"
            )
        response = await self._serve(request, endpoint)
        self.metrics.count(self.metrics.http_responses, name, str(response.status_code))
        return response

    async def _serve(self, request: Request, endpoint: Endpoint) -> Response:
        runtime = self.services.runtime
        # ASGI servers hand header names over lowercased; decoding once beats Headers lookups.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}
        origin = headers.get("origin")
        allowed_origins: tuple[str, ...] = runtime.var("mcp-allowed_origins")
        if origin is not None and allowed_origins and origin not in allowed_origins:
            return _rpc_error(403, INVALID_REQUEST, "Origin not allowed", "UNAUTHORIZED")
        if request.method == "OPTIONS":
            cors = {
                "Allow": "POST, OPTIONS",
                "Access-Control-Allow-Methods": "POST, OPTIONS",
                "Access-Control-Allow-Headers": CORS_HEADERS,
                "Access-Control-Max-Age": "600",
            }
            if origin is not None:
                cors["Access-Control-Allow-Origin"] = origin
                cors["Vary"] = "Origin"
            return Response(status_code=204, headers=cors)
        if request.method != "POST":
            return _rpc_error(
                405,
                INVALID_REQUEST,
                "only POST is served on MCP endpoints (no server-initiated stream)",
                "INVALID_ARGUMENT",
                {"Allow": "POST, OPTIONS"},
            )
        client = request.client.host if request.client else "unknown"
        query = request.query_params if runtime.var("mcp-allow_query_token") else {}
        failure = auth.check_endpoint(endpoint.name, headers, query, runtime)
        if failure is not None:
            self.metrics.auth_failed(endpoint.name, failure, client)
            message = (
                "this endpoint has no token configured and refuses every call"
                if failure == "no_token_configured"
                else "missing or invalid bearer token"
            )
            return _rpc_error(
                401,
                SERVER_UNAUTHORIZED,
                message,
                "UNAUTHORIZED",
                {"WWW-Authenticate": f'Bearer realm="mcp-gateway/{endpoint.name}"'},
            )
        if not runtime.var("mcp-enabled"):
            return _rpc_error(503, SERVER_UNAVAILABLE, "MCP is disabled (mcp-enabled=false)", "UNAVAILABLE")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return _rpc_error(415, INVALID_REQUEST, "Content-Type must be application/json", "INVALID_ARGUMENT")
        body = await self._read_body(request, runtime.var("mcp-max_request_bytes"))
        if body is None:
            return _rpc_error(
                413,
                INVALID_REQUEST,
                f"request body exceeds mcp-max_request_bytes ({runtime.var('mcp-max_request_bytes')})",
                "LIMIT_EXCEEDED",
            )
        self.metrics.observe(self.metrics.request_bytes, endpoint.name, value=len(body))
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _rpc_error(200, PARSE_ERROR, "request body is not valid JSON", "INVALID_ARGUMENT")
        header_version = headers.get("mcp-protocol-version")
        if header_version is not None and header_version not in ALL_VERSIONS:
            return _rpc_error(
                400,
                INVALID_REQUEST,
                f"unsupported MCP-Protocol-Version {header_version!r}; supported: {', '.join(ALL_VERSIONS)}",
                "INVALID_ARGUMENT",
            )
        env = Envelope(endpoint=endpoint, header_version=header_version, headers=headers, client=client)
        if isinstance(message, list):
            if header_version not in (None, "2025-03-26"):
                return _rpc_error(400, INVALID_REQUEST, "batches are not allowed after protocol 2025-03-26", "INVALID_ARGUMENT")
            if not message:
                return _rpc_error(200, INVALID_REQUEST, "empty batch", "INVALID_ARGUMENT")
            answers = [a for a in [await self._one(m, env) for m in message] if a is not None]
            return self._respond(endpoint, answers) if answers else Response(status_code=202)
        answer = await self._one(message, env)
        if answer is None:
            return Response(status_code=202)
        status = 400 if "error" in answer and answer["error"]["code"] in (-32020, -32022) else 200
        return self._respond(endpoint, answer, status)

    def _respond(self, endpoint: Endpoint, payload: Any, status: int = 200) -> Response:
        data = orjson.dumps(payload)
        self.metrics.observe(self.metrics.response_bytes, endpoint.name, value=len(data))
        return Response(data, status_code=status, media_type="application/json")

    async def _one(self, message: Any, env: Envelope) -> dict[str, Any] | None:
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str):
            method_label = "other"  # a list or object here is unhashable: never look it up
        elif method in self.dispatcher.methods:
            method_label = method
        else:
            method_label = "notification" if method.startswith("notifications/") else "other"
        metrics, endpoint = self.metrics, env.endpoint.name
        metrics.inflight_add(endpoint, 1)
        started = time.perf_counter()
        try:
            answer = await self.dispatcher.dispatch(message, env)
        except Exception:  # a bug must not become a 500 with a trace: log it, answer -32603
            log.exception("dispatch failed on /mcp/%s", endpoint)
            msg_id = message.get("id") if isinstance(message, dict) else None
            answer = {
                "jsonrpc": "2.0",
                "id": msg_id,
                "error": {"code": -32603, "message": "internal error; see the gateway log", "data": {"code": "INTERNAL"}},
            }
        finally:
            metrics.inflight_add(endpoint, -1)
        outcome = "ok"
        if answer is not None and "error" in answer:
            outcome = "error"
            error = answer["error"]
            metrics.count(metrics.errors, endpoint, str(error["code"]), error.get("data", {}).get("code", ""))
        if method_label != "tools/call":  # tools/call is observed with its tool name by the dispatcher
            version = env.header_version or ""
            metrics.observe(
                metrics.operation_duration, endpoint, method_label, "", outcome, version, value=time.perf_counter() - started
            )
        metrics.count(metrics.requests, endpoint, method_label, outcome)
        return answer

    @staticmethod
    async def _read_body(request: Request, limit: int) -> bytes | None:
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    return None
            except ValueError:
                return None
            return await request.body()  # the HTTP parser holds the body to its declared length
        chunks, size = [], 0  # chunked: count as it arrives
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
