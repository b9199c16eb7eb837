"""suggest_joins and find_reference_candidates on /mcp/query: how tables join, with the evidence.

Order of evidence: declared foreign keys (confidence 1.0), relationships an agent recorded
with llm.relationship_upsert (its confidence), then inferred candidates (join_inference.py:
name patterns, type compatibility, key-ness) whose value containment is measured on a sample
through the shared read-only path (query rules, read-only checks, caps, timeout), within the
target's timeout_ms for the whole call. Each candidate carries a ready ON clause and a query
that runs it.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, Field

from backends.engines.base import Engine
from backends.sql import ReadOnlySql, Statement
from backends.targets import default_schema
from gateway.errors import DeadlineExceeded
from gateway.tools import CallContext, ToolInput, ToolOutput, tool
from handlers.query import join_inference as infer
from handlers.query.catalog.access import DiscoveryCatalog
from handlers.query.discovery import CatalogReaders
from handlers.query.join_inference import Candidate
from handlers.query.lookup import require_column, require_table
from handlers.query.profile_sql import containment_sql, table_sql

CONTAINMENT_VALUES = 1000  # distinct child values checked per candidate
MAX_PROBES = 12  # candidates whose containment is measured per call (the strongest first)
MIN_PROBE_MS = 20


class SuggestJoinsIn(ToolInput):
    schema_: str | None = Field(
        None, alias="schema", max_length=256, description="Schema (MySQL: database); omitted: the target's default."
    )
    table_a: str = Field(min_length=1, max_length=256)
    table_b: str | None = Field(
        None,
        max_length=256,
        description="Only joins between table_a and table_b; omitted: table_a with every table of the schema.",
    )
    target_id: str | None = Field(None, max_length=64)
    max_candidates: int = Field(10, ge=1, le=100)
    min_confidence: float = Field(0.3, ge=0, le=1, description="Leave out candidates below this confidence.")


class ReferenceCandidatesIn(ToolInput):
    schema_: str | None = Field(None, alias="schema", max_length=256)
    table: str = Field(min_length=1, max_length=256)
    column: str = Field(min_length=1, max_length=256)
    target_id: str | None = Field(None, max_length=64)
    max_tables: int = Field(5, ge=1, le=100, description="Most referenced tables to return.")


class JoinCandidate(BaseModel):
    from_schema: str
    from_table: str
    from_columns: list[str]
    to_schema: str
    to_table: str
    to_columns: list[str]
    kind: str = Field(description="declared (a foreign key), agent (recorded by llm.relationship_upsert) or inferred.")
    confidence: float = Field(description="0-1; 1.0 only for declared foreign keys.")
    evidence: dict[str, Any] = Field(description="signals that fired, overlap_ratio of sampled values found in the key, types.")
    on: str = Field(description="The join condition, identifiers quoted for the target's engine.")
    example_sql: str = Field(description="A query using the join, ready for run_sql_readonly.")


class JoinsOut(ToolOutput):
    target_id: str
    schema_: str = Field(alias="schema")
    candidates: list[JoinCandidate]
    truncated: bool = Field(description="More candidates than max_candidates, or the time budget cut containment checks short.")
    stats: dict[str, Any]


def render(candidate: Candidate, engine: Engine) -> JoinCandidate:
    child = engine.quote(candidate.from_table)
    same_name = candidate.from_table == candidate.to_table
    parent = engine.quote("parent") if same_name else engine.quote(candidate.to_table)
    on = " AND ".join(
        f"{child}.{engine.quote(c)} = {parent}.{engine.quote(p)}" for c, p in zip(candidate.from_columns, candidate.to_columns)
    )
    parent_from = table_sql(candidate.to_schema, candidate.to_table, engine) + (f" AS {parent}" if same_name else "")
    example = (
        f"SELECT * FROM {table_sql(candidate.from_schema, candidate.from_table, engine)} JOIN {parent_from} ON {on} LIMIT 10"
    )
    return JoinCandidate(
        from_schema=candidate.from_schema, from_table=candidate.from_table, from_columns=candidate.from_columns,
        to_schema=candidate.to_schema, to_table=candidate.to_table, to_columns=candidate.to_columns, kind=candidate.kind,
        confidence=candidate.confidence, evidence=candidate.evidence, on=on, example_sql=example,
    )  # fmt: skip


class JoinTools:
    """suggest_joins and find_reference_candidates: catalog readers for the tables, the shared
    read-only path to measure containment, and the discovery catalog for the joins agents recorded."""

    def __init__(self, readers: CatalogReaders, sql: ReadOnlySql, catalog: DiscoveryCatalog) -> None:
        self.readers = readers
        self.sql = sql
        self.catalog = catalog

    def _measure(self, ctx: CallContext, target: Any, candidates: list[Candidate], tool_name: str, deadline: float) -> bool:
        """Containment of the strongest inferred candidates; False when the budget cut it short."""
        for candidate in sorted(candidates, key=lambda c: -c.base)[:MAX_PROBES]:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms < MIN_PROBE_MS:
                return False
            sql = containment_sql(
                (candidate.from_schema, candidate.from_table, candidate.from_columns[0]),
                (candidate.to_schema, candidate.to_table, candidate.to_columns[0]),
                target.engine,
                sample_values=CONTAINMENT_VALUES,
            )
            try:
                out = self.sql.run(
                    ctx, Statement(sql=sql, target_id=target.target_id, timeout_ms=remaining_ms, tool_name=tool_name)
                )
            except DeadlineExceeded:
                return False
            n, hit = out["rows"][0]
            infer.apply_overlap(candidate, int(n or 0), int(hit or 0))
        return len(candidates) <= MAX_PROBES

    def _deadline(self, ctx: CallContext, target: Any) -> float:
        return time.monotonic() + min(target.timeout_ms / 1000, max(0.0, ctx.remaining_s() - 0.05))

    @staticmethod
    def _rank(
        declared: list[Candidate], recorded: list[Candidate], inferred: list[Candidate], min_confidence: float
    ) -> list[Candidate]:
        seen: set[tuple[Any, ...]] = set()
        ranked = []
        for group in (declared, sorted(recorded + inferred, key=lambda c: (-c.confidence, c.from_table, c.to_table))):
            for c in group:
                if c.key() in seen or (c.kind != "declared" and c.confidence < min_confidence):
                    continue
                seen.add(c.key())
                ranked.append(c)
        return ranked

    @tool("suggest_joins", title="Suggest joins", read_only=True, idempotent=True)
    def suggest_joins(self, args: SuggestJoinsIn, ctx: CallContext) -> JoinsOut:
        """Suggest how table_a joins table_b (or any table of the schema), best first, each with a ready ON clause and the evidence.

        Declared foreign keys come first (confidence 1.0), then relationships recorded by an
        agent, then inferred ones: column names that name the other table's key (customer_id ->
        customers.id, cust_id, singular/plural), compatible types, and the share of sampled
        values found in the key (overlap_ratio). Columns that merely share a type are never
        proposed. Sampling queries obey the query rules and the target's timeout."""
        started = time.monotonic()
        with self.readers.open(args.target_id, "suggest_joins", ctx.caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            require_table(catalog, target.target_id, schema, args.table_a)
            if args.table_b:
                require_table(catalog, target.target_id, schema, args.table_b)
            names = [args.table_a, args.table_b] if args.table_b else None
            tables = target.engine.snapshot(catalog.conn, schema, names)
        a = tables[args.table_a]
        others = [tables[args.table_b]] if args.table_b else [t for t in tables.values() if t["type"] == "table"]
        involved = {args.table_a, *([args.table_b] if args.table_b else [])}
        declared = infer.declared_candidates(schema, tables, {args.table_a})
        if args.table_b:
            declared = [c for c in declared if {c.from_table, c.to_table} <= involved]
        recorded = [
            c for c in self.catalog.recorded_relationships(target.target_id, schema)
            if args.table_a in (c.from_table, c.to_table) and (not args.table_b or {c.from_table, c.to_table} <= involved)
        ]  # fmt: skip
        inferred = infer.inferred_candidates(schema, a, others, target.engine.profiling)
        for other in others:
            if other["name"] != args.table_a:
                inferred += infer.inferred_candidates(schema, other, [a], target.engine.profiling)
        known = {c.key() for c in declared + recorded}
        inferred = infer.strongest_per_column([c for c in inferred if c.key() not in known])
        complete = self._measure(ctx, target, inferred, "suggest_joins", self._deadline(ctx, target))
        ranked = self._rank(declared, recorded, inferred, args.min_confidence)
        return JoinsOut(
            target_id=target.target_id,
            schema=schema,
            candidates=[render(c, target.engine) for c in ranked[: args.max_candidates]],
            truncated=len(ranked) > args.max_candidates or not complete,
            stats={"ms": int((time.monotonic() - started) * 1000), "tables_compared": len(others)},
        )

    @tool("find_reference_candidates", title="Find what a column references", read_only=True, idempotent=True)
    def find_reference_candidates(self, args: ReferenceCandidatesIn, ctx: CallContext) -> JoinsOut:
        """Rank the tables a column probably references (a declared foreign key first), with confidence, evidence and a ready ON clause.

        Same evidence as suggest_joins: name patterns against every table's keys, type
        compatibility, and the share of the column's sampled values found in each key. When no
        name tells, the column's sampled values are checked against every key-like column of a
        compatible type (signal name:none), and those that contain them are ranked by it."""
        started = time.monotonic()
        with self.readers.open(args.target_id, "find_reference_candidates", ctx.caller) as (target, catalog):
            schema = default_schema(target, args.schema_)
            require_table(catalog, target.target_id, schema, args.table)
            tables = target.engine.snapshot(catalog.conn, schema)
        child = tables[args.table]
        require_column(child["columns"], target.target_id, schema, args.table, args.column)
        declared = [
            c for c in infer.declared_candidates(schema, {args.table: child}, {args.table}) if c.from_columns == [args.column]
        ]
        recorded = [
            c for c in self.catalog.recorded_relationships(target.target_id, schema)
            if c.from_table == args.table and c.from_columns == [args.column]
        ]  # fmt: skip
        parents = [t for t in tables.values() if t["type"] == "table"]
        known = {c.key() for c in declared + recorded}
        inferred = infer.inferred_candidates(schema, child, parents, target.engine.profiling, only_column=args.column)
        inferred = infer.strongest_per_column([c for c in inferred if c.key() not in known])
        deadline = self._deadline(ctx, target)
        complete = self._measure(ctx, target, inferred, "find_reference_candidates", deadline)
        # Names that do not tell: the column's values against every key-like column of a compatible type.
        by_values = infer.value_candidates(
            schema, child, args.column, parents, target.engine.profiling, skip=known | {c.key() for c in inferred}
        )
        complete = self._measure(ctx, target, by_values, "find_reference_candidates", deadline) and complete
        inferred += [c for c in by_values if infer.keep_value_candidate(c)]
        ranked = self._rank(declared, recorded, inferred, 0.0)
        return JoinsOut(
            target_id=target.target_id,
            schema=schema,
            candidates=[render(c, target.engine) for c in ranked[: args.max_tables]],
            truncated=len(ranked) > args.max_tables or not complete,
            stats={"ms": int((time.monotonic() - started) * 1000), "tables_compared": len(parents)},
        )
