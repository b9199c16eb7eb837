"""LOAD RAG SOURCES and what is already indexed (backends/retrieval/ingest/reconcile.py), through the
real RagHandler and its runtime-change hook (the one the server calls in every worker): a
disabled source leaves the search results with the LOAD and comes back when enabled; a removed
source's documents, chunks, FTS rows and vectors are deleted, and the other source is untouched."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from backends.retrieval.ingest import reconcile
from gateway import sqlite
from gateway.assembly import open_config
from gateway.services import Services
from handlers.rag import RagHandler

DOC_MAP = {"doc_id": {"format": "{t}:{id}"}, "title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}}


def make_corpus(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        for table, animal in (("herons", "heron"), ("otters", "otter")):
            conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, t TEXT, title TEXT, body TEXT)")
            conn.executemany(
                f"INSERT INTO {table} VALUES (?, ?, ?, ?)",
                [(i, table, f"{animal} {i}", f"notes about the {animal} and the river, part {i}") for i in range(1, 121)],
            )


@pytest.fixture
def rag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(reconcile, "PURGE_BATCH", 50)  # several batches for 120 chunks
    corpus = tmp_path / "corpus.db"
    make_corpus(corpus)
    store = open_config(tmp_path)
    conn = store.conn()
    conn.execute("INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('files', 'sqlite', ?)", (str(corpus),))
    for source_id, table in ((1, "herons"), (2, "otters")):
        conn.execute(
            "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s)"
            " VALUES (?, ?, 'files', ?, 'id', ?, 0)",
            (source_id, table, table, json.dumps(DOC_MAP)),
        )
    store.set_variable("rag-embedding_provider", "hash")
    for module in ("MCP VARIABLES", "MCP PROFILES", "RAG SOURCES"):
        store.load_to_runtime(module)
    services = Services(data_dir=tmp_path, store=store, runtime=store.read_runtime(), stats=None, metrics=None)  # type: ignore[arg-type]
    handler = RagHandler(services)
    anyio.run(handler.init)
    ok, out = call(handler, "rag.admin.sync", {})
    assert ok, out
    wait_until(lambda: call(handler, "rag.admin.jobs", {"job_id": out["job_id"]})[1]["jobs"][0]["state"] == "ok")
    yield handler, store
    anyio.run(handler.close)


def call(handler: RagHandler, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    spec = handler.find_tool(name)
    ctx = handler.context(spec, handler.services.runtime)
    result = anyio.run(handler.execute_tool, spec, arguments, ctx)
    return not result["isError"], result["structuredContent"]


def wait_until(condition, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def load_sources(handler: RagHandler, store, statement: str) -> None:
    """An admin's edit, then LOAD RAG SOURCES TO RUNTIME, then the server's runtime hook."""
    store.conn().execute(statement)
    store.load_to_runtime("RAG SOURCES")
    old, new = handler.services.runtime, store.read_runtime()
    handler.services.runtime = new
    handler.on_runtime_change(old, new)


def sources_found(handler: RagHandler, tool: str = "rag.search_fts") -> set[str]:
    """The sources of what a search for each animal finds (each query matches one source)."""
    found = set()
    for animal in ("heron", "otter"):
        ok, out = call(handler, tool, {"query": f"the {animal}", "k": 5})
        assert ok, out
        found |= {hit["source_name"] for hit in out["results"] if animal in hit["chunk_id"] or tool != "rag.search_fts"}
    return found


def counts(handler: RagHandler, source_id: int) -> dict[str, int]:
    conn = handler.index.conn
    return {
        "sources": sqlite.scalar(conn, "SELECT count(*) FROM rag_sources WHERE source_id = ?", (source_id,)),
        "docs": sqlite.scalar(conn, "SELECT count(*) FROM rag_documents WHERE source_id = ?", (source_id,)),
        "chunks": sqlite.scalar(conn, "SELECT count(*) FROM rag_chunks WHERE source_id = ?", (source_id,)),
        "fts": sqlite.scalar(conn, "SELECT count(*) FROM rag_fts_chunks WHERE rag_fts_chunks MATCH 'otter'"),
        "vectors": sqlite.scalar(conn, "SELECT count(*) FROM rag_vec_chunks"),
    }


def test_disabling_hides_a_source_at_once_and_enabling_brings_it_back(rag) -> None:
    handler, store = rag
    assert sources_found(handler) == {"herons", "otters"}
    load_sources(handler, store, "UPDATE rag_sources SET enabled = 0 WHERE name = 'otters'")
    assert sources_found(handler) == {"herons"}
    assert sources_found(handler, "rag.search_hybrid") == {"herons"}
    assert counts(handler, 2)["chunks"] == 120  # hidden, not deleted
    load_sources(handler, store, "UPDATE rag_sources SET enabled = 1 WHERE name = 'otters'")
    assert sources_found(handler) == {"herons", "otters"}


def test_removing_a_source_deletes_what_was_indexed_from_it(rag) -> None:
    handler, store = rag
    before = counts(handler, 1)
    assert counts(handler, 2)["chunks"] == 120 and before["vectors"] == 240
    load_sources(handler, store, "DELETE FROM rag_sources WHERE name = 'otters'")
    assert sources_found(handler) == {"herons"}  # hidden with the LOAD, before the purge ends
    wait_until(lambda: counts(handler, 2)["sources"] == 0)
    assert counts(handler, 2) == {"sources": 0, "docs": 0, "chunks": 0, "fts": 0, "vectors": 120}
    assert counts(handler, 1) == {**before, "fts": 0, "vectors": 120}  # herons untouched
    ok, out = call(handler, "rag.search_vector", {"query_text": "notes about the otter", "k": 50})
    assert ok and {hit["source_name"] for hit in out["results"]} == {"herons"}
    ok, stats = call(handler, "rag.admin.stats", {})
    assert ok and [s["source_name"] for s in stats["sources"]] == ["herons"]


def test_a_removed_source_being_synced_is_purged_after_its_sync(rag) -> None:
    handler, store = rag
    lock = handler.index.source_lock(2)
    assert lock.acquire("a running sync")
    try:
        load_sources(handler, store, "DELETE FROM rag_sources WHERE name = 'otters'")
        time.sleep(0.3)
        assert counts(handler, 2)["chunks"] == 120  # waits for the lock
        assert sources_found(handler) == {"herons"}
    finally:
        lock.release()
    wait_until(lambda: counts(handler, 2)["sources"] == 0)


def test_starting_over_an_index_the_configuration_never_named_deletes_nothing(rag, tmp_path: Path) -> None:
    handler, store = rag
    anyio.run(handler.close)
    load_sources_without_hook = "DELETE FROM rag_sources"
    store.conn().execute(load_sources_without_hook)
    store.load_to_runtime("RAG SOURCES")
    reopened = RagHandler(Services(data_dir=tmp_path, store=store, runtime=store.read_runtime(), stats=None, metrics=None))  # type: ignore[arg-type]
    anyio.run(reopened.init)
    try:
        assert counts(reopened, 1)["chunks"] == 120 and counts(reopened, 2)["chunks"] == 120
    finally:
        anyio.run(reopened.close)


def test_the_follower_applies_vectors_another_process_committed_without_a_search(rag) -> None:
    """A sync by another process (another worker, the demo build, the CLI) commits vectors:
    the handler's follower thread applies them within seconds, so no search has to."""
    from backends.retrieval.storage.sqlite.vector_store import read_vectors, write_vectors

    handler, _ = rag
    vectors = handler.index.vectors
    other = sqlite.connect(handler.index.path, vec=False)  # the other process's connection
    rowids = [r for (r,) in other.execute("SELECT chunk_rowid FROM rag_vec_chunks ORDER BY chunk_rowid")]
    present, matrix = read_vectors(other, rowids, vectors.dim)
    with sqlite.transaction(other):
        write_vectors(other, [int(r) for r in present], matrix[:, ::-1].copy())  # new vectors for every chunk
    head = other.execute("SELECT seq FROM sqlite_sequence WHERE name = 'rag_vec_changes'").fetchall()[0][0]
    assert vectors._seq < head
    wait_until(lambda: vectors._seq == head, timeout_s=10)
