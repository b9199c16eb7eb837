"""What ingestion hands the index (DocumentRecord, ChunkRecord), and how one batch of them
becomes rows of rag.db (RagIndex.write_batch runs this inside its transaction).

Each statement runs once per batch (executemany, json_each lookups), never once per document:
at thousands of chunks per second the per-statement Python cost dominated, not SQLite's work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw
import numpy as np
import orjson

from backends.retrieval.metadata import HotFields
from gateway import sqlite


@dataclass
class ChunkRecord:
    chunk_id: str
    chunk_index: int
    title: str
    body: str
    metadata: dict[str, Any]
    content_hash: str
    embedding: np.ndarray | None  # None: the text is unchanged, keep the stored vector


@dataclass
class DocumentRecord:
    doc_id: str
    source_id: int
    source_name: str
    pk_json: dict[str, Any]
    title: str
    body: str
    metadata: dict[str, Any]
    updated_at: str | None
    chunks: list[ChunkRecord] = field(default_factory=list)


# The stdlib encoder is the fallback: orjson refuses integers beyond 64 bits.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
# datetime and dataclass values go to default=str, as they always did with json.dumps.
_ORJSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def to_json(value: Any) -> str:
    """Compact JSON text (~0.4 us with orjson against ~3.5 us with json.dumps: 3 per chunk).

    Same text as json.dumps(separators=(",", ":"), ensure_ascii=False, default=str), except that
    a few floats are spelled differently with the same value (1e-7, not 1e-07), and NaN and
    Infinity, which are not JSON (SQLite's json functions reject them), become null."""
    try:
        return orjson.dumps(value, default=str, option=_ORJSON_OPTIONS).decode()
    except orjson.JSONEncodeError:
        return _ENCODER.encode(value)


_DOCUMENT_COLUMNS = (
    "doc_id, source_id, source_name, pk_json, title, body, metadata_json, updated_at, doc_score, post_type_id, created_at"
)
_UPSERT_DOCUMENT_TAIL = (
    "ON CONFLICT (doc_id) DO UPDATE SET source_id = excluded.source_id, source_name = excluded.source_name,"
    " pk_json = excluded.pk_json, title = excluded.title, body = excluded.body, metadata_json = excluded.metadata_json,"
    " updated_at = excluded.updated_at, doc_score = excluded.doc_score, post_type_id = excluded.post_type_id,"
    " created_at = excluded.created_at, indexed_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"
)
_CHUNK_COLUMNS = (
    "chunk_rowid, chunk_id, doc_id, source_id, chunk_index, title, body, metadata_json, content_hash, updated_at,"
    " doc_score, post_type_id, created_at"
)
# Same text: the FTS trigger (on title/body) does not fire.
_CHUNK_METADATA_COLUMNS = (
    "chunk_id",
    "source_id",
    "metadata_json",
    "content_hash",
    "updated_at",
    "doc_score",
    "post_type_id",
    "created_at",
)
_CHUNK_TEXT_COLUMNS = (
    "chunk_id", "source_id", "title", "body", "metadata_json", "content_hash", "updated_at", "doc_score", "post_type_id",
    "created_at",
)  # fmt: skip


# A statement's JSON text stays well under SQLite's 1 GB value limit (a batch of documents near
# the 2M-character cap could pass it); bigger batches are split into several statements.
MAX_PAYLOAD_BYTES = 64 << 20


def _payloads(rows: list[tuple[Any, ...]]) -> Iterator[bytes]:
    """`rows` as JSON arrays of at most MAX_PAYLOAD_BYTES (a single row may exceed it).
    Raises orjson.JSONEncodeError for a value JSON cannot carry exactly (an int beyond 64 bits)."""
    payload = orjson.dumps(rows)
    if len(payload) <= MAX_PAYLOAD_BYTES or len(rows) == 1:
        yield payload
        return
    middle = len(rows) // 2
    yield from _payloads(rows[:middle])
    yield from _payloads(rows[middle:])


def insert_rows(conn: apsw.Connection, table: str, columns: str, rows: list[tuple[Any, ...]], tail: str = "") -> None:
    """INSERT `rows` (str, int, float or None values) with one statement reading a JSON array.

    Why not executemany: each row would be its own statement, and (1) FTS5 flushes its pending
    terms to a new segment at every statement of the rag_chunks trigger, so 10,000 chunks wrote
    ~34,000 FTS blocks plus merges instead of ~2,000; (2) apsw takes the GIL back between rows,
    and while the sync's other thread runs Python (the embedder) each take can wait a switch
    interval: the writer measured more time waiting for the GIL than working."""
    if not rows:
        return
    width = len(rows[0])
    try:
        payloads = list(_payloads(rows))
    except orjson.JSONEncodeError:  # bind the values instead: exactly what was given
        conn.executemany(f"INSERT INTO {table} ({columns}) VALUES ({','.join('?' * width)}) {tail}", rows)
        return
    values = ", ".join(f"j->>{i}" for i in range(width))
    # WHERE true: without it SQLite would read a following ON CONFLICT as part of a join.
    sql = f"INSERT INTO {table} ({columns}) SELECT {values} FROM (SELECT value AS j FROM json_each(?) ORDER BY key) WHERE true {tail}"
    for payload in payloads:
        conn.execute(sql, (payload,))


def update_chunks(conn: apsw.Connection, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """UPDATE rag_chunks rows: each row is the new `columns` values, then the chunk_rowid.
    One statement for the batch, as insert_rows explains."""
    if not rows:
        return
    try:
        payloads = list(_payloads(rows))
    except orjson.JSONEncodeError:
        assignments = ", ".join(f"{c} = ?" for c in columns)
        conn.executemany(f"UPDATE rag_chunks SET {assignments} WHERE chunk_rowid = ?", rows)
        return
    assignments = ", ".join(f"{c} = u.j->>{i}" for i, c in enumerate(columns))
    sql = (
        f"UPDATE rag_chunks SET {assignments} FROM (SELECT value AS j FROM json_each(?) ORDER BY key) AS u"
        f" WHERE rag_chunks.chunk_rowid = u.j->>{len(columns)}"
    )
    for payload in payloads:
        conn.execute(sql, (payload,))


@dataclass
class DocumentRows:
    """The document and tag rows of a batch, built before the transaction takes the write lock."""

    docs: list[DocumentRecord] = field(default_factory=list)
    hot: list[HotFields] = field(default_factory=list)
    doc_rows: list[tuple[Any, ...]] = field(default_factory=list)
    tag_rows: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, docs: Sequence[DocumentRecord]) -> DocumentRows:
        rows = cls()
        for doc in docs:
            seen: set[int] = set()
            for chunk in doc.chunks:
                if chunk.chunk_index in seen:
                    raise ValueError(f"document {doc.doc_id}: chunk_index {chunk.chunk_index} given twice")
                seen.add(chunk.chunk_index)
            hot = HotFields.of(doc.metadata)
            rows.docs.append(doc)
            rows.hot.append(hot)
            rows.doc_rows.append(
                (
                    doc.doc_id, doc.source_id, doc.source_name, to_json(doc.pk_json), doc.title, doc.body,
                    to_json(doc.metadata), doc.updated_at, hot.doc_score, hot.post_type_id, hot.created_at,
                )
            )  # fmt: skip
            rows.tag_rows.extend((tag, doc.doc_id) for tag in hot.tags)
        return rows


@dataclass
class ChunkWrites:
    """What writing a part left to do: chunk rowids that are stale, and the vectors to store."""

    stale: list[int] = field(default_factory=list)
    vector_rowids: list[int] = field(default_factory=list)
    vector_chunks: list[ChunkRecord] = field(default_factory=list)


def parts_without_repeats(docs: Sequence[DocumentRecord]) -> Iterator[list[DocumentRecord]]:
    """Split `docs` where a doc_id comes again: each part is written after the previous one, so
    the later version wins exactly as if the two had come in separate batches."""
    part: list[DocumentRecord] = []
    ids: set[str] = set()
    for doc in docs:
        if doc.doc_id in ids:
            yield part
            part, ids = [], set()
        part.append(doc)
        ids.add(doc.doc_id)
    if part:
        yield part


def write_documents(conn: apsw.Connection, rows: DocumentRows) -> ChunkWrites:
    """Upsert one part's documents, tags and chunks (FTS rows by trigger). Returns the vectors to
    store and the stale chunk rowids (chunk indexes a document no longer has) for the caller."""
    writes = ChunkWrites()
    if not rows.docs:
        return writes
    doc_ids_json = to_json([doc.doc_id for doc in rows.docs])
    existing: dict[str, dict[int, tuple[int, str]]] = {}
    for doc_id, index, rowid, content_hash in conn.execute(
        "SELECT doc_id, chunk_index, chunk_rowid, content_hash FROM rag_chunks WHERE doc_id IN (SELECT value FROM json_each(?))",
        (doc_ids_json,),
    ):
        existing.setdefault(doc_id, {})[index] = (rowid, content_hash)
    insert_rows(conn, "rag_documents", _DOCUMENT_COLUMNS, rows.doc_rows, _UPSERT_DOCUMENT_TAIL)
    conn.execute("DELETE FROM rag_doc_tags WHERE doc_id IN (SELECT value FROM json_each(?))", (doc_ids_json,))
    insert_rows(conn, "rag_doc_tags", "tag, doc_id", rows.tag_rows)

    metadata_updates: list[tuple[Any, ...]] = []
    text_updates: list[tuple[Any, ...]] = []
    inserts: list[tuple[Any, ...]] = []
    next_rowid: int | None = None
    for doc, hot in zip(rows.docs, rows.hot, strict=True):
        stored = existing.get(doc.doc_id, {})
        for chunk in doc.chunks:
            tail = (to_json(chunk.metadata), chunk.content_hash, doc.updated_at, hot.doc_score, hot.post_type_id, hot.created_at)
            old = stored.get(chunk.chunk_index)
            if old is not None and old[1] == chunk.content_hash:
                rowid = old[0]
                metadata_updates.append((chunk.chunk_id, doc.source_id, *tail, rowid))
            elif old is not None:
                if chunk.embedding is None:
                    raise ValueError(f"chunk {chunk.chunk_id}: its text changed, so it needs an embedding")
                rowid = old[0]
                text_updates.append((chunk.chunk_id, doc.source_id, chunk.title, chunk.body, *tail, rowid))
            else:
                if chunk.embedding is None:
                    raise ValueError(f"chunk {chunk.chunk_id} is new, so it needs an embedding")
                if next_rowid is None:
                    # Explicit rowids after the current maximum: what SQLite itself would assign
                    # (no AUTOINCREMENT), but known up front, so the inserts are one executemany.
                    next_rowid = int(sqlite.scalar(conn, "SELECT coalesce(max(chunk_rowid), 0) + 1 FROM rag_chunks"))
                rowid, next_rowid = next_rowid, next_rowid + 1
                inserts.append(
                    (rowid, chunk.chunk_id, doc.doc_id, doc.source_id, chunk.chunk_index, chunk.title, chunk.body, *tail)
                )
            if chunk.embedding is not None:
                writes.vector_rowids.append(rowid)
                writes.vector_chunks.append(chunk)
        if stored:
            seen = {chunk.chunk_index for chunk in doc.chunks}
            writes.stale.extend(rowid for index, (rowid, _) in stored.items() if index not in seen)
    update_chunks(conn, _CHUNK_METADATA_COLUMNS, metadata_updates)
    update_chunks(conn, _CHUNK_TEXT_COLUMNS, text_updates)
    insert_rows(conn, "rag_chunks", _CHUNK_COLUMNS, inserts)
    return writes


def embedding_matrix(chunks: list[ChunkRecord], dim: int) -> np.ndarray:
    """The chunks' embeddings as one float32 matrix (write_vectors normalises it in one step)."""
    try:
        matrix = np.vstack([chunk.embedding for chunk in chunks]).astype(np.float32, copy=False)
    except ValueError:
        matrix = None  # ragged widths: the loop below names the culprit
    if matrix is None or matrix.shape != (len(chunks), dim):
        for chunk in chunks:
            width = np.asarray(chunk.embedding).size
            if width != dim:
                raise ValueError(f"chunk {chunk.chunk_id}: embedding has {width} dims, the index has {dim}")
        raise ValueError(f"the embeddings do not form a {len(chunks)} x {dim} matrix")
    return matrix
