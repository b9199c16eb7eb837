"""The query endpoint's own variables (QueryHandler.variables); the SQL path's are in backends/declarations.py."""

from __future__ import annotations

from typing import Any

from gateway.call import CallContext
from gateway.variables import Variable

CATALOG_WRITES = Variable(
    "mcp-catalog_writes",
    "bool",
    "true",
    "Allow the tools that write the discovery catalog and agent memory (discovery.run_static, catalog.upsert/delete/clear, "
    "agent.*, llm.* writes).",
)
SUMMARY_THRESHOLD = Variable(
    "mcp-query_summary_threshold",
    "int",
    "300",
    "Listing tools (list_tables, catalog.list) over this many items answer with a summary and suggested next calls instead "
    "(summarized=true).",
    minimum=10,
    maximum=1_000_000,
)
QUERY_VARIABLES: tuple[Variable, ...] = (CATALOG_WRITES, SUMMARY_THRESHOLD)


def variable(ctx: CallContext, declaration: Variable) -> Any:
    """The runtime value; the declaration's default while a runtime predates the declaration."""
    if declaration.name in ctx.runtime.variables:
        return ctx.runtime.var(declaration.name)
    return declaration.parse(None)
