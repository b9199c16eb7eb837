"""Sync jobs: accepted at once, run in the background, one sync per source at a time.

A job syncs one or more sources in turn. `start` takes each source's lock before it answers,
so a second request for a source that is syncing is refused right away (accepted=false,
with the running job's id) instead of queueing a duplicate. The lock (index.source_lock) is an `fcntl.flock` on
<data_dir>/locks/rag-sync-<source_id>.lock for rag.db, a PostgreSQL advisory lock for an
index there (every instance of a cluster): it excludes other workers, instances, the CLI and
other jobs of this process alike, and is released when its holder dies (kill -9), so a
crashed sync never leaves a stale lock behind.

Job progress lives in memory (for this process) and in the index's rag_sync_jobs, updated in
the same transaction as each batch, so any worker, instance or the CLI can report any job. A row
still queued or running whose job died reads as `interrupted` (backends/retrieval/job_liveness.py: the
source locks on PostgreSQL, where the job's pid means nothing to other hosts; the pid on rag.db).
"""

from __future__ import annotations

import calendar
import json
import logging
import os
import secrets
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from backends.retrieval.ingest.progress import SourceProgress
from backends.retrieval.ingest.sources_config import SourceSpec, runtime_sources
from backends.retrieval.ingest.sync import SourceSync, SyncOptions
from backends.retrieval.job_liveness import live_job_ids, this_member
from backends.retrieval.source_lock import SourceLock
from backends.retrieval.storage.postgresql.index import PgRagIndex
from backends.retrieval.storage.sqlite.index import RagIndex
from backends.targets import Target, targets_from_runtime
from gateway.errors import GatewayError, InvalidArgument, NotFound, Unavailable
from gateway.pids import pid_alive
from gateway.runtime import Runtime

log = logging.getLogger("mcp_gateway.rag.ingest")
JOBS_KEPT_IN_MEMORY = 100


@dataclass
class Job:
    job_id: str
    sources: list[SourceSpec]
    options: SyncOptions
    locks: dict[str, SourceLock]
    state: str = "queued"  # queued|running|ok|failed
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    progress: dict[str, SourceProgress] = field(default_factory=dict)
    error: dict[str, Any] | None = None

    def status(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "state": self.state,
            "source_names": [s.name for s in self.sources],
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "sources": [self.progress[s.name].snapshot() for s in self.sources],
            "error": self.error,
        }


@dataclass
class StartResult:
    accepted: bool
    job_id: str
    source_names: list[str]
    reason: str = ""


