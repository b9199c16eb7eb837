"""The retrieval engine behind /mcp/rag: the index, how it is searched, and how it is filled.

protocols     Embedder, SearchIndex, SyncJobs: what the tools code against
storage/      where the index lives: sqlite/ (rag.db: FTS5, the in-process ANN over float32
              vectors) and postgresql/ (tsvector/GIN, pgvector HNSW); reader.py is the one
              interface search reads either through
search, fusion, filters, content, call
              the search modes, how rankings merge, the filter SQL, content by id, and one
              search's caps and deadline
ingest/       syncing sources into the index: readers, document mapping, chunking, jobs
embeddings/   the embedding models (local ONNX, OpenAI, Ollama, hash) with model_assets/
metrics, build_status, job_liveness, source_lock
              what /metrics and search results say of the index and its sync jobs

It imports `backends` and `gateway`, never `handlers`: handlers/rag holds the tools over it.
"""

# onnxruntime must be loaded before usearch: the other order segfaults inside onnxruntime's
# import (measured with onnxruntime and usearch as pinned here). Every module of this package
# passes through here first, so importing it now makes the order safe wherever usearch is used.
# Except in a worker of a supervisor that serves the local model (MCP_GATEWAY_EMBED_SOCKET set,
# embeddings/shared.py): its embedder is a SharedEmbedder, which never loads onnxruntime, and
# onnxruntime costs ~21 MiB RSS per process (issue 30). Such a worker refuses to load it later
# (LocalEmbedder._build checks the order) rather than crash.
import contextlib
import os

if not os.environ.get("MCP_GATEWAY_EMBED_SOCKET"):  # shared.SOCKET_ENV (not imported: it needs numpy)
    with contextlib.suppress(ImportError):  # without it the local provider reports its own clear error
        import onnxruntime  # noqa: F401
