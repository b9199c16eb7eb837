"""Embedding providers of the RAG endpoint: text in, L2-normalised float32 vectors out.

    Embedder (protocol)          model_id, dim, embed(texts) -> ndarray (n, dim) float32
     +-- LocalEmbedder           "local": all-MiniLM-L6-v2 int8 on onnxruntime, offline, 384 dims
     +-- RemoteEmbedder          "openai": POST {api_base}/v1/embeddings
     |                           "ollama": POST {api_base}/api/embed
     +-- HashEmbedder            "hash": feature hashing, for benchmarks/tests only
     +-- SharedEmbedder          "local" in a worker of several: the supervisor's one model (shared.py)
    QueryEmbeddingCache          bounded LRU of query vectors in front of any Embedder

`make_embedder(config)` builds one from the blueprint's `embedding_json` keys:
provider, model, dim, api_base, api_key, batch_size, timeout_ms, max_retries, backoff_ms,
intra_op_threads, batch_tokens (local: padded tokens per batch, which bounds a sync's memory). Keys it does not know are ignored (the same JSON may carry settings of other
components); known keys with bad values raise `ConfigError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from backends.retrieval.embeddings.cache import QueryEmbeddingCache
from backends.retrieval.embeddings.hashing import HashEmbedder
from backends.retrieval.embeddings.local import BATCH_TOKEN_BUDGET, LOCAL_DIM, LOCAL_MODEL_NAME, LocalEmbedder
from backends.retrieval.embeddings.remote import RemoteEmbedder
from backends.retrieval.embeddings.shared import SharedEmbedder, serve_to_workers, shared_socket
from backends.retrieval.protocols import Embedder
from gateway.errors import ConfigError

__all__ = [
    "PROVIDERS",
    "Embedder",
    "HashEmbedder",
    "LocalEmbedder",
    "QueryEmbeddingCache",
    "RemoteEmbedder",
    "index_embedding_config",
    "make_embedder",
]

PROVIDERS = ("local", "openai", "ollama", "hash")

# Bounds on the numeric settings: wide enough for any real deployment, narrow enough that a typo
# (timeout_ms=0, batch_size=10**6) is refused at LOAD time instead of misbehaving at query time.
_BATCH_SIZE_RANGE = (1, 2048)
_TIMEOUT_MS_RANGE = (1, 600_000)
_MAX_RETRIES_RANGE = (0, 10)
_BACKOFF_MS_RANGE = (0, 60_000)
_DIM_RANGE = (1, 16_384)
_BATCH_TOKENS_RANGE = (256, 1 << 20)  # one text of 256 tokens must fit


def index_embedding_config(runtime: Any) -> dict[str, Any]:
    """The index's embedder from the rag-embedding_* variables (the server and `rag sync` alike)."""
    return {
        "provider": runtime.var("rag-embedding_provider"),
        "model": runtime.var("rag-embedding_model"),
        "api_base": runtime.var("rag-embedding_api_base"),
        "api_key": runtime.var("rag-embedding_api_key"),
        "dim": runtime.var("rag-embedding_dim"),
    }


def make_embedder(config: Mapping[str, Any]) -> Embedder:
    """Build the embedder that `config` describes; raise ConfigError if it does not validate."""
    provider = str(config.get("provider") or "local").strip().lower()
    if provider not in PROVIDERS:
        raise ConfigError(f"unknown embedding provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    dim = _int_setting(config, "dim", None, _DIM_RANGE)
    batch_size = _int_setting(config, "batch_size", 32, _BATCH_SIZE_RANGE)

    if provider == "hash":
        return HashEmbedder(dim=dim or LOCAL_DIM)

    if provider == "local":
        model = str(config.get("model") or LOCAL_MODEL_NAME).strip()
        if model.lower().removeprefix("sentence-transformers/") != LOCAL_MODEL_NAME.lower():
            raise ConfigError(f"the local provider only serves {LOCAL_MODEL_NAME!r}, not {model!r}")
        if dim not in (None, LOCAL_DIM):
            raise ConfigError(f"{LOCAL_MODEL_NAME} produces {LOCAL_DIM}-dim vectors; dim={dim} does not match")
        threads = _int_setting(config, "intra_op_threads", None, (1, 256))
        batch_tokens = _int_setting(config, "batch_tokens", BATCH_TOKEN_BUDGET, _BATCH_TOKENS_RANGE)
        if (path := shared_socket()) is not None:  # a worker: the supervisor's one model (shared.py)
            return SharedEmbedder(path)
        return LocalEmbedder(batch_size=batch_size, batch_tokens=batch_tokens, intra_op_threads=threads)

    model = str(config.get("model") or "").strip()
    api_base = str(config.get("api_base") or "").strip()
    if not model:
        raise ConfigError(f"embedding provider {provider!r} needs a model name")
    if not api_base.startswith(("http://", "https://")):
        raise ConfigError(f"embedding provider {provider!r} needs api_base as an http:// or https:// URL")
    if dim is None:
        # The vector table is created with a fixed width, so the width must be known up front.
        raise ConfigError(f"embedding provider {provider!r} needs dim (the width of its vectors)")
    return RemoteEmbedder(
        api=provider,
        model=model,
        dim=dim,
        api_base=api_base,
        api_key=str(config.get("api_key") or ""),
        batch_size=batch_size,
        timeout_ms=_int_setting(config, "timeout_ms", 10_000, _TIMEOUT_MS_RANGE),
        max_retries=_int_setting(config, "max_retries", 2, _MAX_RETRIES_RANGE),
        backoff_ms=_int_setting(config, "backoff_ms", 200, _BACKOFF_MS_RANGE),
    )


def serve_model(config: dict[str, Any]) -> None:
    """The supervisor's job with several workers (RagHandler.before_serve): the local model that
    `config` describes, served to the workers and to the demo sync's child (shared.py)."""
    embedder = make_embedder(config)
    if not isinstance(embedder, LocalEmbedder):
        raise ConfigError("only the local embedding model is served to the workers")
    serve_to_workers(embedder)


def _int_setting(config: Mapping[str, Any], key: str, default: int | None, bounds: tuple[int, int]) -> int | None:
    raw = config.get(key)
    if raw is None or raw == "":
        return default
    if isinstance(raw, bool):
        raise ConfigError(f"embedding {key} must be an integer, not a boolean")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"embedding {key} must be an integer") from None
    if isinstance(raw, float) and raw != value:
        raise ConfigError(f"embedding {key} must be an integer")
    low, high = bounds
    if not low <= value <= high:
        raise ConfigError(f"embedding {key}={value} is out of range [{low}, {high}]")
    return value
