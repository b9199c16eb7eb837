"""The model-backed tools of /mcp/ai: llm.query, llm.analyze, llm.generate (a tool group of AiHandler).

A statement the model writes is only ever run by services.sql.run — the read-only path of
run_sql_readonly, with its query rules, parser allowlist, read-only transaction, timeouts and
caps — under the tool name "llm.query" or "llm.analyze" (query rules can match on it). A refused
or failed statement is fed back to the model for at most ai-repair_rounds corrections; it is
never run any other way. What goes to the model: the question, table and column names, results
and plans — never a connection detail, a password, an API key or a token.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import Field, model_validator
from sqlglot import exp

from backends.readonly import table_ref
from backends.sql import ReadOnlySql, Statement
from backends.targets import default_schema
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, LimitExceeded, Unavailable
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.ai import prompts
from handlers.ai.chat import ChatProvider, ChatReply
from handlers.ai.chat_models import ChatModels
from handlers.ai.schema import column_names, schema_tables

PROFILE_MAX_COLUMNS = 30
_NO_ORDER = ("json", "bytea", "blob", "binary", "xml", "geometry", "point", "array", "[]", "tsvector", "hstore", "bit")


class Usage(ToolOutput):
    model: str
    model_calls: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Attempt(ToolOutput):
    sql: str | None = Field(description="The statement the model wrote (null: it wrote none).")
    code: str = Field(description="Why it did not run: the error code (INVALID_ARGUMENT for a refusal, ...).")
    message: str


class LlmQueryIn(ToolInput):
    question: str = Field(min_length=1, max_length=4000, description="The question about the target's data, in plain words.")
    target_id: str | None = Field(default=None, max_length=64, description="Target to query; omitted: the default target.")
    schema_: str | None = Field(default=None, alias="schema", max_length=256, description="Schema (MySQL: database) to use.")
    max_rows: int = Field(default=100, ge=1, le=10_000, description="Row cap of the statement (never above the target's).")


class LlmQueryOut(ToolOutput):
    target_id: str
    sql: str = Field(description="The statement that ran, as the model wrote it.")
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool = Field(description="More rows existed than max_rows / the byte cap allowed.")
    answer: str = Field(description="The model's answer to the question from the rows.")
    rounds: int = Field(description="Statements the model wrote (1 + repairs).")
    attempts: list[Attempt] = Field(description="The statements that were refused or failed before the one that ran.")
    schema_tables: int = Field(description="Tables described in the schema context.")
    schema_tables_left_out: int = Field(description="Tables of the schema not in the context (budget).")
    usage: Usage


class LlmAnalyzeIn(ToolInput):
    target_id: str | None = Field(default=None, max_length=64)
    sql: str | None = Field(
        default=None, min_length=1, max_length=65_536, description="A read-only statement to run, explain and explain."
    )
    table: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="A table to profile instead (row count, nulls, distinct values, ranges).",
    )
    schema_: str | None = Field(default=None, alias="schema", max_length=256)
    question: str | None = Field(default=None, max_length=4000, description="What to look for; omitted: a general explanation.")

    @model_validator(mode="after")
    def one_subject(self) -> LlmAnalyzeIn:
        if (self.sql is None) == (self.table is None):
            raise ValueError("give exactly one of sql or table")
        return self


class LlmAnalyzeOut(ToolOutput):
    target_id: str
    sql: str = Field(description="The statement that ran (the profile query when a table was given).")
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    plan: Any = Field(default=None, description="explain_sql's plan of the statement (null when the target disallows EXPLAIN).")
    explanation: str
    usage: Usage


class LlmGenerateIn(ToolInput):
    prompt: str = Field(min_length=1, max_length=1_000_000, description="What to generate.")
    context: str | None = Field(default=None, max_length=1_000_000, description="Material the model should use.")
    max_tokens: int | None = Field(
        default=None, ge=1, le=65_536, description="Most tokens to generate (never above ai-max_tokens)."
    )


class LlmGenerateOut(ToolOutput):
    text: str
    usage: Usage


class _Conversation:
    """The model calls of one tool call, and their token counts."""

    def __init__(self, model: ChatProvider, ctx: CallContext) -> None:
        self.model, self.ctx = model, ctx
        self.calls, self.prompt_tokens, self.completion_tokens = 0, 0, 0
        self.max_tokens = ctx.runtime.var("ai-max_tokens")

    def ask(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> ChatReply:
        self.ctx.check_deadline()
        reply = self.model.chat(
            messages, max_tokens=min(max_tokens or self.max_tokens, self.max_tokens), deadline=self.ctx.deadline
        )
        self.calls += 1
        self.prompt_tokens += reply.prompt_tokens or 0
        self.completion_tokens += reply.completion_tokens or 0
        return reply

    def usage(self) -> Usage:
        return Usage(
            model=self.model.model,
            model_calls=self.calls,
            prompt_tokens=self.prompt_tokens or None,
            completion_tokens=self.completion_tokens or None,
        )


class LlmTools:
    def __init__(self, sql_path: ReadOnlySql | None, models: ChatModels) -> None:
        self.sql_path = sql_path  # the one read-only SQL path every statement a model writes runs through
        self.models = models

    def _sql(self) -> ReadOnlySql:
        if self.sql_path is None:
            raise Unavailable("query targets are not initialised")
        return self.sql_path

    @tool("llm.query", title="Answer a question with SQL", read_only=True, open_world=True)
    def llm_query(self, args: LlmQueryIn, ctx: CallContext) -> LlmQueryOut:
        """Answer a question about a target's data: the model writes one read-only SQL statement from the schema, the gateway runs it and the model answers from the rows.

        The statement runs through the same read-only path as run_sql_readonly (query rules,
        read-only parser, read-only transaction, timeouts, row and byte caps); a refused or
        failing statement is sent back to the model with the error for at most ai-repair_rounds
        corrections, and the attempts are reported. Returns the SQL, the rows (truncated=true
        when a cap cut them) and the model's answer. UNAVAILABLE when no model is configured."""
        model = self.models.model(ctx)
        sql_path = self._sql()
        target = sql_path.targets.resolve(args.target_id)
        _schema, tables, listed = schema_tables(
            sql_path.targets, target, args.schema_, args.question, max_tokens=ctx.runtime.var("ai-context_max_tokens"), ctx=ctx
        )
        context, shown, _ = prompts.schema_context(tables, args.question, max_tokens=ctx.runtime.var("ai-context_max_tokens"))
        talk = _Conversation(model, ctx)
        messages = prompts.sql_messages(target.engine.title, context, args.question)
        attempts: list[Attempt] = []
        for _round in range(ctx.runtime.var("ai-repair_rounds") + 1):
            reply = talk.ask(messages)
            sql = prompts.extract_sql(reply.text)
            messages.append({"role": "assistant", "content": reply.text})
            if sql is None:
                failure: GatewayError = InvalidArgument("the reply contained no SQL statement")
            else:
                try:
                    out = sql_path.run(
                        ctx,
                        Statement(
                            sql=sql,
                            target_id=target.target_id,
                            schema=args.schema_,
                            max_rows=args.max_rows,
                            tool_name="llm.query",
                        ),
                    )
                    break
                except (Unavailable, LimitExceeded):
                    raise  # the target is down or a cap refused: a new statement would not help
                except GatewayError as exc:
                    failure = exc
            attempts.append(Attempt(sql=sql, code=failure.code, message=failure.message))
            if ctx.remaining_s() <= 0:
                raise DeadlineExceeded("llm.query ran past its deadline", details={"attempts": _dump(attempts)})
            messages.append(prompts.repair_message(sql or "", failure.code, failure.message))
        else:
            raise InvalidArgument(
                f"the model wrote no statement that could run in {len(attempts)} round(s) (ai-repair_rounds = {len(attempts) - 1}); "
                f"last: {attempts[-1].code}: {attempts[-1].message}",
                details={"attempts": _dump(attempts)},
            )
        columns = [c["name"] for c in out["columns"]]
        preview = prompts.rows_preview(columns, out["rows"], max_chars=ctx.runtime.var("ai-prompt_max_chars") // 2)
        cut = " (truncated: more rows existed)" if out["truncated"] else ""
        answer = talk.ask(
            [
                {"role": "system", "content": prompts.ANSWER_SYSTEM},
                {"role": "user", "content": f"Question: {args.question}\n\nSQL: {sql}\n\nResult{cut}:\n{preview}"},
            ]
        )
        return LlmQueryOut(
            target_id=out["target_id"], sql=sql or "", columns=columns, rows=out["rows"], row_count=out["row_count"],
            truncated=out["truncated"], answer=answer.text.strip(), rounds=len(attempts) + 1, attempts=attempts,
            schema_tables=shown, schema_tables_left_out=listed - shown, usage=talk.usage(),
        )  # fmt: skip

    @tool("llm.analyze", title="Explain a query or profile a table", read_only=True, open_world=True)
    def llm_analyze(self, args: LlmAnalyzeIn, ctx: CallContext) -> LlmAnalyzeOut:
        """Run a read-only statement (or profile a table) and have the model explain the result and the execution plan.

        With sql: the statement runs through the read-only path (first 50 rows) and, where the
        target allows EXPLAIN, its plan is taken as explain_sql would. With table: one aggregate
        statement (row count, and per column non-null and distinct counts, min and max) profiles
        it through the same path. The model then explains what matters (full scans, estimates,
        nulls, skew) and answers `question` if given. UNAVAILABLE when no model is configured."""
        model = self.models.model(ctx)
        sql_path = self._sql()
        target = sql_path.targets.resolve(args.target_id)
        sql = args.sql or self._profile_sql(target, args.schema_, args.table or "")
        statement = Statement(sql=sql, target_id=target.target_id, schema=args.schema_, tool_name="llm.analyze")
        out = sql_path.run(ctx, dataclasses.replace(statement, max_rows=50))
        plan = None
        if args.sql and target.allow_explain and out["message"] is None:
            try:
                plan = target.engine.plan_of(sql_path.run(ctx, dataclasses.replace(statement, explain="plan")))
            except InvalidArgument:
                plan = None  # SHOW and DESCRIBE have no plan
        budget = ctx.runtime.var("ai-prompt_max_chars")
        columns = [c["name"] for c in out["columns"]]
        material = f"SQL: {sql}\n\nResult{' (truncated)' if out['truncated'] else ''}:\n"
        material += prompts.rows_preview(columns, out["rows"], max_chars=budget // 2)
        if plan is not None:
            material += "\n\nExecution plan (" + target.engine.title + "):\n"
            material += json.dumps(plan, default=str)[: budget // 2]
        if args.table:
            material = f"Profile of table {args.table} (row_count, then per column: non-null, distinct, min, max).\n" + material
        question = args.question or "Explain this result and plan, and what could be improved."
        talk = _Conversation(model, ctx)
        reply = talk.ask(
            [
                {"role": "system", "content": prompts.ANALYZE_SYSTEM},
                {"role": "user", "content": f"{material}\n\nQuestion: {question}"},
            ]
        )
        return LlmAnalyzeOut(
            target_id=out["target_id"], sql=sql, columns=columns, rows=out["rows"], truncated=out["truncated"],
            plan=plan, explanation=reply.text.strip(), usage=talk.usage(),
        )  # fmt: skip

    def _profile_sql(self, target: Any, schema: str | None, table: str) -> str:
        """One aggregate statement over the table, built as a tree from quoted identifiers."""
        columns = column_names(self._sql().targets, target, default_schema(target, schema), table)
        dialect = target.engine.dialect
        select: list[exp.Expression] = [exp.alias_(exp.Count(this=exp.Star()), "row_count", quoted=True)]
        for column in columns[:PROFILE_MAX_COLUMNS]:
            ref = exp.column(exp.to_identifier(column["name"], quoted=True))
            name = str(column["name"])[:40]
            select.append(exp.alias_(exp.Count(this=ref.copy()), f"{name}.non_null", quoted=True))
            if not any(marker in str(column.get("type") or "").lower() for marker in _NO_ORDER):
                select.append(exp.alias_(exp.Count(this=exp.Distinct(expressions=[ref.copy()])), f"{name}.distinct", quoted=True))
                select.append(exp.alias_(exp.Min(this=ref.copy()), f"{name}.min", quoted=True))
                select.append(exp.alias_(exp.Max(this=ref.copy()), f"{name}.max", quoted=True))
        query = exp.Select(expressions=select).from_(table_ref(table, schema), copy=False)
        return query.sql(dialect=dialect)

    @tool("llm.generate", title="Generate text", read_only=True, open_world=True)
    def llm_generate(self, args: LlmGenerateIn, ctx: CallContext) -> LlmGenerateOut:
        """Plain text generation by the configured model, within the endpoint's limits (ai-max_tokens, ai-prompt_max_chars, ai-calls_per_minute).

        `context` is given to the model as material to use. A prompt plus context longer than
        ai-prompt_max_chars is LIMIT_EXCEEDED. UNAVAILABLE when no model is configured."""
        limit = ctx.runtime.var("ai-prompt_max_chars")
        size = len(args.prompt) + len(args.context or "")
        if size > limit:
            raise LimitExceeded(f"prompt and context are {size} characters; ai-prompt_max_chars is {limit}")
        model = self.models.model(ctx)
        messages = [{"role": "user", "content": args.prompt}]
        if args.context:
            messages.insert(0, {"role": "system", "content": f"Use this material:\n{args.context}"})
        talk = _Conversation(model, ctx)
        reply = talk.ask(messages, max_tokens=args.max_tokens)
        return LlmGenerateOut(text=reply.text, usage=talk.usage())


def _dump(attempts: list[Attempt]) -> list[dict[str, Any]]:
    return [a.model_dump() for a in attempts]
