"""Vector storage of the RAG index: SQLite holds the float32 vectors (the truth), an in-process
HNSW index (usearch, i8-quantised) beside rag.db answers nearest-neighbour queries fast.

Write path: `write_vectors` / `delete_vectors` run inside the caller's write transaction and
append the touched rowids to `rag_vec_changes`, so vectors, chunks and the change log commit or
roll back together. Read path: every `VectorIndex.search` first calls `refresh`, which catches
the ANN index up with whatever other processes committed since this process last looked (one tiny
query when nothing changed). ANN candidates are rescored with the exact float vectors, so the
distances returned are exact cosine distances whichever path produced them.

Filters are applied inside the search rather than after it: the ANN is over-fetched in proportion
to the filter's selectivity (growing until enough rows pass), and a small allowed set is scored
exactly instead. See bench/README.md for the measured trade-offs.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import apsw
import numpy as np
import orjson

from backends.retrieval.storage.sqlite.ann_filter import EXACT_MAX_ROWIDS, Filter, sql_filter
from backends.retrieval.storage.sqlite.ann_snapshot import AnnSnapshots, new_ann_index
from gateway.errors import InvalidArgument, Unavailable
from gateway.sqlite import iter_statements, scalar, schema_section, transaction

log = logging.getLogger(__name__)

__all__ = [
    "EXACT_MAX_ROWIDS",
    "VectorIndex",
    "apply_vector_schema",
    "delete_vectors",
    "read_vectors",
    "sql_filter",
    "vector_schema",
    "write_vectors",
]

# Candidates rescored with exact floats: at least this many, or 2*k. Rescoring 200 rows costs
# ~1 ms (one IN-list query), and it turns quantised graph distances into exact ones.
RESCORE_MIN = 40
# Scoring one allowed row exactly (read its floats from SQLite) costs about this many graph
# candidates of over-fetch; a set is scored exactly when that is the cheaper of the two, i.e.
# below ~3*sqrt(N) rows (bench/README.md).
EXACT_COST_RATIO = 1.7
# Beyond this many graph candidates the over-fetch stops and the filtered search goes exact.
OVERFETCH_MAX = 20_000
# Rows read per batch when scanning SQLite (rebuild, exact search).
SCAN_BATCH = 20_000
# Change-log rows applied per hold of the index lock when catching up (~60 us each: ~0.12 s).
# A search applies at most this many itself; a bigger backlog (a large sync by another
# process) is applied by catch_up in the background, the lock released between batches, so
# no search waits for more than one batch. Meanwhile the newest vectors are missing from the
# graph only (their chunks are still found by FTS, and by exact search under a filter).
CATCH_UP_BATCH = 2_000


def vector_schema(dim: int) -> str:
    """DDL for the vector tables of an index of `dim`-dimensional vectors."""
    if not isinstance(dim, int) or not 1 <= dim <= 8192:
        raise InvalidArgument(f"vector dimension must be an integer in 1..8192, got {dim!r}")
    return schema_section("rag_vectors").replace("{dim}", str(dim))


def apply_vector_schema(conn: apsw.Connection, dim: int) -> None:
    """Create the vector tables if missing; refuse a database built for another dimension."""
    for statement in iter_statements(vector_schema(dim)):
        conn.execute(statement)
    stored = scalar(conn, "SELECT value FROM rag_vec_meta WHERE key = 'dim'")
    if int(stored) != dim:
        raise InvalidArgument(f"rag.db holds {stored}-dimensional vectors; this index is configured for {dim}")


def _as_matrix(vectors: np.ndarray, *, rows: int | None = None) -> np.ndarray:
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or (rows is not None and matrix.shape[0] != rows):
        raise InvalidArgument(f"expected {rows} vectors, got an array of shape {vectors.shape}")
    if not np.all(np.isfinite(matrix)):
        raise InvalidArgument("vectors contain NaN or infinity")
    return matrix


def write_vectors(conn: apsw.Connection, rowids: Sequence[int], vectors: np.ndarray) -> None:
    """Insert or replace the vectors of `rowids` (call inside the caller's write transaction).

    Vectors are normalised here, so cosine distance is `1 - dot` everywhere downstream."""
    if len(rowids) == 0:
        return
    matrix = _as_matrix(vectors, rows=len(rowids))
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise InvalidArgument("a zero vector has no direction; cannot index it")
    matrix = (matrix / norms).astype(np.float32)
    keys = [int(r) for r in rowids]
    # One statement for the batch (row i's vector is bytes [i*w, (i+1)*w) of one blob): executemany
    # would take the GIL back between rows, a wait while another thread runs Python (storage/records.py).
    row_bytes = matrix.shape[1] * 4
    conn.execute(
        "INSERT OR REPLACE INTO rag_vec_chunks (chunk_rowid, embedding)"
        " SELECT value, substr(?2, key * ?3 + 1, ?3) FROM json_each(?1) ORDER BY key",
        (orjson.dumps(keys), matrix.tobytes(), row_bytes),
    )
    _log_changes(conn, keys)


def _log_changes(conn: apsw.Connection, keys: list[int]) -> None:
    """Append the rowids to rag_vec_changes, in order, in one statement."""
    conn.execute("INSERT INTO rag_vec_changes (chunk_rowid) SELECT value FROM json_each(?) ORDER BY key", (orjson.dumps(keys),))


def delete_vectors(conn: apsw.Connection, rowids: Sequence[int]) -> None:
    """Delete the vectors of `rowids` (inside the caller's write transaction); absent ones are ignored."""
    keys = [int(r) for r in rowids]
    if keys:
        conn.execute("DELETE FROM rag_vec_chunks WHERE chunk_rowid IN (SELECT value FROM json_each(?))", (orjson.dumps(keys),))
        _log_changes(conn, keys)


def read_vectors(conn: apsw.Connection, rowids: Iterable[int], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(rowids found, float32 matrix) for the given rowids; one IN-list query per batch."""
    wanted = [int(r) for r in rowids]
    found: list[int] = []
    blobs: list[bytes] = []
    for start in range(0, len(wanted), SCAN_BATCH):
        batch = orjson.dumps(wanted[start : start + SCAN_BATCH])
        for rowid, blob in conn.execute(
            "SELECT chunk_rowid, embedding FROM rag_vec_chunks WHERE chunk_rowid IN (SELECT value FROM json_each(?))",
            (batch,),
        ):
            found.append(rowid)
            blobs.append(blob)
    matrix = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(found), dim)
    return np.array(found, dtype=np.int64), matrix


def _top_k(rowids: np.ndarray, distances: np.ndarray, k: int) -> list[tuple[int, float]]:
    if len(rowids) > k:
        part = np.argpartition(distances, k - 1)[:k]
        rowids, distances = rowids[part], distances[part]
    order = np.lexsort((rowids, distances))  # ties broken by rowid: deterministic results
    return [(int(rowids[i]), float(distances[i])) for i in order]


@dataclass(frozen=True)
class Candidates:
    """Rowids and their exact float32 vectors, as one search gathered them."""

    rowids: np.ndarray
    matrix: np.ndarray

    @classmethod
    def none(cls, dim: int) -> Candidates:
        return cls(np.empty(0, dtype=np.int64), np.empty((0, dim), dtype=np.float32))

    def nearest(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The k nearest to `query` (unit length) as (rowid, cosine distance), nearest first."""
        return _top_k(self.rowids, 1.0 - self.matrix @ query, k) if len(self.rowids) and k > 0 else []

    def including(self, rowids: np.ndarray, matrix: np.ndarray) -> Candidates:
        """These candidates plus the given rows (those already here are not repeated)."""
        new = ~np.isin(rowids, self.rowids)
        return Candidates(np.concatenate([self.rowids, rowids[new]]), np.concatenate([self.matrix, matrix[new]]))

    def distances(self, query: np.ndarray) -> dict[int, float]:
        return {int(r): float(d) for r, d in zip(self.rowids, 1.0 - self.matrix @ query, strict=True)}


class VectorIndex:
    """The ANN index of one rag.db, kept in step with SQLite (see module docstring)."""

    def __init__(self, db_path: Path, *, dim: int) -> None:
        self.dim = dim
        self.snapshots = AnnSnapshots(Path(str(db_path) + ".ann"), dim=dim)
        self._lock = threading.RLock()
        self._index = None  # usearch Index, loaded lazily by refresh()
        self._generation: str | None = None
        self._seq = 0  # last rag_vec_changes.seq applied to self._index
        self._saved_seq = -1

    # ---- keeping up with SQLite -------------------------------------------------------------

    def refresh(self, conn: apsw.Connection, *, max_changes: int | None = None) -> bool:
        """Apply changes committed since this process last looked (at most max_changes of
        them); load or rebuild if needed. Returns whether the index is level with the log."""
        if self._index is not None and conn.txn_state("main") == apsw.SQLITE_TXN_WRITE:
            # This connection's own uncommitted writes may still roll back (and their seq numbers
            # be reused by another commit): catch up after COMMIT instead. Results stay correct
            # meanwhile because every candidate is rescored from SQLite.
            return False
        with self._lock, _read_snapshot(conn):
            generation, head, trimmed = self._log_position(conn)
            if self._index is None or generation != self._generation or self._seq > head or self._seq < trimmed:
                self._load_or_rebuild(conn, generation, head, trimmed)
            if self._seq < head:
                through = head if max_changes is None else min(head, self._seq + max_changes)
                self._apply_changes(conn, self._seq, through)
                self._seq = through
            return self._seq == head

    def catch_up(self, conn: apsw.Connection, stop: threading.Event | None = None) -> None:
        """Apply what other connections committed, CATCH_UP_BATCH changes per hold of the lock,
        so searches meanwhile wait for one batch at most. Called after a sync in this process
        and by RagHandler's follower thread for syncs of other processes (929 changes, the demo
        corpus: 52-68 ms in all). Loads nothing: a process that never searched (the ingest
        CLI) keeps no ANN index."""
        while self._index is not None and not (stop is not None and stop.is_set()):
            before = self._seq
            if self.refresh(conn, max_changes=CATCH_UP_BATCH) or self._seq == before:
                return  # level; or no progress: conn holds a write transaction, catch up after its COMMIT

    def _log_position(self, conn: apsw.Connection) -> tuple[str, int, int]:
        try:
            generation, head, trimmed = next(
                conn.execute(
                    "SELECT (SELECT value FROM rag_vec_meta WHERE key = 'generation'),"
                    " coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'rag_vec_changes'), 0),"
                    " (SELECT value FROM rag_vec_meta WHERE key = 'trimmed_through_seq')"
                )
            )
        except apsw.SQLError as exc:
            raise Unavailable("the vector tables of rag.db are missing; apply vector_schema first") from exc
        return str(generation), int(head), int(trimmed)

    def _load_or_rebuild(self, conn: apsw.Connection, generation: str, head: int, trimmed: int) -> None:
        loaded = self.snapshots.load_newest(generation, max_seq=head, min_seq=trimmed)
        if loaded is not None:
            self._index, self._seq = loaded
            self._saved_seq = self._seq
        else:
            self._index = self._rebuild(conn)
            self._seq = head
        self._generation = generation
        if loaded is None:
            self.save()  # a rebuild is expensive at scale; keep its result for the next process

    def _rebuild(self, conn: apsw.Connection):
        total = scalar(conn, "SELECT count(*) FROM rag_vec_chunks")
        log.info("rebuilding the ANN index of %s from SQLite (%d vectors)", self.snapshots.directory, total)
        index = new_ann_index(self.dim)
        done = 0
        cursor = conn.execute("SELECT chunk_rowid, embedding FROM rag_vec_chunks")
        while batch := list(islice(cursor, SCAN_BATCH)):
            keys = np.fromiter((r for r, _ in batch), dtype=np.uint64, count=len(batch))
            matrix = np.frombuffer(b"".join(b for _, b in batch), dtype=np.float32).reshape(len(batch), self.dim)
            index.add(keys, matrix)
            done += len(batch)
            log.info("ANN rebuild: %d/%d vectors", done, total)
        return index

    def _apply_changes(self, conn: apsw.Connection, after_seq: int, through_seq: int) -> None:
        changed = [
            r
            for (r,) in conn.execute(
                "SELECT DISTINCT chunk_rowid FROM rag_vec_changes WHERE seq > ? AND seq <= ?", (after_seq, through_seq)
            )
        ]
        present, matrix = read_vectors(conn, changed, self.dim)
        keys = np.array(changed, dtype=np.uint64)
        stale = keys[self._index.contains(keys)] if len(keys) else keys
        if len(stale):
            self._index.remove(stale)
        if len(present):
            self._index.add(present.astype(np.uint64), matrix)

    def save(self) -> None:
        """Persist the ANN index (atomically) with the change-log position it reflects."""
        with self._lock:
            if self._index is None or self._saved_seq == self._seq:
                return
            self.snapshots.save(self._index, self._generation or "", self._seq)
            self._saved_seq = self._seq

    def close(self) -> None:
        """Save the snapshot so the next process starts from it instead of replaying the log."""
        self.save()

    def compact_changes(self, conn: apsw.Connection) -> int:
        """Delete change-log rows the saved snapshot already reflects; returns how many.

        A process whose in-memory index is older than the trimmed point reloads the snapshot
        (refresh sees trimmed_through_seq move past it), so nobody misses a change."""
        self.save()
        with self._lock:
            if self._saved_seq <= 0:
                return 0
            with transaction(conn):
                conn.execute("DELETE FROM rag_vec_changes WHERE seq <= ?", (self._saved_seq,))
                deleted = conn.changes()
                conn.execute(
                    "UPDATE rag_vec_meta SET value = ? WHERE key = 'trimmed_through_seq' AND CAST(value AS INTEGER) < ?",
                    (str(self._saved_seq), self._saved_seq),
                )
            return deleted

    # ---- queries ----------------------------------------------------------------------------

    def size(self) -> int:
        """Vectors in the ANN index (0 before it is loaded): about the number of chunks."""
        with self._lock:
            return len(self._index) if self._index is not None else 0

    def search(
        self,
        conn: apsw.Connection,
        query: np.ndarray,
        k: int,
        *,
        allowed_rowids: set[int] | None = None,
        allowed: Callable[[int], bool] | None = None,
        allowed_many: Callable[[list[int]], Collection[int]] | None = None,
    ) -> list[tuple[int, float]]:
        """The k nearest chunks as (rowid, cosine distance), nearest first, passing every filter.

        `allowed_rowids` is an explicit set; `allowed` checks one rowid; `allowed_many` checks a
        batch (e.g. one SQL query over the candidates: see `sql_filter`). A small allowed set is
        scored exactly; otherwise the graph is over-fetched until enough candidates pass."""
        q = self._query(query)
        pool = self.candidates(conn, q, k, allowed_rowids=allowed_rowids, allowed=allowed, allowed_many=allowed_many)
        return pool.nearest(q, k)

    def candidates(
        self,
        conn: apsw.Connection,
        query: np.ndarray,
        k: int,
        *,
        allowed_rowids: set[int] | None = None,
        allowed: Callable[[int], bool] | None = None,
        allowed_many: Callable[[list[int]], Collection[int]] | None = None,
    ) -> Candidates:
        """The float vectors of the candidates `search` ranks (at least k of them when that
        many pass): a second query close to this one can be ranked over them without a search."""
        q = self._query(query)
        if k <= 0 or (allowed_rowids is not None and not allowed_rowids):
            return Candidates.none(self.dim)
        self.refresh(conn, max_changes=CATCH_UP_BATCH)  # a bigger backlog: see catch_up
        passing = Filter(allowed_rowids, allowed, allowed_many)
        # Unfiltered: the graph's own candidate list (expansion_search long) costs the same for
        # 40 results as for 10, and rescoring 40 with exact floats repairs i8 quantisation error.
        # Filtered: k passing candidates suffice; the over-fetch is what costs.
        want = max(2 * k, RESCORE_MIN) if passing.is_empty else k
        keys, go_exact = self._graph_candidates(q, want, passing, allowed_rowids)
        # An exact pass runs outside the lock: it reads SQLite and must not stall other searches.
        if go_exact and allowed_rowids is not None:
            keys = passing(list(allowed_rowids))  # a small set: all of it
        elif go_exact:
            keys = [rowid for rowid, _ in self.exact_search(conn, q, k, allowed=allowed, allowed_many=allowed_many)]
        return Candidates(*read_vectors(conn, keys[: max(want, 2 * k)] if not go_exact else keys, self.dim))

    def _graph_candidates(
        self, q: np.ndarray, want: int, passing: Filter, allowed_rowids: set[int] | None
    ) -> tuple[list[int], bool]:
        """(passing candidates nearest first, go_exact): over-fetch the graph until `want` pass,
        or decide that scoring the allowed rows exactly is cheaper."""
        with self._lock:  # serialised with refresh(): usearch must not be searched while it is modified
            size = len(self._index)
            if allowed_rowids is not None:  # known selectivity, plus a margin for its correlation with the query
                fetch = math.ceil(1.5 * want * size / len(allowed_rowids))
                if len(allowed_rowids) * EXACT_COST_RATIO <= fetch or fetch > OVERFETCH_MAX:
                    return [], True
            else:
                fetch = want if passing.is_empty else max(want * 4, self._index.expansion_search)
            fetch = min(size, fetch)
            keys: list[int] = []
            while size:
                keys = passing.first([int(key) for key in self._index.search(q, fetch, threads=1).keys], want)
                if len(keys) >= want or fetch >= size:
                    break
                if fetch >= OVERFETCH_MAX:  # the filter passes too little for the graph
                    return [], True
                # Size the next round by the pass rate just seen (at least x2, at most x8).
                rate_based = math.ceil(1.5 * want * fetch / max(len(keys), 1))
                fetch = min(size, OVERFETCH_MAX, max(fetch * 2, min(fetch * 8, rate_based)))
            return keys, False

    def distances(self, conn: apsw.Connection, query: np.ndarray, rowids: Sequence[int]) -> dict[int, float]:
        """Exact cosine distance from `query` to each given rowid that has a vector."""
        q = self._query(query)
        found, matrix = read_vectors(conn, rowids, self.dim)
        dist = 1.0 - matrix @ q
        return {int(r): float(d) for r, d in zip(found, dist, strict=True)}

    def exact_search(
        self,
        conn: apsw.Connection,
        query: np.ndarray,
        k: int,
        *,
        allowed_rowids: set[int] | None = None,
        allowed: Callable[[int], bool] | None = None,
        allowed_many: Callable[[list[int]], Collection[int]] | None = None,
    ) -> list[tuple[int, float]]:
        """Brute force over the float vectors in SQLite: the truth recall is measured against."""
        q = self._query(query)
        if k <= 0:
            return []
        passing = Filter(None, allowed, allowed_many)
        if allowed_rowids is not None:
            return Candidates(*read_vectors(conn, passing(list(allowed_rowids)), self.dim)).nearest(q, k)
        best_rowids = np.empty(0, dtype=np.int64)
        best_dist = np.empty(0, dtype=np.float32)
        cursor = conn.execute("SELECT chunk_rowid, embedding FROM rag_vec_chunks")
        while batch := list(islice(cursor, SCAN_BATCH)):
            if not passing.is_empty:
                kept = set(passing([r for r, _ in batch]))
                batch = [row for row in batch if row[0] in kept]
            if not batch:
                continue
            keys = np.fromiter((r for r, _ in batch), dtype=np.int64, count=len(batch))
            matrix = np.frombuffer(b"".join(b for _, b in batch), dtype=np.float32).reshape(len(batch), self.dim)
            top = _top_k(np.concatenate([best_rowids, keys]), np.concatenate([best_dist, 1.0 - matrix @ q]), k)
            best_rowids = np.array([r for r, _ in top], dtype=np.int64)
            best_dist = np.array([d for _, d in top], dtype=np.float32)
        return [(int(r), float(d)) for r, d in zip(best_rowids, best_dist, strict=True)]

    def _query(self, query: np.ndarray) -> np.ndarray:
        q = _as_matrix(query).reshape(-1)
        if q.shape[0] != self.dim:
            raise InvalidArgument(f"query vector has {q.shape[0]} dimensions; the index has {self.dim}")
        norm = float(np.linalg.norm(q))
        if norm == 0.0:
            raise InvalidArgument("the query vector is all zeros")
        return (q / norm).astype(np.float32)


class _read_snapshot:
    """One read transaction around several statements, unless the caller already holds one
    (then its transaction already gives a consistent view)."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn
        self.began = False

    def __enter__(self) -> None:
        if not self.conn.in_transaction:
            self.conn.execute("BEGIN DEFERRED")
            self.began = True

    def __exit__(self, *_: object) -> None:
        if self.began:
            self.conn.execute("COMMIT")
