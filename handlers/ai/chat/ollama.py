"""Ollama's chat wire format (POST {base}/api/chat, stream false)."""

from __future__ import annotations

from typing import Any

from gateway.errors import Unavailable
from gateway.http_json import JsonPoster
from handlers.ai.chat import ChatReply


class OllamaChat:
    name = "ollama"

    def __init__(self, *, api_base: str, model: str, api_key: str, timeout_ms: int, max_retries: int) -> None:
        self.model = model
        self._poster = JsonPoster(
            url=f"{api_base.rstrip('/')}/api/chat",
            label=f"chat model ollama:{model}",
            api_key=api_key,
            timeout_ms=timeout_ms,
            max_retries=max_retries,
        )

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, deadline: float) -> ChatReply:
        body = self._poster.post(
            {
                "model": self.model,
                "messages": messages,
                "stream": False,
                "options": {"num_predict": max_tokens, "temperature": 0},
            },
            deadline=deadline,
        )
        try:
            text = body["message"]["content"]
            if not isinstance(text, str):
                raise TypeError
        except (KeyError, TypeError):
            raise Unavailable(f"{self._poster.where} returned a response without a message") from None
        return ChatReply(
            text=text,
            model=str(body.get("model") or self.model),
            prompt_tokens=_int_or_none(body.get("prompt_eval_count")),
            completion_tokens=_int_or_none(body.get("eval_count")),
        )

    def close(self) -> None:
        self._poster.close()


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
