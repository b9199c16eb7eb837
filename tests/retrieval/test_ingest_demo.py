"""The quick-start demo: Python's documentation as a SQLite source, registered and synced on first start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import apsw

from backends.retrieval.ingest.demo import CORPUS_FILE, SOURCE_NAME, demo_needs_sync, ensure_demo, start_demo_in_background
from gateway.assembly import open_config


def test_first_start_builds_registers_and_syncs_the_demo(tmp_path: Path) -> None:
    store = open_config(tmp_path)
    store.set_variable("rag-embedding_provider", "hash")  # the real first start embeds with the local model
    store.load_to_runtime("MCP VARIABLES")
    thread = start_demo_in_background(tmp_path, store=store, first_start=True, progress=False)
    assert thread is not None
    thread.join(timeout=120)
    assert not thread.is_alive()

    corpus_rows = sqlite3.connect(tmp_path / CORPUS_FILE).execute("SELECT count(*) FROM python_docs").fetchone()[0]
    assert 300 <= corpus_rows <= 2500
    # Registered in every layer, as an admin would have done it.
    conn = store.conn()
    for layer in ("main", "disk"):
        assert conn.execute(f"SELECT count(*) FROM {layer}.rag_sources WHERE name = ?", (SOURCE_NAME,)).fetchall()[0][0] == 1
    assert conn.execute("SELECT count(*) FROM runtime_rag_sources WHERE name = ?", (SOURCE_NAME,)).fetchall()[0][0] == 1

    index = apsw.Connection(str(tmp_path / "rag.db"))
    assert index.execute("SELECT count(*) FROM rag_documents").fetchall()[0][0] == corpus_rows
    hits = [
        r[0]
        for r in index.execute(
            "SELECT c.title FROM rag_fts_chunks f JOIN rag_chunks c ON c.chunk_rowid = f.rowid WHERE rag_fts_chunks MATCH 'comprehension' ORDER BY bm25(rag_fts_chunks) LIMIT 5"
        )
    ]
    assert hits, "the language reference explains comprehensions"
    assert not demo_needs_sync(tmp_path)

    # A later start neither rebuilds nor re-syncs; ensure_demo is idempotent.
    assert start_demo_in_background(tmp_path, store=store, first_start=False, progress=False) is None
    assert ensure_demo(tmp_path, store) is False
