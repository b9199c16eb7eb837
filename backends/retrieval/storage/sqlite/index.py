"""The RAG index (rag.db): opening and migrating it, and the writer API ingestion calls.

    RagIndex.open(path, embedding_model_id=..., dim=...)   schema applied, model checked
    index.conn                                              this thread's connection
    index.write_batch(docs, delete_doc_ids=..., in_transaction=...)

`storage.open_index` picks the backend (rag-backend): this file, or PostgreSQL (storage/postgresql/index.py), which
offers the same methods; what ingestion, jobs and the tools call is that common surface:
write_batch, upsert_source, query/fetch_all/run (plain SQL with `?` placeholders),
iter_doc_ids, source_lock, purge_source, reader (storage/reader.py) and stats.

`write_batch` is the only way content enters the index: documents, chunks, their FTS rows
(triggers on rag_chunks), their vectors (backends/retrieval/storage/sqlite/vector_store.py) and the caller's own
bookkeeping (the sync cursor) commit in ONE transaction, so a crash can never leave the
keyword index, the vectors and the sync state out of step.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import apsw

from backends.retrieval.metadata import normalise_timestamp, parse_tags
from backends.retrieval.source_lock import SourceLock
from backends.retrieval.storage.records import (
    ChunkRecord,
    DocumentRecord,
    DocumentRows,
    embedding_matrix,
    parts_without_repeats,
    to_json,
    write_documents,
)
from gateway import sqlite
from gateway.errors import ConfigError

__all__ = ["ChunkRecord", "DocumentRecord", "RagIndex", "normalise_timestamp", "parse_tags"]

SCHEMA_VERSION = 1
# Forward migrations: MIGRATIONS[v] takes a version-v index to v+1 (run before the schema section,
# which then creates whatever is new with IF NOT EXISTS). Version 1 is the first released shape.
MIGRATIONS: dict[int, Callable[[apsw.Connection], None]] = {}


# -- the index -----------------------------------------------------------------------------------
_SOURCE_COLUMNS = [
    "name",
    "enabled",
    "backend_type",
    "backend_host",
    "backend_port",
    "backend_user",
    "backend_pass",
    "backend_db",
    "table_name",
    "pk_column",
    "where_sql",
    "target_id",
    "doc_map_json",
    "chunking_json",
    "embedding_json",
]


class RagIndex:
    """One rag.db: per-thread apsw connections, the recorded embedding model, the vector index."""

    def __init__(self, path: Path, *, embedding_model_id: str, dim: int) -> None:
        from backends.retrieval.storage.sqlite import vector_store  # the ANN helper's module (vector storage and search)

        self.path = Path(path)
        self.embedding_model_id = embedding_model_id
        self.dim = dim
        self._vectors_module = vector_store
        self._local = threading.local()
        self._connections: list[apsw.Connection] = []
        self._lock = threading.Lock()
        self.vectors = vector_store.VectorIndex(self.path, dim=dim)

    @classmethod
    def open(cls, path: Path, *, embedding_model_id: str, dim: int) -> RagIndex:
        """Create or open the index, migrate its schema forward, and check the embedding model.

        Raises ConfigError when the index was built with another model or dimension: mixing
        vectors of two models gives meaningless distances, so the index must be rebuilt.
        """
        if dim < 1:
            raise ConfigError(f"embedding dim must be positive, got {dim}")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            # 8 KiB pages before anything is written (WAL fixes the page size): a 1.5 KB vector
            # row fits 5 to a page instead of 2, 2,053 -> 1,641 bytes per row (bench/README.md).
            fresh = apsw.Connection(str(path))
            # Workers start together: another may be creating the same file (wait, not BusyError).
            fresh.set_busy_timeout(sqlite.BUSY_TIMEOUT_MS)
            fresh.execute("PRAGMA page_size = 8192; VACUUM")
            fresh.close()
        conn = sqlite.connect(path, vec=False)
        try:
            _prepare_schema(conn, embedding_model_id=embedding_model_id, dim=dim)
        finally:
            conn.close()
        return cls(path, embedding_model_id=embedding_model_id, dim=dim)

    @property
    def conn(self) -> apsw.Connection:
        """This thread's connection (apsw connections are cheap; sharing one serialises readers)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite.connect(self.path, vec=False)
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        close_vectors = getattr(self.vectors, "close", None)
        if close_vectors is not None:
            close_vectors()
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    # -- the surface both backends offer ---------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return sqlite.rows(self.conn, sql, params)

    def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, params).fetchall()

    def run(self, work: Callable[[apsw.Connection], None]) -> None:
        """`work(conn)` in one write transaction."""
        with sqlite.transaction(self.conn):
            work(self.conn)

    def iter_doc_ids(self, source_id: int, batch: int = 5000) -> Iterator[list[str]]:
        cursor = self.conn.execute("SELECT doc_id FROM rag_documents WHERE source_id = ? ORDER BY doc_id", (source_id,))
        while rows := list(itertools.islice(cursor, batch)):
            yield [r[0] for r in rows]

    def source_lock(self, source_id: int) -> Any:
        return SourceLock(self.path.parent, source_id)

    def held_sync_jobs(self) -> None:
        """rag.db is on one host: a job's pid tells whether it lives (job_liveness.py)."""
        return None

    def after_sync(self) -> None:
        """The ANN index catches up with the sync now, not in the next search."""
        self.vectors.catch_up(self.conn)

    def totals(self) -> dict[str, int]:
        one = lambda sql: self.conn.execute(sql).fetchall()[0][0]  # noqa: E731
        return {
            "docs": one("SELECT count(*) FROM rag_documents"),
            "chunks": one("SELECT count(*) FROM rag_chunks"),
            "vectors": one("SELECT count(*) FROM rag_vec_chunks"),
        }

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path, self.path.with_name(self.path.name + "-wal")) if p.exists())

    def purge_source(self, source_id: int, stop: threading.Event | None = None, *, batch: int = 2_000) -> int:
        """Delete a source and everything indexed from it, `batch` chunks per transaction, so
        readers and other syncs never wait long. Returns the chunks deleted; stopping halfway
        leaves a consistent index (each batch is one transaction) with the source still hidden."""
        conn = self.conn
        deleted = 0
        while not (stop is not None and stop.is_set()):
            with sqlite.transaction(conn, "IMMEDIATE"):
                rowids = [
                    r
                    for (r,) in conn.execute("SELECT chunk_rowid FROM rag_chunks WHERE source_id = ? LIMIT ?", (source_id, batch))
                ]
                if not rowids:
                    conn.execute(
                        "DELETE FROM rag_documents WHERE doc_id IN (SELECT doc_id FROM rag_documents WHERE source_id = ? LIMIT ?)",
                        (source_id, batch),
                    )
                    if conn.changes() == 0:  # nothing left: the source row itself (its sync state cascades)
                        conn.execute("DELETE FROM rag_sources WHERE source_id = ?", (source_id,))
                        break
                    continue
                self._delete_chunks(conn, rowids)
            deleted += len(rowids)
        return deleted

    # -- meta ------------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return {row["key"]: row["value"] for row in sqlite.rows(self.conn, "SELECT key, value FROM rag_meta")}

    # -- sources ---------------------------------------------------------------------------
    def upsert_source(self, source_id: int, name: str, **fields: Any) -> None:
        """Insert or update a source; `fields` are rag_sources columns (JSON columns take dicts)."""
        unknown = set(fields) - set(_SOURCE_COLUMNS)
        if unknown:
            raise ValueError(f"rag_sources has no column(s) {', '.join(sorted(unknown))}")
        values = {
            "name": name,
            **{k: (to_json(v) if k.endswith("_json") and not isinstance(v, str) else v) for k, v in fields.items()},
        }
        columns = list(values)  # names come from _SOURCE_COLUMNS, never from a request
        assignments = ", ".join(f"{c} = excluded.{c}" for c in columns)
        sql = (
            f"INSERT INTO rag_sources (source_id, {', '.join(columns)}) VALUES (?, {', '.join('?' * len(columns))}) "
            f"ON CONFLICT (source_id) DO UPDATE SET {assignments}, updated_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"
        )
        with sqlite.transaction(self.conn):
            self.conn.execute(sql, (source_id, *values.values()))

    def delete_source(self, source_id: int) -> None:
        """Remove a source and everything indexed from it (vectors included)."""
        conn = self.conn
        with sqlite.transaction(conn):
            rowids = [r[0] for r in conn.execute("SELECT chunk_rowid FROM rag_chunks WHERE source_id = ?", (source_id,))]
            self._vectors_module.delete_vectors(conn, rowids)
            conn.execute("DELETE FROM rag_chunks WHERE source_id = ?", (source_id,))
            conn.execute("DELETE FROM rag_sources WHERE source_id = ?", (source_id,))

    def doc_ids_for_source(self, source_id: int) -> Iterator[str]:
        for (doc_id,) in self.conn.execute("SELECT doc_id FROM rag_documents WHERE source_id = ? ORDER BY doc_id", (source_id,)):
            yield doc_id

    def source_counts(self) -> dict[int, dict[str, int]]:
        """{source_id: {docs, chunks}}: each count from its own table (a join would multiply)."""
        counts = {sid: {"docs": 0, "chunks": 0} for (sid,) in self.conn.execute("SELECT source_id FROM rag_sources")}
        for sid, n in self.conn.execute("SELECT source_id, count(*) FROM rag_documents GROUP BY source_id"):
            counts.setdefault(sid, {"docs": 0, "chunks": 0})["docs"] = n
        for sid, n in self.conn.execute("SELECT source_id, count(*) FROM rag_chunks GROUP BY source_id"):
            counts.setdefault(sid, {"docs": 0, "chunks": 0})["chunks"] = n
        return counts

    # -- content ---------------------------------------------------------------------------
    def chunk_hashes(self, doc_ids: Sequence[str]) -> dict[str, str]:
        """{chunk_id: content_hash} of these documents' stored chunks (to skip re-embedding)."""
        result: dict[str, str] = {}
        ids = list(doc_ids)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            sql = f"SELECT chunk_id, content_hash FROM rag_chunks WHERE doc_id IN ({','.join('?' * len(part))})"
            result.update(dict(self.conn.execute(sql, part)))
        return result

    def write_batch(
        self,
        docs: Sequence[DocumentRecord],
        *,
        delete_doc_ids: Sequence[str] = (),
        in_transaction: Callable[[apsw.Connection], None] | None = None,
    ) -> None:
        """Upsert `docs` (replacing their chunks), delete `delete_doc_ids`, run the callback: one transaction."""
        parts = [DocumentRows.of(part) for part in parts_without_repeats(docs)]  # before the write lock
        conn = self.conn
        with sqlite.transaction(conn):
            for rows in parts:
                writes = write_documents(conn, rows)
                if writes.vector_rowids:
                    matrix = embedding_matrix(writes.vector_chunks, self.dim)
                    self._vectors_module.write_vectors(conn, writes.vector_rowids, matrix)
                # Per part, after its vectors: a later part of the same batch then sees (and a
                # stale chunk leaves behind) exactly what separate batches would.
                self._delete_chunks(conn, writes.stale)
            if delete_doc_ids:
                doc_ids_json = to_json(list(delete_doc_ids))
                query = "SELECT chunk_rowid FROM rag_chunks WHERE doc_id IN (SELECT value FROM json_each(?))"
                self._delete_chunks(conn, [r for (r,) in conn.execute(query, (doc_ids_json,))])
                conn.execute("DELETE FROM rag_documents WHERE doc_id IN (SELECT value FROM json_each(?))", (doc_ids_json,))
            if in_transaction is not None:
                in_transaction(conn)

    def _delete_chunks(self, conn: apsw.Connection, rowids: list[int]) -> None:
        if rowids:
            self._vectors_module.delete_vectors(conn, rowids)
            conn.execute("DELETE FROM rag_chunks WHERE chunk_rowid IN (SELECT value FROM json_each(?))", (to_json(rowids),))


