"""A bounded LRU of query vectors: agents repeat and rephrase, and the model costs milliseconds."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from backends.retrieval.protocols import Embedder


class QueryEmbeddingCache:
    """Wraps an Embedder; `embed_query(text)` returns a read-only (dim,) float32 vector.

    Keyed by (model_id, text) so that swapping the embedder on a runtime change can never serve a
    vector of the old model. Counters `hits` and `misses` are plain ints for the stats endpoint.
    """

    def __init__(self, embedder: Embedder, *, max_entries: int = 1024) -> None:
        if max_entries < 0:
            raise ValueError("max_entries must be >= 0")
        self.embedder = embedder
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, text: str) -> np.ndarray | None:
        """The cached vector (counted as a hit), or None; a miss is counted by embed_query."""
        key = (self.embedder.model_id, text)
        with self._lock:
            vector = self._entries.get(key)
            if vector is not None:
                self._entries.move_to_end(key)
                self.hits += 1
            return vector

    def embed_query(self, text: str) -> np.ndarray:
        vector = self.lookup(text)
        if vector is not None:
            return vector
        key = (self.embedder.model_id, text)
        with self._lock:
            self.misses += 1
        # Embed outside the lock: a slow remote provider must not serialise every other query.
        vector = self.embedder.embed([text])[0]
        vector.setflags(write=False)  # shared between callers: nobody may change it in place
        if self.max_entries:
            with self._lock:
                self._entries[key] = vector
                self._entries.move_to_end(key)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
        return vector

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
