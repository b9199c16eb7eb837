"""MCP resources: what an endpoint lets a client read by URI, beside its tools.

A handler that serves resources returns a `ResourceSource` from its `resources()` hook: the URI
templates it answers (`resources/templates/list`), the concrete resources it lists
(`resources/list`, bounded and paged) and `read(uri, ctx)`, which answers a JSON payload or
raises a GatewayError (NOT_FOUND for a URI it does not serve or that a rule hides). The same read
serves `resources/read` and the `read_resource` tool (`ResourceTools`, a tool group a handler
composes, gateway/resource_tools.py), for clients without resource support (pgEdge's answer).

Bounds: a listing holds at most mcp-resources_list_max resources (then `truncated` in `_meta`),
served mcp-tools_page_size per page; a read runs under the endpoint's deadline (mcp-timeout_ms)
and its JSON text never exceeds mcp-resources_max_bytes (LIMIT_EXCEEDED: read something smaller,
or call the tool with paging). The methods themselves live in `gateway/mcp_methods.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, unquote

import orjson

from gateway.call import CallContext
from gateway.errors import LimitExceeded, NotFound
from gateway.variables import Variable

JSON_MIME = "application/json"
RESOURCES_LIST_MAX = Variable(
    "mcp-resources_list_max",
    "int",
    "1000",
    "Most resources one resources/list (all its pages) shows; past it the listing says truncated and the URI "
    "templates (resources/templates/list) reach the rest.",
    minimum=10,
    maximum=100_000,
)
RESOURCES_MAX_BYTES = Variable(
    "mcp-resources_max_bytes",
    "int",
    "1000000",
    "Most bytes of JSON one resources/read (or read_resource call) answers; more is LIMIT_EXCEEDED.",
    minimum=1024,
    maximum=64 * 1024 * 1024,
)
RESOURCE_VARIABLES: tuple[Variable, ...] = (RESOURCES_LIST_MAX, RESOURCES_MAX_BYTES)


def setting(ctx: CallContext, declaration: Variable) -> Any:
    """The runtime value; the declaration's default while a runtime predates the declaration."""
    if declaration.name in ctx.runtime.variables:
        return ctx.runtime.var(declaration.name)
    return declaration.parse(None)


@dataclass(frozen=True)
class ResourceTemplate:
    """One RFC 6570 level-1 URI template: `{name}` expands to a percent-encoded path segment."""

    uri_template: str
    name: str
    title: str
    description: str
    mime_type: str = JSON_MIME

    def describe(self) -> dict[str, Any]:
        return {
            "uriTemplate": self.uri_template,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "mimeType": self.mime_type,
        }

    def match(self, uri: str) -> dict[str, str] | None:
        """The template's values in `uri`, decoded; None when `uri` is not of this template."""
        names = re.findall(r"\{([a-z_]+)\}", self.uri_template)
        found = re.fullmatch(_template_regex(self.uri_template), uri)
        if found is None:
            return None
        return {name: unquote(value) for name, value in zip(names, found.groups(), strict=True)}

    def expand(self, **values: str) -> str:
        return re.sub(r"\{([a-z_]+)\}", lambda m: quote(str(values[m.group(1)]), safe=""), self.uri_template)


def _template_regex(template: str) -> str:
    parts = re.split(r"(\{[a-z_]+\})", template)
    return "".join("([^/?#]+)" if part.startswith("{") else re.escape(part) for part in parts)


def resource(uri: str, name: str, title: str, description: str = "", mime_type: str = JSON_MIME) -> dict[str, Any]:
    """One entry of resources/list."""
    entry = {"uri": uri, "name": name, "title": title, "mimeType": mime_type}
    if description:
        entry["description"] = description[:500]
    return entry


class ResourceSource(Protocol):
    """What a handler's `resources()` hook returns."""

    templates: tuple[ResourceTemplate, ...]

    async def listing(self, ctx: CallContext, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """At most `limit` resources (entries made by `resource`), and whether more exist."""
        ...

    async def read(self, uri: str, ctx: CallContext) -> Any:
        """The JSON payload at `uri`; NotFound for a URI this source does not serve."""
        ...


def unknown(uri: str, templates: tuple[ResourceTemplate, ...]) -> NotFound:
    forms = ", ".join(t.uri_template for t in templates)
    return NotFound(f"no resource {uri[:300]!r} here; this endpoint serves {forms}", details={"templates": forms})


def encode_payload(payload: Any, ctx: CallContext, uri: str) -> str:
    """The payload as JSON text, within mcp-resources_max_bytes."""
    text = orjson.dumps(payload, default=str).decode()
    cap = setting(ctx, RESOURCES_MAX_BYTES)
    if len(text.encode()) > cap:
        raise LimitExceeded(
            f"resource {uri[:300]} is {len(text.encode())} bytes of JSON, over mcp-resources_max_bytes ({cap}); "
            "read a narrower resource or use the paged tools",
            details={"bytes": len(text.encode()), "max_bytes": cap},
        )
    return text
