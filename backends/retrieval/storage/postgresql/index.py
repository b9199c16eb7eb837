"""The RAG index on PostgreSQL + pgvector (rag-backend = postgresql): storage only.

Same tables and meaning as rag.db (schema.sql, section rag_postgres). What SQLite does with FTS5
and the in-process ANN files, PostgreSQL does with a generated tsvector (GIN) and a pgvector
column with an HNSW index, both on rag_chunks: a filtered search is one query over one table,
and pgvector's iterative index scan (hnsw.iterative_scan, 0.8+) keeps walking the graph until k
rows pass the filter (or hnsw.max_scan_tuples is reached: then `nearest` says it came back short).

Every instance of a cluster opens the same database: a sync through one is searchable through
all as soon as it commits. Connections come from a psycopg_pool; a PostgreSQL restart makes the
calls in the gap fail UNAVAILABLE and the pool reconnects by itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.drivers import LazyDriver
from backends.retrieval.storage.postgresql.fts import TermStats
from backends.retrieval.storage.postgresql.ingest import PgExec, PgSourceLock, held_sync_jobs, pg_where
from backends.retrieval.storage.records import (
    DocumentRecord,
    DocumentRows,
    embedding_matrix,
    parts_without_repeats,
    to_json,
)
from gateway import sqlite
from gateway.errors import ConfigError, Unavailable

if TYPE_CHECKING:
    import pgvector
    import psycopg
    import psycopg_pool
    from pgvector import psycopg as pgvector_psycopg
    from psycopg import rows as pgrows
else:  # imported when a PostgreSQL index opens: a rag.db gateway never loads them (backends/drivers.py)
    pgvector = LazyDriver("pgvector")
    pgvector_psycopg = LazyDriver("pgvector.psycopg")
    psycopg = LazyDriver("psycopg")
    psycopg_pool = LazyDriver("psycopg_pool")
    pgrows = LazyDriver("psycopg.rows")

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
# What the HNSW index holds: halfvec halves it (2 bytes a dimension); its candidates are rescored
# with the stored float32 vectors (as rag.db's ANN is), so scores are exact either way.
HNSW_TYPES = {"halfvec": ("halfvec", "halfvec_cosine_ops", "HalfVector"), "vector": ("vector", "vector_cosine_ops", "Vector")}
# Candidates the graph returns for rescoring: at least this many, or 2k. Each costs a TOAST fetch
# of its float32 vector: at 1M chunks 40 took 4.5 ms p50 and 20 took 3.2 ms, recall@10 0.999 both
# at ef_search 128 (bench/README, issue 16).
RESCORE_MIN = 20
# A filter admitting at most this many chunks is scored exactly (no graph). Each allowed chunk
# costs a TOAST fetch of its vector (pgvector stores it out of line in a row this wide): at 200k
# chunks, 42 chunks (20 doc_ids) took 1.1 ms exactly against 6.0 ms through the iterative scan,
# 500 chunks 21 ms against ~10 ms unfiltered, 2,000 chunks 57 ms (bench/README, issue 16).
EXACT_SCAN_MAX = 300
HNSW_EF_SEARCH_MIN = 128  # the graph search keeps at least this many (200k: recall@10 0.929 at 64, 0.982 at 128, 8.0 ms p50)
POOL_TIMEOUT_S = 1.0  # a call in a PostgreSQL outage fails UNAVAILABLE this soon, well inside rag-timeout_ms
# psycopg_pool retries a lost connection 1, 2, 4, ... s apart until reconnect_timeout (5 min by
# default): after a few seconds' outage the next attempt was seconds past PostgreSQL's return, and
# every call until then failed its POOL_TIMEOUT_S. Given up this soon, the attempt is made again
# by the next call that asks, at once.
POOL_RECONNECT_S = 1.0
SCHEMA_LOCK_KEY = 0x7261_6770_675F_6964  # pg_advisory_xact_lock: instances creating the schema at once
# rag_chunks' columns as the insert's binary COPY writes them.
COPY_TYPES = ("text", "text", "int8", "int4", "text", "text", "text", "text", "text", "float8", "int4", "text", "vector")
INDEX_TABLES = ("rag_meta", "rag_sources", "rag_documents", "rag_doc_tags", "rag_chunks", "rag_sync_state", "rag_sync_jobs")


def hnsw_expr(dim: int, hnsw_type: str) -> str:
    """The indexed expression; a query must order by exactly this for the planner to use the index."""
    return "embedding" if hnsw_type == "vector" else f"(embedding)::halfvec({int(dim)})"


def schema_ddl(dim: int, hnsw_type: str) -> str:
    _, ops, _ = HNSW_TYPES[hnsw_type]
    section = sqlite.schema_section("rag_postgres").replace("{hnsw_expr}", hnsw_expr(dim, hnsw_type))
    return section.replace("{dim}", str(int(dim))).replace("{ops}", ops)


@dataclass(frozen=True)
class Nearest:
    rows: list[tuple[int, float]]  # the k nearest: (chunk_rowid, exact cosine distance), nearest first
    # Every candidate the graph proposed (>= k when as many pass), nearest first; without vectors, the k nearest.
    candidates: list[int]
    matrix: np.ndarray  # their stored float32 vectors, row for row (the caller rescores with them); empty if not read
    short: bool  # fewer than k came back though the filter may admit more (scan limit reached)
    hits: dict[int, tuple[Any, ...]]  # each candidate's hit columns, as pg_fts.hit_rows reads them


# The candidates' hit columns come back with them (search.hits then needs no round trip of its
# own): `inner` selects chunk_rowid, d, {embedding}, chunk_id, doc_id, source_id and title.
_WITH_HIT_COLUMNS = (
    "SELECT n.chunk_rowid, n.d, n.embedding, n.chunk_id, n.doc_id, n.source_id, s.name, n.title, d.metadata_json"
    " FROM ({inner}) n JOIN rag_sources s ON s.source_id = n.source_id JOIN rag_documents d ON d.doc_id = n.doc_id"
)

# What `inner` selects as the vector: the stored one (for callers that rescore or move the query),
# or nothing: sending 20 vectors (1.5 KB each, detoasted for the output) cost ~1 ms of a 3.5 ms
# search at 200k chunks, and the distance is exact without them.
_VECTOR_COLUMN = {True: "c.embedding", False: "NULL::vector AS embedding"}


def _with_hit_columns(inner: str, params: tuple[Any, ...], *, vectors: bool, k: int) -> tuple[str, tuple[Any, ...]]:
    """The search statement: `inner`'s candidates with their hit columns. Without vectors the
    caller wants only the k nearest, so they are cut to those by exact distance before the join
    (hybrid's ranking: 100 of 200 candidates joined, each a rag_documents lookup)."""
    if vectors:
        return _WITH_HIT_COLUMNS.format(inner=inner), params
    top = f"SELECT * FROM ({inner}) candidate ORDER BY d, chunk_rowid LIMIT %s"
    return _WITH_HIT_COLUMNS.format(inner=top), (*params, k)


def _configure_session(conn: psycopg.Connection) -> None:
    """A new pooled connection: the vector types registered, and the graph search's settings as
    session defaults, so a search sends none of its own. Iterative (relaxed order): past
    ef_search (at most 1000) a filtered scan goes on until LIMIT rows passed the filter; the
    candidates are re-sorted by their exact distances anyway."""
    pgvector_psycopg.register_vector(conn)
    conn.execute(f"SET hnsw.ef_search = {HNSW_EF_SEARCH_MIN}")
    conn.execute("SET hnsw.iterative_scan = relaxed_order")
    conn.commit()  # the pool hands out idle connections


def index_size_bytes(conn: psycopg.Connection) -> int:
    """Tables, indexes (GIN, HNSW) and TOAST of the index; a table not created yet counts 0."""
    return int(
        conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) FROM unnest(%s::text[]) t", (list(INDEX_TABLES),)
        ).fetchone()[0]
    )


