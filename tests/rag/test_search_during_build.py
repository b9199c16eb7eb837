"""A search while the index is being built says so, with progress, instead of a bare k_returned: 0.

A real gateway indexes a 300-row SQLite source through a slow embedding service (an
OpenAI-compatible endpoint on loopback answering after 0.3 s, 32 texts per request), the way
the demo corpus builds on first start. While the sync job runs, rag.search_* results carry
`index: {building: true, documents, of, ...}`; once it is done they carry no such note.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

from tests.retrieval.embedding_server import EmbeddingServer

pytestmark = pytest.mark.skipif("rag" not in registered_endpoints(), reason="the rag endpoint is needed")
ROWS = 300
DIM = 32
DOC_MAP = {"doc_id": {"format": "notes:{id}"}, "title": {"concat": [{"col": "title"}]}, "body": {"concat": [{"col": "body"}]}}


def _embed(texts: list[str]) -> np.ndarray:
    rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:DIM].astype(np.float32) + 1 for t in texts]
    matrix = np.stack(rows)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.fixture
def slow_embedder() -> Iterator[EmbeddingServer]:
    server = EmbeddingServer(_embed).start()
    yield server
    server.stop()


def _admin(gateway: GatewayProcess, http: Any, statement: str) -> None:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, (statement, result)


def _search(gateway: GatewayProcess, http: Any) -> dict[str, Any]:
    result = call_tool(http, gateway, "rag", "rag.search_fts", {"query": "herons", "k": 5})
    assert result["isError"] is False, result
    return result["structuredContent"]


def test_searches_during_a_build_report_progress(tmp_path: Path, slow_embedder: EmbeddingServer) -> None:
    corpus = tmp_path / "notes.db"
    with sqlite3.connect(corpus) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        conn.executemany(
            "INSERT INTO notes VALUES (?, ?, ?)", [(i, f"note {i}", f"note {i} is about herons") for i in range(1, ROWS + 1)]
        )
    variables = {
        "rag-embedding_provider": "openai",
        "rag-embedding_api_base": slow_embedder.url,
        "rag-embedding_model": "slow-test-model",
        "rag-embedding_dim": DIM,
    }
    with start_gateway(variables=variables) as gateway, gateway.client(timeout=30.0) as http:
        _admin(
            gateway,
            http,
            f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('notes', 'sqlite', '{corpus}')",
        )
        _admin(
            gateway,
            http,
            "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s) "
            f"VALUES (1, 'notes', 'notes', 'notes', 'id', '{json.dumps(DOC_MAP)}', 0)",
        )
        _admin(gateway, http, "LOAD MCP PROFILES TO RUNTIME")
        _admin(gateway, http, "LOAD RAG SOURCES TO RUNTIME")
        assert _search(gateway, http).get("index") is None  # nothing building: no note

        slow_embedder.script.delay_s = 0.3  # ~10 requests of 32 texts: a few seconds of building
        deadline = time.monotonic() + 10  # the worker follows the LOAD within a second
        while True:
            started = call_tool(http, gateway, "rag", "rag.admin.sync", {"source_names": ["notes"]})["structuredContent"]
            if "error" not in started or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert started.get("accepted") is True, started
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = _search(gateway, http)
            if found.get("index") is None and (seen or time.monotonic() > deadline - 50):
                break  # the build is over (or was never seen within 10 s: the assertion below says so)
            if found.get("index") is not None:
                seen.append({**found["index"], "k_returned": found["stats"]["k_returned"]})
            time.sleep(0.1)
        assert seen, "no search saw the build"
        assert all(note["building"] is True for note in seen), seen
        assert any(note["of"] == ROWS for note in seen), seen  # the total, once the source is counted
        assert all(note["documents"] <= (note["of"] or ROWS) for note in seen), seen
        assert seen[0]["k_returned"] < 5 or seen[0]["documents"] > 0, seen
        assert "notes" in seen[-1]["sources"] and seen[-1]["job_id"] == started["job_id"], seen[-1]
        done = _search(gateway, http)
        assert done.get("index") is None and done["stats"]["k_returned"] == 5, done


def test_a_build_by_another_process_reports_counts_that_agree_with_the_results(
    tmp_path: Path, slow_embedder: EmbeddingServer
) -> None:
    """Issue 29: the demo corpus is synced by its own job manager (not the rag handler's), so a
    search learns the build's progress from rag_sync_jobs. It used to say `0 (sources still being
    counted)` until the first 256 embeddings were committed and then lag one batch behind, so
    results came back beside `documents: 0`. Here a sync run by `run_sync` in this test process
    (another process, as far as the gateway is concerned) builds the index while searches watch."""
    import io
    import threading

    from backends.retrieval.ingest.foreground import run_sync
    from gateway.assembly import open_config

    corpus = tmp_path / "notes.db"
    with sqlite3.connect(corpus) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        conn.executemany(
            "INSERT INTO notes VALUES (?, ?, ?)", [(i, f"note {i}", f"note {i} is about herons") for i in range(1, ROWS + 1)]
        )
    variables = {
        "rag-embedding_provider": "openai",
        "rag-embedding_api_base": slow_embedder.url,
        "rag-embedding_model": "slow-test-model",
        "rag-embedding_dim": DIM,
    }
    with start_gateway(variables=variables) as gateway, gateway.client(timeout=30.0) as http:
        _admin(
            gateway,
            http,
            f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('notes', 'sqlite', '{corpus}')",
        )
        _admin(
            gateway,
            http,
            "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s) "
            f"VALUES (1, 'notes', 'notes', 'notes', 'id', '{json.dumps(DOC_MAP)}', 0)",
        )
        _admin(gateway, http, "LOAD MCP PROFILES TO RUNTIME")
        _admin(gateway, http, "LOAD RAG SOURCES TO RUNTIME")
        slow_embedder.script.delay_s = 0.3
        codes: list[int] = []
        store = open_config(gateway.data_dir)
        sync = threading.Thread(target=lambda: codes.append(run_sync(store, "notes", progress=False, out=io.StringIO())))
        began = time.monotonic()
        sync.start()
        seen: list[dict[str, Any]] = []
        first_hit_s = None
        while sync.is_alive() and time.monotonic() - began < 60:
            found = _search(gateway, http)
            if found.get("index") is not None:
                seen.append({**found["index"], "k_returned": found["stats"]["k_returned"]})
                if first_hit_s is None and found["stats"]["k_returned"]:
                    first_hit_s = time.monotonic() - began
            time.sleep(0.05)
        sync.join(timeout=30)
        assert codes == [0], codes
        assert seen, "no search saw the build"
        # Results never come back beside a count that says nothing is indexed.
        assert all(note["documents"] > 0 for note in seen if note["k_returned"]), seen
        # Once anything is written, the total is known (counting ends before the first batch).
        assert all(note["of"] == ROWS for note in seen if note["documents"]), seen
        assert all(note["documents"] <= ROWS for note in seen), seen
        assert all(f"{note['documents']} of {ROWS} documents" in note["message"] for note in seen if note["of"] is not None), seen
        assert not any("(sources still being counted)" in note["message"] for note in seen), seen
        # The first batch is small: searches find something well before the build ends.
        assert first_hit_s is not None and any(note["k_returned"] and note["documents"] < ROWS for note in seen), seen
        # The build's note goes once it is over (build_status re-reads the job at most every CACHE_S).
        deadline = time.monotonic() + 10
        while (note := _search(gateway, http).get("index")) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert note is None