# Columns added after version 1 shipped, without a version bump: an older gateway still opens the
# index (it names its columns in every statement) and ignores them.
ADDED_COLUMNS = {"rag_sync_jobs": {"member_id": "TEXT NOT NULL DEFAULT ''"}}


def _add_missing_columns(conn: apsw.Connection) -> None:
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, decl in columns.items():
            if name not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")


def _schema_fingerprint(dim: int) -> str:
    """What a prepared index was prepared from: any change to the DDL, the added columns or the
    version changes it, so the next open takes the write path once."""
    from backends.retrieval.storage.sqlite import vector_store

    text = "\x00".join((sqlite.schema_section("rag"), vector_store.vector_schema(dim), repr(ADDED_COLUMNS), str(SCHEMA_VERSION)))
    return hashlib.sha256(text.encode()).hexdigest()


def _schema_current(conn: apsw.Connection, *, fingerprint: str, embedding_model_id: str, dim: int) -> bool:
    """Whether an earlier open prepared this index as this one would, for this model: a read,
    no write lock. Workers start while the demo sync may hold the write lock for seconds
    (longer on a loaded machine than the busy timeout): they no longer wait for it."""
    with sqlite.transaction(conn, "DEFERRED"):
        if not sqlite.scalar(conn, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rag_meta'"):
            return False
        meta = {row["key"]: row["value"] for row in sqlite.rows(conn, "SELECT key, value FROM rag_meta")}
    wanted = {
        "schema_fingerprint": fingerprint, "schema_version": str(SCHEMA_VERSION),
        "embedding_model": embedding_model_id, "embedding_dim": str(dim),
    }  # fmt: skip
    return all(meta.get(key) == value for key, value in wanted.items())


def _prepare_schema(conn: apsw.Connection, *, embedding_model_id: str, dim: int) -> None:
    from backends.retrieval.storage.sqlite import vector_store

    fingerprint = _schema_fingerprint(dim)
    if _schema_current(conn, fingerprint=fingerprint, embedding_model_id=embedding_model_id, dim=dim):
        return
    with sqlite.transaction(conn):
        has_meta = sqlite.scalar(conn, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'rag_meta'")
        version = int(sqlite.scalar(conn, "SELECT value FROM rag_meta WHERE key = 'schema_version'") or 0) if has_meta else 0
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"rag.db has schema version {version}; this gateway knows up to {SCHEMA_VERSION}: upgrade the gateway"
            )
        if version:
            for step in range(version, SCHEMA_VERSION):
                MIGRATIONS[step](conn)
        conn.execute(sqlite.schema_section("rag"))
        _add_missing_columns(conn)
        meta = {row["key"]: row["value"] for row in sqlite.rows(conn, "SELECT key, value FROM rag_meta")}
        if "embedding_model" in meta and (meta["embedding_model"], meta.get("embedding_dim")) != (embedding_model_id, str(dim)):
            raise ConfigError(
                f"rag.db was built with embedding model {meta['embedding_model']!r} ({meta.get('embedding_dim')} dims) but the "
                f"configured embedder is {embedding_model_id!r} ({dim} dims); configure that model or rebuild the index "
                "(move rag.db away and sync again)"
            )
        vector_store.apply_vector_schema(conn, dim)
        for key, value in (
            ("schema_version", str(SCHEMA_VERSION)),
            ("embedding_model", embedding_model_id),
            ("embedding_dim", str(dim)),
            ("created_at", normalise_timestamp(datetime.now(UTC)) or ""),
        ):
            conn.execute("INSERT INTO rag_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value))
        conn.execute("UPDATE rag_meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        conn.execute(
            "INSERT INTO rag_meta (key, value) VALUES ('schema_fingerprint', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (fingerprint,),
        )
