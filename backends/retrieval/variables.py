"""The retrieval engine's variables (rag-*): its caps, the embedder, and where the index lives
(rag-backend: the storages backends/retrieval/storage names). The /mcp/rag handler lists them."""

from __future__ import annotations

from typing import Any

from backends.retrieval.storage import BACKENDS
from gateway.variables import Variable


def _v(name: str, kind: str, default: Any, help: str, **kw: Any) -> Variable:
    return Variable(name=name, kind=kind, default=str(default), help=help, **kw)


RAG_VARIABLES: tuple[Variable, ...] = (
    _v("rag-k_max", "int", 50, "Most results one rag search returns, and most ids one rag.get_* call serves.", minimum=1, maximum=1000),
    _v("rag-candidates_max", "int", 500, "Most candidates a rag search ranks (fts_k, vec_k, candidates_k, offset + k).", minimum=1, maximum=100_000),
    _v("rag-query_max_bytes", "int", 8192, "Longest rag query text, in bytes; longer is LIMIT_EXCEEDED.", minimum=16, maximum=1_048_576),
    _v("rag-response_max_bytes", "int", 5_000_000, "Largest rag tool response, in bytes of JSON; results beyond it are cut (truncated: true).", minimum=1024, maximum=64_000_000),
    _v("rag-timeout_ms", "int", 2000, "Deadline of one rag tool call, in milliseconds (DEADLINE_EXCEEDED past it).", minimum=10, maximum=600_000),
    _v("rag-embedding_provider", "enum", "local", "Embedding provider of the index: local (all-MiniLM-L6-v2, offline), openai, ollama, or hash (tests only).", choices=("local", "openai", "ollama", "hash"), restart_required=True),
    _v("rag-embedding_model", "str", "", "Embedding model name (openai/ollama); empty for local's own model.", restart_required=True),
    _v("rag-embedding_api_base", "str", "", "Base URL of the openai/ollama embedding API.", restart_required=True),
    _v("rag-embedding_api_key", "str", "", "API key of the embedding provider.", secret=True, restart_required=True),
    _v("rag-embedding_dim", "int", 384, "Width of the embedding vectors (must match the model; fixed per index).", minimum=1, maximum=16384, restart_required=True),
    _v("rag-vector_column_models", "str", "", 'Which embedding model filled a target\'s vector column, for rag.similarity_search\'s query_text: a JSON object {"<target_id>.<schema>.<table>.<column>": {"provider": ..., "model": ..., "dim": ...}} (missing fields: the index\'s rag-embedding_* settings, its API key included). Empty: columns are searched with the index\'s model when the dimensions match.'),
    _v("rag-query_cache_entries", "int", 1024, "Query embeddings kept in the LRU cache (0: no cache).", minimum=0, maximum=1_000_000, restart_required=True),
    _v("rag-backend", "enum", BACKENDS[0], "Where the RAG index lives: sqlite (rag.db in the data directory) or postgresql (rag-postgres_dsn, with pgvector; shared by every instance of a cluster).", choices=BACKENDS, restart_required=True),
    _v("rag-postgres_dsn", "str", "", "PostgreSQL DSN of the RAG index when rag-backend is postgresql (pgvector 0.8+ installed).", secret=True, restart_required=True),
    _v("rag-postgres_hnsw_type", "enum", "halfvec", "What the HNSW index on PostgreSQL holds: halfvec (2 bytes a dimension; candidates rescored with the stored float32 vectors) or vector (4); fixed per index.", choices=("halfvec", "vector"), restart_required=True),
)  # fmt: skip
