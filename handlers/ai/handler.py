"""/mcp/ai: model-backed tools (llm.*) and evidence-backed ones (anomaly.*, recommendation.get).

The llm.* tools talk to one chat model (handlers/ai/chat: OpenAI-compatible or Ollama), built
from the ai-* variables on first use and rebuilt when they change; with no provider configured
they answer UNAVAILABLE naming the variables to set. Every SQL statement a model writes runs
through services.sql (the read-only path of run_sql_readonly). anomaly.* and
recommendation.get need no model: they read what the gateway recorded (gateway.evidence).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, ClassVar

from gateway.errors import LimitExceeded, Unavailable
from gateway.tools import CallContext
from gateway.variables import Variable
from handlers.ai.chat import ChatProvider
from handlers.ai.chat.ollama import OllamaChat
from handlers.ai.chat.openai import OpenAiChat
from handlers.ai.insight_tools import InsightTools
from handlers.ai.llm_tools import LlmTools


def _v(name: str, kind: str, default: Any, help: str, **kw: Any) -> Variable:
    return Variable(name=name, kind=kind, default=str(default), help=help, **kw)


AI_VARIABLES: tuple[Variable, ...] = (
    _v("ai-provider", "enum", "", "Chat model API of the llm.* tools: openai (any OpenAI-compatible chat-completions API: vLLM, llama.cpp, LM Studio, OpenAI), ollama, or empty (llm.* answer UNAVAILABLE).", choices=("", "openai", "ollama")),
    _v("ai-api_base", "str", "", "Base URL of the chat API, e.g. http://127.0.0.1:11434 (Ollama) or https://api.openai.com/v1."),
    _v("ai-api_key", "str", "", "API key sent as a bearer token to the chat API (empty: none).", secret=True),
    _v("ai-model", "str", "", "Model name the chat API serves."),
    _v("ai-timeout_ms", "int", 30_000, "Longest wait for one model request, in milliseconds (a slow answer is UNAVAILABLE, not retried).", minimum=100, maximum=600_000),
    _v("ai-max_retries", "int", 2, "Retries of a model request that failed with a connection error, HTTP 429 or 5xx (Retry-After honoured, never past the call's deadline).", minimum=0, maximum=10),
    _v("ai-max_tokens", "int", 1024, "Most tokens the model may generate per request.", minimum=16, maximum=65_536),
    _v("ai-calls_per_minute", "int", 60, "llm.* calls one bearer token may make per minute, per worker (0: no limit); more are LIMIT_EXCEEDED with a retry hint.", minimum=0, maximum=100_000),
    _v("ai-repair_rounds", "int", 2, "Times llm.query feeds a failed or refused statement's error back to the model for a corrected one.", minimum=0, maximum=5),
    _v("ai-context_max_tokens", "int", 4000, "Token budget of the schema context llm.query sends (tables most relevant to the question first).", minimum=100, maximum=200_000),
    _v("ai-prompt_max_chars", "int", 32_000, "Longest prompt (plus context) llm.generate accepts, and most characters of results or plans sent to the model.", minimum=1000, maximum=1_000_000),
    _v("ai-anomaly_window_s", "int", 300, "Default window anomaly.detect judges (the last N seconds).", minimum=10, maximum=86_400),
    _v("ai-anomaly_baseline_s", "int", 3600, "Rolling baseline before the window that anomaly.detect compares against.", minimum=60, maximum=30 * 86_400),
    _v("ai-anomalies_max", "int", 10_000, "Anomalies kept in the data directory (oldest dropped first).", minimum=10, maximum=1_000_000),
    _v("ai-slow_query_ms", "int", 20, "Mean time from which recommendation.get looks at a frequent digest's plan for full scans.", minimum=0, maximum=3_600_000),
)  # fmt: skip

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


class AiHandler(LlmTools, InsightTools):
    endpoint: ClassVar[str] = "ai"
    title: ClassVar[str] = "AI: LLM tools, anomalies, recommendations"
    instructions: ClassVar[str] = (
        "llm.query answers a question about a target's data with one read-only SQL statement the model writes "
        "(the statement, rows and a short answer come back); llm.analyze explains a statement's result and plan or "
        "profiles a table; llm.generate is plain generation. anomaly.detect / anomaly.list report unusual gateway "
        "traffic (no model needed); recommendation.get suggests indexes, cache rules and fixes from measured evidence."
    )
    variables: ClassVar[tuple[Variable, ...]] = AI_VARIABLES
    example_call: ClassVar[tuple[str, dict[str, Any]] | None] = ("anomaly.detect", {})

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self._provider: tuple[tuple[Any, ...], ChatProvider] | None = None
        self._provider_lock = threading.Lock()
        self.limiter = RateLimiter()
        self.init_insights()

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

    async def close(self) -> None:
        if self._provider is not None:
            self._provider[1].close()
            self._provider = None
        await super().close()
