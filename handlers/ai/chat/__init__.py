"""Chat completion providers: one small module per wire format, one shape for the tools.

`openai` speaks the OpenAI-compatible chat-completions API (vLLM, llama.cpp server, LM Studio,
OpenAI); `ollama` speaks Ollama's /api/chat. Both post through gateway.http_json (bounded
retries on 429/5xx honouring Retry-After, never past the call's deadline, no secret in errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ChatReply:
    text: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ChatProvider(Protocol):
    name: str
    model: str

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, deadline: float) -> ChatReply:
        """One completion for `messages` ({role, content} dicts); raises GatewayError subclasses."""
        ...

    def close(self) -> None: ...
