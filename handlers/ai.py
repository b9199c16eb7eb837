"""/mcp/ai: the endpoint exists with its own token; it has no tools yet.

Seed 002 sketches llm.* / anomaly.* tools that ProxySQL never shipped. We ship none rather than
stubs: tools/list answers an empty list until real ones land.
"""

from __future__ import annotations

from gateway.tools import ToolHandler


class AiHandler(ToolHandler):
    endpoint = "ai"
    title = "AI features (no tools yet)"
