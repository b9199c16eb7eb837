"""rag.admin.sync / rag.admin.jobs through the tool base's execute_tool (the path the server
calls), over a SQLite source file: background jobs, one sync per source across processes,
append-only (primary key cursor) change detection, periodic syncs, and errors as results.
"""

from __future__ import annotations

import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from backends.retrieval.embeddings import index_embedding_config, make_embedder
from backends.retrieval.ingest.foreground import run_sync
from backends.retrieval.ingest.jobs import JobManager
from backends.retrieval.source_lock import SourceLock
from backends.retrieval.storage.sqlite.index import RagIndex
from gateway.assembly import open_config
from gateway.services import Services
from gateway.tools import ToolHandler
from handlers.rag.sync_tools import SyncTools

DOC_MAP = {"doc_id": {"format": "notes:{id}"}, "title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}}


class IngestHost(ToolHandler):
    """The smallest handler serving the sync tools: a job manager over an index and its embedder,
    as RagHandler starts one."""

    endpoint = "rag"
    tool_groups = (SyncTools,)

    def __init__(self, services: Services, index: Any, embedder: Any) -> None:
        super().__init__(services)
        self.index, self.embedder = index, embedder
        self.jobs = JobManager(
            data_dir=services.data_dir,
            index=index,
            embedder=embedder,
            runtime=lambda: self.services.runtime,
            make_embedder=make_embedder,
        )

    def make_groups(self) -> list[object]:
        return [SyncTools(lambda: self.jobs)]


def make_corpus(path: Path, rows: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        conn.executemany(
            "INSERT INTO notes VALUES (?, ?, ?)", [(i, f"note {i}", f"body of note {i} about herons") for i in range(1, rows + 1)]
        )


@pytest.fixture
def host(tmp_path: Path):
    yield from make_host(
        tmp_path, 200, lambda embedder: RagIndex.open(tmp_path / "rag.db", embedding_model_id=embedder.model_id, dim=embedder.dim)
    )


def make_host(tmp_path: Path, rows: int, open_index: Any):
    corpus = tmp_path / "corpus.db"
    make_corpus(corpus, rows)
    store = open_config(tmp_path)
    conn = store.conn()
    conn.execute("INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('files', 'sqlite', ?)", (str(corpus),))
    conn.execute(
        "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s) VALUES (1, 'notes', 'files', 'notes', 'id', ?, 0)",
        (json.dumps(DOC_MAP),),
    )
    store.set_variable("rag-embedding_provider", "hash")
    for module in ("MCP VARIABLES", "MCP PROFILES", "RAG SOURCES"):
        store.load_to_runtime(module)
    runtime = store.read_runtime()
    embedder = make_embedder(index_embedding_config(runtime))
    services = Services(data_dir=tmp_path, store=store, runtime=runtime, stats=None, metrics=None)  # type: ignore[arg-type]
    handler = IngestHost(services, open_index(embedder), embedder)
    yield handler, corpus, store
    handler.jobs.close()
    handler.index.close()


def call(handler: IngestHost, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    spec = handler.find_tool(name)
    ctx = handler.context(spec, handler.services.runtime)
    result = anyio.run(handler.execute_tool, spec, arguments, ctx)
    return result["isError"], result["structuredContent"]


def wait_job(handler: IngestHost, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        is_error, out = call(handler, "rag.admin.jobs", {"job_id": job_id})
        assert not is_error, out
        (job,) = out["jobs"]
        if job["state"] in ("ok", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish")


def test_sync_tool_answers_at_once_and_jobs_tool_reports_progress(host) -> None:
    handler, corpus, _ = host
    is_error, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
    assert not is_error and out["accepted"] is True and out["job_id"].startswith("sync-")
    job = wait_job(handler, out["job_id"])
    assert job["state"] == "ok", job
    (progress,) = job["sources"]
    assert progress["phase"] == "done" and progress["rows_total"] == progress["rows_read"] == 200
    assert progress["docs_written"] == 200 and progress["chunks_embedded"] == 200 and progress["rows_per_s"] > 0

    # Append-only source: the primary key is the cursor, so only new rows are read;
    # the key scan still sees deletions.
    with sqlite3.connect(corpus) as conn:
        conn.executemany("INSERT INTO notes VALUES (?, ?, ?)", [(i, f"note {i}", "late arrival") for i in range(201, 206)])
        conn.execute("DELETE FROM notes WHERE id IN (10, 11)")
    _, out = call(handler, "rag.admin.sync", {})
    job = wait_job(handler, out["job_id"])
    (progress,) = job["sources"]
    assert (progress["rows_read"], progress["docs_written"], progress["docs_deleted"]) == (5, 5, 2)
    assert handler.index.conn.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0] == 203

    # The listing shows both jobs, newest first.
    _, listing = call(handler, "rag.admin.jobs", {"limit": 1})
    assert listing["truncated"] is True and listing["jobs"][0]["job_id"] == out["job_id"]


def test_a_source_syncs_once_at_a_time_across_processes(host) -> None:
    handler, _, _ = host
    other = SourceLock(handler.services.data_dir, 1)  # what another worker or the CLI holds while syncing
    assert other.acquire("sync-elsewhere")
    try:
        is_error, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
        assert not is_error and out["accepted"] is False and out["job_id"] == "sync-elsewhere"
        assert "already running" in out["reason"]
        # The terminal path is refused the same way (exit code 2), without touching the index.
        assert run_sync(open_config(handler.services.data_dir), "notes", progress=False, out=io.StringIO()) == 2
    finally:
        other.release()
    _, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
    assert out["accepted"] is True
    assert wait_job(handler, out["job_id"])["state"] == "ok"


def test_errors_are_structured_results(host) -> None:
    handler, _, _ = host
    is_error, out = call(handler, "rag.admin.sync", {"source_names": ["nope"]})
    assert is_error and out["error"]["code"] == "NOT_FOUND"
    is_error, out = call(handler, "rag.admin.jobs", {"job_id": "sync-unknown"})
    assert is_error and out["error"]["code"] == "NOT_FOUND"
    is_error, out = call(handler, "rag.admin.sync", {"source_names": "notes"})
    assert is_error and out["error"]["code"] == "INVALID_ARGUMENT"


def test_a_missing_source_file_fails_the_job_unavailable(host) -> None:
    handler, corpus, _ = host
    corpus.unlink()
    _, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
    job = wait_job(handler, out["job_id"])
    assert job["state"] == "failed" and job["error"]["code"] == "UNAVAILABLE"


def test_periodic_sync_runs_when_due(host) -> None:
    handler, _, store = host
    store.conn().execute("UPDATE rag_sources SET sync_interval_s = 3600")
    store.load_to_runtime("RAG SOURCES")
    handler.services.runtime = store.read_runtime()
    manager = handler.jobs
    (job_id,) = manager.run_due()  # never synced: due now
    assert wait_job(handler, job_id)["state"] == "ok"
    assert manager.run_due() == []  # synced a moment ago: not due for an hour


def test_a_finished_sync_has_caught_the_ann_index_up(host) -> None:
    """The first search after a sync answers without replaying the sync's change log first."""
    handler, _, _ = host
    vectors = handler.index.vectors
    vectors.refresh(handler.index.conn)  # loaded, as RagHandler does at start
    _, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
    assert wait_job(handler, out["job_id"])["state"] == "ok"
    head = handler.index.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'rag_vec_changes'").fetchall()[0][0]
    assert head > 0 and vectors._seq == head and len(vectors._index) == 200


def test_a_sync_that_loses_its_postgresql_lock_stops_and_a_rerun_is_exact(tmp_path: Path, pgvector_db: str) -> None:
    """A PostgreSQL restart ends the lock's session while the pooled writers reconnect: the job must
    stop at its next batch (another instance may own the source by then), not write on unlocked."""
    from backends.retrieval.storage.postgresql.index import PgRagIndex
    from backends.retrieval.storage.postgresql.ingest import SYNC_LOCK_PREFIX

    rows = 5_000  # ten batches: the lock is gone long before the last one
    fixture = make_host(tmp_path, rows, lambda e: PgRagIndex.open(pgvector_db, embedding_model_id=e.model_id, dim=e.dim))
    handler, _, _ = next(fixture)
    try:
        _, out = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
        assert out["accepted"] is True
        with psycopg.connect(pgvector_db, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (SYNC_LOCK_PREFIX + out["job_id"],),
            ).fetchall()
        assert ended == [(True,)]
        job = wait_job(handler, out["job_id"])
        assert job["state"] == "failed" and job["error"]["code"] == "UNAVAILABLE", job
        assert "lock of this source was lost" in job["error"]["message"]
        written = handler.index.totals()["docs"]
        assert written < rows

        _, again = call(handler, "rag.admin.sync", {"source_names": ["notes"]})
        assert wait_job(handler, again["job_id"])["state"] == "ok"
        assert handler.index.totals()["docs"] == rows
        with psycopg.connect(pgvector_db) as conn:
            assert conn.execute("SELECT count(*), count(DISTINCT doc_id) FROM rag_chunks").fetchone() == (rows, rows)
    finally:
        next(fixture, None)  # stop ingestion, close the index
