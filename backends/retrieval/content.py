"""Fetching content by id (rag.get_chunks, rag.get_docs), MMR re-ordering and the token budget."""

from __future__ import annotations

import json
from typing import Any, Protocol

import numpy as np

from backends.retrieval.storage.reader import Reader

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers


class ChunksReturn(Protocol):
    """What a chunk carries besides its ids and body (rag.get_chunks' `return`)."""

    @property
    def include_title(self) -> bool: ...
    @property
    def include_doc_metadata(self) -> bool: ...
    @property
    def include_chunk_metadata(self) -> bool: ...


class DocsReturn(Protocol):
    """What a document carries besides its ids and title (rag.get_docs' `return`)."""

    @property
    def include_body(self) -> bool: ...
    @property
    def include_metadata(self) -> bool: ...


def _marks(n: int) -> str:
    return ",".join("?" * n)


def load_chunks(reader: Reader, chunk_ids: list[str], options: ChunksReturn) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Chunks in the order asked for (duplicates once), and {chunk_id: chunk_rowid}."""
    rows = {
        row[1]: row
        for row in reader.execute(
            "SELECT c.chunk_rowid, c.chunk_id, c.doc_id, c.source_id, s.name, c.title, c.body, c.chunk_index,"
            " c.metadata_json, d.metadata_json FROM rag_chunks c JOIN rag_sources s ON s.source_id = c.source_id"
            f" JOIN rag_documents d ON d.doc_id = c.doc_id WHERE c.chunk_id IN ({_marks(len(chunk_ids))})",
            chunk_ids,
        )
    }
    chunks, rowids = [], {}
    for chunk_id in dict.fromkeys(chunk_ids):
        row = rows.get(chunk_id)
        if row is None:
            continue
        rowids[chunk_id] = row[0]
        chunk: dict[str, Any] = {"chunk_id": row[1], "doc_id": row[2], "source_id": row[3], "source_name": row[4]}
        if options.include_title:
            chunk["title"] = row[5]
        chunk["body"] = row[6]
        if options.include_doc_metadata:
            chunk["doc_metadata"] = json.loads(row[9])
        if options.include_chunk_metadata:
            chunk["chunk_metadata"] = {"chunk_index": row[7], **json.loads(row[8])}
        chunks.append(chunk)
    return chunks, rowids


def mmr_order(reader: Reader, chunks: list[dict[str, Any]], rowids: dict[str, int], *, lam: float) -> list[dict[str, Any]]:
    """Maximal marginal relevance over the stored chunk vectors.

    The order the caller gave is the relevance (rank r of n -> 1 - r/n); each step picks the
    chunk maximising lam * relevance - (1 - lam) * (highest cosine similarity to one already
    picked). lam = 1 keeps the given order; lower values push near-duplicates down.
    """
    if len(chunks) < 3:
        return chunks
    dim = reader.dim
    found, matrix = reader.read_vectors([rowids[c["chunk_id"]] for c in chunks])
    by_rowid = {int(r): matrix[i] for i, r in enumerate(found)}
    vecs = np.stack([by_rowid.get(rowids[c["chunk_id"]], np.zeros(dim, dtype=np.float32)) for c in chunks])
    similarity = vecs @ vecs.T
    n = len(chunks)
    relevance = np.array([1.0 - r / n for r in range(n)])
    picked: list[int] = []
    best_sim = np.full(n, -np.inf)
    remaining = set(range(n))
    while remaining:
        redundancy = np.where(np.isinf(best_sim), 0.0, best_sim)
        gain = lam * relevance - (1.0 - lam) * redundancy
        choice = max(remaining, key=lambda i: (gain[i], -i))
        picked.append(choice)
        remaining.discard(choice)
        best_sim = np.maximum(best_sim, similarity[choice])
    return [chunks[i] for i in picked]


def apply_token_budget(chunks: list[dict[str, Any]], max_output_tokens: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep bodies within the budget (estimated); the body that crosses it is cut, the rest dropped."""
    budget_chars = max_output_tokens * CHARS_PER_TOKEN
    kept: list[dict[str, Any]] = []
    for chunk in chunks:
        body = chunk["body"]
        if len(body) <= budget_chars:
            kept.append(chunk)
            budget_chars -= len(body)
            continue
        if budget_chars > 0:
            kept.append({**chunk, "body": body[:budget_chars], "body_truncated": True})
        return kept, True
    return kept, False


def load_docs(reader: Reader, doc_ids: list[str], options: DocsReturn) -> list[dict[str, Any]]:
    rows = {
        row[0]: row
        for row in reader.execute(
            "SELECT d.doc_id, d.source_id, s.name, d.pk_json, d.title, d.body, d.metadata_json, d.updated_at"
            f" FROM rag_documents d JOIN rag_sources s ON s.source_id = d.source_id WHERE d.doc_id IN ({_marks(len(doc_ids))})",
            doc_ids,
        )
    }
    docs = []
    for doc_id in dict.fromkeys(doc_ids):
        row = rows.get(doc_id)
        if row is None:
            continue
        doc: dict[str, Any] = {
            "doc_id": row[0],
            "source_id": row[1],
            "source_name": row[2],
            "pk_json": json.loads(row[3]),
            "title": row[4],
            "updated_at": row[7],
        }
        if options.include_body:
            doc["body"] = row[5]
        if options.include_metadata:
            doc["metadata"] = json.loads(row[6])
        docs.append(doc)
    return docs
