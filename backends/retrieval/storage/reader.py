"""The one small interface between the RAG tools and where the index lives.

search.py (ranking, fusion, feedback, scores), content.py and the tools are backend-neutral; they
read the index through a `Reader`, one per tool call, of which there are two:

    SqliteReader  rag.db: FTS5 bm25, the in-process ANN index over the float32 vectors
    PgReader      PostgreSQL + pgvector (postgresql/index.py): tsvector/GIN, HNSW with iterative scans

A reader answers in rowids and raw scores; turning them into scores and hits is search.py's job,
the same for both. `execute` runs the few plain statements both engines read alike (content by
id, the hit join), written with `?` placeholders.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import apsw
import numpy as np

from backends.drivers import LazyDriver
from backends.retrieval.call import Call
from backends.retrieval.filters import FilterSQL, all_sources_enabled
from backends.retrieval.storage.postgresql import fts as pg_fts
from backends.retrieval.storage.postgresql.index import Nearest, PgRagIndex
from backends.retrieval.storage.postgresql.ingest import pg_where
from backends.retrieval.storage.sqlite import fts, vector_store
from backends.retrieval.storage.sqlite.index import RagIndex
from backends.retrieval.storage.sqlite.vector_store import Candidates
from gateway.errors import DeadlineExceeded

if TYPE_CHECKING:
    import psycopg
else:  # imported when a PostgreSQL index opens (postgresql/index.py)
    psycopg = LazyDriver("psycopg")

# Either storage's index: what `reading` reads, and what the tools and ingestion are handed.
Index = RagIndex | PgRagIndex


class Reader(Protocol):
    dim: int
    dialect: str  # "json1" (rag.db) | "jsonb" (PostgreSQL): the JSON functions of the filters' metadata clauses
    fewer_than_k: bool  # set by a filtered vector search that stopped short of k (PostgreSQL's scan limit)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]: ...
    def hit_rows(self, rowids: list[int]) -> dict[int, tuple[Any, ...]]: ...
    def all_sources_enabled(self) -> bool: ...
    def fts_ranked(self, match: fts.MatchQuery, flt: FilterSQL, *, limit: int, offset: int = 0) -> list[tuple[int, float]]: ...
    def fts_raw_of(self, match: fts.MatchQuery, rowids: list[int]) -> dict[int, float]: ...
    def snippets(self, match: fts.MatchQuery, rowids: list[int], *, tokens: int) -> dict[int, str]: ...
    def rare_term_idf(self, match: fts.MatchQuery | None, threshold: float) -> float: ...
    def vector_candidates(self, unit: np.ndarray, k: int, flt: FilterSQL) -> Candidates: ...
    def vector_nearest(self, unit: np.ndarray, k: int, flt: FilterSQL) -> list[tuple[int, float]]: ...
    def vector_distances(self, query: np.ndarray, rowids: list[int]) -> dict[int, float]: ...
    def read_vectors(self, rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]: ...


class SqliteReader:
    """rag.db through this thread's apsw connection; the filter's ANN form is worked out once
    per call and shared by the keyword and vector halves of a hybrid search."""

    def __init__(self, index: RagIndex, conn: apsw.Connection) -> None:
        self.index, self.conn, self.dim = index, conn, index.dim
        self.dialect = "json1"
        self.fewer_than_k = False
        self._narrowing: dict[FilterSQL, dict[str, Any]] = {}

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        return self.conn.execute(sql, params)

    def hit_rows(self, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
        return {
            row[0]: row
            for row in self.conn.execute(
                "SELECT c.chunk_rowid, c.chunk_id, c.doc_id, c.source_id, s.name, c.title, d.metadata_json"
                " FROM rag_chunks c JOIN rag_sources s ON s.source_id = c.source_id JOIN rag_documents d ON d.doc_id = c.doc_id"
                f" WHERE c.chunk_rowid IN ({','.join('?' * len(rowids))})",
                rowids,
            )
        }

    def all_sources_enabled(self) -> bool:
        return all_sources_enabled(self.conn)

    def narrowing(self, flt: FilterSQL) -> dict[str, Any]:
        """How the ANN search applies the filter: nothing, a small exact rowid set, or a batch check."""
        if flt not in self._narrowing:
            self._narrowing[flt] = vector_store.sql_filter(self.conn, flt.where, flt.params) if flt.narrows else {}
        return self._narrowing[flt]

    def fts_ranked(self, match: fts.MatchQuery, flt: FilterSQL, *, limit: int, offset: int = 0) -> list[tuple[int, float]]:
        narrowing = self.narrowing(flt) if flt.narrows else None
        return fts.ranked(self.conn, match, flt, limit=limit, offset=offset, narrowing=narrowing)

    def fts_raw_of(self, match: fts.MatchQuery, rowids: list[int]) -> dict[int, float]:
        return fts.bm25_of(self.conn, match, rowids)

    def snippets(self, match: fts.MatchQuery, rowids: list[int], *, tokens: int) -> dict[int, str]:
        return fts.snippets(self.conn, match, rowids, tokens=tokens)

    def rare_term_idf(self, match: fts.MatchQuery | None, threshold: float) -> float:
        return fts.rare_term_idf(self.conn, match, self.index.vectors.size(), threshold)

    def vector_candidates(self, unit: np.ndarray, k: int, flt: FilterSQL) -> Candidates:
        return self.index.vectors.candidates(self.conn, unit, k, **self.narrowing(flt))

    def vector_nearest(self, unit: np.ndarray, k: int, flt: FilterSQL) -> list[tuple[int, float]]:
        return self.vector_candidates(unit, k, flt).nearest(unit, k)

    def vector_distances(self, query: np.ndarray, rowids: list[int]) -> dict[int, float]:
        return self.index.vectors.distances(self.conn, query, rowids)

    def read_vectors(self, rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return vector_store.read_vectors(self.conn, rowids, self.dim)


class PgReader:
    """One pooled PostgreSQL connection for the call, its statements bounded by the call's deadline."""

    def __init__(self, index: PgRagIndex, conn: psycopg.Connection, *, sources_enabled: bool) -> None:
        self.index, self.conn, self.dim = index, conn, index.dim
        self.dialect = "jsonb"
        self.fewer_than_k = False
        self._fts = pg_fts
        self._sources_enabled = sources_enabled
        self._hit_rows: dict[int, tuple[Any, ...]] = {}  # of the vector candidates, read with them

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        return iter(self.conn.execute(pg_where(sql), tuple(params)).fetchall())

    def hit_rows(self, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
        known = {r: self._hit_rows[r] for r in rowids if r in self._hit_rows}
        missing = [r for r in rowids if r not in known]
        return known | (self._fts.hit_rows(self.conn, missing) if missing else {})

    def all_sources_enabled(self) -> bool:
        return self._sources_enabled

    def fts_ranked(self, match: fts.MatchQuery, flt: FilterSQL, *, limit: int, offset: int = 0) -> list[tuple[int, float]]:
        return self._fts.fts_ranked(
            self.conn,
            _without_window(match),
            self.index.term_stats,
            where=flt.where,
            params=flt.params,
            limit=limit,
            offset=offset,
        )

    def fts_raw_of(self, match: fts.MatchQuery, rowids: list[int]) -> dict[int, float]:
        return self._fts.fts_raw_of(self.conn, _without_window(match), self.index.term_stats, rowids)

    def snippets(self, match: fts.MatchQuery, rowids: list[int], *, tokens: int) -> dict[int, str]:
        marked = self._fts.fts_snippets(
            self.conn, match, rowids, tokens=tokens, open_mark=fts.MARK_OPEN, close_mark=fts.MARK_CLOSE
        )
        cap = fts.SNIPPET_MAX_CHARS
        return {r: (s if len(s) <= cap else s[:cap] + fts.ELLIPSIS) for r, s in marked.items()}

    def rare_term_idf(self, match: fts.MatchQuery | None, threshold: float) -> float:
        if match is None or match.user_syntax:
            return 0.0
        return self.index.term_stats.rare_idf(self.conn, " ".join(self._fts.words_of(match)), threshold)

    def vector_candidates(self, unit: np.ndarray, k: int, flt: FilterSQL) -> Candidates:
        found = self._nearest(unit, k, flt, vectors=True)
        return Candidates(np.asarray(found.candidates, dtype=np.int64), found.matrix)

    def vector_nearest(self, unit: np.ndarray, k: int, flt: FilterSQL) -> list[tuple[int, float]]:
        """The k nearest by PostgreSQL's exact distances, without reading their vectors back."""
        return self._nearest(unit, k, flt, vectors=False).rows

    def _nearest(self, unit: np.ndarray, k: int, flt: FilterSQL, *, vectors: bool) -> Nearest:
        found = self.index.nearest(self.conn, unit, k, where=flt.where, params=flt.params, vectors=vectors)
        self.fewer_than_k |= found.short
        self._hit_rows.update(found.hits)  # search.hits then reads none of them again
        return found

    def vector_distances(self, query: np.ndarray, rowids: list[int]) -> dict[int, float]:
        return self.index.distances(self.conn, query, rowids)

    def read_vectors(self, rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        return self.index.read_vectors(self.conn, rowids)


def _without_window(match: fts.MatchQuery) -> fts.MatchQuery:
    """tsquery has no "within N words" operator (<N> is an exact distance): on PostgreSQL the
    all-terms ranking with a window is the all-terms ranking (every word, anywhere)."""
    return (match.all_terms() or match) if match.window else match


@contextlib.contextmanager
def pg_reader(index: PgRagIndex, call: Call) -> Iterator[PgReader]:
    """One pooled connection in autocommit (each statement its own read: no BEGIN or COMMIT
    round trip); its statement_timeout = what is left of the call, so PostgreSQL cancels a
    statement running past the deadline. The same round trip reads whether a source is
    disabled, and proves the pooled connection alive."""
    enabled: list[bool] = []

    def preamble(conn: psycopg.Connection) -> None:
        left_ms = max(1, int((call.deadline - time.monotonic()) * 1000))
        row = conn.execute(
            "SELECT set_config('statement_timeout', %s, false), NOT EXISTS (SELECT 1 FROM rag_sources WHERE enabled = 0)",
            (str(left_ms),),
        ).fetchone()
        enabled[:] = row[1:]

    with index.reading_connection(preamble) as conn:
        try:
            yield PgReader(index, conn, sources_enabled=enabled[0])
        except psycopg.errors.QueryCanceled as exc:
            raise DeadlineExceeded(f"the search ran past rag-timeout_ms ({call.caps.timeout_ms} ms)") from exc


@contextlib.contextmanager
def reading(index: Index, call: Call) -> Iterator[Reader]:
    """The Reader a tool call reads `index` through, bounded by the call's deadline: rag.db's
    connection of this thread (interrupted by SQLite's progress handler), or one pooled
    PostgreSQL connection (statement_timeout)."""
    if isinstance(index, PgRagIndex):
        with pg_reader(index, call) as reader:
            yield reader
    else:
        conn = index.conn
        with call.sqlite_deadline(conn):
            yield SqliteReader(index, conn)
