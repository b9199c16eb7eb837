"""The agent memory tools of /mcp/query: agent.* (runs and events) and llm.* (what an agent
concluded: summaries, relationships, domains, metrics, question templates, notes; and
llm.search over all of it). The store is catalog/memory.py.

An agent runs its own model in the client; the gateway keeps what it learns per target and
discovery run, so the next agent (or the next run) starts from it. A relationship recorded
here appears in suggest_joins and catalog.get_relationships. A metric's SQL and a question
template's SQL pass the read-only check when stored: a metric that writes is refused.
Every field is bounded; unknown ids are INVALID_ARGUMENT.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from backends.pools import TargetPools
from backends.readonly import check_readonly
from backends.targets import default_schema
from gateway.errors import InvalidArgument
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.query.catalog.access import DiscoveryCatalog, require_writes
from handlers.query.catalog.memory import KINDS

NAME = Field(min_length=1, max_length=256)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
MAX_PAYLOAD_BYTES = 65_536


INT64_MAX = 2**63 - 1  # ids are SQLite integers: anything larger is refused as INVALID_ARGUMENT


class RunStartIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    run_id: int = Field(ge=1, le=INT64_MAX, description="The discovery run (discovery.run_static) this agent works from.")
    model: str = Field("", max_length=256)
    notes: str = Field("", max_length=4000)


class AgentRunOut(ToolOutput):
    agent_run_id: int
    target_id: str
    run_id: int
    status: str


class RunFinishIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    status: Literal["ok", "failed", "cancelled"]
    error: str = Field("", max_length=4000)


class EventIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    event_type: str = Field(min_length=1, max_length=64, description="e.g. tool_call, observation, decision.")
    payload: Any = Field(None, description=f"Any JSON, at most {MAX_PAYLOAD_BYTES} bytes.")


class IdOut(ToolOutput):
    id: int
    kind: str


class SummaryIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    run_id: int = Field(ge=1, le=INT64_MAX)
    object_id: int = Field(ge=1, le=INT64_MAX, description="A catalog object (catalog.get / catalog.search give ids).")
    summary: str = Field(min_length=1, max_length=8000)
    confidence: float | None = Field(None, ge=0, le=1)
    status: Literal["draft", "reviewed", "final"] = "draft"
    sources: list[str] = Field(
        default_factory=list, max_length=32, description="Where the summary comes from (tools, queries, documents)."
    )


class SummaryGetIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    object_id: int | None = Field(None, ge=1, le=INT64_MAX)
    name: str | None = Field(None, max_length=800, description="schema.table[.column]: every run's summaries of that object.")
    run_id: int | None = Field(None, ge=1, le=INT64_MAX)


class SummariesOut(ToolOutput):
    summaries: list[dict[str, Any]]


class RelationshipIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    from_schema: str | None = Field(None, max_length=256, description="Default: the target's default schema.")
    from_table: str = NAME
    from_columns: list[str] = Field(min_length=1, max_length=16)
    to_schema: str | None = Field(None, max_length=256)
    to_table: str = NAME
    to_columns: list[str] = Field(min_length=1, max_length=16)
    confidence: float = Field(ge=0, le=1)
    evidence: dict[str, Any] = Field(default_factory=dict, description="Why the agent believes it (at most 8 KiB as JSON).")


class DomainIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    name: str = NAME
    description: str = Field("", max_length=4000)
    confidence: float | None = Field(None, ge=0, le=1)


class Member(BaseModel):
    schema_: str = Field(alias="schema", max_length=256)
    table: str = NAME
    role: str = Field("", max_length=64, description="e.g. core, lookup, history.")


class DomainMembersIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    domain_id: int = Field(ge=1, le=INT64_MAX)
    members: list[Member] = Field(max_length=500)


class MetricIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    name: str = NAME
    description: str = Field("", max_length=4000)
    sql: str = Field(
        min_length=1, max_length=16_384, description="One read-only statement computing the metric; checked when stored."
    )
    unit: str = Field("", max_length=64)


class TemplateIn(ToolInput):
    agent_run_id: int = Field(ge=1, le=INT64_MAX)
    question: str = Field(min_length=1, max_length=2000)
    sql_template: str = Field(min_length=1, max_length=16_384, description="Read-only SQL with {name} placeholders for values.")
    parameters: list[str] = Field(default_factory=list, max_length=32)


class NoteIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    run_id: int = Field(ge=1, le=INT64_MAX)
    agent_run_id: int | None = Field(None, ge=1, le=INT64_MAX)
    object_id: int | None = Field(None, ge=1, le=INT64_MAX)
    title: str = Field("", max_length=256)
    body: str = Field(min_length=1, max_length=8000)
    tags: list[str] = Field(default_factory=list, max_length=32)


class LlmSearchIn(ToolInput):
    query: str = Field(min_length=1, max_length=512)
    target_id: str = Field(min_length=1, max_length=64)
    kinds: list[Literal["summary", "relationship", "domain", "metric", "question_template", "note"]] = Field(default_factory=list)
    limit: int = Field(20, ge=1, le=200)


class LlmHit(BaseModel):
    kind: str
    ref_id: int
    title: str
    snippet: str
    score: float
    run_id: int | None
    agent_run_id: int | None


class LlmSearchOut(ToolOutput):
    results: list[LlmHit]


class AgentMemoryTools:
    """agent.* and llm.*: the agent memory in the discovery catalog, and the targets' pools to
    resolve the targets they name."""

    def __init__(self, catalog: DiscoveryCatalog, pools: TargetPools) -> None:
        self.catalog = catalog
        self.pools = pools

    def _check_sql(self, target_id: str, sql: str, what: str) -> None:
        engine = self.pools.resolve(target_id).engine
        try:
            check_readonly(sql, engine)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{what} is not stored: {exc.message}") from None

    @tool("agent.run_start", title="Start an agent run", read_only=False)
    def agent_run_start(self, args: RunStartIn, ctx: CallContext) -> AgentRunOut:
        """Start recording an agent's discovery work on a target and discovery run; returns the agent_run_id the other agent.* and llm.* tools take."""
        require_writes(ctx)
        self.pools.resolve(args.target_id)
        agent_run_id = self.catalog.memory().run_start(args.target_id, args.run_id, args.model, args.notes)
        return AgentRunOut(agent_run_id=agent_run_id, target_id=args.target_id, run_id=args.run_id, status="running")

    @tool("agent.run_finish", title="Finish an agent run", read_only=False)
    def agent_run_finish(self, args: RunFinishIn, ctx: CallContext) -> AgentRunOut:
        """Close an agent run with its outcome (ok, failed, cancelled) and an error text if it failed."""
        require_writes(ctx)
        run = self.catalog.memory().run_finish(args.agent_run_id, args.status, args.error)
        return AgentRunOut(
            agent_run_id=run["agent_run_id"], target_id=run["target_id"], run_id=run["run_id"], status=run["status"]
        )

    @tool("agent.event_append", title="Record an agent event", read_only=False)
    def agent_event_append(self, args: EventIn, ctx: CallContext) -> IdOut:
        """Append one event (a tool call, an observation, a decision) with a JSON payload to an open agent run."""
        require_writes(ctx)
        if len(json.dumps(args.payload)) > MAX_PAYLOAD_BYTES:
            raise InvalidArgument(f"payload is larger than {MAX_PAYLOAD_BYTES} bytes as JSON")
        return IdOut(id=self.catalog.memory().event_append(args.agent_run_id, args.event_type, args.payload), kind="event")

    @tool("llm.summary_upsert", title="Record a summary", read_only=False)
    def llm_summary_upsert(self, args: SummaryIn, ctx: CallContext) -> IdOut:
        """Record (or replace) an agent's summary of one catalog object in a discovery run, with confidence, status and sources."""
        require_writes(ctx)
        summary_id = self.catalog.memory().summary_upsert(
            args.agent_run_id, args.run_id, args.object_id, args.summary, args.confidence, args.status, args.sources
        )
        return IdOut(id=summary_id, kind="summary")

    @tool("llm.summary_get", title="Read summaries", read_only=True)
    def llm_summary_get(self, args: SummaryGetIn, ctx: CallContext) -> SummariesOut:
        """Agents' summaries of a target's objects: of one object_id, of one name (schema.table[.column]) across runs, or of one run."""
        return SummariesOut(
            summaries=self.catalog.memory().summaries(
                args.target_id, object_id=args.object_id, name=args.name, run_id=args.run_id
            )
        )

    @tool("llm.relationship_upsert", title="Record a relationship", read_only=False)
    def llm_relationship_upsert(self, args: RelationshipIn, ctx: CallContext) -> IdOut:
        """Record a join the agent inferred, with confidence and evidence; suggest_joins and catalog.get_relationships then show it (kind agent)."""
        require_writes(ctx)
        if len(args.from_columns) != len(args.to_columns):
            raise InvalidArgument("from_columns and to_columns must have the same length")
        if len(json.dumps(args.evidence)) > 8192:
            raise InvalidArgument("evidence is larger than 8 KiB as JSON")
        memory = self.catalog.memory()
        target = self.pools.resolve(memory.agent_run(args.agent_run_id)["target_id"])
        relationship = {
            "from_schema": args.from_schema or default_schema(target, None), "from_table": args.from_table,
            "from_columns": args.from_columns, "to_schema": args.to_schema or args.from_schema or default_schema(target, None),
            "to_table": args.to_table, "to_columns": args.to_columns, "confidence": args.confidence, "evidence": args.evidence,
        }  # fmt: skip
        return IdOut(id=memory.relationship_upsert(args.agent_run_id, relationship), kind="relationship")

    @tool("llm.domain_upsert", title="Record a business domain", read_only=False)
    def llm_domain_upsert(self, args: DomainIn, ctx: CallContext) -> IdOut:
        """Record (or update, by name) a business domain of the target, such as billing or fulfilment; llm.domain_set_members lists its tables."""
        require_writes(ctx)
        return IdOut(
            id=self.catalog.memory().domain_upsert(args.agent_run_id, args.name, args.description, args.confidence), kind="domain"
        )

    @tool("llm.domain_set_members", title="Set a domain's tables", read_only=False)
    def llm_domain_set_members(self, args: DomainMembersIn, ctx: CallContext) -> IdOut:
        """Replace the tables of a business domain (schema, table, role)."""
        require_writes(ctx)
        members = [{"schema": m.schema_, "table": m.table, "role": m.role} for m in args.members]
        self.catalog.memory().domain_set_members(args.agent_run_id, args.domain_id, members)
        return IdOut(id=args.domain_id, kind="domain")

    @tool("llm.metric_upsert", title="Record a metric", read_only=False)
    def llm_metric_upsert(self, args: MetricIn, ctx: CallContext) -> IdOut:
        """Record (or update, by name) a named metric with the SQL that computes it; the SQL must pass the read-only check or the metric is refused."""
        require_writes(ctx)
        memory = self.catalog.memory()
        self._check_sql(memory.open_agent_run(args.agent_run_id)["target_id"], args.sql, f"metric {args.name!r}")
        return IdOut(id=memory.metric_upsert(args.agent_run_id, args.name, args.description, args.sql, args.unit), kind="metric")

    @tool("llm.question_template_add", title="Record a question template", read_only=False)
    def llm_question_template_add(self, args: TemplateIn, ctx: CallContext) -> IdOut:
        """Record a natural-language question with the SQL template that answers it ({name} placeholders for values), checked read-only with the placeholders as NULL."""
        require_writes(ctx)
        memory = self.catalog.memory()
        target_id = memory.open_agent_run(args.agent_run_id)["target_id"]
        self._check_sql(target_id, PLACEHOLDER.sub("NULL", args.sql_template), "the question template")
        parameters = args.parameters or list(dict.fromkeys(PLACEHOLDER.findall(args.sql_template)))
        return IdOut(
            id=memory.question_template_add(args.agent_run_id, args.question, args.sql_template, parameters),
            kind="question_template",
        )

    @tool("llm.note_add", title="Add a note", read_only=False)
    def llm_note_add(self, args: NoteIn, ctx: CallContext) -> IdOut:
        """Add a free-text note about a target (optionally one catalog object) in a discovery run; llm.search finds it."""
        require_writes(ctx)
        self.pools.resolve(args.target_id)
        tags = " ".join(t.strip() for t in args.tags if t.strip())[:2000]
        note_id = self.catalog.memory().note_add(
            args.target_id, args.run_id, args.agent_run_id, args.object_id, args.title, args.body, tags
        )
        return IdOut(id=note_id, kind="note")

    @tool("llm.search", title="Search agent memory", read_only=True)
    def llm_search(self, args: LlmSearchIn, ctx: CallContext) -> LlmSearchOut:
        """Full-text search (FTS5, bm25) over everything agents recorded for a target: summaries, relationships, domains, metrics, question templates and notes."""
        kinds = [k for k in args.kinds if k in KINDS]
        hits = self.catalog.memory().search(args.query, args.target_id, kinds, args.limit)
        return LlmSearchOut(results=[LlmHit(**h) for h in hits])
