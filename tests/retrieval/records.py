"""Documents and chunks for the RAG index tests, on both storages (test_index, test_pg_index)."""

from __future__ import annotations

import hashlib

from backends.retrieval.embeddings import make_embedder
from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord

EMBEDDER = make_embedder({"provider": "hash", "dim": 64})


def chunk(doc_id: str, index: int, body: str, *, embed: bool = True) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=f"{doc_id}#{index}",
        chunk_index=index,
        title=f"title of {doc_id}",
        body=body,
        metadata={"part": index},
        content_hash=hashlib.sha1(body.encode()).hexdigest(),
        embedding=EMBEDDER.embed([body])[0] if embed else None,
    )


def doc(
    doc_id: str, bodies: list[str], *, source_id: int = 1, metadata: dict | None = None, embed: bool = True
) -> DocumentRecord:
    return DocumentRecord(
        doc_id=doc_id,
        source_id=source_id,
        source_name=f"src{source_id}",
        pk_json={"id": doc_id},
        title=f"title of {doc_id}",
        body=" ".join(bodies),
        metadata=metadata or {},
        updated_at=None,
        chunks=[chunk(doc_id, i, b, embed=embed) for i, b in enumerate(bodies)],
    )
