"""The quick-start demo: Python's documentation as a SQLite source, registered and synced on first start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import apsw

from backends.retrieval.ingest.demo import (
    CORPUS_FILE,
    MAX_DOCS,
    SOURCE_NAME,
    demo_needs_sync,
    ensure_demo,
    start_demo_in_background,
)
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
    assert 2000 <= corpus_rows <= MAX_DOCS  # the standard library (issue 29), within the cap
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


# Five first questions of a Python user, and the document that answers each (a title prefix).
EVERYDAY_QUESTIONS = {
    "how do I start a thread": "threading.Thread.start",
    "open a file for reading": "builtins.open(",
    "parse a JSON string": "json.loads(",
    "run a shell command and capture its output": "subprocess.run(",
    "sort a list by a key": ("builtins.list.sort(", "builtins.sorted("),
}


def test_the_demo_corpus_answers_everyday_questions(tmp_path: Path) -> None:
    """Issue 29: the 384 documents of the old corpus had no threading, datetime or open(); "start a
    thread" found `module sys`. The corpus now covers the standard library's modules (everyday ones
    first), and five everyday questions find their answer in the top 3 of rag.search_fts over the
    whole corpus. The index here is built with the `hash` embedder (the local model would take
    minutes, and hashed vectors say nothing of meaning): bench/demo_questions.py asks the same
    questions through rag.search_hybrid of the local-model index a real first start builds."""
    import asyncio

    from gateway.runtime import build_runtime
    from gateway.services import Services
    from gateway.variables import all_variables
    from handlers.rag import RagHandler

    store = open_config(tmp_path)
    store.set_variable("rag-embedding_provider", "hash")
    store.load_to_runtime("MCP VARIABLES")
    thread = start_demo_in_background(tmp_path, store=store, first_start=True, progress=False)
    assert thread is not None
    thread.join(timeout=180)
    corpus = sqlite3.connect(tmp_path / CORPUS_FILE)
    titles = [row[0] for row in corpus.execute("SELECT title FROM python_docs ORDER BY id")]
    for module in ("threading", "datetime", "subprocess", "pathlib", "asyncio", "json", "csv", "logging", "email.message"):
        assert f"module {module}" in titles, module
    assert any(t.startswith("builtins.open(") for t in titles) and any(t.startswith("datetime.datetime.now(") for t in titles)
    assert any(t.startswith("os.listdir(") for t in titles)  # os's functions live in posix; documented under os
    # Everyday modules come first: synced first, searchable first.
    assert titles.index("module threading") < titles.index("module smtplib")

    runtime = build_runtime(1, {"rag-embedding_provider": "hash"}, {}, all_variables(RagHandler.variables))
    handler = RagHandler(Services(data_dir=tmp_path, store=None, runtime=runtime, stats=None, metrics=None))
    asyncio.run(handler.init())
    try:
        for tool in ("rag.search_fts",):
            spec = handler.find_tool(tool)
            for question, expected in EVERYDAY_QUESTIONS.items():
                result = asyncio.run(handler.execute_tool(spec, {"query": question, "k": 3}, handler.context(spec, runtime)))
                found = [hit["title"] for hit in result["structuredContent"]["results"]]
                assert any(title.startswith(expected) for title in found), (tool, question, found)
    finally:
        asyncio.run(handler.close())
