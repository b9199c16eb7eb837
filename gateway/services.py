"""What the app hands every handler at construction: the data directory, the config store,
the current runtime, statistics and metrics, and the components endpoints share. No module
globals, no untyped bag: a shared component is a typed field here.

gateway.assembly builds the database side (`targets`, `sql`) before any handler; the RAG
handler publishes the index, its embedder and the sync job runner when its init succeeds
(None while /mcp/rag is down). Other endpoints use those through the small protocols below,
never through handlers.rag's modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gateway.runtime import Runtime
from gateway.store import ConfigStore
from gateway.tokens import TokenUse

if TYPE_CHECKING:
    import numpy as np

    from backends.pools import TargetPools
    from backends.result_cache import ResultCache
    from backends.sql import ReadOnlySql
    from gateway.evidence import EvidenceRecorder
    from gateway.metrics import Metrics
    from gateway.tool_counters import ToolCounters


@runtime_checkable
class Embedder(Protocol):
    """An embedding model (handlers/rag/embeddings): what the index and the search tools code against."""

    model_id: str  # "local:all-MiniLM-L6-v2@int8", "openai:<model>", "ollama:<model>", "hash:<dim>"
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dim) with L2-normalised rows, in input order."""
        ...


@runtime_checkable
class SearchIndex(Protocol):
    """The retrieval index as far as other endpoints see it: what both backends implement,
    handlers/rag/index.py RagIndex (rag.db) and handlers/rag/pg_index.py PgRagIndex (PostgreSQL).
    Nothing engine-specific (a path, a connection): an endpoint reads the index through these."""

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
    """The RAG sync job runner (handlers/rag/ingest/jobs.py JobManager), as other endpoints see it."""

    def recent(self, limit: int) -> list[dict[str, Any]]: ...

    def status(self, job_id: str) -> dict[str, Any]: ...


class EndpointState(Protocol):
    """A handler as the status tools see it (gateway.tools ToolHandler)."""

    down_reason: str  # why init failed, "" while it serves
    tools: Mapping[str, Any]


@dataclass
class Services:
    data_dir: Path
    store: ConfigStore
    runtime: Runtime
    stats: ToolCounters
    metrics: Metrics
    workers: int = 1
    port: int = 0
    host: str = ""  # the address the listener is bound to (mcp-bind_address or --host)
    started_at: float = field(default_factory=time.time)
    handlers: dict[str, EndpointState] = field(default_factory=dict)  # every endpoint, by name
    targets: TargetPools | None = None  # the database targets' pools (backends.pools)
    sql: ReadOnlySql | None = None  # the one read-only SQL path (backends.sql)
    result_cache: ResultCache | None = None  # the query result cache inside that path (backends.result_cache)
    evidence: EvidenceRecorder | None = None  # what the gateway saw, for /mcp/ai (gateway.evidence)
    rag_index: SearchIndex | None = None
    rag_embedder: Embedder | None = None
    rag_jobs: SyncJobs | None = None
    token_use: TokenUse = field(default_factory=TokenUse)  # last use of each token, until the next flush
    # admin_flush_cache{cache_type}: what each kind of cache clears in this process, given a
    # target_id or None, returning the entries dropped (gateway.workers runs them in every worker).
    cache_flushers: dict[str, Callable[[str | None], int]] = field(default_factory=dict)
