"""Vector storage and ANN search of the RAG index, against real SQLite files and a real usearch
index: transactions, catch-up between processes, rebuild from SQLite, filters, recall."""

from __future__ import annotations

from pathlib import Path

import apsw
import numpy as np
import pytest

from backends.retrieval.storage.sqlite import vector_store as vectors_module
from backends.retrieval.storage.sqlite.vector_store import (
    VectorIndex,
    apply_vector_schema,
    delete_vectors,
    vector_schema,
    write_vectors,
)
from gateway.errors import InvalidArgument
from gateway.sqlite import connect, transaction

DIM = 32


def clustered_unit_vectors(n: int, dim: int, *, clusters: int = 40, spread: float = 0.35, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres: the shape of real embeddings (neighbours are close)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def open_db(path: Path, dim: int = DIM) -> apsw.Connection:
    conn = connect(path, vec=True)
    apply_vector_schema(conn, dim)
    return conn


def brute_force(matrix: np.ndarray, rowids: np.ndarray, q: np.ndarray, k: int) -> list[int]:
    dist = 1.0 - matrix @ (q / np.linalg.norm(q))
    return [int(rowids[i]) for i in np.lexsort((rowids, dist))[:k]]


@pytest.fixture
def db(tmp_path: Path) -> tuple[Path, apsw.Connection]:
    path = tmp_path / "rag.db"
    return path, open_db(path)


def test_schema_is_per_dimension_and_refuses_a_mismatch(tmp_path: Path) -> None:
    assert "4 * 384" in vector_schema(384)
    with pytest.raises(InvalidArgument):
        vector_schema(0)
    conn = open_db(tmp_path / "rag.db", 16)
    with pytest.raises(InvalidArgument, match="16-dimensional"):
        apply_vector_schema(conn, 32)


def test_write_search_update_delete(db) -> None:
    path, conn = db
    vectors = clustered_unit_vectors(300, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 301)), vectors * 3.0)  # stored normalised
    index = VectorIndex(path, dim=DIM)
    hits = index.search(conn, vectors[9], 5)
    assert hits[0][0] == 10 and hits[0][1] == pytest.approx(0.0, abs=1e-5)
    assert [d for _, d in hits] == sorted(d for _, d in hits)

    with transaction(conn):  # move rowid 10 onto vector 200's position; delete rowid 200
        write_vectors(conn, [10], vectors[199:200])
        delete_vectors(conn, [200, 9999])
    hits = index.search(conn, vectors[199], 3)
    assert hits[0] == (10, pytest.approx(0.0, abs=1e-5))
    assert 200 not in [r for r, _ in hits]
    assert index.distances(conn, vectors[199], [10, 200, 11]).keys() == {10, 11}


def test_bad_vectors_are_refused_with_clear_errors(db) -> None:
    path, conn = db
    with pytest.raises(InvalidArgument, match="expected 2 vectors"), transaction(conn):
        write_vectors(conn, [1, 2], clustered_unit_vectors(3, DIM))
    with pytest.raises(InvalidArgument, match="zero vector"), transaction(conn):
        write_vectors(conn, [1], np.zeros((1, DIM), dtype=np.float32))
    bad = clustered_unit_vectors(1, DIM)
    bad[0, 0] = np.nan
    with pytest.raises(InvalidArgument, match="NaN"), transaction(conn):
        write_vectors(conn, [1], bad)
    with pytest.raises(apsw.ConstraintError), transaction(conn):  # wrong width never reaches the table
        conn.execute("INSERT INTO rag_vec_chunks VALUES (1, ?)", (b"\0" * 8,))
    index = VectorIndex(path, dim=DIM)
    with pytest.raises(InvalidArgument, match="dimensions"):
        index.search(conn, np.ones(DIM + 1, dtype=np.float32), 3)
    assert index.search(conn, np.ones(DIM, dtype=np.float32), 3) == []


def test_rollback_leaves_the_ann_consistent(db) -> None:
    path, conn = db
    vectors = clustered_unit_vectors(200, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 101)), vectors[:100])
    index = VectorIndex(path, dim=DIM)
    index.refresh(conn)
    with pytest.raises(RuntimeError), transaction(conn):
        write_vectors(conn, list(range(101, 201)), vectors[100:])
        delete_vectors(conn, [1])
        raise RuntimeError("ingestion failed half way")
    with transaction(conn):  # a later commit reuses the rolled-back seq numbers
        write_vectors(conn, [150], vectors[149:150])
    hits = index.search(conn, vectors[0], 1)
    assert hits[0][0] == 1  # the rolled-back delete never happened
    assert index.search(conn, vectors[120], 1)[0][0] != 121  # nor the rolled-back inserts
    assert index.search(conn, vectors[149], 1)[0][0] == 150
    assert len(index._index) == 101