class PgRagIndex:
    """A pool of connections to one PostgreSQL RAG index, and the storage operations on it."""

    def __init__(self, dsn: str, *, embedding_model_id: str, dim: int, hnsw_type: str = "halfvec", pool_max: int = 8):
        if hnsw_type not in HNSW_TYPES:
            raise ConfigError(f"rag-postgres_hnsw_type must be one of {', '.join(HNSW_TYPES)}")
        self.dsn = dsn
        self.embedding_model_id = embedding_model_id
        self.dim = dim
        self.hnsw_type = hnsw_type
        self._wrap_index = getattr(pgvector, HNSW_TYPES[hnsw_type][2])  # the query as the index's type
        self._hnsw = hnsw_expr(dim, hnsw_type)
        self.term_stats = TermStats()  # BM25's corpus figures, shared by this process's searches
        self.pool = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_max,
            timeout=POOL_TIMEOUT_S,
            reconnect_timeout=POOL_RECONNECT_S,
            kwargs={"connect_timeout": 3, "application_name": "mcp-gateway-rag"},
            configure=_configure_session,
            check=self._check,  # a connection from before a restart is replaced, not handed out
            open=False,
            name="rag-index",
        )
        self._unchecked = threading.local()  # set while a reading_connection caller asks the pool

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def open(cls, dsn: str, *, embedding_model_id: str, dim: int, hnsw_type: str = "halfvec") -> PgRagIndex:
        """Create or open the index and check the embedding model, as RagIndex.open does."""
        index = cls(dsn, embedding_model_id=embedding_model_id, dim=dim, hnsw_type=hnsw_type)
        index.pool.open(wait=False)
        try:
            index._prepare_schema()
        except BaseException:
            index.close()
            raise
        return index

    def close(self) -> None:
        self.pool.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in a transaction (committed at the end, rolled back on an error);
        PostgreSQL being away is UNAVAILABLE. The pool's check proves it alive first: one left
        over from before a PostgreSQL restart is replaced."""
        with self._unavailable_as_error():
            conn = self.pool.getconn()
            try:
                with conn:  # commit, or roll back on an error, as psycopg_pool's connection() does
                    yield conn
            finally:
                self.pool.putconn(conn)

    @contextlib.contextmanager
    def reading_connection(self, first: Callable[[psycopg.Connection], None]) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit for a search: each statement is its own read, with
        no BEGIN or COMMIT round trip (a vector search is then two round trips, `first` and the
        search: ~0.35 ms less than the transaction's BEGIN pipeline and COMMIT, bench/README).
        `first` is the caller's first statement and proves the connection alive in place of the
        pool's check, saving that round trip too; it may set session settings (the search's
        statement_timeout), which the pool's check resets before an ordinary caller gets the
        connection."""
        with self._unavailable_as_error():
            conn = self._getconn(first)
            try:
                yield conn
            finally:
                self._put_back_reading(conn)

    @contextlib.contextmanager
    def _unavailable_as_error(self) -> Iterator[None]:
        try:
            yield
        except psycopg_pool.PoolTimeout as exc:  # an OperationalError too: first
            raise Unavailable("no connection to the RAG index database within 1 s; retry shortly") from exc
        except psycopg.OperationalError as exc:  # AdminShutdown is one
            raise Unavailable(f"the RAG index database is unreachable ({type(exc).__name__}); retry shortly") from exc

    def _getconn(self, first: Callable[[psycopg.Connection], None]) -> psycopg.Connection:
        """A connection in autocommit that `first` ran on. One failing it for being broken (left
        over from a restart) is dropped and the next taken at once; psycopg_pool's own check loop
        would wait a second before the next, past POOL_TIMEOUT_S, failing the call."""
        deadline = time.monotonic() + POOL_TIMEOUT_S
        self._unchecked.active = True
        try:
            while True:
                conn = self.pool.getconn(max(0.0, deadline - time.monotonic()))
                try:
                    conn.autocommit = True
                    first(conn)
                    return conn
                except BaseException as exc:
                    broken = conn.broken
                    self._put_back_reading(conn)  # never lost; a broken one is discarded and another opened
                    if not (broken and isinstance(exc, psycopg.OperationalError)):
                        raise  # the statement failed, not the connection: the caller's error
        finally:
            self._unchecked.active = False

    def _put_back_reading(self, conn: psycopg.Connection) -> None:
        """A reading_connection's connection back to the pool, out of autocommit as the pool's
        other callers expect (client-side only: no transaction is open; a broken one is discarded)."""
        if not (conn.broken or conn.closed):
            conn.autocommit = False
        self.pool.putconn(conn)

    def _check(self, conn: psycopg.Connection) -> None:
        """The pool's liveness check, run in the thread asking for a connection: one round trip
        that also clears a search's session statement_timeout (reading_connection), so a write
        never runs under a search's deadline. Skipped for a reading_connection caller, whose own
        first statement proves the connection."""
        if getattr(self._unchecked, "active", False):
            return
        conn.autocommit = True
        try:
            conn.execute("RESET statement_timeout")
        finally:
            conn.autocommit = False

    def _prepare_schema(self) -> None:
        with self.connection() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            conn.execute(schema_ddl(self.dim, self.hnsw_type))
            meta = dict(conn.execute("SELECT key, value FROM rag_meta").fetchall())
            if int(meta.get("schema_version", SCHEMA_VERSION)) > SCHEMA_VERSION:
                raise ConfigError(f"the RAG index has schema version {meta['schema_version']}; upgrade the gateway")
            built = (meta.get("embedding_model"), meta.get("embedding_dim"), meta.get("hnsw_type"))
            if "embedding_model" in meta and built != (self.embedding_model_id, str(self.dim), self.hnsw_type):
                raise ConfigError(
                    f"the PostgreSQL RAG index was built with embedding model {built[0]!r} ({built[1]} dims, {built[2]}) "
                    f"but the configured embedder is {self.embedding_model_id!r} ({self.dim} dims, {self.hnsw_type}); "
                    "configure that model or rebuild the index (drop its tables and sync again)"
                )
            for key, value in (
                ("schema_version", str(SCHEMA_VERSION)),
                ("embedding_model", self.embedding_model_id),
                ("embedding_dim", str(self.dim)),
                ("hnsw_type", self.hnsw_type),
            ):
                conn.execute("INSERT INTO rag_meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value))

    def meta(self) -> dict[str, str]:
        with self.connection() as conn:
            return dict(conn.execute("SELECT key, value FROM rag_meta").fetchall())

    # -- sources ---------------------------------------------------------------------------
    def upsert_source(self, source_id: int, name: str, **fields: Any) -> None:
        values = {
            "name": name,
            **{k: (to_json(v) if k.endswith("_json") and not isinstance(v, str) else v) for k, v in fields.items()},
        }
        columns = list(values)  # the caller's keyword names are rag_sources columns, never request text
        assignments = ", ".join(f"{c} = excluded.{c}" for c in columns)
        with self.connection() as conn:
            conn.execute(
                f"INSERT INTO rag_sources (source_id, {', '.join(columns)}) VALUES (%s, {', '.join(['%s'] * len(columns))}) "
                f"ON CONFLICT (source_id) DO UPDATE SET {assignments}, "
                "updated_at = to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
                (source_id, *values.values()),
            )

    def delete_source(self, source_id: int) -> None:
        with self.connection() as conn:
            conn.execute("DELETE FROM rag_chunks WHERE source_id = %s", (source_id,))
            conn.execute("DELETE FROM rag_sources WHERE source_id = %s", (source_id,))

    def source_counts(self) -> dict[int, dict[str, int]]:
        with self.connection() as conn:
            counts = {sid: {"docs": 0, "chunks": 0} for (sid,) in conn.execute("SELECT source_id FROM rag_sources")}
            for sid, n in conn.execute("SELECT source_id, count(*) FROM rag_documents GROUP BY source_id"):
                counts.setdefault(sid, {"docs": 0, "chunks": 0})["docs"] = n
            for sid, n in conn.execute("SELECT source_id, count(*) FROM rag_chunks GROUP BY source_id"):
                counts.setdefault(sid, {"docs": 0, "chunks": 0})["chunks"] = n
        return counts

    def doc_ids_for_source(self, source_id: int) -> list[str]:
        with self.connection() as conn:
            return [
                r[0] for r in conn.execute("SELECT doc_id FROM rag_documents WHERE source_id = %s ORDER BY doc_id", (source_id,))
            ]

    def chunk_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        with self.connection() as conn:
            return dict(conn.execute("SELECT chunk_id, content_hash FROM rag_chunks WHERE doc_id = ANY(%s)", (list(doc_ids),)))

    # -- the surface RagIndex offers too ----------------------------------------------------
    def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            return conn.execute(pg_where(sql), tuple(params)).fetchall()

    def after_sync(self) -> None:
        """Nothing to catch up: the HNSW index is part of the committed rows."""

    def totals(self) -> dict[str, int]:
        with self.connection() as conn:
            docs = conn.execute("SELECT count(*) FROM rag_documents").fetchone()[0]
            chunks, vectors = conn.execute("SELECT count(*), count(embedding) FROM rag_chunks").fetchone()
        return {"docs": docs, "chunks": chunks, "vectors": vectors}

    def size_bytes(self) -> int:
        with self.connection() as conn:
            return index_size_bytes(conn)

    def purge_source(self, source_id: int, stop: Any = None, *, batch: int = 2_000) -> int:
        """Delete a source and everything indexed from it, `batch` documents per transaction."""
        deleted = 0
        while not (stop is not None and stop.is_set()):
            with self.connection() as conn:
                gone = conn.execute(
                    "DELETE FROM rag_chunks WHERE chunk_rowid IN (SELECT chunk_rowid FROM rag_chunks WHERE source_id = %s LIMIT %s)",
                    (source_id, batch),
                ).rowcount
                docs_gone = (
                    0
                    if gone
                    else conn.execute(
                        "DELETE FROM rag_documents WHERE doc_id IN (SELECT doc_id FROM rag_documents WHERE source_id = %s LIMIT %s)",
                        (source_id, batch),
                    ).rowcount
                )
                if not gone and not docs_gone:  # nothing left: the source row itself (its sync state cascades)
                    conn.execute("DELETE FROM rag_sources WHERE source_id = %s", (source_id,))
                    break
            deleted += gone
        return deleted

    # -- what ingestion and the jobs read and write besides documents ------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts of a plain statement written with `?` placeholders (sync state, jobs)."""
        with self.connection() as conn, conn.cursor(row_factory=pgrows.dict_row) as cur:
            return cur.execute(pg_where(sql), tuple(params)).fetchall()

    def run(self, work: Callable[[PgExec], None]) -> None:
        """`work(executor)` in one transaction; the executor takes `?` placeholders like apsw."""
        with self.connection() as conn:
            work(PgExec(conn))

    def iter_doc_ids(self, source_id: int, batch: int = 5000) -> Iterator[list[str]]:
        """The source's doc_ids in batches, through a server-side cursor (flat memory at any size)."""
        with self.connection() as conn, conn.cursor(name="rag_doc_ids") as cur:
            cur.itersize = batch
            cur.execute("SELECT doc_id FROM rag_documents WHERE source_id = %s", (source_id,))
            while rows := cur.fetchmany(batch):
                yield [r[0] for r in rows]

    def source_lock(self, source_id: int) -> PgSourceLock:
        return PgSourceLock(self.dsn, source_id)

    def held_sync_jobs(self) -> set[str]:
        with self.connection() as conn:
            return held_sync_jobs(conn)

    # -- writing ---------------------------------------------------------------------------
    def write_batch(
        self,
        docs: Sequence[DocumentRecord],
        *,
        delete_doc_ids: Sequence[str] = (),
        in_transaction: Callable[[PgExec], None] | None = None,
    ) -> None:
        """Upsert `docs` (replacing their chunks), delete `delete_doc_ids`, run the callback (the
        sync cursor): ONE transaction, so a killed sync leaves exact counts after the next run."""
        parts = [DocumentRows.of(part) for part in parts_without_repeats(docs)]
        with self.connection() as conn:
            for rows in parts:
                self._write_documents(conn, rows)
            if delete_doc_ids:
                conn.execute("DELETE FROM rag_documents WHERE doc_id = ANY(%s)", (list(delete_doc_ids),))  # chunks cascade
            if in_transaction is not None:
                in_transaction(PgExec(conn))  # the same `?` statements as on rag.db

    def _write_documents(self, conn: psycopg.Connection, rows: DocumentRows) -> None:
        if not rows.docs:
            return
        doc_ids = [doc.doc_id for doc in rows.docs]
        existing: dict[str, dict[int, tuple[int, str]]] = {}
        for doc_id, index, rowid, content_hash in conn.execute(
            "SELECT doc_id, chunk_index, chunk_rowid, content_hash FROM rag_chunks WHERE doc_id = ANY(%s)", (doc_ids,)
        ):
            existing.setdefault(doc_id, {})[index] = (rowid, content_hash)
        with conn.cursor() as cur:
            # executemany runs in pipeline mode: one round trip for the batch, not one per row.
            cur.executemany(
                "INSERT INTO rag_documents (doc_id, source_id, source_name, pk_json, title, body, metadata_json, updated_at,"
                " doc_score, post_type_id, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (doc_id) DO UPDATE SET source_id = excluded.source_id, source_name = excluded.source_name,"
                " pk_json = excluded.pk_json, title = excluded.title, body = excluded.body,"
                " metadata_json = excluded.metadata_json, updated_at = excluded.updated_at, doc_score = excluded.doc_score,"
                " post_type_id = excluded.post_type_id, created_at = excluded.created_at,"
                " indexed_at = to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
                rows.doc_rows,
            )
            cur.execute("DELETE FROM rag_doc_tags WHERE doc_id = ANY(%s)", (doc_ids,))
            if rows.tag_rows:
                cur.executemany("INSERT INTO rag_doc_tags (tag, doc_id) VALUES (%s, %s) ON CONFLICT DO NOTHING", rows.tag_rows)

        metadata_updates: list[tuple[Any, ...]] = []
        text_updates: list[tuple[Any, ...]] = []
        inserts: list[tuple[Any, ...]] = []
        stale: list[int] = []
        embedded = [c for doc in rows.docs for c in doc.chunks if c.embedding is not None]
        vectors = iter(self._unit(embedding_matrix(embedded, self.dim)) if embedded else ())
        for doc, hot in zip(rows.docs, rows.hot, strict=True):
            stored = existing.get(doc.doc_id, {})
            for chunk in doc.chunks:
                tail = (
                    to_json(chunk.metadata),
                    chunk.content_hash,
                    doc.updated_at,
                    hot.doc_score,
                    hot.post_type_id,
                    hot.created_at,
                )
                vector = next(vectors) if chunk.embedding is not None else None
                old = stored.get(chunk.chunk_index)
                if old is not None and old[1] == chunk.content_hash:
                    metadata_updates.append((chunk.chunk_id, doc.source_id, *tail, vector, old[0]))
                elif vector is None:
                    raise ValueError(
                        f"chunk {chunk.chunk_id}: {'its text changed' if old else 'it is new'}, so it needs an embedding"
                    )
                elif old is not None:
                    text_updates.append((chunk.chunk_id, doc.source_id, chunk.title, chunk.body, *tail, vector, old[0]))
                else:
                    inserts.append(
                        (chunk.chunk_id, doc.doc_id, doc.source_id, chunk.chunk_index, chunk.title, chunk.body, *tail, vector)
                    )
            if stored:
                seen = {chunk.chunk_index for chunk in doc.chunks}
                stale.extend(rowid for index, (rowid, _) in stored.items() if index not in seen)
        with conn.cursor() as cur:
            if stale:
                cur.execute("DELETE FROM rag_chunks WHERE chunk_rowid = ANY(%s)", (stale,))
            meta_set = "chunk_id = %s, source_id = %s, metadata_json = %s, content_hash = %s, updated_at = %s, doc_score = %s, post_type_id = %s, created_at = %s"
            if metadata_updates:  # the same text: keep the stored vector unless a new one came
                cur.executemany(
                    f"UPDATE rag_chunks SET {meta_set}, embedding = coalesce(%s, embedding) WHERE chunk_rowid = %s",
                    metadata_updates,
                )
            if text_updates:
                cur.executemany(
                    "UPDATE rag_chunks SET chunk_id = %s, source_id = %s, title = %s, body = %s, metadata_json = %s,"
                    " content_hash = %s, updated_at = %s, doc_score = %s, post_type_id = %s, created_at = %s, embedding = %s"
                    " WHERE chunk_rowid = %s",
                    text_updates,
                )
            if inserts:
                copy_sql = (
                    "COPY rag_chunks (chunk_id, doc_id, source_id, chunk_index, title, body, metadata_json, content_hash,"
                    " updated_at, doc_score, post_type_id, created_at, embedding) FROM STDIN (FORMAT BINARY)"
                )
                with cur.copy(copy_sql) as copy:
                    # Binary: a vector's text form costs ~1 ms of Python a row (384 floats formatted), its binary ~10 us.
                    copy.set_types(COPY_TYPES)
                    for row in inserts:
                        copy.write_row(row)

    def _unit(self, matrix: np.ndarray) -> list[Any]:
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.maximum(norms, 1e-12)
        return [pgvector.Vector(row) for row in matrix]

    # -- reading: the storage half of search.py --------------------------------------------
    def nearest(
        self,
        conn: psycopg.Connection,
        query: np.ndarray,
        k: int,
        *,
        where: str = "TRUE",
        params: Sequence[Any] = (),
        vectors: bool = True,
    ) -> Nearest:
        """The k nearest chunks passing `where` (a FilterSQL over `c`) by exact cosine distance.

        A filter admitting at most EXACT_SCAN_MAX chunks (a count probe says) is scored exactly:
        every allowed chunk, no graph. Otherwise the HNSW graph (over halfvec, or the vectors)
        proposes max(2k, RESCORE_MIN) candidates unfiltered, 2k filtered, ranked by the stored
        float32 vectors, as rag.db's ANN does. With a filter that scan is iterative (relaxed
        order), so a selective filter still fills k when enough chunks pass it; when pgvector's
        scan limit stops it first, `short` says so. `vectors` False: no `matrix` (empty); the
        distances are exact all the same."""
        if k <= 0:
            return Nearest([], [], np.zeros((0, self.dim), np.float32), False, {})
        exact = pgvector.Vector(np.asarray(query, dtype=np.float32))
        narrows = where.strip() != "TRUE"
        # Filtered, the walk until LIMIT rows pass is what costs: 2k then (5 % filter at 200k:
        # 38 ms for 20, 55 ms for 40, recall@10 0.993 both).
        fetch = 2 * k if narrows else max(2 * k, RESCORE_MIN)
        # The probe counts chunks, with a vector or not: an upper bound, readable from an index alone.
        if narrows and self._admitted(conn, where, params, EXACT_SCAN_MAX + 1, any_chunk=True) <= EXACT_SCAN_MAX:
            # MATERIALIZED: the ORDER BY runs over the allowed rows, never through the HNSW index.
            inner = (
                f"SELECT c.chunk_rowid, c.embedding <=> %s AS d, {_VECTOR_COLUMN[vectors]}, c.chunk_id, c.doc_id, c.source_id,"
                " c.title FROM allowed c ORDER BY d, c.chunk_rowid LIMIT %s"
            )
            sql, args = _with_hit_columns(inner, (*params, exact, fetch), vectors=vectors, k=k)
            rows = conn.execute(
                "WITH allowed AS MATERIALIZED (SELECT c.chunk_rowid, c.embedding, c.chunk_id, c.doc_id, c.source_id, c.title"
                f" FROM rag_chunks c WHERE c.embedding IS NOT NULL AND ({pg_where(where)})) " + sql,
                args,
                binary=True,
            ).fetchall()
            return self._ranked(rows, k, short=False, vectors=vectors)
        graph = self._wrap_index(np.asarray(query, dtype=np.float32))
        inner = (
            f"SELECT c.chunk_rowid, c.embedding <=> %s AS d, {_VECTOR_COLUMN[vectors]}, c.chunk_id, c.doc_id, c.source_id,"
            f" c.title FROM rag_chunks c WHERE c.embedding IS NOT NULL AND ({pg_where(where)}) ORDER BY {self._hnsw} <=> %s LIMIT %s"
        )
        search = _with_hit_columns(inner, (exact, *params, graph, fetch), vectors=vectors, k=k)
        ef_search = min(1000, max(HNSW_EF_SEARCH_MIN, fetch))
        if ef_search == HNSW_EF_SEARCH_MIN:  # the session's (set on connect)
            rows = conn.execute(*search, binary=True).fetchall()  # binary: 40 vectors as text took ~6 ms to parse
        else:  # a wider one, for this search only: set in its own transaction (an autocommit search
            # connection gets one here), sent with the search in one pipeline, results read after its sync
            with conn.pipeline(), conn.transaction() if conn.autocommit else contextlib.nullcontext():
                conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef_search),))
                cursor = conn.execute(*search, binary=True)
            rows = cursor.fetchall()
        # Came back short: either the filter admits fewer chunks, or the scan limit stopped it.
        short = len(rows) < k and self._admitted(conn, where, params, k) > len(rows)
        return self._ranked(rows, k, short=short, vectors=vectors)

    @staticmethod
    def _admitted(conn: psycopg.Connection, where: str, params: Sequence[Any], cap: int, *, any_chunk: bool = False) -> int:
        """How many chunks with a vector (any chunk: `any_chunk`) pass `where`, counted up to `cap`."""
        with_vector = "TRUE" if any_chunk else "c.embedding IS NOT NULL"
        return conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM rag_chunks c WHERE {with_vector} AND ({pg_where(where)}) LIMIT %s) x",
            (*params, cap),
        ).fetchone()[0]

    def _ranked(self, rows: list[tuple[Any, ...]], k: int, *, short: bool, vectors: bool) -> Nearest:
        """Rows of _WITH_HIT_COLUMNS, nearest first by exact distance (then rowid)."""
        pool = sorted(((int(row[0]), float(row[1])) for row in rows), key=lambda item: (item[1], item[0]))
        ids = [rowid for rowid, _ in pool]
        if vectors and ids:
            stored = {int(row[0]): row[2] for row in rows}
            matrix = np.vstack([stored[r].to_numpy() for r in ids]).astype(np.float32)
        else:
            matrix = np.zeros((0, self.dim), np.float32)
        hits = {int(row[0]): (int(row[0]), *row[3:]) for row in rows}
        return Nearest(pool[:k], ids, matrix, short, hits)

    def distances(self, conn: psycopg.Connection, query: np.ndarray, rowids: Sequence[int]) -> dict[int, float]:
        if not rowids:
            return {}
        exact = pgvector.Vector(np.asarray(query, dtype=np.float32))
        return {
            int(r): float(d)
            for r, d in conn.execute(
                "SELECT chunk_rowid, embedding <=> %s FROM rag_chunks WHERE chunk_rowid = ANY(%s) AND embedding IS NOT NULL",
                (exact, list(rowids)),
            )
        }

    def read_vectors(self, conn: psycopg.Connection, rowids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        rows = conn.execute(
            "SELECT chunk_rowid, embedding FROM rag_chunks WHERE chunk_rowid = ANY(%s) AND embedding IS NOT NULL ORDER BY chunk_rowid",
            (list(rowids),),
            binary=True,
        ).fetchall()
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.dim), dtype=np.float32)
        ids = np.array([r for r, _ in rows], dtype=np.int64)
        matrix = np.vstack([np.asarray(v.to_numpy(), dtype=np.float32) for _, v in rows])
        return ids, matrix
