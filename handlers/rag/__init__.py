"""The /mcp/rag endpoint: the tools over the retrieval engine (backends/retrieval), their input and
output models (models.py) and limits (limits.py); the handler (handler.py) composes the tool groups."""

from handlers.rag.handler import RagHandler

__all__ = ["RagHandler"]
