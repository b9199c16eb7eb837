"""What RagHandler.init opens and close releases, as its tool groups reach it: each group is given
the getters of what it uses, which answer UNAVAILABLE while the index is not open."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.retrieval.embeddings.queries import QueryVectors
from backends.retrieval.ingest.jobs import JobManager
from backends.retrieval.protocols import Embedder
from backends.retrieval.storage.reader import Index
from gateway.errors import Unavailable


@dataclass
class Opened:
    index: Index | None = None
    embedder: Embedder | None = None
    queries: QueryVectors | None = None
    jobs: JobManager | None = None

    def open_index(self) -> Index:
        if self.index is None:
            raise Unavailable("the RAG index is not open")
        return self.index

    def open_embedder(self) -> Embedder:
        if self.embedder is None:
            raise Unavailable("the RAG index is not open")
        return self.embedder

    def query_vectors(self) -> QueryVectors:
        if self.queries is None:
            raise Unavailable("the RAG index is not open")
        return self.queries

    def running_jobs(self) -> JobManager:
        if self.jobs is None:
            raise Unavailable("ingestion is not running (the RAG index is not open)")
        return self.jobs

    def recent_jobs(self, limit: int) -> list[dict[str, Any]]:
        """The most recent sync jobs, or none while ingestion is not running."""
        return self.jobs.recent(limit) if self.jobs is not None else []
