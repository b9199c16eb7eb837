"""The RAG index's PostgreSQL storage (backends/retrieval/storage/postgresql/index.py) on a real PostgreSQL 18 + pgvector:
the write path's semantics (those of RagIndex.write_batch), filtered HNSW search with iterative
scans, and a PostgreSQL restart survived without reopening the index."""

from __future__ import annotations

import time

import numpy as np
import psycopg
import pytest

from backends.retrieval.call import Call, Caps
from backends.retrieval.storage.postgresql import fts as pg_fts
from backends.retrieval.storage.postgresql import index as pg_index
from backends.retrieval.storage.postgresql.fts import fts_ranked, fts_snippets, hit_rows
from backends.retrieval.storage.postgresql.index import PgRagIndex
from backends.retrieval.storage.postgresql.ingest import SYNC_LOCK_PREFIX
from backends.retrieval.storage.reader import pg_reader
from backends.retrieval.storage.sqlite import fts
from gateway.errors import ConfigError, Unavailable
from tests.retrieval.records import EMBEDDER, doc


@pytest.fixture()
def index(pgvector_db: str):
    idx = PgRagIndex.open(pgvector_db, embedding_model_id=EMBEDDER.model_id, dim=EMBEDDER.dim)
    idx.upsert_source(1, "src1", backend_type="sqlite")
    idx.upsert_source(2, "src2", backend_type="mysql", enabled=0)
    yield idx
    idx.close()


def counts(idx: PgRagIndex) -> dict[str, int]:
    with idx.connection() as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("rag_documents", "rag_chunks", "rag_doc_tags")
        } | {"vectors": conn.execute("SELECT count(embedding) FROM rag_chunks").fetchone()[0]}


def test_write_batch_replaces_chunks_and_keeps_unchanged_vectors(index: PgRagIndex) -> None:
    index.write_batch([doc("a", ["alpha one", "alpha two", "alpha three"], metadata={"Tags": "<x><y>"}), doc("b", ["beta"])])
    assert counts(index) == {"rag_documents": 2, "rag_chunks": 4, "rag_doc_tags": 2, "vectors": 4}
    with index.connection() as conn:
        before = dict(conn.execute("SELECT chunk_id, embedding::text FROM rag_chunks WHERE doc_id = 'a'").fetchall())
    # Same first text (no embedding sent: keep the vector), a changed second, the third gone.
    changed = doc("a", ["alpha one", "alpha TWO changed"], metadata={"Tags": "<x>"})
    changed.chunks[0].embedding = None
    index.write_batch([changed], delete_doc_ids=["b"])
    assert counts(index) == {"rag_documents": 1, "rag_chunks": 2, "rag_doc_tags": 1, "vectors": 2}
    with index.connection() as conn:
        after = dict(conn.execute("SELECT chunk_id, embedding::text FROM rag_chunks WHERE doc_id = 'a'").fetchall())
    assert after["a#0"] == before["a#0"] and after["a#1"] != before["a#1"]
    assert index.source_counts() == {1: {"docs": 1, "chunks": 2}, 2: {"docs": 0, "chunks": 0}}
    with pytest.raises(ValueError, match="needs an embedding"):
        index.write_batch([doc("c", ["new text"], embed=False)])


def test_a_failing_batch_writes_nothing(index: PgRagIndex) -> None:
    def crash(db: object) -> None:
        raise RuntimeError("killed between the chunks and the cursor")

    with pytest.raises(RuntimeError):
        index.write_batch([doc("a", ["alpha"])], in_transaction=crash)
    assert counts(index)["rag_chunks"] == 0


def test_model_mismatch_is_refused(index: PgRagIndex, pgvector_db: str) -> None:
    with pytest.raises(ConfigError, match="rebuild the index"):
        PgRagIndex.open(pgvector_db, embedding_model_id="another-model", dim=EMBEDDER.dim)


