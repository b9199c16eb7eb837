"""The local embedder's memory bounds: token-budgeted batches and the idle batch session's release."""

from __future__ import annotations

import time

import numpy as np
import pytest

from backends.retrieval.embeddings import LocalEmbedder, make_embedder
from backends.retrieval.embeddings import local as local_module
from backends.retrieval.embeddings.local import QUERY_THREADS, token_batches
from backends.retrieval.embeddings.onnx_gather import gather_before_dequantize
from gateway.errors import ConfigError


def test_token_batches_respect_the_budget_and_the_text_count() -> None:
    lengths = [256, 10, 12, 256, 100, 11, 256, 9, 256, 255]
    batches = token_batches(lengths, max_texts=4, max_tokens=512)
    assert sorted(p for batch in batches for p in batch) == list(range(len(lengths)))  # each text once
    for batch in batches:
        assert len(batch) <= 4
        assert len(batch) * max(lengths[p] for p in batch) <= 512 or len(batch) == 1
    # Short texts share a batch; long ones go two at a time (2 x 256 = 512).
    assert batches == [[7, 1, 5, 2], [4, 9], [0, 3], [6, 8]]
    assert token_batches([], max_texts=4, max_tokens=512) == []
    assert token_batches([4000], max_texts=4, max_tokens=512) == [[0]]  # one text over budget still runs


@pytest.fixture(scope="module")
def texts() -> list[str]:
    base = "The gateway embeds every chunk of a source with the local model during a sync. "
    return [base * n for n in (1, 2, 8, 20, 3, 1)] + ["short one", "another short text about sqlite"]


def test_a_small_token_budget_gives_the_same_vectors(texts: list[str]) -> None:
    wide = LocalEmbedder(batch_size=32, batch_tokens=1 << 20, intra_op_threads=2).embed(texts)
    narrow = LocalEmbedder(batch_size=32, batch_tokens=256, intra_op_threads=2).embed(texts)
    assert np.allclose(wide, narrow, atol=1e-5)


def test_the_batch_session_is_dropped_when_idle_and_the_query_session_stays(texts: list[str]) -> None:
    embedder = LocalEmbedder(batch_idle_s=2.0, intra_op_threads=2)
    batch_key, query_key = embedder._key(2), embedder._key(QUERY_THREADS)
    embedder.embed(["a query"])
    before = embedder.embed(texts[:3])
    assert batch_key in local_module._LOADED and query_key in local_module._LOADED
    deadline = time.monotonic() + 10
    while batch_key in local_module._LOADED and time.monotonic() < deadline:
        time.sleep(0.05)
    assert batch_key not in local_module._LOADED
    assert query_key in local_module._LOADED
    assert np.allclose(embedder.embed(texts[:3]), before, atol=1e-6)  # reloads on the next batch


def test_batch_tokens_is_an_embedding_setting() -> None:
    assert make_embedder({"provider": "local", "batch_tokens": 1024}).batch_tokens == 1024
    assert make_embedder({"provider": "local"}).batch_tokens == local_module.BATCH_TOKEN_BUDGET
    with pytest.raises(ConfigError, match="batch_tokens"):
        make_embedder({"provider": "local", "batch_tokens": 10})


def _plain_session(model: bytes, threads: int) -> object:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def test_the_int8_embedding_table_is_gathered_before_dequantizing(texts: list[str]) -> None:
    """The rewritten graph gives bit-identical vectors (the same multiplications on the same
    values) and keeps the 30,522 x 384 table int8: its session is over 25 MiB smaller."""
    model = local_module.default_model_path().read_bytes()
    pieces = gather_before_dequantize(model)
    assert pieces is not None
    edited = b"".join(pieces)
    assert len(edited) != len(model)
    assert gather_before_dequantize(edited) is None  # no pattern left
    assert gather_before_dequantize(b"") is None
    loaded = local_module._load(local_module.default_model_path(), local_module.MODEL_SHA256, QUERY_THREADS)
    reference = local_module._LoadedModel(loaded.tokenizer, _plain_session(model, 1), loaded.input_names)
    for batch in ([texts[0]], texts):
        assert np.array_equal(loaded.embed_batch(batch), reference.embed_batch(batch))

    def rss_growth_mib(model_bytes: bytes) -> float:  # in a fresh process: this one's heap is warm
        code = (
            "import ctypes, sys, onnxruntime\n"
            "def rss(): return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1])\n"
            "model = open(sys.argv[1], 'rb').read(); before = rss()\n"
            "s = onnxruntime.InferenceSession(model, providers=['CPUExecutionProvider']); del model\n"
            "ctypes.CDLL(None).malloc_trim(0); print((rss() - before) / 1024)\n"
        )
        import subprocess
        import sys
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".onnx") as handle:
            handle.write(model_bytes)
            handle.flush()
            out = subprocess.run([sys.executable, "-c", code, handle.name], capture_output=True, text=True, check=True)
        return float(out.stdout)

    assert rss_growth_mib(model) - rss_growth_mib(edited) > 25
