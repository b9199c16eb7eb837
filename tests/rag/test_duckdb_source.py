"""A DuckDB file as a RAG source, through the engine's source reader (backends/engines/duckdb.py):
rag.admin.sync reads it (keyset paging, an appended row picked up by the next sync), and
rag.fetch_from_source reads a row back by its key through the targets' pools."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from backends.pools import TargetPools
from backends.retrieval.embeddings import index_embedding_config, make_embedder
from backends.retrieval.storage.sqlite.index import RagIndex
from gateway.assembly import open_config
from gateway.services import Services
from tests.rag.test_fetch import FetchHandler
from tests.rag.test_ingest_jobs import IngestHost, call, wait_job

DOC_MAP = {"doc_id": {"format": "notes:{id}"}, "title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}}


def write_notes(path: Path, ids: range) -> None:
    conn = duckdb.connect(str(path))
    conn.execute("CREATE TABLE IF NOT EXISTS notes (id INTEGER PRIMARY KEY, title VARCHAR, body VARCHAR, score DECIMAL(6,2))")
    conn.executemany("INSERT INTO notes VALUES (?, ?, ?, ?)", [(i, f"note {i}", f"herons wade at dawn {i}", i / 4) for i in ids])
    conn.close()


@pytest.fixture
def duck_host(tmp_path: Path) -> Iterator[tuple[IngestHost, Path]]:
    corpus = tmp_path / "notes.duckdb"
    write_notes(corpus, range(1, 121))
    store = open_config(tmp_path)
    conn = store.conn()
    conn.execute("INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('duck', 'duckdb', ?)", (str(corpus),))
    conn.execute(
        "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s)"
        " VALUES (1, 'notes', 'duck', 'notes', 'id', ?, 0)",
        (json.dumps(DOC_MAP),),
    )
    store.set_variable("rag-embedding_provider", "hash")
    for module in ("MCP VARIABLES", "MCP PROFILES", "RAG SOURCES"):
        store.load_to_runtime(module)
    runtime = store.read_runtime()
    embedder = make_embedder(index_embedding_config(runtime))
    index = RagIndex.open(tmp_path / "rag.db", embedding_model_id=embedder.model_id, dim=embedder.dim)
    pools = TargetPools(runtime)
    services = Services(data_dir=tmp_path, store=store, runtime=runtime, stats=None, metrics=None, targets=pools)  # type: ignore[arg-type]
    host = IngestHost(services, index, embedder)
    yield host, corpus
    host.jobs.close()
    pools.close()
    index.close()


def test_a_duckdb_file_is_synced_and_its_rows_fetched_back(duck_host: tuple[IngestHost, Path]) -> None:
    host, corpus = duck_host
    is_error, out = call(host, "rag.admin.sync", {"source_names": ["notes"]})
    assert not is_error, out
    job = wait_job(host, out["job_id"])
    assert job["state"] == "ok", job
    (progress,) = job["sources"]
    assert progress["rows_total"] == progress["rows_read"] == progress["docs_written"] == 120

    # The primary key is the cursor: the next sync reads only the appended rows. DuckDB keeps one
    # writer per file, so the pooled read-only sessions of the sync are closed before this write.
    host.jobs.close()
    write_notes(corpus, range(121, 124))
    host.jobs = type(host.jobs)(
        data_dir=host.services.data_dir,
        index=host.index,
        embedder=host.embedder,
        runtime=lambda: host.services.runtime,
        make_embedder=make_embedder,
    )
    _, out = call(host, "rag.admin.sync", {})
    job = wait_job(host, out["job_id"])
    assert job["state"] == "ok", job
    assert job["sources"][0]["rows_read"] == 3
    assert host.index.conn.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0] == 123

    fetcher = FetchHandler(host.services, host.index)
    is_error, got = call(fetcher, "rag.fetch_from_source", {"doc_ids": ["notes:7", "notes:122"]})
    assert not is_error, got
    rows = {item["doc_id"]: item["row"] for item in got["rows"]}
    assert got["errors"] == [] and got["truncated"] is False
    assert rows["notes:7"] == {"id": 7, "title": "note 7", "body": "herons wade at dawn 7", "score": "1.75"}
    assert rows["notes:122"]["body"] == "herons wade at dawn 122"
