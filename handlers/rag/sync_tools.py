"""rag.admin.sync and rag.admin.jobs: the sync job runner (backends/retrieval/ingest/jobs.py
JobManager) that RagHandler starts once the index is open and stops in its close."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from backends.retrieval.ingest.jobs import JobManager
from backends.retrieval.ingest.sync import SyncOptions
from gateway.tools import CallContext, ToolInput, ToolOutput, tool

MAX_JOBS_LISTED = 100


class SyncIn(ToolInput):
    source_names: list[str] = Field(
        default_factory=list,
        max_length=100,
        description="Sources to sync, by rag_sources.name; empty syncs every enabled source.",
    )
    full: bool = Field(
        False, description="Re-read every row instead of only rows past the cursor (unchanged chunks still keep their vectors)."
    )


class SyncOut(ToolOutput):
    accepted: bool
    job_id: str = Field(description="The new job, or the job already syncing a requested source when accepted is false.")
    source_names: list[str]
    reason: str = Field("", description="Why the job was not accepted.")


class JobsIn(ToolInput):
    job_id: str | None = Field(None, max_length=64, description="One job; omit to list the most recent jobs.")
    limit: int = Field(10, ge=1, le=MAX_JOBS_LISTED, description="Most jobs listed when job_id is omitted.")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RowError(_Strict):
    key: dict[str, Any] = Field(description="Primary key of the skipped row.")
    reason: str = Field(description="EMPTY_BODY, UNDECODABLE or OVERSIZE.")
    message: str


class SourceProgressOut(_Strict):
    source: str
    phase: str = Field(description="queued, connecting, counting, reading, key_scan, done or failed.")
    rows_total: int | None = Field(description="Rows past the cursor when the sync began (for the ETA).")
    rows_read: int = Field(description="Rows fetched from the source (reading runs ahead of embedding).")
    rows_done: int = Field(description="Rows committed to the index or skipped: what rows_per_s and eta_s count.")
    rows_skipped: int
    docs_written: int
    docs_deleted: int
    chunks_written: int
    chunks_embedded: int = Field(description="Chunks whose text changed and were embedded.")
    chunks_reused: int = Field(description="Chunks whose text was unchanged: their vectors were kept.")
    embed_s: float = Field(description="Wall time spent in the embedder.")
    embed_cpu_s: float
    elapsed_s: float
    rows_per_s: float
    chunks_per_s: float
    eta_s: float | None
    errors: list[RowError] = Field(description="Skipped rows with their keys (the first 100).")
    errors_truncated: bool
    error: dict[str, Any] | None = Field(description="{code, message} when this source's sync failed.")


class JobStatus(_Strict):
    job_id: str
    state: str = Field(description="queued, running, ok, failed, or interrupted (its process died; a new sync resumes).")
    source_names: list[str]
    created_at: float
    started_at: float | None
    finished_at: float | None
    sources: list[SourceProgressOut]
    error: dict[str, Any] | None


class JobsOut(ToolOutput):
    jobs: list[JobStatus]
    truncated: bool = Field(description="More jobs exist than limit allowed.")


class SyncTools:
    def __init__(self, jobs: Callable[[], JobManager]) -> None:
        self._jobs = jobs  # the running job manager (UNAVAILABLE while ingestion is not running)

    @tool("rag.admin.sync", title="Sync sources into the index", read_only=False, idempotent=False, open_world=True)
    def admin_sync(self, args: SyncIn, ctx: CallContext) -> SyncOut:
        """Start syncing sources (all enabled ones when source_names is empty) into the index, in the
        background: answers at once with {accepted, job_id}. Only rows past each source's cursor are
        read, only chunks whose text changed are re-embedded, and rows deleted at the source leave
        the index. A source already syncing is not synced twice: accepted is false and job_id names
        the running job. Follow progress with rag.admin.jobs {job_id}."""
        result = self._jobs().start(args.source_names or None, options=SyncOptions(full=args.full))
        return SyncOut(accepted=result.accepted, job_id=result.job_id, source_names=result.source_names, reason=result.reason)

    @tool("rag.admin.jobs", title="Sync job progress", read_only=True)
    def admin_jobs(self, args: JobsIn, ctx: CallContext) -> JobsOut:
        """Progress of sync jobs: per source the phase, rows read of the total, documents and chunks
        written, chunks embedded vs. reused, rows skipped with their keys and reasons, rate and ETA,
        and the error of a failed job. Give job_id for one job, or none for the most recent."""
        manager = self._jobs()
        if args.job_id:
            return JobsOut(jobs=[JobStatus.model_validate(manager.status(args.job_id))], truncated=False)
        jobs = manager.recent(args.limit + 1)
        return JobsOut(jobs=[JobStatus.model_validate(j) for j in jobs[: args.limit]], truncated=len(jobs) > args.limit)
