"""The OpenAI-compatible chat-completions wire format (POST {base}/v1/chat/completions)."""

from __future__ import annotations

from typing import Any

from gateway.errors import Unavailable
from gateway.http_json import JsonPoster
from handlers.ai.chat import ChatReply


def chat_url(api_base: str) -> str:
    base = api_base.rstrip("/")
    # OpenAI's own docs give the base as https://api.openai.com/v1; accept it with or without /v1.
    return f"{base}/chat/completions" if base.endswith("/v1") else f"{base}/v1/chat/completions"


class OpenAiChat:
    name = "openai"

    def __init__(self, *, api_base: str, model: str, api_key: str, timeout_ms: int, max_retries: int) -> None:
        self.model = model
        self._poster = JsonPoster(
            url=chat_url(api_base),
            label=f"chat model openai:{model}",
            api_key=api_key,
            timeout_ms=timeout_ms,
            max_retries=max_retries,
        )

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, deadline: float) -> ChatReply:
        body = self._poster.post(
            {"model": self.model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": False},
            deadline=deadline,
        )
        return _reply(body, self.model, self._poster.where)

    def close(self) -> None:
        self._poster.close()


def _reply(body: Any, model: str, where: str) -> ChatReply:
    try:
        text = body["choices"][0]["message"]["content"]
        if not isinstance(text, str):
            raise TypeError
    except (KeyError, IndexError, TypeError):
        raise Unavailable(f"{where} returned a response without a message") from None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    return ChatReply(
        text=text,
        model=str(body.get("model") or model),
        prompt_tokens=_int_or_none(usage.get("prompt_tokens")),
        completion_tokens=_int_or_none(usage.get("completion_tokens")),
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
