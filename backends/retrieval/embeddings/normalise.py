"""Small helpers every provider shares: argument checks and row normalisation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gateway.errors import InvalidArgument


def check_texts(texts: Sequence[str]) -> list[str]:
    """The texts as a list, or InvalidArgument if any item is not a string."""
    if isinstance(texts, str):
        # A bare string would otherwise be embedded character by character.
        raise InvalidArgument("embed() takes a list of texts, not a single string")
    items = list(texts)
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise InvalidArgument(f"text #{position} to embed is {type(item).__name__}, not a string")
    return items


def l2_normalise(rows: np.ndarray) -> np.ndarray:
    """float32 copy of `rows` with unit L2 norm; an all-zero row stays zero instead of becoming NaN."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
