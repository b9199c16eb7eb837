"""What the tools and ingestion code against, whichever storage and embedding model are configured."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """An embedding model (backends/retrieval/embeddings): what the index and the search tools code against."""

    model_id: str  # "local:all-MiniLM-L6-v2@int8", "openai:<model>", "ollama:<model>", "hash:<dim>"
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim) with L2-normalised rows, in input order."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """The retrieval index as the tools see it beyond a search: what both storages implement,
    storage/sqlite/index.py RagIndex (rag.db) and storage/postgresql/index.py PgRagIndex.
    Nothing engine-specific (a path, a connection)."""

    embedding_model_id: str
    dim: int

    def meta(self) -> dict[str, str]:
        """schema_version, embedding_model, embedding_dim, ... of the index."""
        ...

    def fetch_all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one plain read written with `?` placeholders, in SQL both engines read alike."""
        ...

    def totals(self) -> dict[str, int]:
        """{docs, chunks, vectors} in the whole index."""
        ...

    def size_bytes(self) -> int: ...


class SyncJobs(Protocol):
    """The sync job runner (ingest/jobs.py JobManager), as the tools see it."""

    def recent(self, limit: int) -> list[dict[str, Any]]: ...

    def status(self, job_id: str) -> dict[str, Any]: ...
