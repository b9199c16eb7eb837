"""The chat model the llm.* tools talk to: built from the ai-* variables on first use, rebuilt when
they change, closed with the endpoint; every use counts against the calling token's rate limit."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from gateway.errors import LimitExceeded, Unavailable
from gateway.tools import CallContext
from handlers.ai.chat import ChatProvider
from handlers.ai.chat.ollama import OllamaChat
from handlers.ai.chat.openai import OpenAiChat

_PROVIDERS = {"openai": OpenAiChat, "ollama": OllamaChat}
SETUP_HINT = (
    "SET ai-provider = openai (or ollama); SET ai-api_base = <URL of the chat API>; SET ai-model = <model name>; "
    "SET ai-api_key = <key, if the API needs one>; LOAD MCP VARIABLES TO RUNTIME"
)


class RateLimiter:
    """Calls per token fingerprint in a sliding minute (per worker; thread-safe)."""

    def __init__(self) -> None:
        self._calls: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def admit(self, token_fp: str, per_minute: int) -> None:
        if per_minute <= 0:
            return
        now = time.monotonic()
        with self._lock:
            calls = self._calls.setdefault(token_fp, deque())
            while calls and calls[0] <= now - 60:
                calls.popleft()
            if len(calls) >= per_minute:
                retry_after_s = round(calls[0] + 60 - now, 1)
                raise LimitExceeded(
                    f"ai-calls_per_minute ({per_minute}) reached for this token; retry in {retry_after_s} s",
                    details={"retry_after_s": retry_after_s, "limit_per_minute": per_minute},
                )
            calls.append(now)
            if len(self._calls) > 10_000:  # tokens are few; bound it anyway
                self._calls = {fp: c for fp, c in self._calls.items() if c and c[-1] > now - 60}


class ChatModels:
    """One per /mcp/ai handler: the provider its variables name now, and the rate limit."""

    def __init__(self) -> None:
        self._provider: tuple[tuple[Any, ...], ChatProvider] | None = None
        self._provider_lock = threading.Lock()
        self.limiter = RateLimiter()

    def model(self, ctx: CallContext) -> ChatProvider:
        """The configured chat model (built on first use, rebuilt when its variables change);
        counts the call against the token's rate limit."""
        runtime = ctx.runtime
        name = runtime.var("ai-provider")
        api_base, model = runtime.var("ai-api_base"), runtime.var("ai-model")
        if not name or not api_base or not model:
            missing = [v for v, value in (("ai-provider", name), ("ai-api_base", api_base), ("ai-model", model)) if not value]
            raise Unavailable(
                f"{ctx.tool_name} needs a chat model and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: {SETUP_HINT}",
                details={"missing_variables": missing},
            )
        self.limiter.admit(ctx.token_fingerprint, runtime.var("ai-calls_per_minute"))
        key = (name, api_base, model, runtime.var("ai-api_key"), runtime.var("ai-timeout_ms"), runtime.var("ai-max_retries"))
        with self._provider_lock:
            if self._provider is None or self._provider[0] != key:
                old = self._provider
                provider = _PROVIDERS[name](api_base=api_base, model=model, api_key=key[3], timeout_ms=key[4], max_retries=key[5])
                self._provider = (key, provider)
                if old is not None:
                    old[1].close()
            return self._provider[1]

    def close(self) -> None:
        if self._provider is not None:
            self._provider[1].close()
            self._provider = None
