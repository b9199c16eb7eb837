"""The /mcp/rag endpoint: the retrieval index (index.py), its search modes (search.py) and tools (handler.py)."""

# onnxruntime must be loaded before usearch: the other order segfaults inside onnxruntime's
# import (measured with onnxruntime and usearch as pinned here). Every module of this package
# passes through here first, so importing it now makes the order safe wherever usearch is used.
import contextlib

with contextlib.suppress(ImportError):  # without it the local provider reports its own clear error
    import onnxruntime  # noqa: F401

from handlers.rag.handler import RagHandler  # noqa: E402

__all__ = ["RagHandler"]
