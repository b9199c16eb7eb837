"""/mcp/cache: the endpoint exists with its own token; it has no tools yet.

ProxySQL declares cache tools (get_cache_stats, invalidate_cache, ...) that are all stubs.
We ship none rather than stubs: tools/list answers an empty list until a real query cache lands.
"""

from __future__ import annotations

from gateway.tools import ToolHandler


class CacheHandler(ToolHandler):
    endpoint = "cache"
    title = "Query cache (no tools yet)"
