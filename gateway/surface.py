"""The tool surface of an endpoint: which tools `tools/list` shows and `tools/call` runs, from the
current runtime.

A built-in endpoint serves its handler's tools and the custom tools (MCP TOOLS) that name it; a
toolset (an active `mcp_endpoints` row) serves the built-in tools it lists, each maybe pinned to
one target, and the custom tools that name it. Tools matching the endpoint's disabled names or
globs (`mcp-<endpoint>_tools_disabled`, a toolset's `tools_disabled`) are not listed, and a call
to one answers a tool error saying so. A surface is rebuilt when the runtime changes (a LOAD),
never per call: the call path pays one identity check.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.runtime import Runtime
from gateway.tools import ToolHandler, ToolSpec

TOOLSETS_TABLE = "runtime_mcp_endpoints"


def disabled_variable(endpoint: str) -> str:
    return f"mcp-{endpoint}_tools_disabled"


class ToolsetHandler(ToolHandler):
    """An admin-defined endpoint: no tools of its own (its surface lends them), its own threads,
    title and instructions from its mcp_endpoints row."""

    def __init__(self, services: Any, name: str, row: Mapping[str, Any]) -> None:
        super().__init__(services)
        self.endpoint = name  # type: ignore[misc]
        self.update(row)

    def update(self, row: Mapping[str, Any]) -> None:
        self.title = str(row.get("title") or self.endpoint)  # type: ignore[misc]
        self.instructions = str(row.get("instructions") or "")  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class Served:
    spec: ToolSpec
    handler: ToolHandler  # whose execute_tool runs it (a built-in tool's own handler)
    pin: str | None = None  # the target a built-in tool is pinned to on a toolset
    disabled: bool = False


def _pinned(spec: ToolSpec) -> dict[str, Any]:
    schema = dict(spec.input_schema)
    schema["properties"] = {k: v for k, v in schema.get("properties", {}).items() if k != "target_id"}
    if "required" in schema:
        schema["required"] = [r for r in schema["required"] if r != "target_id"]
    return schema


class Surface:
    def __init__(self, served: list[Served]) -> None:
        self.served = served
        self._lookup: dict[str, Served] = {}
        for item in served:
            self._lookup.setdefault(item.spec.portable_name, item)
            self._lookup[item.spec.name] = item
        self._lists: dict[str, list[dict[str, Any]]] = {}

    def find(self, name: str) -> Served | None:
        return self._lookup.get(name)

    @staticmethod
    def describe(item: Served, style: str) -> dict[str, Any]:
        """The tool as tools/list and tools/describe show it here (a pinned tool without target_id)."""
        described = item.spec.describe(style=style)
        if item.pin is not None:
            described["inputSchema"] = _pinned(item.spec)
            described["description"] += f"\n\nOn this endpoint it runs on target {item.pin} only."
        return described

    def listing(self, style: str) -> list[dict[str, Any]]:
        listed = self._lists.get(style)
        if listed is None:
            listed = [self.describe(item, style) for item in self.served if not item.disabled]
            self._lists[style] = listed
        return listed


def build_surface(
    name: str,
    handler: ToolHandler,
    runtime: Runtime,
    handlers: Mapping[str, ToolHandler],
    custom: Callable[[Runtime], Mapping[str, tuple[ToolSpec, ...]]] | None,
) -> Surface:
    custom_specs = custom(runtime).get(name, ()) if custom is not None else ()
    row = next((r for r in runtime.table(TOOLSETS_TABLE) if r["endpoint"] == name), None)
    served: list[tuple[ToolSpec, ToolHandler, str | None]] = []
    if row is None:
        patterns = runtime.variables.get(disabled_variable(name), ())
        served = [(spec, handler, None) for spec in handler.tools.values()]
    else:
        patterns = tuple(w for w in str(row.get("tools_disabled") or "").replace(",", " ").split() if w)
        for ref in str(row.get("builtin_tools") or "").replace(",", " ").split():
            source, _, rest = ref.partition("/")
            tool_name, _, pin = rest.partition("@")
            owner = handlers.get(source)
            spec = owner.find_tool(tool_name) if owner is not None else None
            if owner is not None and spec is not None:
                served.append((spec, owner, pin or None))
    served += [(spec, handler, None) for spec in custom_specs]
    return Surface([
        Served(spec, owner, pin, disabled=_matches(spec, patterns)) for spec, owner, pin in served
    ])  # fmt: skip


def _matches(spec: ToolSpec, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatchcase(spec.name, p) or fnmatch.fnmatchcase(spec.portable_name, p) for p in patterns)


def toolset_rows(runtime: Runtime) -> dict[str, Mapping[str, Any]]:
    return {r["endpoint"]: r for r in runtime.table(TOOLSETS_TABLE) if r.get("active")}
