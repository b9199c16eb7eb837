"""The /mcp/ai endpoint: LLM tools over a chat model (llm_tools.py, chat/), anomaly detection and
recommendations from the gateway's own evidence (insight_tools.py, anomaly/, recommend/)."""

from handlers.ai.handler import AiHandler

__all__ = ["AiHandler"]