def test_two_processes_catch_up_through_sqlite(db) -> None:
    path, conn = db
    other_conn = connect(path, vec=True)
    vectors = clustered_unit_vectors(400, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 201)), vectors[:200])
    server, ingester = VectorIndex(path, dim=DIM), VectorIndex(path, dim=DIM)
    assert server.search(conn, vectors[5], 1)[0][0] == 6
    with transaction(other_conn):  # the "CLI ingestion" process writes through its own connection
        write_vectors(other_conn, list(range(201, 401)), vectors[200:])
        delete_vectors(other_conn, [6])
    ingester.refresh(other_conn)
    assert server.search(conn, vectors[300], 1)[0][0] == 301
    assert 6 not in [r for r, _ in server.search(conn, vectors[5], 5)]
    assert len(server._index) == len(ingester._index) == 399


def test_a_search_applies_one_batch_of_a_big_backlog_and_catch_up_the_rest(db) -> None:
    """Another process commits more changes than one batch: a search waits for one batch only
    (its own results still come right through FTS and rescoring); catch_up, the lock released
    between batches, brings the graph level with the log."""
    path, conn = db
    other_conn = connect(path, vec=True)
    count = vectors_module.CATCH_UP_BATCH * 2 + 50
    vectors = clustered_unit_vectors(count + 10, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 11)), vectors[:10])
    server = VectorIndex(path, dim=DIM)
    server.refresh(conn)
    with transaction(other_conn):
        write_vectors(other_conn, list(range(11, count + 11)), vectors[10:])
    server.search(conn, vectors[0], 1)
    assert server._seq == 10 + vectors_module.CATCH_UP_BATCH and len(server._index) == 10 + vectors_module.CATCH_UP_BATCH
    assert server.refresh(conn, max_changes=vectors_module.CATCH_UP_BATCH) is False  # one more batch, not level yet
    assert server._seq == 10 + 2 * vectors_module.CATCH_UP_BATCH
    server.catch_up(conn)
    assert server._seq == count + 10 and len(server._index) == count + 10
    assert server.refresh(conn, max_changes=vectors_module.CATCH_UP_BATCH) is True
    assert server.search(conn, vectors[count + 9], 1)[0][0] == count + 10


def test_catch_up_loads_nothing_in_a_process_that_never_searched(db) -> None:
    path, conn = db
    with transaction(conn):
        write_vectors(conn, [1, 2], clustered_unit_vectors(2, DIM))
    cli = VectorIndex(path, dim=DIM)
    cli.catch_up(conn)
    assert cli._index is None


