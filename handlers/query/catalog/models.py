"""Inputs and outputs of the discovery.* and catalog.* tools (catalog/tools.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from gateway.tools import ToolInput, ToolOutput

INT64_MAX = 2**63 - 1  # ids are SQLite integers: anything larger is refused as INVALID_ARGUMENT


class RunStaticIn(ToolInput):
    target_id: str | None = Field(None, max_length=64)
    schema_filter: str = Field(
        "",
        max_length=256,
        description="A schema name, or a pattern with * or %; empty: every schema (MySQL: the target's database).",
    )
    notes: str = Field("", max_length=4000, description="Stored with the run (why it ran, what changed).")
    wait_s: float = Field(
        10, ge=0, le=60, description="Wait up to this long for the run to finish; it continues in the background after."
    )


class RunStatus(BaseModel):
    run_id: int
    target_id: str
    state: str = Field(description="queued, running, ok, failed or interrupted (its process died).")
    schema_filter: str
    notes: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    progress: dict[str, Any] = Field(description="phase, schemas_done/schemas_total, tables_done/tables_total.")
    counts: dict[str, Any] = Field(description="schemas, tables, views, columns, foreign_keys, indexes, view_dependencies.")
    error: dict[str, Any] | None


class RunStatusIn(ToolInput):
    run_id: int | None = Field(
        None, ge=1, le=INT64_MAX, description="One run; omitted: the most recent runs (of target_id, if given)."
    )
    target_id: str | None = Field(None, max_length=64)
    limit: int = Field(10, ge=1, le=100)


class RunsOut(ToolOutput):
    runs: list[RunStatus]


class CatalogObject(BaseModel):
    object_id: int
    target_id: str
    run_id: int
    object_type: str
    name: str = Field(description="schema[.table[.column]]")
    schema_name: str
    table_name: str
    column_name: str
    comment: str
    notes: str
    tags: list[str]
    rows_estimate: int | None
    definition: dict[str, Any]
    source: str
    updated_at: float
    score: float | None = None


class GetIn(ToolInput):
    object_id: int | None = Field(None, ge=1, le=INT64_MAX)
    target_id: str | None = Field(None, max_length=64)
    schema_: str | None = Field(None, alias="schema", max_length=256)
    name: str | None = Field(None, max_length=520, description="table, or table.column, within schema.")
    run_id: int | None = Field(None, ge=0, le=INT64_MAX, description="Default: the newest run that has the object.")


class GetOut(ToolOutput):
    object: CatalogObject
    columns: list[CatalogObject] = Field(default_factory=list)
    relationships: list[dict[str, Any]] = Field(default_factory=list)
    summaries: list[dict[str, Any]] = Field(default_factory=list, description="What agents wrote about this object, any run.")


class ListIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    run_id: int | None = Field(None, ge=0, le=INT64_MAX, description="Default: the target's newest finished run.")
    object_type: str | None = Field(None, max_length=32)
    schema_name: str | None = Field(None, max_length=256)
    page_token: str | None = Field(None, max_length=4096)
    page_size: int = Field(100, ge=1, le=1000)
    summarize: bool | None = Field(None, description="null: summarize when over mcp-query_summary_threshold; false: always list.")


class ListOut(ToolOutput):
    run_id: int | None
    objects: list[CatalogObject]
    next_page_token: str | None
    truncated: bool
    summarized: bool
    summary: dict[str, Any] | None = None
    suggested_calls: list[dict[str, Any]] = Field(default_factory=list)


class SearchIn(ToolInput):
    query: str = Field(min_length=1, max_length=512, description="Words to find in names, comments, notes and tags.")
    target_id: str | None = Field(None, max_length=64)
    run_id: int | None = Field(None, ge=0, le=INT64_MAX)
    object_type: str | None = Field(None, max_length=32)
    schema_name: str | None = Field(None, max_length=256)
    limit: int = Field(20, ge=1, le=200)


class SearchOut(ToolOutput):
    results: list[CatalogObject]


class ObjectIn(BaseModel):
    object_id: int | None = Field(
        None, ge=1, le=INT64_MAX, description="Update this object; else identify it by the fields below."
    )
    target_id: str | None = Field(None, max_length=64)
    run_id: int = Field(0, ge=0, le=INT64_MAX, description="0: outside any discovery run.")
    object_type: str = Field("table", max_length=32)
    schema_name: str = Field("", max_length=256)
    table_name: str = Field("", max_length=256)
    column_name: str = Field("", max_length=256)
    comment: str | None = Field(None, max_length=4000)
    definition: dict[str, Any] | None = None


class UpsertIn(ToolInput):
    object: ObjectIn
    notes: str | None = Field(None, max_length=8000)
    tags: list[str] = Field(default_factory=list, max_length=32)


class UpsertOut(ToolOutput):
    object: CatalogObject


class DeleteIn(ToolInput):
    object_id: int = Field(ge=1, le=INT64_MAX)


class CountOut(ToolOutput):
    deleted: dict[str, int]


class ClearIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    run_id: int | None = Field(
        None, ge=0, le=INT64_MAX, description="Only this run; omitted: every run of the target (agent memory stays)."
    )


class RelationshipsIn(ToolInput):
    target_id: str = Field(min_length=1, max_length=64)
    schema_: str | None = Field(None, alias="schema", max_length=256)
    table: str | None = Field(None, max_length=256)
    include_inferred: bool = Field(
        False, description="Add joins inferred from names, types and keys in the catalog (no data read)."
    )
    min_confidence: float = Field(0.0, ge=0, le=1)
    run_id: int | None = Field(None, ge=0, le=INT64_MAX)


class RelationshipsOut(ToolOutput):
    run_id: int | None
    relationships: list[dict[str, Any]]
    notes: list[str] = Field(default_factory=list)
