"""Query vectors for the search tools: from the LRU cache (cache.py), embedded now, or started on
a thread of their own, so that a hybrid search runs its keyword half meanwhile (the ONNX model
and SQLite both release the GIL: on two cores the two halves overlap)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from backends.retrieval.embeddings.cache import QueryEmbeddingCache
from backends.retrieval.protocols import Embedder


class QueryVectors:
    def __init__(self, embedder: Embedder, *, max_entries: int) -> None:
        self.cache = QueryEmbeddingCache(embedder, max_entries=max_entries)
        self._thread = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rag-query-embed")

    def now(self, text: str) -> np.ndarray:
        return self.cache.embed_query(text)

    def soon(self, text: str) -> Callable[[], np.ndarray]:
        """Start embedding `text` (unless cached) and return the call that waits for it."""
        vector = self.cache.lookup(text)
        if vector is not None:
            return lambda: vector
        return self._thread.submit(self.now, text).result

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)
