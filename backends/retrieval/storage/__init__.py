"""Where the retrieval index lives: sqlite/ (rag.db in the data directory) or postgresql/
(pgvector, shared by a cluster), as rag-backend says. reader.py is what search reads either
through; records.py what ingestion hands either to write.

The rest of the retrieval engine reaches a storage through the entry points below (which index
to open, whether it is shared, its figures for /metrics), never by naming a backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from gateway.errors import ConfigError

SQLITE, POSTGRESQL = "sqlite", "postgresql"
BACKENDS = (SQLITE, POSTGRESQL)  # rag-backend's choices; the first is the default

T = TypeVar("T")


def shares_index(runtime: Any) -> bool:
    """Whether the index is a server every instance of a cluster shares (PostgreSQL), rather
    than rag.db in this data directory."""
    return runtime.var("rag-backend") == POSTGRESQL


def open_index(runtime: Any, data_dir: Path, *, embedding_model_id: str, dim: int) -> Any:
    """The index rag-backend names: rag.db in the data directory, or PostgreSQL at rag-postgres_dsn."""
    if shares_index(runtime):
        from backends.retrieval.storage.postgresql.index import PgRagIndex

        dsn = runtime.var("rag-postgres_dsn")
        if not dsn:
            raise ConfigError("rag-backend is postgresql but rag-postgres_dsn is empty")
        return PgRagIndex.open(
            dsn, embedding_model_id=embedding_model_id, dim=dim, hnsw_type=runtime.var("rag-postgres_hnsw_type")
        )
    from backends.retrieval.storage.sqlite.index import RagIndex

    return RagIndex.open(Path(data_dir) / "rag.db", embedding_model_id=embedding_model_id, dim=dim)


def index_figures(runtime: Any, data_dir: Path, read: Callable[[Any], T]) -> T | None:
    """`read(db)` on a short-lived read-only handle of the index (backends/retrieval/metrics.py
    StateReader: query, size_bytes, held_sync_jobs); None when there is no index yet or it
    cannot be read (logged), so a /metrics scrape never fails on it."""
    if shares_index(runtime):
        from backends.retrieval.storage.postgresql.state import read_pg_state

        return read_pg_state(runtime.var("rag-postgres_dsn"), read)
    from backends.retrieval.storage.sqlite.state import read_sqlite_state

    return read_sqlite_state(Path(data_dir) / "rag.db", read)
