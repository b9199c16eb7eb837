"""A tiny deterministic embedder for benchmarks and tests of OTHER components (index, search tools).

Signed feature hashing of lower-cased word tokens into `dim` buckets, L2-normalised. Texts that
share words get a positive cosine, so ranking code has something to rank, but this is NOT a
semantic model: never use it to judge retrieval quality. Its virtue is speed (no model to load,
~microseconds per text) and identical output on every machine and process.
"""

from __future__ import annotations

import functools
import hashlib
import re

import numpy as np

from backends.retrieval.embeddings.normalise import check_texts, l2_normalise

_TOKEN = re.compile(r"\w+")


class HashEmbedder:
    """provider "hash": deterministic bag-of-words vectors. For benchmarks/tests, not retrieval quality."""

    def __init__(self, *, dim: int = 384) -> None:
        if dim < 1:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.model_id = f"hash:{dim}"
        # Per-instance memo of token -> (bucket, sign); hashing dominates the cost otherwise.
        self._bucket = functools.lru_cache(maxsize=65_536)(self._bucket_uncached)

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for token in _TOKEN.findall(text.lower()):
                bucket, sign = self._bucket(token)
                vectors[row, bucket] += sign
        return l2_normalise(vectors)

    def _bucket_uncached(self, token: str) -> tuple[int, float]:
        # blake2b, not hash(): Python salts str hashes per process, and vectors must be stable.
        digest = int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")
        return digest % self.dim, (1.0 if (digest >> 63) & 1 else -1.0)
