"""/mcp/ai: model-backed tools (llm.*) and evidence-backed ones (anomaly.*, recommendation.get).

The llm.* tools talk to one chat model (handlers/ai/chat: OpenAI-compatible or Ollama), built
from the ai-* variables on first use and rebuilt when they change (chat_models.py); with no
provider configured they answer UNAVAILABLE naming the variables to set. Every SQL statement a
model writes runs through services.sql (the read-only path of run_sql_readonly). anomaly.* and
recommendation.get need no model: they read what the gateway recorded (gateway.evidence).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from gateway.tools import ToolHandler
from gateway.variables import Variable
from handlers.ai.chat_models import ChatModels
from handlers.ai.insight_tools import InsightTools, anomaly_counter
from handlers.ai.llm_tools import LlmTools

if TYPE_CHECKING:
    from gateway.services import Services


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


class AiHandler(ToolHandler):
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

    # tools/list shows anomaly.* and recommendation.get first, then llm.*.
    tool_groups: ClassVar[tuple[type, ...]] = (InsightTools, LlmTools)

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self.models = ChatModels()  # its provider is reused across calls and closed with the endpoint
        self.anomalies_found = anomaly_counter(services.metrics)  # declared at start, as /metrics shows it

    def make_groups(self) -> list[object]:
        services = self.services
        return [
            InsightTools(services.store, services.sql, services.evidence, self.anomalies_found),
            LlmTools(services.sql, self.models),
        ]

    async def close(self) -> None:
        self.models.close()
        await super().close()
