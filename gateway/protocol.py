"""MCP over JSON-RPC 2.0: one message in, one result or error out, for both protocol eras.

Legacy era (2025-03-26 .. 2025-11-25): `initialize` negotiates a version, later requests carry
the `MCP-Protocol-Version` header. Modern era (2026-07-28): no handshake; every request carries
`_meta["io.modelcontextprotocol/protocolVersion"]`, routing headers `Mcp-Method`/`Mcp-Name` must
agree with the body, results carry `resultType`, list results `ttlMs`/`cacheScope`.

`Dispatcher.dispatch` takes a parsed message and returns the response dict (or None for a
notification). It is the one place per-call metrics are recorded (requests, durations, errors,
in-flight, tool counters), around `_answer`, which is pure protocol. HTTP concerns (auth,
sizes, content types) live in `gateway.transport`; tools live in handlers.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from gateway import __version__
from gateway.call import Caller
from gateway.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    UNSUPPORTED_PROTOCOL_VERSION,
    InvalidArgument,
    PermissionDenied,
    ProtocolError,
    Unavailable,
)
from gateway.mcp_methods import ResourceAndPromptMethods
from gateway.surface import Surface, build_surface, disabled_variable
from gateway.tokens import fingerprint
from gateway.tools import error_result

if TYPE_CHECKING:
    from gateway.services import Services
    from gateway.tools import ToolHandler

log = logging.getLogger("mcp_gateway.http")

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
ALL_VERSIONS = (*LEGACY_VERSIONS, *MODERN_VERSIONS)
DEFAULT_HEADER_VERSION = "2025-03-26"  # what an absent MCP-Protocol-Version header means
META_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
NAME_BEARING = {"tools/call": "name", "tools/describe": "name", "prompts/get": "name", "resources/read": "uri"}
# A LOAD (MCP TOOLS, a tools_disabled variable) changes a tool list without a restart: clients
# refresh within a few seconds.
LIST_TTL_MS = 5_000


@dataclass(frozen=True)
class Endpoint:
    """A routed endpoint: its handler, or the reason it is down."""

    name: str
    handler: ToolHandler
    down_reason: str = ""


class Envelope(NamedTuple):  # a tuple: built once per request, cheaper than a frozen dataclass
    """What the transport learned about a request before dispatch."""

    endpoint: Endpoint
    header_version: str | None  # MCP-Protocol-Version, if sent
    headers: Mapping[bytes, bytes]  # as the ASGI scope has them: names lowercased, not decoded
    client: str
    token: str = ""  # the bearer token the caller was admitted with
    caller: Caller | None = None  # who an OAuth access token names (None: a static token)


def _b64_header(value: str | None) -> str | None:
    match = re.fullmatch(r"=\?base64\?(.*)\?=", value or "")
    if not match:
        return value
    try:
        return base64.b64decode(match.group(1), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


class Dispatcher:
    def __init__(self, services: Services) -> None:
        self.services = services
        self._static_callers: dict[str, Caller] = {}  # static token -> its Caller (fingerprint hashed once)
        self.methods: dict[str, Callable[[dict[str, Any], Envelope, str], Awaitable[dict[str, Any]]]] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "server/discover": self._discover,
            "tools/list": self._tools_list,
            "tools/describe": self._tools_describe,
            "tools/call": self._tools_call,
        }
        # resources/* and prompts/* (gateway/mcp_methods.py): -32601 on an endpoint that serves none
        self.extras = ResourceAndPromptMethods(services)
        self.methods.update(self.extras.methods())
        self._surfaces: dict[str, tuple[Any, Surface]] = {}  # endpoint -> (the runtime it was built from, its surface)

    def surface(self, env: Envelope) -> Surface:
        """The endpoint's tool surface in the current runtime (gateway.surface), rebuilt after a LOAD."""
        runtime = self.services.runtime
        name = env.endpoint.name
        built = self._surfaces.get(name)
        if built is None or built[0] is not runtime:
            surface = build_surface(
                name,
                env.endpoint.handler,
                runtime,
                self.services.handlers,
                self.services.custom_tools,  # type: ignore[arg-type]
            )
            built = self._surfaces[name] = (runtime, surface)
        return built[1]

    # -- entry point -----------------------------------------------------------------------
    async def dispatch(self, message: Any, env: Envelope) -> dict[str, Any] | None:
        """Answer one message and record its metrics, once: a tools/call that ran a tool counts
        as a tool call (Metrics.tool_call, its request included, and the tool counters), any
        other message as a request of its method."""
        method = message.get("method") if isinstance(message, dict) else None
        if not isinstance(method, str):
            method_label = "other"  # a list or object here is unhashable: never look it up
        elif method in self.methods:
            method_label = method
        else:
            method_label = "notification" if method.startswith("notifications/") else "other"
        services = self.services
        metrics, endpoint = services.metrics, env.endpoint.name
        metrics.inflight_add(endpoint, 1)
        started = time.perf_counter()
        version = ""
        try:
            answer, version = await self._answer(message, env)
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
        seconds = time.perf_counter() - started
        if answer is not None and "error" in answer:
            error = answer["error"]
            metrics.count(metrics.errors, endpoint, str(error["code"]), error.get("data", {}).get("code", ""))
            outcome = "error"
        elif method_label == "tools/call" and answer is not None:
            result = answer["result"]
            tool = self.surface(env).find(message["params"]["name"]).spec.name  # it ran: the name resolves
            content = result["structuredContent"]
            tool_outcome = content["error"]["code"] if result["isError"] else "ok"
            metrics.tool_call(endpoint, tool, tool_outcome, version, seconds)
            services.stats.record(endpoint, tool, seconds, ok=tool_outcome == "ok")
            if services.evidence is not None:
                services.evidence.call(endpoint, tool, outcome=tool_outcome, truncated=content.get("truncated") is True)
            return answer
        else:
            outcome = "ok"
        metrics.observe(metrics.operation_duration, endpoint, method_label, "", outcome, env.header_version or "", value=seconds)
        metrics.count(metrics.requests, endpoint, method_label, outcome)
        return answer

    async def _answer(self, message: Any, env: Envelope) -> tuple[dict[str, Any] | None, str]:
        """The response to one message (None for a notification) and the protocol version it spoke."""
        if not isinstance(message, dict):
            return _error(None, ProtocolError(INVALID_REQUEST, "a JSON-RPC message must be an object")), ""
        msg_id = message.get("id")
        method = message.get("method")
        is_request = "id" in message
        if message.get("jsonrpc") != "2.0" or not isinstance(method, str) or (is_request and not _valid_id(msg_id)):
            if not is_request and isinstance(method, str):
                return None, ""  # a malformed notification gets no answer, as JSON-RPC says
            error = ProtocolError(INVALID_REQUEST, "not a valid JSON-RPC 2.0 request")
            return _error(msg_id if _valid_id(msg_id) else None, error), ""
        if not is_request:
            return None, ""  # notifications/* (initialized, cancelled, ...) need no work here
        params = message.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return _error(msg_id, ProtocolError(INVALID_PARAMS, "params must be an object")), ""
        try:
            version = self._era(method, params, env)
            handler = self.methods.get(method)
            if handler is None:
                raise ProtocolError(METHOD_NOT_FOUND, f"method {method!r} is not supported", error_code="NOT_FOUND")
            result = await handler(params, env, version)
        except ProtocolError as exc:
            return _error(msg_id, exc), ""
        if version in MODERN_VERSIONS:
            result["resultType"] = "complete"
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}, version

    def _era(self, method: str, params: dict[str, Any], env: Envelope) -> str:
        """The protocol version this request speaks, after the modern header checks."""
        meta = params.get("_meta")
        meta_version = meta.get(META_VERSION_KEY) if isinstance(meta, dict) else None
        if method == "initialize" or meta_version is None:
            return env.header_version or DEFAULT_HEADER_VERSION
        if not isinstance(meta_version, str):
            raise ProtocolError(INVALID_PARAMS, "the protocol-version envelope value must be a string")
        if env.header_version is not None and env.header_version != meta_version:
            raise ProtocolError(HEADER_MISMATCH, "MCP-Protocol-Version header does not match _meta protocolVersion")
        mcp_method = env.headers.get(b"mcp-method")
        if mcp_method is not None and mcp_method.decode("latin-1") != method:
            raise ProtocolError(HEADER_MISMATCH, "Mcp-Method header does not match the request body's method")
        name_key = NAME_BEARING.get(method)
        mcp_name = env.headers.get(b"mcp-name")
        if (
            name_key
            and mcp_name is not None
            and params.get(name_key) is not None
            and _b64_header(mcp_name.decode("latin-1")) != params.get(name_key)
        ):
            raise ProtocolError(HEADER_MISMATCH, f"Mcp-Name header does not match the request body's {name_key!r}")
        if meta_version not in ALL_VERSIONS:
            raise ProtocolError(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"protocol version {meta_version!r} is not supported",
                data={"supported": list(ALL_VERSIONS), "requested": meta_version},
            )
        return meta_version

    # -- methods ---------------------------------------------------------------------------
    def _capabilities(self, env: Envelope) -> dict[str, Any]:
        return {"tools": {"listChanged": False}, **self.extras.capabilities(env)}  # only what is served

    def _server_info(self, env: Envelope) -> dict[str, Any]:
        return {"name": f"mcp-gateway/{env.endpoint.name}", "title": f"MCP Gateway: {env.endpoint.name}", "version": __version__}

    async def _initialize(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        requested = params.get("protocolVersion")
        negotiated = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[-1]
        result = {"protocolVersion": negotiated, "capabilities": self._capabilities(env), "serverInfo": self._server_info(env)}
        if env.endpoint.handler.instructions:
            result["instructions"] = env.endpoint.handler.instructions
        return result

    async def _discover(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        result = {
            "supportedVersions": list(ALL_VERSIONS),
            "capabilities": self._capabilities(env),
            "serverInfo": self._server_info(env),
            "ttlMs": LIST_TTL_MS,
            "cacheScope": "private",
        }
        if env.endpoint.handler.instructions:
            result["instructions"] = env.endpoint.handler.instructions
        return result

    async def _ping(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        return {}

    async def _tools_list(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        runtime = self.services.runtime
        tools = self.surface(env).listing(runtime.var("mcp-tool_name_style"))
        page_size = runtime.var("mcp-tools_page_size")
        start = _decode_cursor(params.get("cursor"))
        if start > len(tools):
            raise ProtocolError(INVALID_PARAMS, "invalid cursor")
        result: dict[str, Any] = {"tools": tools[start : start + page_size]}
        if start + page_size < len(tools):
            result["nextCursor"] = _encode_cursor(start + page_size)
        if version in MODERN_VERSIONS:
            result.update(ttlMs=LIST_TTL_MS, cacheScope="private")
        return result

    async def _tools_describe(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        name = params.get("name")
        style = self.services.runtime.var("mcp-tool_name_style")
        served = self.surface(env).find(name) if isinstance(name, str) else None
        description = Surface.describe(served, style) if served is not None and not served.disabled else None
        if description is None:
            raise ProtocolError(INVALID_PARAMS, f"unknown tool {name!r}", error_code="NOT_FOUND")
        return {"tool": description}

    async def _tools_call(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments") or {}
        served = self.surface(env).find(name) if isinstance(name, str) else None
        if served is None:
            raise ProtocolError(INVALID_PARAMS, f"unknown tool {name!r} on /mcp/{env.endpoint.name}", error_code="NOT_FOUND")
        spec, handler = served.spec, served.handler
        if not isinstance(arguments, dict):
            raise ProtocolError(INVALID_PARAMS, "arguments must be an object")
        if served.disabled:
            where = env.endpoint.name
            return error_result(
                PermissionDenied(
                    f"tool {spec.name} is disabled on /mcp/{where} ({disabled_variable(where)} or the toolset's tools_disabled)"
                )
            )
        if env.endpoint.down_reason:
            return error_result(Unavailable(f"/mcp/{env.endpoint.name} is unavailable: {env.endpoint.down_reason}"))
        if handler.down_reason:
            return error_result(Unavailable(f"/mcp/{handler.endpoint} is unavailable: {handler.down_reason}"))
        if served.pin is not None:
            if arguments.get("target_id") not in (None, served.pin):
                return error_result(
                    InvalidArgument(f"target_id: {spec.name} runs on target {served.pin} only on /mcp/{env.endpoint.name}")
                )
            arguments = {**arguments, "target_id": served.pin}
        caller = env.caller or self._static_caller(env.token)
        ctx = handler.context(
            spec,
            self.services.runtime,
            protocol_version=version,
            client=env.client,
            token_fingerprint=caller.token_fingerprint,
            caller=caller,
        )
        if handler.endpoint != env.endpoint.name:  # a built-in tool served on a toolset
            ctx = dataclasses.replace(ctx, endpoint=env.endpoint.name)
        return await handler.execute_tool(spec, arguments, ctx)

    def _static_caller(self, token: str) -> Caller:
        """The Caller of a static token: its fingerprint, no subject (kept per token, bounded)."""
        caller = self._static_callers.get(token)
        if caller is None:
            if len(self._static_callers) >= 64:
                self._static_callers.clear()
            caller = self._static_callers[token] = Caller(token_fingerprint=fingerprint(token) if token else "")
        return caller


def _valid_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def _error(msg_id: Any, exc: ProtocolError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": exc.to_error()}


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode()


def _decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        if not text.startswith("o:"):
            raise ValueError
        offset = int(text[2:])
        if offset < 0:
            raise ValueError
        return offset
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ProtocolError(INVALID_PARAMS, "invalid cursor") from None
