"""Embedding over HTTP: any OpenAI-compatible /v1/embeddings, or Ollama's /api/embed.

Failures become `Unavailable` with a message that names the provider, host and HTTP status but
never the api_key, nor the response body (a proxy's error page can echo request headers).
Connection failures, 429 and 5xx are retried with exponential backoff, a bounded number of times.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Literal

import httpx
import numpy as np

from gateway.errors import ConfigError, InvalidArgument, Unavailable
from handlers.rag.embeddings.normalise import check_texts, l2_normalise

log = logging.getLogger("mcp_gateway.rag.embeddings")

Api = Literal["openai", "ollama"]
MAX_BACKOFF_MS = 10_000  # one wait never exceeds this, whatever Retry-After says


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth another try."""

    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


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
        self.timeout_ms = timeout_ms
        self.max_retries = max_retries
        self.backoff_ms = backoff_ms
        self.url = _endpoint_url(api, api_base)
        parsed = httpx.URL(self.url)
        # Host and port only: a URL may carry user:password, and the path is of no use to a reader.
        self._where = f"{self.model_id} at {parsed.host}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"
        headers = {"User-Agent": "mcp-gateway", "Accept": "application/json"}
        if api_key and not (api_key.isascii() and api_key.isprintable() and " " not in api_key):
            # Checked here because httpx's own complaint about a bad header quotes the value.
            raise ConfigError("embedding api_key contains characters that are not allowed in an HTTP header")
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(timeout=timeout_ms / 1000, headers=headers, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            vectors[start : start + len(batch)] = self._embed_batch(batch)
        return vectors

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        body = self._post({"model": self.model, "input": batch})
        rows = _vectors_from(self.api, body)
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise Unavailable(f"embedding provider {self._where} returned malformed vectors") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(batch):
            raise Unavailable(f"embedding provider {self._where} returned {len(rows)} vectors for {len(batch)} texts")
        if matrix.shape[1] != self.dim:
            raise InvalidArgument(
                f"embedding provider {self._where} returned {matrix.shape[1]}-dim vectors but dim is configured as {self.dim}"
            )
        if not np.isfinite(matrix).all():
            raise Unavailable(f"embedding provider {self._where} returned non-finite values")
        return l2_normalise(matrix)

    def _post(self, payload: dict[str, Any]) -> Any:
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._attempt(payload)
            except _Retryable as failure:
                if attempt + 1 == attempts:
                    raise Unavailable(
                        f"embedding provider {self._where} failed after {attempts} attempt(s): {failure.reason}"
                    ) from failure
                delay_s = self._backoff_s(attempt, failure.retry_after_s)
                log.warning("embedding provider %s: %s; retry in %.2f s", self._where, failure.reason, delay_s)
                time.sleep(delay_s)
        raise AssertionError("unreachable")

    def _attempt(self, payload: dict[str, Any]) -> Any:
        """One POST: the decoded JSON body, _Retryable, or Unavailable for what a retry cannot fix."""
        try:
            response = self._client.post(self.url, json=payload)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise _Retryable("connect timed out") from exc
            # The server got the request and is slow: retrying would multiply the wait.
            raise Unavailable(f"embedding provider {self._where} did not answer within {self.timeout_ms} ms") from exc
        except httpx.ConnectError as exc:
            raise _Retryable("cannot connect") from exc
        except httpx.HTTPError as exc:  # connection reset, malformed HTTP: transient more often than not
            raise _Retryable(f"transport error ({type(exc).__name__})") from exc

        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}", retry_after_s=_retry_after_s(response))
        if status in (401, 403):
            raise Unavailable(f"embedding provider {self._where} rejected the credentials (HTTP {status})")
        if status != 200:
            raise Unavailable(f"embedding provider {self._where} refused the request (HTTP {status})")
        try:
            return response.json()
        except ValueError:
            raise Unavailable(f"embedding provider {self._where} returned a body that is not JSON") from None

    def _backoff_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, MAX_BACKOFF_MS / 1000)
        ceiling_ms = min(self.backoff_ms * (2**attempt), MAX_BACKOFF_MS)
        # Half fixed, half random: spreads out the retries of many callers hitting one provider.
        return (ceiling_ms / 2 + random.uniform(0, ceiling_ms / 2)) / 1000


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


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date, or absent: fall back to our own backoff
    return max(0.0, seconds)