def test_snapshot_is_reused_and_rebuilt_when_missing_or_corrupt(db) -> None:
    path, conn = db
    vectors = clustered_unit_vectors(500, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 501)), vectors)
    first = VectorIndex(path, dim=DIM)
    first.refresh(conn)  # builds from SQLite and saves a snapshot
    with transaction(conn):
        delete_vectors(conn, [1])
    first.refresh(conn)
    first.save()
    snapshots = list(Path(str(path) + ".ann").glob("*.usearch"))
    assert len(snapshots) == 1 and snapshots[0].name.endswith("-501.usearch")

    with transaction(conn):  # committed after the snapshot: a new process must catch up
        write_vectors(conn, [2], vectors[2:3])
    second = VectorIndex(path, dim=DIM)
    second.refresh(conn)
    assert second._seq == 502 and len(second._index) == 499
    assert second.search(conn, vectors[2], 2)[0][0] in (2, 3)

    snapshots[0].write_bytes(snapshots[0].read_bytes()[: snapshots[0].stat().st_size // 2])
    third = VectorIndex(path, dim=DIM)
    assert third.search(conn, vectors[400], 1)[0][0] == 401  # rebuilt from SQLite
    assert len(third._index) == 499

    for snapshot in Path(str(path) + ".ann").glob("*.usearch"):
        snapshot.unlink()
    fourth = VectorIndex(path, dim=DIM)
    assert fourth.search(conn, vectors[0], 1)[0][0] != 1
    assert len(list(Path(str(path) + ".ann").glob("*.usearch"))) == 1


def test_snapshot_of_a_recreated_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rag.db"
    vectors = clustered_unit_vectors(50, DIM)
    conn = open_db(path)
    with transaction(conn):
        write_vectors(conn, list(range(1, 51)), vectors)
    VectorIndex(path, dim=DIM).refresh(conn)
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    conn = open_db(path)  # same path, new generation, same seq numbers, different vectors
    with transaction(conn):
        write_vectors(conn, list(range(1, 51)), vectors[::-1].copy())
    hit = VectorIndex(path, dim=DIM).search(conn, vectors[0], 1)[0]
    assert hit[0] == 50


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    path = tmp_path_factory.mktemp("recall") / "rag.db"
    conn = open_db(path, 64)
    vectors = clustered_unit_vectors(6000, 64, clusters=60, seed=1)
    rowids = np.arange(1, 6001) * 3  # rowids need not be dense
    with transaction(conn):
        write_vectors(conn, rowids.tolist(), vectors)
    conn.close()
    return path, rowids, vectors


def test_recall_against_exact(corpus) -> None:
    path, rowids, vectors = corpus
    conn = connect(path, vec=True)
    index = VectorIndex(path, dim=64)
    queries = clustered_unit_vectors(50, 64, clusters=60, seed=1)[:50] + 0.05
    hits = 0
    for q in queries:
        truth = brute_force(vectors, rowids, q, 10)
        assert [r for r, _ in index.exact_search(conn, q, 10)] == truth
        got = index.search(conn, q, 10)
        hits += len({r for r, _ in got} & set(truth))
        exact = index.distances(conn, q, [r for r, _ in got])
        assert all(d == pytest.approx(exact[r], abs=1e-6) for r, d in got)
    assert hits / (10 * len(queries)) >= 0.95


@pytest.mark.parametrize("allowed_count", [25, 400, 3000])  # exact, over-fetch x20, over-fetch x3
def test_filtered_search_returns_only_allowed_rows_in_exact_order(corpus, allowed_count: int) -> None:
    path, rowids, vectors = corpus
    conn = connect(path, vec=True)
    index = VectorIndex(path, dim=64)
    rng = np.random.default_rng(allowed_count)
    allowed_rowids = {int(r) for r in rng.choice(rowids, allowed_count, replace=False)}
    mask = np.isin(rowids, list(allowed_rowids))
    recall = []
    for q in vectors[rng.choice(len(vectors), 20)]:
        truth = brute_force(vectors[mask], rowids[mask], q, 10)
        got = [r for r, _ in index.search(conn, q, 10, allowed_rowids=allowed_rowids)]
        assert set(got) <= allowed_rowids and len(got) == 10
        recall.append(len(set(got) & set(truth)) / 10)
        assert [r for r, _ in index.exact_search(conn, q, 10, allowed_rowids=allowed_rowids)] == truth
    assert np.mean(recall) >= 0.95


def test_filter_by_predicate_and_by_set_combine(corpus) -> None:
    path, rowids, vectors = corpus
    conn = connect(path, vec=True)
    index = VectorIndex(path, dim=64)
    even = {int(r) for r in rowids if r % 2 == 0}
    for q in vectors[:10]:
        got = index.search(conn, q, 10, allowed=lambda r: r % 2 == 0)
        assert len(got) == 10 and all(r % 2 == 0 for r, _ in got)
        both = index.search(conn, q, 10, allowed_rowids=even, allowed=lambda r: r % 4 == 0)
        assert len(both) == 10 and all(r % 4 == 0 for r, _ in both)
    rare = index.search(conn, vectors[0], 10, allowed=lambda r: r == 9)  # over-fetch gives up, goes exact
    assert [r for r, _ in rare] == [9]
    assert index.search(conn, vectors[0], 10, allowed_rowids=set()) == []


def test_compacting_the_change_log_keeps_every_process_consistent(db) -> None:
    path, conn = db
    vectors = clustered_unit_vectors(300, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 201)), vectors[:200])
    lagging, compactor = VectorIndex(path, dim=DIM), VectorIndex(path, dim=DIM)
    lagging.refresh(conn)  # at seq 200
    with transaction(conn):
        write_vectors(conn, list(range(201, 301)), vectors[200:])
        delete_vectors(conn, [1])
    compactor.refresh(conn)
    assert compactor.compact_changes(conn) == 301
    assert conn.execute("SELECT count(*) FROM rag_vec_changes").fetchall() == [(0,)]
    with transaction(conn):
        write_vectors(conn, [2], vectors[250:251])
    # The lagging process cannot replay seqs 201..301 any more: it reloads the snapshot, then catches up.
    assert lagging.search(conn, vectors[250], 2)[0][0] in (2, 251)
    assert len(lagging._index) == 299 and lagging._seq == 302


