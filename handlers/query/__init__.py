"""The /mcp/query endpoint."""

from handlers.query.handler import QueryHandler

__all__ = ["QueryHandler"]
