"""Embedding providers: the real local model, real HTTP providers on loopback, the cache, config."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from backends.retrieval.embeddings import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    QueryEmbeddingCache,
    RemoteEmbedder,
    make_embedder,
)
from backends.retrieval.embeddings.local import MAX_SEQ_TOKENS
from gateway.errors import ConfigError, InvalidArgument, Unavailable

from .embedding_server import SECRET_IN_ERROR_BODY, EmbeddingServer

API_KEY = "sk-test-do-not-leak-91c2"
TEXTS = [
    "How do I sort a list in Python?",
    "Use sorted() to order a list",
    "The pressure distribution over a swept wing at supersonic speed.",
    "A man is eating food.",
    "Boundary layer transition on a flat plate is delayed by a favourable pressure gradient, "
    "as the measurements in the second wind tunnel series show.",
]


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    return LocalEmbedder(batch_size=2).load()


@pytest.fixture(scope="module")
def server(local: LocalEmbedder) -> Iterator[EmbeddingServer]:
    running = EmbeddingServer(local.embed).start()
    yield running
    running.stop()


@pytest.fixture
def provider(server: EmbeddingServer) -> EmbeddingServer:
    server.reset()
    return server


def remote(api: str, api_base: str, **overrides: object) -> RemoteEmbedder:
    config = {"provider": api, "model": "minilm-test", "dim": 384, "api_base": api_base, "api_key": API_KEY}
    config.update(backoff_ms=5, max_retries=2, timeout_ms=2000)
    config.update(overrides)
    embedder = make_embedder(config)
    assert isinstance(embedder, RemoteEmbedder)
    return embedder


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b))  # rows are unit length


# --- local model -------------------------------------------------------------------------------


def test_default_config_is_the_local_model(local: LocalEmbedder) -> None:
    embedder = make_embedder({})
    assert isinstance(embedder, LocalEmbedder)
    assert isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dim) == ("local:all-MiniLM-L6-v2@int8", 384)
    named = make_embedder({"provider": "local", "model": "sentence-transformers/all-MiniLM-L6-v2", "dim": 384})
    assert named.model_id == embedder.model_id
    assert local._model().input_names == {"input_ids", "attention_mask", "token_type_ids"}


def test_local_vectors_are_unit_float32_rows(local: LocalEmbedder) -> None:
    vectors = local.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert local.embed([]).shape == (0, 384)


def test_local_model_ranks_the_answer_above_an_unrelated_sentence(local: LocalEmbedder) -> None:
    question, answer, unrelated = local.embed(
        ["How do I sort a list in Python?", "Use sorted() to order a list", "The weather in Paris is sunny today."]
    )
    related_score, unrelated_score = cosine(question, answer), cosine(question, unrelated)
    assert related_score > 0.5
    assert related_score - unrelated_score > 0.3


def test_batching_and_padding_do_not_change_a_vector(local: LocalEmbedder) -> None:
    # batch_size=2 over 5 texts of mixed length: sorted, padded, scattered back in input order.
    together = local.embed(TEXTS)
    alone = np.vstack([local.embed([text]) for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_tokenizer_truncates_at_256_not_at_the_files_128(local: LocalEmbedder) -> None:
    tokenizer = local._model().tokenizer
    long_text = " ".join(f"word{i}" for i in range(400))
    short, long = tokenizer.encode_batch(["tiny", long_text])
    assert len(long.ids) == MAX_SEQ_TOKENS
    assert len(short.ids) == MAX_SEQ_TOKENS and sum(short.attention_mask) == 3  # padded to the longest only
    # Two texts that differ only after token ~150 must embed differently (they would not at 128).
    # ("aerodynamic" is one token.) Texts that differ only after token ~150 embed differently (not
    # so at 128); texts that differ only after token 300 embed identically (truncated at 256).
    prefix = " ".join(["aerodynamic"] * 150)
    first, second = local.embed([prefix + " cats purr loudly", prefix + " quantum chromodynamics lattice"])
    assert cosine(first, second) < 0.999
    prefix = " ".join(["aerodynamic"] * 300)
    first, second = local.embed([prefix + " cats purr loudly", prefix + " quantum chromodynamics lattice"])
    assert cosine(first, second) > 0.99999


def test_local_model_is_shared_and_thread_safe(local: LocalEmbedder) -> None:
    expected = local.embed(TEXTS)
    other = LocalEmbedder(batch_size=2)
    assert other._model() is local._model()  # loaded once per process
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: other.embed(TEXTS), range(8)))
    for result in results:
        np.testing.assert_allclose(result, expected, atol=1e-5)


def test_model_file_with_wrong_sha256_is_refused(tmp_path) -> None:
    tampered = tmp_path / "model.onnx"
    tampered.write_bytes(b"not the model" * 100)
    with pytest.raises(Unavailable, match="sha256"):
        LocalEmbedder(model_path=tampered).embed(["hello"])
    with pytest.raises(Unavailable, match="cannot be read"):
        LocalEmbedder(model_path=tmp_path / "missing.onnx").load()


def test_cutting_a_huge_text_keeps_its_first_256_tokens(local: LocalEmbedder) -> None:
    words = " ".join(f"w{i}" for i in range(400))
    huge = words + " filler" * 200_000  # 1.4 MB, cut to MAX_TEXT_CHARS before tokenising
    np.testing.assert_allclose(local.embed([huge]), local.embed([words]), atol=1e-5)


def test_texts_must_be_a_list_of_strings(local: LocalEmbedder) -> None:
    with pytest.raises(InvalidArgument, match="#1"):
        local.embed(["fine", 3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgument, match="single string"):
        local.embed("a string is not a list")  # type: ignore[arg-type]


# --- remote providers over real HTTP ------------------------------------------------------------


@pytest.mark.parametrize(("api", "path"), [("openai", "/v1/embeddings"), ("ollama", "/api/embed")])
def test_remote_provider_round_trip(provider: EmbeddingServer, local: LocalEmbedder, api: str, path: str) -> None:
    embedder = remote(api, provider.url, batch_size=2)
    vectors = embedder.embed(TEXTS)
    assert embedder.model_id == f"{api}:minilm-test"
    np.testing.assert_allclose(vectors, local.embed(TEXTS), atol=1e-5)  # same vectors, same order
    assert [len(seen.body["input"]) for seen in provider.requests] == [2, 2, 1]
    assert {seen.path for seen in provider.requests} == {path}
    assert {seen.authorization for seen in provider.requests} == {f"Bearer {API_KEY}"}
    assert provider.requests[0].body["model"] == "minilm-test"
    embedder.close()


def test_openai_base_may_end_in_v1_and_key_is_optional(provider: EmbeddingServer) -> None:
    embedder = remote("openai", provider.url + "/v1/", api_key="")
    assert embedder.embed(["hello"]).shape == (1, 384)
    assert provider.requests[0].path == "/v1/embeddings"
    assert provider.requests[0].authorization is None


def test_provider_down_is_unavailable_quickly() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and has no listener now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = remote("ollama", f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        embedder.embed(["hello"])
    assert time.monotonic() - started < 3
    assert "cannot connect" in caught.value.message and "3 attempt" in caught.value.message
    assert API_KEY not in caught.value.message


def test_5xx_then_success_is_retried(provider: EmbeddingServer, local: LocalEmbedder) -> None:
    provider.script.fail_statuses = [500, 503]
    vectors = remote("openai", provider.url).embed(["hello"])
    np.testing.assert_allclose(vectors, local.embed(["hello"]), atol=1e-5)
    assert len(provider.requests) == 3


def test_429_honours_retry_after(provider: EmbeddingServer) -> None:
    provider.script.fail_statuses = [429]
    provider.script.retry_after = "0.3"
    started = time.monotonic()
    remote("openai", provider.url, backoff_ms=0).embed(["hello"])
    assert time.monotonic() - started >= 0.3
    assert len(provider.requests) == 2


def test_persistent_5xx_gives_up_without_echoing_the_body(provider: EmbeddingServer) -> None:
    provider.script.fail_statuses = [502] * 10
    with pytest.raises(Unavailable) as caught:
        remote("openai", provider.url, max_retries=1).embed(["hello"])
    assert len(provider.requests) == 2  # bounded: 1 + max_retries
    assert "HTTP 502" in caught.value.message
    assert SECRET_IN_ERROR_BODY not in caught.value.message
    assert API_KEY not in caught.value.message


def test_rejected_credentials_are_not_retried(provider: EmbeddingServer) -> None:
    provider.script.fail_statuses = [401]
    with pytest.raises(Unavailable, match="credentials"):
        remote("openai", provider.url).embed(["hello"])
    assert len(provider.requests) == 1


def test_wrong_dimension_is_invalid_argument(provider: EmbeddingServer) -> None:
    with pytest.raises(InvalidArgument, match="384-dim vectors but dim is configured as 768"):
        remote("ollama", provider.url, dim=768).embed(["hello"])
    provider.script.dim = 100
    with pytest.raises(InvalidArgument, match="100-dim"):
        remote("openai", provider.url).embed(["hello"])


def test_slow_provider_times_out(provider: EmbeddingServer) -> None:
    provider.script.delay_s = 3.0
    started = time.monotonic()
    with pytest.raises(Unavailable, match="within 200 ms"):
        remote("openai", provider.url, timeout_ms=200).embed(["hello"])
    assert time.monotonic() - started < 2.5  # gave up long before the server answered
    assert len(provider.requests) == 1  # a read timeout is not retried: the server got the work


def test_body_that_is_not_json_is_unavailable(provider: EmbeddingServer) -> None:
    provider.script.not_json = True
    with pytest.raises(Unavailable, match="not JSON"):
        remote("openai", provider.url).embed(["hello"])


# --- hash embedder and the query cache ----------------------------------------------------------


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    embedder = make_embedder({"provider": "hash", "dim": 64})
    assert isinstance(embedder, HashEmbedder) and isinstance(embedder, Embedder)
    assert (embedder.model_id, embedder.dim) == ("hash:64", 64)
    vectors = embedder.embed(["Sort a list", "sort the LIST quickly", "wind tunnel pressure", ""])
    np.testing.assert_array_equal(
        vectors, HashEmbedder(dim=64).embed(["Sort a list", "sort the LIST quickly", "wind tunnel pressure", ""])
    )
    np.testing.assert_allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-6)
    assert not vectors[3].any()  # no tokens: a zero row rather than NaN
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2])


def test_query_cache_counts_and_evicts_least_recently_used() -> None:
    cache = QueryEmbeddingCache(HashEmbedder(dim=32), max_entries=2)
    first = cache.embed_query("alpha")
    cache.embed_query("beta")
    assert cache.embed_query("alpha") is first  # hit, and alpha becomes most recent
    cache.embed_query("gamma")  # evicts beta
    cache.embed_query("beta")
    assert (cache.hits, cache.misses, len(cache)) == (1, 4, 2)
    assert first.shape == (32,) and not first.flags.writeable
    cache.embedder = HashEmbedder(dim=16)  # another model_id: never served the old vector
    assert cache.embed_query("alpha").shape == (16,)
    assert cache.misses == 5


def test_query_cache_in_front_of_the_local_model_is_thread_safe(local: LocalEmbedder) -> None:
    cache = QueryEmbeddingCache(local, max_entries=8)
    barrier = threading.Barrier(4)

    def query(_: int) -> np.ndarray:
        barrier.wait()
        return cache.embed_query(TEXTS[0])

    with ThreadPoolExecutor(max_workers=4) as pool:
        vectors = list(pool.map(query, range(4)))
    for vector in vectors:
        np.testing.assert_allclose(vector, local.embed(TEXTS[:1])[0], atol=1e-5)
    assert cache.hits + cache.misses == 4 and len(cache) == 1


# --- configuration ------------------------------------------------------------------------------


def test_api_key_that_cannot_be_a_header_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        remote("openai", "http://127.0.0.1:9", api_key="sk-line1\nInjected: yes")
    assert "sk-line1" not in caught.value.message


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        ({"provider": "cohere"}, "unknown embedding provider"),
        ({"provider": "local", "dim": 768}, "384-dim"),
        ({"provider": "local", "model": "bge-small"}, "only serves"),
        ({"provider": "openai", "model": "m", "api_base": "http://127.0.0.1:1"}, "needs dim"),
        ({"provider": "openai", "model": "m", "dim": 8, "api_base": "ftp://x"}, "api_base"),
        ({"provider": "ollama", "dim": 8, "api_base": "http://127.0.0.1:1"}, "model name"),
        ({"provider": "hash", "batch_size": 0}, "out of range"),
        ({"provider": "hash", "batch_size": "many"}, "must be an integer"),
        ({"provider": "hash", "dim": True}, "not a boolean"),
        ({"provider": "openai", "model": "m", "dim": 8, "api_base": "http://h", "timeout_ms": 0}, "timeout_ms"),
    ],
)
def test_bad_configuration_is_refused(config: dict, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        make_embedder(config)
