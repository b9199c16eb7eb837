"""The read_resource tool: an endpoint's MCP resources (gateway/resources.py) as a tool, for
clients that do not speak resources/* (pgEdge's answer). A handler that serves resources
composes `ResourceTools(source)` into its tool groups."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gateway.call import CallContext
from gateway.errors import InvalidArgument
from gateway.resources import JSON_MIME, RESOURCES_LIST_MAX, ResourceSource, encode_payload, setting
from gateway.tools import ToolInput, ToolOutput, tool


class ReadResourceIn(ToolInput):
    uri: str | None = Field(
        None, max_length=2048, description="The resource to read (from list=true or a template); omitted with list=true."
    )
    list_: bool = Field(False, alias="list", description="true: list the resources and URI templates instead of reading.")


class ReadResourceOut(ToolOutput):
    uri: str | None = None
    mime_type: str | None = None
    contents: Any = Field(None, description="The resource's JSON payload (read).")
    resources: list[dict[str, Any]] = Field(default_factory=list, description="list=true: the resources listed.")
    templates: list[dict[str, Any]] = Field(default_factory=list, description="list=true: the URI templates.")
    truncated: bool = Field(False, description="list=true: more resources exist than mcp-resources_list_max shows.")


class ResourceTools:
    """read_resource: the endpoint's MCP resources as a tool, for clients that do not speak
    resources/*. Takes the source its handler's `resources()` hook returns."""

    def __init__(self, source: ResourceSource) -> None:
        self.source = source

    @tool("read_resource", title="Read a resource", read_only=True)
    async def read_resource(self, args: ReadResourceIn, ctx: CallContext) -> ReadResourceOut:
        """Read one of this endpoint's MCP resources by URI (the same as resources/read), or
        list=true to see the resources and URI templates it serves. For clients that do not
        support MCP resources. Payloads are JSON; a URI this endpoint does not serve, or that a
        query rule hides, is NOT_FOUND."""
        if args.list_:
            entries, more = await self.source.listing(ctx, setting(ctx, RESOURCES_LIST_MAX))
            return ReadResourceOut(resources=entries, templates=[t.describe() for t in self.source.templates], truncated=more)
        if not args.uri:
            raise InvalidArgument("read_resource needs a uri (or list=true)")
        payload = await self.source.read(args.uri, ctx)
        encode_payload(payload, ctx, args.uri)  # the same byte cap as resources/read
        return ReadResourceOut(uri=args.uri, mime_type=JSON_MIME, contents=payload)
