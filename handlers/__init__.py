"""One handler per endpoint. The app is assembled from this explicit list; nothing registers later.

`HANDLER_CLASSES` is imported on first use (PEP 562): importing a handler imports its tool groups
and their libraries, which a command like `mcp-gateway --help` or `mcp-gateway admin` never needs.
`CLI_COMMANDS` names the sub-commands the handlers add (`ToolHandler.add_cli`), so the command
line can list them without importing the handlers (tests/gateway/test_cli_speed.py checks that
it says what `add_cli` adds).
"""

from __future__ import annotations

from typing import Any

CLI_COMMANDS = {"query": "query endpoint jobs", "rag": "RAG index jobs"}


def __getattr__(name: str) -> Any:
    if name != "HANDLER_CLASSES":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from handlers.admin import AdminHandler
    from handlers.ai import AiHandler
    from handlers.cache import CacheHandler
    from handlers.config import ConfigHandler
    from handlers.query import QueryHandler
    from handlers.rag import RagHandler
    from handlers.stats import StatsHandler

    classes = (ConfigHandler, QueryHandler, RagHandler, StatsHandler, AdminHandler, CacheHandler, AiHandler)
    globals()["HANDLER_CLASSES"] = classes
    return classes
