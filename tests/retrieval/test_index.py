"""The RAG index (backends/retrieval/storage/sqlite/index.py): schema, model check, migrations and the writer API,
on a real rag.db (apsw, FTS5, the vector tables) built in each test."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from backends.retrieval.storage.sqlite.index import RagIndex, normalise_timestamp, parse_tags
from gateway import sqlite
from gateway.errors import ConfigError
from tests.retrieval.records import EMBEDDER, chunk, doc


@pytest.fixture()
def index(tmp_path: Path):
    idx = RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=EMBEDDER.dim)
    idx.upsert_source(1, "src1", backend_type="sqlite")
    idx.upsert_source(2, "src2", backend_type="mysql", enabled=0)
    yield idx
    idx.close()


def counts(idx: RagIndex) -> dict[str, int]:
    conn = idx.conn
    return {
        "chunks": sqlite.scalar(conn, "SELECT count(*) FROM rag_chunks"),
        "fts": sqlite.scalar(conn, "SELECT count(*) FROM rag_fts_chunks_docsize"),
        "vectors": sqlite.scalar(conn, "SELECT count(*) FROM rag_vec_chunks"),
        "docs": sqlite.scalar(conn, "SELECT count(*) FROM rag_documents"),
    }


def assert_in_step(idx: RagIndex) -> None:
    """FTS rows and vectors match rag_chunks one to one, by rowid."""
    conn = idx.conn
    chunks = {r[0] for r in conn.execute("SELECT chunk_rowid FROM rag_chunks")}
    assert {r[0] for r in conn.execute("SELECT id FROM rag_fts_chunks_docsize")} == chunks
    assert {r[0] for r in conn.execute("SELECT chunk_rowid FROM rag_vec_chunks")} == chunks
    conn.execute("INSERT INTO rag_fts_chunks (rag_fts_chunks) VALUES ('integrity-check')")


def test_schema_from_schema_sql_in_wal_with_version_and_model(index: RagIndex) -> None:
    conn = index.conn
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for name in (
        "rag_sources",
        "rag_documents",
        "rag_chunks",
        "rag_fts_chunks",
        "rag_vec_chunks",
        "rag_chunk_view",
        "rag_sync_state",
        "rag_meta",
    ):
        assert name in names
    assert sqlite.scalar(conn, "PRAGMA journal_mode") == "wal"
    meta = index.meta()
    assert meta["schema_version"] == "1"
    assert (meta["embedding_model"], meta["embedding_dim"]) == (EMBEDDER.model_id, "64")
    # The DDL comes from schema.sql itself: the section text names the tables.
    assert "CREATE TABLE IF NOT EXISTS rag_chunks" in sqlite.schema_section("rag")


def test_reopen_with_another_model_is_refused_clearly(index: RagIndex, tmp_path: Path) -> None:
    index.close()
    RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=64).close()  # same model: fine
    with pytest.raises(ConfigError, match="built with embedding model 'hash:64'.*'local:x'"):
        RagIndex.open(tmp_path / "rag.db", embedding_model_id="local:x", dim=64)
    with pytest.raises(ConfigError, match="dims"):
        RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=32)


def test_newer_schema_version_is_refused_and_older_is_migrated(index: RagIndex, tmp_path: Path, monkeypatch) -> None:
    from backends.retrieval.storage.sqlite import index as index_module

    index.conn.execute("UPDATE rag_meta SET value = '99' WHERE key = 'schema_version'")
    index.close()
    with pytest.raises(ConfigError, match="schema version 99"):
        RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=64)

    # An index at version 1 opened by a gateway whose schema is version 2 runs migration 1 -> 2.
    conn = sqlite.connect(tmp_path / "rag.db")
    conn.execute("UPDATE rag_meta SET value = '1' WHERE key = 'schema_version'")
    conn.close()
    ran = []
    monkeypatch.setattr(index_module, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(index_module.MIGRATIONS, 1, lambda c: ran.append(c.execute("SELECT 1").fetchall()))
    reopened = RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=64)
    assert ran and reopened.meta()["schema_version"] == "2"
    reopened.close()


def test_write_update_shrink_and_delete_keep_fts_and_vectors_in_step(index: RagIndex) -> None:
    index.write_batch([doc("a", ["alpha one", "alpha two", "alpha three"]), doc("b", ["beta one"])])
    assert counts(index) == {"chunks": 4, "fts": 4, "vectors": 4, "docs": 2}
    assert_in_step(index)

    # Document a shrinks to 2 chunks, one of them with new text.
    index.write_batch([doc("a", ["alpha one", "alpha changed"])])
    assert counts(index) == {"chunks": 3, "fts": 3, "vectors": 3, "docs": 2}
    assert_in_step(index)
    hits = [
        r[0]
        for r in index.conn.execute(
            "SELECT c.chunk_id FROM rag_fts_chunks f JOIN rag_chunks c ON c.chunk_rowid = f.rowid WHERE rag_fts_chunks MATCH 'changed'"
        )
    ]
    assert hits == ["a#1"]
    assert not list(index.conn.execute("SELECT 1 FROM rag_fts_chunks WHERE rag_fts_chunks MATCH 'three'"))

    index.write_batch([], delete_doc_ids=["b"])
    assert counts(index) == {"chunks": 2, "fts": 2, "vectors": 2, "docs": 1}
    assert_in_step(index)
    assert index.chunk_hashes(["a", "b"]) == {
        "a#0": chunk("a", 0, "alpha one").content_hash,
        "a#1": chunk("a", 1, "alpha changed").content_hash,
    }


def test_unchanged_text_keeps_its_vector_without_an_embedding(index: RagIndex) -> None:
    index.write_batch([doc("a", ["same text"])])
    before = index.conn.execute("SELECT chunk_rowid, embedding FROM rag_vec_chunks").fetchall()
    index.write_batch([doc("a", ["same text"], embed=False, metadata={"Score": 7})])
    assert index.conn.execute("SELECT chunk_rowid, embedding FROM rag_vec_chunks").fetchall() == before
    assert sqlite.scalar(index.conn, "SELECT doc_score FROM rag_chunks") == 7
    assert_in_step(index)


def test_a_failed_batch_or_callback_rolls_everything_back(index: RagIndex) -> None:
    index.write_batch([doc("a", ["first text"])])
    before = counts(index)
    with pytest.raises(ValueError, match="needs an embedding"):
        index.write_batch([doc("b", ["new"]), doc("a", ["edited text"], embed=False)])
    assert counts(index) == before

    def failing_callback(conn) -> None:
        conn.execute("INSERT INTO rag_sync_state (source_id, cursor_json) VALUES (1, '{\"v\": 5}')")
        raise RuntimeError("crash after the writes")

    with pytest.raises(RuntimeError):
        index.write_batch([doc("c", ["third"])], delete_doc_ids=["a"], in_transaction=failing_callback)
    assert counts(index) == before
    assert sqlite.scalar(index.conn, "SELECT count(*) FROM rag_sync_state") == 0
    assert_in_step(index)

    index.write_batch(
        [doc("c", ["third"])],
        in_transaction=lambda conn: conn.execute("INSERT INTO rag_sync_state (source_id, cursor_json) VALUES (1, '{}')"),
    )
    assert sqlite.scalar(index.conn, "SELECT count(*) FROM rag_sync_state") == 1


def test_wrong_vector_width_is_refused(index: RagIndex) -> None:
    bad = doc("a", ["text"])
    bad.chunks[0].embedding = np.ones(10, dtype=np.float32)
    with pytest.raises(ValueError, match="10 dims"):
        index.write_batch([bad])
    assert counts(index)["chunks"] == 0


def test_hot_filter_fields_are_denormalised(index: RagIndex) -> None:
    metadata = {"Score": "12", "PostTypeId": 2, "Tags": "<MySQL><json>", "CreationDate": "2023-05-01 10:00:00"}
    index.write_batch([doc("a", ["one", "two"], metadata=metadata)])
    rows = index.conn.execute("SELECT doc_score, post_type_id, created_at FROM rag_chunks").fetchall()
    assert rows == [(12.0, 2, "2023-05-01T10:00:00Z")] * 2
    assert sorted(r[0] for r in index.conn.execute("SELECT tag FROM rag_doc_tags WHERE doc_id = 'a'")) == ["json", "mysql"]
    view = sqlite.rows(index.conn, "SELECT chunk_id, source_name, pk_json FROM rag_chunk_view ORDER BY chunk_id")
    assert view == [
        {"chunk_id": "a#0", "source_name": "src1", "pk_json": '{"id":"a"}'},
        {"chunk_id": "a#1", "source_name": "src1", "pk_json": '{"id":"a"}'},
    ]


def test_counts_per_source_and_source_deletion(index: RagIndex) -> None:
    index.write_batch([doc("a", ["x1", "x2", "x3"]), doc("b", ["y1"]), doc("c", ["z1", "z2"], source_id=2)])
    assert index.source_counts() == {1: {"docs": 2, "chunks": 4}, 2: {"docs": 1, "chunks": 2}}
    assert sorted(index.doc_ids_for_source(1)) == ["a", "b"]
    index.delete_source(2)
    assert index.source_counts() == {1: {"docs": 2, "chunks": 4}}
    assert_in_step(index)


def test_upsert_source_rejects_unknown_columns(index: RagIndex) -> None:
    with pytest.raises(ValueError, match="no column"):
        index.upsert_source(3, "s3", **{"name; DROP TABLE rag_chunks": 1})
    index.upsert_source(3, "s3", doc_map_json={"title": {"concat": []}})
    assert sqlite.scalar(index.conn, "SELECT doc_map_json FROM rag_sources WHERE source_id = 3") == '{"title":{"concat":[]}}'


def test_timestamps_and_tags_normalise() -> None:
    assert normalise_timestamp("2022-01-01T00:00:00Z") == "2022-01-01T00:00:00Z"
    assert normalise_timestamp("2022-01-01T02:00:00+02:00") == "2022-01-01T00:00:00Z"
    assert normalise_timestamp(0) == "1970-01-01T00:00:00Z"
    assert normalise_timestamp("not a date") is None
    assert parse_tags("<a><B>") == ["a", "b"]
    assert parse_tags("|x|y|") == ["x", "y"]
    assert parse_tags("p, q") == ["p", "q"]
    assert parse_tags(["Z"]) == ["z"]


def test_a_doc_id_twice_in_one_batch_ends_as_if_written_in_two_batches(index: RagIndex) -> None:
    index.write_batch([doc("d:1", ["one", "two", "three", "four"]), doc("d:1", ["uno", "dos", "tres"])])
    assert counts(index) == {"chunks": 3, "fts": 3, "vectors": 3, "docs": 1}
    assert_in_step(index)
    bodies = [r[0] for r in index.conn.execute("SELECT body FROM rag_chunks ORDER BY chunk_index")]
    assert bodies == ["uno", "dos", "tres"]


def test_metadata_beyond_64_bit_integers_still_writes(index: RagIndex) -> None:
    index.write_batch([doc("d:big", ["big numbers"], metadata={"Id": 2**70, "Score": 1})])
    stored = index.conn.execute("SELECT metadata_json FROM rag_documents WHERE doc_id = 'd:big'").fetchall()[0][0]
    assert str(2**70) in stored
    assert_in_step(index)


def test_a_batch_larger_than_one_statement_payload_is_split(index: RagIndex, monkeypatch) -> None:
    from backends.retrieval.storage import records as index_write

    monkeypatch.setattr(index_write, "MAX_PAYLOAD_BYTES", 2048)  # forces many statements per batch
    docs = [doc(f"d:{i}", [f"chunk {i} {'x' * 300}", f"second {i}"]) for i in range(40)]
    index.write_batch(docs)
    assert counts(index) == {"chunks": 80, "fts": 80, "vectors": 80, "docs": 40}
    assert_in_step(index)


def test_a_new_index_uses_8_kib_pages(index: RagIndex) -> None:
    assert sqlite.scalar(index.conn, "PRAGMA page_size") == 8192
    assert sqlite.scalar(index.conn, "PRAGMA journal_mode") == "wal"


def test_opening_a_prepared_index_takes_no_write_lock(index: RagIndex, tmp_path: Path) -> None:
    """A worker starting while the demo sync holds the write lock (for longer than the busy
    timeout on a loaded machine) opens the index at once; a schema to change takes the write path."""
    fingerprint = index.meta()["schema_fingerprint"]
    index.close()
    writer = sqlite.connect(tmp_path / "rag.db")
    writer.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        reopened = RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=EMBEDDER.dim)
        assert time.monotonic() - started < 2  # not the 10 s busy timeout, nor BusyError
        reopened.close()
        writer.execute("UPDATE rag_meta SET value = 'stale' WHERE key = 'schema_fingerprint'")  # DDL changed since
    finally:
        writer.execute("COMMIT")
        writer.close()
    reopened = RagIndex.open(tmp_path / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=EMBEDDER.dim)
    assert reopened.meta()["schema_fingerprint"] == fingerprint  # prepared again, under the write lock
    reopened.close()
