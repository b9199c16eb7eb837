"""The MCP methods beside tools: resources/list, resources/templates/list, resources/read,
prompts/list and prompts/get (gateway/protocol.py's Dispatcher adds them to its table).

An endpoint serves resources when its handler's `resources()` hook returns a source
(gateway/resources.py), and prompts when its handler's `prompts(runtime)` hook or the
admin-defined prompts naming it (MCP PROMPTS, gateway/prompts.py) give any; `capabilities`
says exactly that in `initialize` and `server/discover`, and an endpoint without them answers
their methods -32601 like any method it does not serve. A list is paged like tools/list
(mcp-tools_page_size, an opaque cursor); in the 2026-07-28 era list and read results carry
ttlMs and cacheScope. A resource that cannot be read is a JSON-RPC error whose data.code is the
gateway's stable code (NOT_FOUND, LIMIT_EXCEEDED, ...), never a traceback.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gateway.call import CallContext
from gateway.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    SERVER_UNAVAILABLE,
    GatewayError,
    ProtocolError,
)
from gateway.prompts import PROMPTS_TABLE, Prompt, admin_prompts
from gateway.resources import JSON_MIME, RESOURCES_LIST_MAX, encode_payload, setting
from gateway.tokens import fingerprint

if TYPE_CHECKING:
    from gateway.services import Services
    from gateway.tools import ToolHandler

log = logging.getLogger("mcp_gateway.http")

MODERN = "2026-07-28"
LIST_TTL_MS = 5_000  # as tools/list: a LOAD changes what is listed without a restart
READ_TTL_MS = 0  # a resource is read fresh: rows and the index change under it
INVALID = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "LIMIT_EXCEEDED", "PERMISSION_DENIED"})

Method = Callable[[dict[str, Any], Any, str], Awaitable[dict[str, Any]]]
Envelope = Any  # gateway.protocol.Envelope (which imports this module)


class ResourceAndPromptMethods:
    def __init__(self, services: Services) -> None:
        self.services = services

    def methods(self) -> dict[str, Method]:
        return {
            "resources/list": self.resources_list,
            "resources/templates/list": self.templates_list,
            "resources/read": self.resources_read,
            "prompts/list": self.prompts_list,
            "prompts/get": self.prompts_get,
        }

    # -- what an endpoint serves -----------------------------------------------------------
    def prompts(self, handler: ToolHandler, endpoint: str) -> dict[str, Prompt]:
        """The endpoint's prompts by name: its handler's, then the admin-defined ones (which shadow)."""
        runtime = self.services.runtime
        found = {p.name: p for p in handler.prompts(runtime)}
        found.update({p.name: p for p in admin_prompts(runtime.table(PROMPTS_TABLE), endpoint)})
        return found

    def capabilities(self, env: Envelope) -> dict[str, Any]:
        handler = env.endpoint.handler
        served: dict[str, Any] = {}
        if handler.resources() is not None:
            served["resources"] = {"subscribe": False, "listChanged": False}
        if self.prompts(handler, env.endpoint.name):
            served["prompts"] = {"listChanged": False}
        return served

    def _context(self, env: Envelope, method: str, version: str) -> CallContext:
        runtime, handler = self.services.runtime, env.endpoint.handler
        timeout_ms = runtime.variables["mcp-timeout_ms"]
        if handler.timeout_variable in runtime.variables:
            timeout_ms = min(timeout_ms, runtime.variables[handler.timeout_variable])
        return CallContext(
            endpoint=env.endpoint.name, tool_name=method, runtime=runtime, deadline=time.monotonic() + timeout_ms / 1000,
            protocol_version=version, client=env.client, token_fingerprint=fingerprint(env.token) if env.token else "",
        )  # fmt: skip

    def _source(self, env: Envelope) -> Any:
        source = env.endpoint.handler.resources()
        if source is None:
            raise ProtocolError(METHOD_NOT_FOUND, f"/mcp/{env.endpoint.name} serves no resources", error_code="NOT_FOUND")
        if env.endpoint.down_reason or env.endpoint.handler.down_reason:
            reason = env.endpoint.down_reason or env.endpoint.handler.down_reason
            raise ProtocolError(
                SERVER_UNAVAILABLE, f"/mcp/{env.endpoint.name} is unavailable: {reason}", error_code="UNAVAILABLE"
            )
        return source

    async def _guarded(self, ctx: CallContext, work: Awaitable[Any]) -> Any:
        """Run a source's work under the call's deadline, its errors as JSON-RPC errors."""
        try:
            async with asyncio.timeout(ctx.remaining_s()):
                return await work
        except TimeoutError:
            raise ProtocolError(
                SERVER_UNAVAILABLE, f"{ctx.tool_name} did not finish within its deadline", error_code="DEADLINE_EXCEEDED"
            ) from None
        except GatewayError as exc:
            code = INVALID_PARAMS if exc.code in INVALID else SERVER_UNAVAILABLE if exc.code == "UNAVAILABLE" else INTERNAL_ERROR
            raise ProtocolError(
                code,
                exc.message,
                error_code=exc.code,
                data=exc.to_dict().get("details") and {"details": exc.to_dict()["details"]},
            ) from None

    # -- resources -------------------------------------------------------------------------
    async def resources_list(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        source = self._source(env)
        ctx = self._context(env, "resources/list", version)
        entries, more = await self._guarded(ctx, source.listing(ctx, setting(ctx, RESOURCES_LIST_MAX)))
        result = self._page(params, entries, "resources", version)
        if more and "nextCursor" not in result:
            result["_meta"] = {"truncated": True, "hint": "more resources exist: read them through resources/templates/list"}
        return result

    async def templates_list(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        source = self._source(env)
        return self._page(params, [t.describe() for t in source.templates], "resourceTemplates", version)

    async def resources_read(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        source = self._source(env)
        uri = params.get("uri")
        if not isinstance(uri, str) or not uri or len(uri) > 2048:
            raise ProtocolError(INVALID_PARAMS, "resources/read needs a uri (a string of at most 2048 characters)")
        ctx = self._context(env, "resources/read", version)
        payload = await self._guarded(ctx, source.read(uri, ctx))
        try:
            text = encode_payload(payload, ctx, uri)
        except GatewayError as exc:
            raise ProtocolError(INVALID_PARAMS, exc.message, error_code=exc.code) from None
        result: dict[str, Any] = {"contents": [{"uri": uri, "mimeType": JSON_MIME, "text": text}]}
        if version == MODERN:
            result.update(ttlMs=READ_TTL_MS, cacheScope="private")
        return result

    # -- prompts ---------------------------------------------------------------------------
    def _served_prompts(self, env: Envelope) -> dict[str, Prompt]:
        prompts = self.prompts(env.endpoint.handler, env.endpoint.name)
        if not prompts:
            raise ProtocolError(METHOD_NOT_FOUND, f"/mcp/{env.endpoint.name} serves no prompts", error_code="NOT_FOUND")
        return prompts

    async def prompts_list(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        prompts = self._served_prompts(env)
        return self._page(params, [p.describe() for p in prompts.values()], "prompts", version)

    async def prompts_get(self, params: dict[str, Any], env: Envelope, version: str) -> dict[str, Any]:
        prompts = self._served_prompts(env)
        name, arguments = params.get("name"), params.get("arguments") or {}
        prompt = prompts.get(name) if isinstance(name, str) else None
        if prompt is None:
            raise ProtocolError(
                INVALID_PARAMS, f"unknown prompt {str(name)[:100]!r} on /mcp/{env.endpoint.name}", error_code="NOT_FOUND"
            )
        if not isinstance(arguments, dict):
            raise ProtocolError(INVALID_PARAMS, "arguments must be an object of strings")
        try:
            return prompt.render(arguments)
        except ValueError as exc:
            raise ProtocolError(INVALID_PARAMS, str(exc)) from None

    # -- paging ----------------------------------------------------------------------------
    def _page(self, params: dict[str, Any], items: list[dict[str, Any]], key: str, version: str) -> dict[str, Any]:
        page_size = self.services.runtime.var("mcp-tools_page_size")
        start = _decode_cursor(params.get("cursor"))
        if start > len(items):
            raise ProtocolError(INVALID_PARAMS, "invalid cursor")
        result: dict[str, Any] = {key: items[start : start + page_size]}
        if start + page_size < len(items):
            result["nextCursor"] = _encode_cursor(start + page_size)
        if version == MODERN:
            result.update(ttlMs=LIST_TTL_MS, cacheScope="private")
        return result


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"r:{offset}".encode()).decode()


def _decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        if not text.startswith("r:") or int(text[2:]) < 0:
            raise ValueError
        return int(text[2:])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ProtocolError(INVALID_PARAMS, "invalid cursor") from None
