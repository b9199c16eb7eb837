"""/mcp/admin: run the gateway without writing SQL against admin tables (handler.py lists the groups)."""

from handlers.admin.handler import AdminHandler

__all__ = ["AdminHandler"]
