"""Split a document body into overlapping chunks, by characters or by model tokens.

Defaults are the blueprint's (RAG_POC): 4000 characters, 400 overlap, and a tail shorter
than 800 joins the previous chunk rather than standing alone as a weak retrieval unit.
Chunking is a pure function of the text and the settings, so an unchanged document yields
the same chunks (and content hashes) on every sync: that is what lets a sync re-embed only
the chunks whose text changed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.errors import ConfigError

TOKENIZER_FILE = Path(__file__).resolve().parent.parent / "embeddings" / "model_assets" / "tokenizer.json"
# A window's end moves back to a paragraph, line, sentence or word break when one lies in
# its last fifth: chunks then end on natural boundaries instead of mid-word.
_BREAKS = ("\n\n", "\n", ". ", " ")
_SNAP_FRACTION = 0.2


@dataclass(frozen=True)
class ChunkingSpec:
    unit: str = "chars"  # "chars" | "tokens"
    chunk_size: int = 4000
    overlap: int = 400
    min_chunk_size: int = 800

    @classmethod
    def from_json(cls, raw: dict[str, Any] | None) -> ChunkingSpec:
        raw = dict(raw or {})
        unknown = set(raw) - {"unit", "chunk_size", "overlap", "min_chunk_size"}
        if unknown:
            raise ConfigError(f"chunking_json: unknown key(s) {', '.join(sorted(unknown))}")
        unit = raw.get("unit", "chars")
        defaults = cls() if unit == "chars" else cls(unit="tokens", chunk_size=256, overlap=32, min_chunk_size=48)
        try:
            spec = cls(
                unit=unit,
                chunk_size=int(raw.get("chunk_size", defaults.chunk_size)),
                overlap=int(raw.get("overlap", defaults.overlap)),
                min_chunk_size=int(raw.get("min_chunk_size", defaults.min_chunk_size)),
            )
        except (TypeError, ValueError):
            raise ConfigError("chunking_json: chunk_size, overlap and min_chunk_size must be integers") from None
        spec.validate()
        return spec

    def validate(self) -> None:
        if self.unit not in ("chars", "tokens"):
            raise ConfigError(f"chunking_json.unit must be chars or tokens, got {self.unit!r}")
        if not 16 <= self.chunk_size <= 1_000_000:
            raise ConfigError("chunking_json.chunk_size must be between 16 and 1000000")
        if not 0 <= self.overlap < self.chunk_size // 2 + 1:
            raise ConfigError("chunking_json.overlap must be >= 0 and at most half of chunk_size")
        if not 0 <= self.min_chunk_size <= self.chunk_size:
            raise ConfigError("chunking_json.min_chunk_size must be between 0 and chunk_size")


def chunk_text(text: str, spec: ChunkingSpec) -> list[str]:
    """The chunks of `text` (at least one when text is non-empty)."""
    if not text:
        return []
    if spec.unit == "tokens":
        return _chunk_tokens(text, spec)
    return [text[start:end] for start, end in _windows(len(text), spec, text)]


def _windows(length: int, spec: ChunkingSpec, text: str | None) -> list[tuple[int, int]]:
    """[start, end) spans over positions 0..length; `text` (chars mode) enables snapping."""
    spans: list[tuple[int, int]] = []
    start = 0
    while start < length:
        end = min(start + spec.chunk_size, length)
        if end < length and text is not None:
            end = _snap(text, start, end)
        if length - end < spec.min_chunk_size and end < length:
            end = length  # the short tail joins this chunk
        spans.append((start, end))
        if end >= length:
            break
        start = max(end - spec.overlap, start + 1)
    return spans


def _snap(text: str, start: int, end: int) -> int:
    floor = end - int((end - start) * _SNAP_FRACTION)
    for sep in _BREAKS:
        cut = text.rfind(sep, floor, end)
        if cut > start:
            return cut + len(sep)
    return end


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_FILE))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def _chunk_tokens(text: str, spec: ChunkingSpec) -> list[str]:
    """Windows of model tokens, cut back into the original text by the tokens' offsets."""
    encoding = _tokenizer().encode(text, add_special_tokens=False)
    offsets = [span for span in encoding.offsets if span[1] > span[0]]
    if not offsets:
        return [text]
    chunks = []
    windows = _windows(len(offsets), spec, None)
    for index, (first, last) in enumerate(windows):
        begin = 0 if index == 0 else offsets[first][0]
        finish = len(text) if index == len(windows) - 1 else offsets[last - 1][1]
        chunks.append(text[begin:finish])
    return chunks
