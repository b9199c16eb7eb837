"""JSON over HTTP to a model provider (embeddings, chat): one POST with bounded retries.

Failures become `Unavailable` with a message naming the provider, host and HTTP status, but
never the api_key nor the response body (a proxy's error page can echo request headers).
Connection failures, 429 and 5xx are retried with exponential backoff (Retry-After honoured,
capped), a bounded number of times and never past the caller's deadline.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import httpx

from gateway.errors import ConfigError, DeadlineExceeded, Unavailable

log = logging.getLogger("mcp_gateway.http")
MAX_BACKOFF_MS = 10_000  # one wait never exceeds this, whatever Retry-After says


class _Retryable(Exception):
    """Internal: this attempt failed in a way worth another try."""

    def __init__(self, reason: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


def where(label: str, url: str) -> str:
    """`label at host:port`: the URL may carry user:password, and the path is of no use to a reader."""
    parsed = httpx.URL(url)
    return f"{label} at {parsed.host}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"


def auth_headers(api_key: str) -> dict[str, str]:
    headers = {"User-Agent": "mcp-gateway", "Accept": "application/json"}
    if api_key and not (api_key.isascii() and api_key.isprintable() and " " not in api_key):
        # Checked here because httpx's own complaint about a bad header quotes the value.
        raise ConfigError("api_key contains characters that are not allowed in an HTTP header")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class JsonPoster:
    """POSTs JSON to one URL and returns the decoded answer. Thread-safe (one pooled httpx client)."""

    def __init__(
        self,
        *,
        url: str,
        label: str,
        api_key: str = "",
        timeout_ms: int = 10_000,
        max_retries: int = 2,
        backoff_ms: int = 200,
    ) -> None:
        self.url = url
        self.where = where(label, url)
        self.timeout_ms = timeout_ms
        self.max_retries = max_retries
        self.backoff_ms = backoff_ms
        self._client = httpx.Client(timeout=timeout_ms / 1000, headers=auth_headers(api_key), follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def post(self, payload: dict[str, Any], *, deadline: float | None = None) -> Any:
        """`deadline` is a time.monotonic() value: no attempt starts, and no wait runs, past it."""
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._attempt(payload, deadline)
            except _Retryable as failure:
                if attempt + 1 == attempts:
                    raise Unavailable(f"{self.where} failed after {attempts} attempt(s): {failure.reason}") from failure
                delay_s = self._backoff_s(attempt, failure.retry_after_s)
                if deadline is not None and time.monotonic() + delay_s >= deadline:
                    raise DeadlineExceeded(
                        f"{self.where}: {failure.reason}; the next retry (in {delay_s:.1f} s) would pass the deadline"
                    ) from failure
                log.warning("%s: %s; retry in %.2f s", self.where, failure.reason, delay_s)
                time.sleep(delay_s)
        raise AssertionError("unreachable")

    def _attempt(self, payload: dict[str, Any], deadline: float | None) -> Any:
        """One POST: the decoded JSON body, _Retryable, or Unavailable for what a retry cannot fix."""
        timeout_s = self.timeout_ms / 1000
        if deadline is not None:
            timeout_s = min(timeout_s, deadline - time.monotonic())
            if timeout_s <= 0:
                raise DeadlineExceeded(f"{self.where}: no time left for the request")
        try:
            response = self._client.post(self.url, json=payload, timeout=timeout_s)
        except httpx.TimeoutException as exc:
            if isinstance(exc, httpx.ConnectTimeout):
                raise _Retryable("connect timed out") from exc
            # The server got the request and is slow: retrying would multiply the wait.
            raise Unavailable(f"{self.where} did not answer within {int(timeout_s * 1000)} ms") from exc
        except httpx.ConnectError as exc:
            raise _Retryable("cannot connect") from exc
        except httpx.HTTPError as exc:  # connection reset, malformed HTTP: transient more often than not
            raise _Retryable(f"transport error ({type(exc).__name__})") from exc

        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}", retry_after_s=_retry_after_s(response))
        if status in (401, 403):
            raise Unavailable(f"{self.where} rejected the credentials (HTTP {status})")
        if status != 200:
            raise Unavailable(f"{self.where} refused the request (HTTP {status})")
        try:
            return response.json()
        except ValueError:
            raise Unavailable(f"{self.where} returned a body that is not JSON") from None

    def _backoff_s(self, attempt: int, retry_after_s: float | None) -> float:
        if retry_after_s is not None:
            return min(retry_after_s, MAX_BACKOFF_MS / 1000)
        ceiling_ms = min(self.backoff_ms * (2**attempt), MAX_BACKOFF_MS)
        # Half fixed, half random: spreads out the retries of many callers hitting one provider.
        return (ceiling_ms / 2 + random.uniform(0, ceiling_ms / 2)) / 1000


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date, or absent: fall back to our own backoff
    return max(0.0, seconds)
