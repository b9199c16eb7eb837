"""Embedding over HTTP: any OpenAI-compatible /v1/embeddings, or Ollama's /api/embed.

Posted through gateway.http_json.JsonPoster: failures become `Unavailable` with a message that
names the provider, host and HTTP status but never the api_key, nor the response body;
connection failures, 429 and 5xx are retried with exponential backoff (Retry-After honoured),
a bounded number of times.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from backends.retrieval.embeddings.normalise import check_texts, l2_normalise
from gateway.errors import InvalidArgument, Unavailable
from gateway.http_json import JsonPoster

Api = Literal["openai", "ollama"]


class RemoteEmbedder:
    """An embedding service reached over HTTP. Thread-safe (one pooled httpx client)."""

    def __init__(
        self,
        *,
        api: Api,
        model: str,
        dim: int,
        api_base: str,
        api_key: str = "",
        batch_size: int = 32,
        timeout_ms: int = 10_000,
        max_retries: int = 2,
        backoff_ms: int = 200,
    ) -> None:
        if api not in ("openai", "ollama"):
            raise ValueError(f"unknown remote embedding api {api!r}")
        self.api = api
        self.model = model
        self.model_id = f"{api}:{model}"
        self.dim = dim
        self.batch_size = batch_size
        self.url = _endpoint_url(api, api_base)
        self._poster = JsonPoster(
            url=self.url,
            label=f"embedding provider {self.model_id}",
            api_key=api_key,
            timeout_ms=timeout_ms,
            max_retries=max_retries,
            backoff_ms=backoff_ms,
        )
        self._where = self._poster.where

    def close(self) -> None:
        self._poster.close()

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors[start : start + len(batch)] = self._embed_batch(batch)
        return vectors

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        body = self._poster.post({"model": self.model, "input": batch})
        rows = _vectors_from(self.api, body)
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise Unavailable(f"{self._where} returned malformed vectors") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(batch):
            raise Unavailable(f"{self._where} returned {len(rows)} vectors for {len(batch)} texts")
        if matrix.shape[1] != self.dim:
            raise InvalidArgument(f"{self._where} returned {matrix.shape[1]}-dim vectors but dim is configured as {self.dim}")
        if not np.isfinite(matrix).all():
            raise Unavailable(f"{self._where} returned non-finite values")
        return l2_normalise(matrix)


def _endpoint_url(api: Api, api_base: str) -> str:
    base = api_base.rstrip("/")
    if api == "ollama":
        return f"{base}/api/embed"
    # OpenAI's own docs give the base as https://api.openai.com/v1; accept it with or without /v1.
    return f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"


def _vectors_from(api: Api, body: Any) -> list[Any]:
    """The list of vectors in a provider's JSON answer, in input order."""
    try:
        if api == "ollama":
            rows = body["embeddings"]
            if not isinstance(rows, list):
                raise TypeError
            return rows
        items = body["data"]
        if all(isinstance(item.get("index"), int) for item in items):
            items = sorted(items, key=lambda item: item["index"])
        return [item["embedding"] for item in items]
    except (KeyError, TypeError, AttributeError):
        raise Unavailable(f"embedding provider ({api}) returned a response without vectors") from None