def test_filtered_vector_search_fills_k_and_says_when_short(index: PgRagIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    # 600 chunks in source 1, 12 in source 3: a filter admitting 2 % of the index.
    index.upsert_source(3, "src3")
    docs = [doc(f"d{i}", [f"common words number {i}"]) for i in range(600)]
    docs += [doc(f"r{i}", [f"rare document {i}"], source_id=3) for i in range(12)]
    index.write_batch(docs)
    query = EMBEDDER.embed(["common words number 7"])[0]
    with index.connection() as conn:
        plain = index.nearest(conn, query, 10)
        assert len(plain.rows) == 10 and not plain.short
        assert plain.rows[0][0] == hit_rowid(conn, "d7#0") and plain.rows[0][1] < 1e-3
        filtered = index.nearest(conn, query, 10, where="c.source_id IN (?)", params=(3,))
        assert len(filtered.rows) == 10 and not filtered.short
        assert {hit_rows(conn, [r])[r][3] for r, _ in filtered.rows} == {3}
        fewer = index.nearest(conn, query, 20, where="c.source_id IN (?)", params=(3,))
        assert len(fewer.rows) == 12 and not fewer.short  # only 12 exist: not "short"
        # A scan budget below what the filter needs: through the graph pgvector stops early...
        monkeypatch.setattr(pg_index, "HNSW_EF_SEARCH_MIN", 10)  # a first pass of 40 of the 612 nodes
        conn.execute("SET LOCAL hnsw.max_scan_tuples = 30")
        conn.execute("SET LOCAL enable_sort = off")  # a table this small would be sorted exactly instead
        small = index.nearest(conn, query, 12, where="c.source_id IN (?)", params=(3,))
        # ...but 12 allowed chunks are few enough to be scored exactly: all of them, exact order.
        assert [r for r, _ in small.rows] == exact_order(conn, query, "source_id = 3") and not small.short
        monkeypatch.setattr(pg_index, "EXACT_SCAN_MAX", 5)  # now too many for that: the graph, cut short
        cut = index.nearest(conn, query, 12, where="c.source_id IN (?)", params=(3,))
        assert len(cut.rows) < 12 and cut.short


def exact_order(conn: psycopg.Connection, query: np.ndarray, where: str) -> list[int]:
    """The rowids passing `where`, nearest first by cosine distance computed here in numpy."""
    rows = conn.execute(f"SELECT chunk_rowid, embedding FROM rag_chunks WHERE {where}").fetchall()
    unit = query / np.linalg.norm(query)
    distance = {r: 1 - float(np.dot(v.to_numpy(), unit) / np.linalg.norm(v.to_numpy())) for r, v in rows}
    return sorted(distance, key=lambda r: (distance[r], r))


def hit_rowid(conn: psycopg.Connection, chunk_id: str) -> int:
    return conn.execute("SELECT chunk_rowid FROM rag_chunks WHERE chunk_id = %s", (chunk_id,)).fetchone()[0]


def test_keyword_search_ranks_stems_and_marks(index: PgRagIndex) -> None:
    index.write_batch(
        [
            doc("a", ["the wings of aircraft are tested in wind tunnels"]),
            doc("b", ["boundary layer theory for a wing"]),
            doc("c", ["nothing relevant here"]),
        ]
    )
    match = fts.build_match("wing tunnel")
    with index.connection() as conn:
        ranked = fts_ranked(conn, match, index.term_stats, limit=10)
        assert [hit_rows(conn, [r])[r][2] for r, _ in ranked] == ["a", "b"]  # both words beat one; "wings" stems to wing
        assert all(raw < 0 for _, raw in ranked)
        marked = fts_snippets(conn, match, [r for r, _ in ranked], tokens=8, open_mark="<mark>", close_mark="</mark>")
        assert "<mark>wings</mark>" in marked[ranked[0][0]]
        # A chunk matching by its title only: the title is the snippet, the body has no mark.
        by_title = fts_snippets(conn, fts.build_match("title"), [ranked[0][0]], tokens=8, open_mark="<", close_mark=">")
        assert "<title>" in by_title[ranked[0][0]] and "wings" not in by_title[ranked[0][0]]
        both = fts_ranked(conn, match.all_terms(), index.term_stats, limit=10)
        assert [hit_rows(conn, [r])[r][2] for r, _ in both] == ["a"]
        only_source_2 = fts_ranked(conn, match, index.term_stats, where="c.source_id IN (?)", params=(2,), limit=10)
        assert only_source_2 == []


def test_bm25_corpus_figures_exact_when_small_sampled_when_large(index: PgRagIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    index.write_batch([doc(f"d{i}", [" ".join(["word"] * (i % 7 + 1))]) for i in range(300)])
    with index.connection() as conn:
        exact = conn.execute("SELECT count(*)::float8, avg(length(fts))::float8 FROM rag_chunks").fetchone()
        assert pg_fts.corpus_figures(conn) == exact  # never analysed: counted
    with psycopg.connect(index.dsn, autocommit=True) as conn:
        conn.execute("ANALYZE rag_chunks")
    monkeypatch.setattr(pg_fts, "SAMPLE_FROM", 100)  # 300 chunks count as large: the planner's count, a page sample
    monkeypatch.setattr(pg_fts, "SAMPLE_ROWS", 1_000)  # more than the table: the sample is every page
    with index.connection() as conn:
        count, avgdl = pg_fts.corpus_figures(conn)
    assert count == exact[0] and avgdl == pytest.approx(exact[1])


def test_postgresql_restart_fails_unavailable_then_recovers(index: PgRagIndex, pgvector_server) -> None:
    index.write_batch([doc("a", ["alpha"])])
    pgvector_server.stop()
    try:
        with pytest.raises(Unavailable):
            index.source_counts()
    finally:
        pgvector_server.start()
    assert index.source_counts()[1] == {"docs": 1, "chunks": 1}  # the same index object, no reopen
    with index.connection() as conn:
        assert len(index.nearest(conn, np.asarray(EMBEDDER.embed(["alpha"])[0]), 3).rows) == 1


def test_the_first_call_after_a_long_outage_succeeds(index: PgRagIndex, pgvector_server) -> None:
    """A call in a 4 s outage fails UNAVAILABLE; once PostgreSQL is back the next call is served.
    The pool's reconnect attempts back off (1, 2, 4 s ...): unbounded, the first call after the
    outage waited for an attempt seconds away and failed its 1 s budget."""
    index.write_batch([doc("a", ["alpha"])])
    pgvector_server.stop()
    try:
        with pytest.raises(Unavailable):
            index.source_counts()
        time.sleep(4)  # nobody asks: only the pool's own attempts run, further and further apart
    finally:
        pgvector_server.start()
    assert index.source_counts()[1] == {"docs": 1, "chunks": 1}


def test_a_search_after_a_restart_replaces_stale_connections_in_its_first_round_trip(index: PgRagIndex, pgvector_server) -> None:
    """A search skips the pool's separate liveness check: its own first statement is the check,
    so a connection from before a restart is dropped and another taken, and no call fails."""
    index.write_batch([doc("a", ["alpha"])])
    held = [index.pool.getconn() for _ in range(3)]  # three pooled connections, all of which the restart ends
    for conn in held:
        index.pool.putconn(conn)
    pgvector_server.restart()
    query = np.asarray(EMBEDDER.embed(["alpha"])[0])
    for _ in range(len(held) + 1):  # each call may draw a stale connection: none fails
        call = Call(
            Caps(k_max=50, candidates_max=200, query_max_bytes=4096, response_max_bytes=100_000, timeout_ms=5_000),
            deadline=time.monotonic() + 5,
        )
        with pg_reader(index, call) as reader:
            assert reader.all_sources_enabled() is False  # src2 is disabled
            assert [r for r, _ in index.nearest(reader.conn, query, 3).rows] == [1]
            # The graph search's settings are the session's, set when the connection was opened.
            assert reader.conn.execute(
                "SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')"
            ).fetchone() == (
                str(pg_index.HNSW_EF_SEARCH_MIN),
                "relaxed_order",
            )


def test_a_first_statement_that_fails_returns_its_connection(index: PgRagIndex) -> None:
    """A caller's own first statement failing for its own reason is the caller's error, and the
    connection goes back to the pool: more failures than the pool holds leave it serving."""
    for _ in range(index.pool.max_size + 2):
        with pytest.raises(psycopg.errors.DivisionByZero), index.reading_connection(lambda conn: conn.execute("SELECT 1/0")):
            pass
    assert index.source_counts()[1] == {"docs": 0, "chunks": 0}


def test_a_search_leaves_no_setting_behind_for_the_next_caller(index: PgRagIndex) -> None:
    """A search reads in autocommit with the call's deadline as its session statement_timeout,
    and a wide k sets hnsw.ef_search for its own statement only: the next caller of the same
    connection (a write, which may run long) gets neither."""
    index.write_batch([doc("a", ["alpha"])])
    call = Call(
        Caps(k_max=200, candidates_max=200, query_max_bytes=4096, response_max_bytes=100_000, timeout_ms=5_000),
        deadline=time.monotonic() + 0.2,
    )
    with pg_reader(index, call) as reader:
        pid = reader.conn.info.backend_pid
        timeout = "SELECT current_setting('statement_timeout')::interval BETWEEN '1ms' AND '200ms'"
        assert reader.conn.execute(timeout).fetchone()[0] is True  # what is left of the call
        wide = index.nearest(reader.conn, np.asarray(EMBEDDER.embed(["alpha"])[0]), 100)  # ef_search 200 for it
        assert [r for r, _ in wide.rows] == [1]
        assert reader.conn.execute("SELECT current_setting('hnsw.ef_search')").fetchone()[0] == str(pg_index.HNSW_EF_SEARCH_MIN)
        assert reader.conn.execute(timeout).fetchone()[0] is True  # still set: the session's, for the whole call
    taken = []  # through the pool's check, as every ordinary caller takes one, until the search's comes
    try:
        while not taken or taken[-1].info.backend_pid != pid:
            taken.append(index.pool.getconn())
        conn = taken[-1]
        assert not conn.autocommit
        assert conn.execute("SELECT current_setting('statement_timeout'), pg_sleep(0.3)::text").fetchone()[0] == "0"
        conn.rollback()
    finally:
        for conn in taken:
            index.pool.putconn(conn)


def test_one_sync_per_source_across_instances(index: PgRagIndex) -> None:
    first, second = index.source_lock(7), index.source_lock(7)
    assert first.acquire("job-1@gw1")
    try:
        assert not second.acquire("job-2@gw2")
        assert second.holder() == "job-1@gw1"
        other = index.source_lock(8)
        assert other.acquire("job-3@gw2")  # another source is free
        other.release()
    finally:
        first.release()
    assert second.acquire("job-2@gw2")
    second.release()


def test_a_lock_whose_session_ended_stops_the_batch_that_would_follow(index: PgRagIndex, pgvector_db: str) -> None:
    lock = index.source_lock(1)
    assert lock.acquire("job-lost@gw1")
    try:
        lock.confirm()
        index.write_batch([doc("a", ["alpha"])], in_transaction=lambda db: lock.confirm())
        # What a PostgreSQL restart does to the lock's session (the pooled writers reconnect).
        with psycopg.connect(pgvector_db, autocommit=True) as admin:
            ended = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                (SYNC_LOCK_PREFIX + "job-lost@gw1",),
            ).fetchall()
        assert ended == [(True,)]
        with pytest.raises(Unavailable, match="sync lock of this source was lost"):
            lock.confirm()
        with pytest.raises(Unavailable):
            index.write_batch([doc("b", ["beta"])], in_transaction=lambda db: lock.confirm())
        assert counts(index)["rag_documents"] == 1  # batch b rolled back
        successor = index.source_lock(1)
        assert successor.acquire("job-next@gw2")  # the source is free for another sync
        successor.release()
    finally:
        lock.release()


def test_state_statements_take_sqlite_placeholders(index: PgRagIndex) -> None:
    index.run(lambda db: db.execute("INSERT INTO rag_sync_state (source_id, cursor_json) VALUES (?, ?)", (1, '{"pk": 5}')))
    assert index.query("SELECT cursor_json FROM rag_sync_state WHERE source_id = ?", (1,)) == [{"cursor_json": '{"pk": 5}'}]
    index.write_batch([doc(f"d{i}", [f"text {i}"]) for i in range(7)])
    assert sorted(d for part in index.iter_doc_ids(1, batch=3) for d in part) == sorted(f"d{i}" for i in range(7))