def test_sql_filter_through_the_real_rag_schema(tmp_path: Path) -> None:
    from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord, RagIndex
    from backends.retrieval.storage.sqlite.vector_store import sql_filter

    vectors = clustered_unit_vectors(5000, DIM, seed=3)
    index = RagIndex.open(tmp_path / "rag.db", embedding_model_id="test-model", dim=DIM)
    for source_id in (1, 2):
        index.upsert_source(source_id, f"source{source_id}")
    docs = [
        DocumentRecord(
            f"d{i}", 1 + i % 2, f"source{1 + i % 2}", {"id": i}, "t", "", {}, None,
            [ChunkRecord(f"d{i}#0", 0, "t", f"body {i}", {}, f"h{i}", vectors[i])],
        )
        for i in range(5000)
    ]  # fmt: skip
    index.write_batch(docs)
    conn = index.conn
    vindex = index.vectors
    chunk_source = dict(conn.execute("SELECT chunk_rowid, source_id FROM rag_chunks").fetchall())
    broad = sql_filter(conn, "c.source_id = ?", (2,))
    assert set(broad) == {"allowed_many"}  # 2500 chunks: checked in batches, never materialised
    narrow = sql_filter(conn, "c.doc_id IN (?, ?)", ("d7", "d8"))
    assert narrow == {"allowed_rowids": {r for r, s in chunk_source.items() if r in (8, 9)}}
    for q in vectors[:20]:
        got = vindex.search(conn, q, 10, **broad)
        assert len(got) == 10 and all(chunk_source[r] == 2 for r, _ in got)
        truth = vindex.exact_search(conn, q, 10, **broad)
        assert len({r for r, _ in got} & {r for r, _ in truth}) >= 8
    assert {r for r, _ in vindex.search(conn, vectors[7], 10, **narrow)} == {8, 9}
    index.close()
    assert list((tmp_path / "rag.db.ann").glob("*.usearch"))  # close() saved a snapshot


def test_a_filter_too_selective_for_the_graph_falls_back_to_exact(corpus, monkeypatch) -> None:
    import backends.retrieval.storage.sqlite.vector_store as vectors

    path, rowids, vectors_ = corpus
    conn = connect(path, vec=True)
    index = VectorIndex(path, dim=64)
    monkeypatch.setattr(vectors, "OVERFETCH_MAX", 200)  # the graph gives up after 200 candidates
    wanted = {int(r) for r in rowids[::500]}  # 12 rows scattered over every cluster
    got = index.search(conn, vectors_[0], 5, allowed_many=lambda batch: [r for r in batch if r in wanted])
    assert got == index.exact_search(conn, vectors_[0], 5, allowed_rowids=wanted)


def test_searching_inside_an_uncommitted_write_does_not_poison_the_ann(db) -> None:
    path, conn = db
    vectors = clustered_unit_vectors(30, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 11)), vectors[:10])
    index = VectorIndex(path, dim=DIM)
    index.refresh(conn)
    with pytest.raises(RuntimeError), transaction(conn):
        write_vectors(conn, [11, 12], vectors[10:12])  # seq 11, 12: rolled back below
        index.search(conn, vectors[10], 1)
        raise RuntimeError("abort")
    with transaction(conn):
        write_vectors(conn, [21, 22], vectors[20:22])  # reuses seq 11, 12
    assert index.search(conn, vectors[21], 1)[0][0] == 22
    assert 11 not in [r for r, _ in index.search(conn, vectors[10], 12)]
    assert len(index._index) == 12


def test_catch_up_inside_the_connections_own_write_transaction_returns(db) -> None:
    """Its uncommitted seqs may roll back: catch_up leaves them for after the COMMIT, and returns."""
    path, conn = db
    vectors = clustered_unit_vectors(20, DIM)
    with transaction(conn):
        write_vectors(conn, list(range(1, 11)), vectors[:10])
    index = VectorIndex(path, dim=DIM)
    index.refresh(conn)
    with transaction(conn):
        write_vectors(conn, list(range(11, 21)), vectors[10:])
        index.catch_up(conn)
        assert index._seq == 10
    index.catch_up(conn)
    assert index._seq == 20