class JobManager:
    """One per process. `runtime` returns the current snapshot (sources and targets come from it)."""

    def __init__(
        self,
        *,
        data_dir: Path,
        index: RagIndex | PgRagIndex,
        embedder: Any,
        runtime: Callable[[], Runtime],
        make_embedder: Callable[[dict[str, Any]], Any] | None = None,
        member: str | None = None,
    ) -> None:
        self.data_dir, self.index, self.embedder, self.runtime = Path(data_dir), index, embedder, runtime
        # Which instance runs this process's jobs (rag_sync_jobs.member_id): its pid check is ours alone.
        self.member = member if member is not None else this_member(runtime().variables)
        self.make_embedder = make_embedder
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.stop = threading.Event()
        # One runner and one writer thread for the life of the manager: jobs run one after the
        # other (the embedder is the bottleneck; two at once would only share the cores), and the
        # index's per-thread connections stay two instead of growing with every job.
        self._runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-sync-job")
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-sync-write")
        self._embedders: dict[str, Any] = {}
        self._scheduler: threading.Thread | None = None
        _MANAGERS.add(self)

    # -- starting ----------------------------------------------------------------------------
    def sources(self) -> dict[str, SourceSpec]:
        return runtime_sources(self.runtime().table("runtime_rag_sources"))

    def start(
        self,
        source_names: list[str] | None = None,
        *,
        options: SyncOptions = SyncOptions(),
        on_progress: Callable[[SourceProgress], None] | None = None,
    ) -> StartResult:
        """Lock the sources and queue the job; never waits for a running sync."""
        known = self.sources()
        if source_names:
            missing = [n for n in source_names if n not in known]
            if missing:
                raise NotFound(
                    f"no rag source named {', '.join(map(repr, missing))}; known: {', '.join(sorted(known)) or 'none'}"
                )
            disabled = [n for n in source_names if not known[n].enabled]
            if disabled:
                raise InvalidArgument(f"rag source(s) {', '.join(map(repr, disabled))} disabled (enabled=0)")
            chosen = [known[n] for n in dict.fromkeys(source_names)]
        else:
            chosen = [s for s in known.values() if s.enabled]
        if not chosen:
            raise NotFound("no enabled rag source to sync (rag_sources is empty or every source is disabled)")
        job_id = time.strftime("sync-%Y%m%dT%H%M%SZ-", time.gmtime()) + secrets.token_hex(3)
        locks: dict[str, SourceLock] = {}
        for spec in chosen:
            lock = self.index.source_lock(spec.source_id)
            if not lock.acquire(job_id):
                for taken in locks.values():
                    taken.release()
                running = lock.holder()
                return StartResult(
                    False,
                    running,
                    [s.name for s in chosen],
                    f"a sync of source {spec.name!r} is already running (job {running or 'unknown'})",
                )
            locks[spec.name] = lock
        job = Job(job_id, chosen, options, locks, progress={s.name: SourceProgress(s.name) for s in chosen})
        with self._lock:
            self.jobs[job_id] = job
            for old in sorted(self.jobs.values(), key=lambda j: j.created_at)[: max(0, len(self.jobs) - JOBS_KEPT_IN_MEMORY)]:
                if old.state in ("ok", "failed"):
                    self.jobs.pop(old.job_id, None)
        self._record(job)
        self._runner.submit(self._run, job, on_progress)
        return StartResult(True, job_id, [s.name for s in chosen])

    def wait(self, job_id: str, timeout_s: float | None = None) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.status(job_id)
            if status["state"] in ("ok", "failed", "interrupted"):
                return status
            if deadline is not None and time.monotonic() > deadline:
                return status
            time.sleep(0.05)

    # -- running -----------------------------------------------------------------------------
    def _run(self, job: Job, on_progress: Callable[[SourceProgress], None] | None) -> None:
        job.state, job.started_at = "running", time.time()
        self._record(job)
        try:
            for spec in job.sources:
                try:
                    # Recorded now, not with the first batch: other processes see which source
                    # the job is on even while it connects, counts or waits on the source.
                    job.progress[spec.name].start()
                    self._record(job)
                    self._sync_one(job, spec, on_progress)
                except GatewayError as exc:
                    job.error = {
                        "code": exc.code,
                        "message": f"source {spec.name!r}: {exc.message}" if spec.name not in exc.message else exc.message,
                    }
                    job.progress[spec.name].error = job.progress[spec.name].error or {"code": exc.code, "message": exc.message}
                    job.progress[spec.name].finish("failed")
                except Exception:  # a bug: the job fails with a safe message, the log has the trace
                    log.exception("rag sync of source %s failed", spec.name)
                    job.error = {
                        "code": "INTERNAL",
                        "message": f"source {spec.name!r}: sync failed unexpectedly; see the gateway log",
                    }
                    job.progress[spec.name].error = job.error
                    job.progress[spec.name].finish("failed")
                finally:
                    if len(job.locks) > 1:  # the last one is kept until the outcome is recorded
                        job.locks.pop(spec.name).release()
        finally:
            job.state = "failed" if job.error else "ok"
            job.finished_at = time.time()
            try:
                self._record(job)
            finally:
                # Only now: a job whose row says running while no lock is held reads as interrupted.
                for lock in job.locks.values():
                    lock.release()
                job.locks.clear()

    def _sync_one(self, job: Job, spec: SourceSpec, on_progress: Callable[[SourceProgress], None] | None) -> None:
        progress = job.progress[spec.name]
        target = self._target(spec)
        embedder = self._embedder(spec)

        def record_job(conn: apsw.Connection) -> None:
            # Inside each batch's transaction: a batch written after the source's lock was lost
            # (another instance may hold it by now) rolls back instead of racing that sync.
            job.locks[spec.name].confirm()
            self._record(job, conn)

        phases = [progress.phase]

        def progressed(p: SourceProgress) -> None:
            # A new phase is recorded at once: other processes (a search's `index` note, the demo
            # synced by the server's own thread) learn the row count when counting ends, not
            # with the first batch, which may be a long embedding away.
            if p.phase != phases[-1]:
                phases.append(p.phase)
                self._record(job)
            if on_progress is not None:
                on_progress(p)

        SourceSync(
            spec,
            target,
            self.index,
            embedder,
            progress,
            options=job.options,
            writer=self._writer,
            in_transaction=record_job,
            on_progress=progressed,
            stop=self.stop,
            scratch_dir=self.data_dir,
        ).run()
        self.index.after_sync()

    def _target(self, spec: SourceSpec) -> Target:
        targets, skipped = targets_from_runtime(self.runtime())
        if spec.target_id in targets:
            return targets[spec.target_id]
        if spec.target_id in skipped:
            raise Unavailable(f"source {spec.name!r}: target {spec.target_id!r} is not serving ({skipped[spec.target_id]})")
        raise NotFound(f"source {spec.name!r}: no target {spec.target_id!r} in MCP PROFILES")

    def _embedder(self, spec: SourceSpec) -> Any:
        """The index's embedder, unless the source's embedding_json names a provider (same model only)."""
        if not spec.embedding.get("provider") or self.make_embedder is None:
            return self.embedder
        key = json.dumps(spec.embedding, sort_keys=True)
        if key not in self._embedders:
            self._embedders[key] = self.make_embedder(spec.embedding)
        embedder = self._embedders[key]
        if (embedder.model_id, embedder.dim) != (self.index.embedding_model_id, self.index.dim):
            raise InvalidArgument(
                f"source {spec.name!r}: embedding_json gives model {embedder.model_id!r} ({embedder.dim} dims) but the index "
                f"holds {self.index.embedding_model_id!r} ({self.index.dim} dims); one index has one model"
            )
        return embedder

    # -- status ------------------------------------------------------------------------------
    def _record(self, job: Job, conn: apsw.Connection | None = None) -> None:
        status = job.status()
        values = (
            job.job_id,
            json.dumps(status["source_names"]),
            job.state,
            os.getpid(),
            self.member,
            job.created_at,
            job.started_at,
            job.finished_at,
            json.dumps(status["sources"], default=str),
            json.dumps(job.error),
        )
        sql = (
            "INSERT INTO rag_sync_jobs (job_id, source_names, state, pid, member_id, created_at, started_at, finished_at,"
            " progress_json, error_json) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (job_id) DO UPDATE SET state = excluded.state, started_at = excluded.started_at,"
            " finished_at = excluded.finished_at, progress_json = excluded.progress_json, error_json = excluded.error_json"
        )
        if conn is not None:
            conn.execute(sql, values)
            return
        self.index.run(lambda db: db.execute(sql, values))

    def status(self, job_id: str) -> dict[str, Any]:
        job = self.jobs.get(job_id)
        if job is not None:
            return job.status()
        rows = self.index.query("SELECT * FROM rag_sync_jobs WHERE job_id = ?", (job_id,))
        if not rows:
            raise NotFound(f"no sync job {job_id!r}")
        return self._statuses(rows)[0]

    def recent(self, limit: int) -> list[dict[str, Any]]:
        rows = self.index.query("SELECT * FROM rag_sync_jobs ORDER BY created_at DESC LIMIT ?", (limit,))
        return self._statuses(rows)

    def _statuses(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """This process's jobs from memory; the others from their rows, unfinished ones checked for life."""
        others = [r for r in rows if r["job_id"] not in self.jobs]
        live = live_job_ids([r for r in others if r["state"] in ("queued", "running")], self.index, self.member)
        return [
            self.jobs[r["job_id"]].status() if r["job_id"] in self.jobs else status_from_row(r, alive=r["job_id"] in live)
            for r in rows
        ]

    # -- periodic syncs ----------------------------------------------------------------------
    def start_scheduler(self, *, tick_s: float = 5.0) -> None:
        """Sync each enabled source with sync_interval_s > 0 once its interval has passed."""
        if self._scheduler is None:
            self._scheduler = threading.Thread(target=self._schedule, args=(tick_s,), name="rag-sync-scheduler", daemon=True)
            self._scheduler.start()

    def _schedule(self, tick_s: float) -> None:
        while not self.stop.wait(tick_s):
            try:
                self.run_due()
            except Exception:  # keep scheduling: one bad tick must not end periodic syncs
                log.exception("rag sync scheduler tick failed")

    def run_due(self) -> list[str]:
        """Start a job for every source whose periodic sync is due; returns the job ids."""
        last_runs = {
            r["source_id"]: r["last_run_at"] for r in self.index.query("SELECT source_id, last_run_at FROM rag_sync_state")
        }
        started = []
        for spec in self.sources().values():
            if not spec.enabled or spec.sync_interval_s <= 0:
                continue
            last = last_runs.get(spec.source_id)
            if last and time.time() - _epoch(last) < spec.sync_interval_s:
                continue
            result = self.start([spec.name])
            if result.accepted:
                started.append(result.job_id)
        return started

    def close(self) -> None:
        """Stop between batches (the cursor is committed), drop queued jobs, release their locks."""
        self.stop.set()
        self._runner.shutdown(wait=True, cancel_futures=True)
        self._writer.shutdown(wait=True)
        for job in list(self.jobs.values()):
            if job.state == "queued":
                job.state, job.finished_at = "failed", time.time()
                job.error = {"code": "UNAVAILABLE", "message": "the gateway shut down before this job started"}
                try:
                    self._record(job)
                finally:
                    for lock in job.locks.values():
                        lock.release()


# Managers a process stops when its interpreter exits (a `serve` that got SIGTERM while the demo
# corpus or a `rag sync` builds in a thread): their jobs stop at the next batch, before
# concurrent.futures joins its threads (which would wait for the whole sync, then fail it with
# "cannot schedule new futures after interpreter shutdown"). The cursor is committed, so the
# next start resumes. threading's exit hooks run last-registered first: this one runs first.
_MANAGERS: weakref.WeakSet[JobManager] = weakref.WeakSet()
EXIT_WAIT_S = 2.5  # `serve` exits at most 3.5 s after it stopped serving (gateway/cli.py)


def _stop_at_exit() -> None:
    managers = list(_MANAGERS)
    for manager in managers:
        manager.stop.set()
    deadline = time.monotonic() + EXIT_WAIT_S
    while time.monotonic() < deadline and any(
        job.state == "running" for manager in managers for job in list(manager.jobs.values())
    ):
        time.sleep(0.05)


threading._register_atexit(_stop_at_exit)  # type: ignore[attr-defined]


def _epoch(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


def status_from_row(row: dict[str, Any], *, alive: bool | None = None) -> dict[str, Any]:
    """A job's status from its row; `alive` (job_liveness) says whether a queued or running job
    still runs (None: its pid, which only rag.db's single host may rely on)."""
    state = row["state"]
    if alive is None:
        alive = pid_alive(int(row["pid"] or 0))
    if state in ("queued", "running") and not alive:
        state = "interrupted"  # its process or instance died (crash, kill -9): a new sync resumes from the cursor
    return {
        "job_id": row["job_id"],
        "state": state,
        "source_names": json.loads(row["source_names"]),
        "created_at": row["created_at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "sources": json.loads(row["progress_json"] or "[]"),
        "error": json.loads(row["error_json"] or "null"),
    }
    return True
