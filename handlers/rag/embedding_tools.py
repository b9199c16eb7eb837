"""rag.generate_embedding: the index's embedding provider as a tool, so a client can embed text
for its own vector columns, or for rag.search_vector's query_embedding, with the same model."""

from __future__ import annotations

import base64
from collections.abc import Callable

import numpy as np

from backends.retrieval.call import Call
from backends.retrieval.protocols import Embedder
from gateway.errors import InvalidArgument
from gateway.tools import CallContext, tool
from handlers.rag.limits import ENVELOPE_BYTES, fit_to_bytes
from handlers.rag.models import GenerateEmbeddingIn, GenerateEmbeddingOut, Stats


def encode_vector(vector: np.ndarray) -> str:
    """float32 little-endian, base64: the form query_embedding.values_b64 takes."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


class EmbeddingTools:
    def __init__(self, embedder: Callable[[], Embedder]) -> None:
        self._embedder = embedder  # the index's embedder (UNAVAILABLE while the index is not open)

    @tool("rag.generate_embedding", title="Embed text", read_only=True)
    def generate_embedding(self, args: GenerateEmbeddingIn, ctx: CallContext) -> GenerateEmbeddingOut:
        """Embed `text` (or up to 64 `texts`) with the index's configured provider and model. Each
        vector comes as {dim, values_b64 (float32 little-endian, base64), model}: pass it as
        rag.search_vector's query_embedding, or compare it with your own vector columns. A text
        equal to what the index embedded for a chunk ("{title}\\n\\n{body}" by default, a source's
        input_template otherwise) gives exactly the stored vector (unit length)."""
        embedder, call = self._embedder(), Call.of(ctx)
        if (args.text is None) == (args.texts is None):
            raise InvalidArgument("give exactly one of text and texts")
        texts = [args.text] if args.text is not None else list(args.texts or [])
        for i, text in enumerate(texts):
            call.check_query(text, name="text" if args.text is not None else f"texts[{i}]")
        call.check_deadline()
        matrix = np.asarray(embedder.embed(texts), dtype=np.float32) if texts else np.zeros((0, embedder.dim), dtype=np.float32)
        # Unit length, computed as both index storages do when they write a vector: the result is
        # bit for bit what the index holds for the same text.
        matrix = (matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), np.float32(1e-12))).astype(np.float32)
        call.check_deadline()
        items = [
            {"index": i, "dim": int(vector.shape[0]), "values_b64": encode_vector(vector), "model": embedder.model_id}
            for i, vector in enumerate(matrix)
        ]
        fitted, cut = fit_to_bytes(items, call.caps.response_max_bytes - ENVELOPE_BYTES)
        return GenerateEmbeddingOut(
            model=embedder.model_id,
            dim=embedder.dim,
            embeddings=fitted,
            truncated=call.truncated or cut,
            stats=Stats(k_requested=len(texts), k_returned=len(fitted), ms=call.ms(), mode="embed"),
        )
