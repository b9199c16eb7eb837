"""Re-ranking of rows a vector search found (similarity_search over a user's own table): chunk the
rows' text, score the chunks by BM25 against the query, blend with the row's vector similarity,
then pick by maximal marginal relevance (lambda) with at most `per_row` chunks of one row, and
stop at a token budget. Backend-neutral: it sees texts and scores, never a database."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

CHARS_PER_TOKEN = 4  # the budget's estimate, as rag.get_chunks' max_output_tokens
_WORD = re.compile(r"\w+", re.UNICODE)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


@dataclass
class Chunk:
    row: int  # position of its row in the vector ranking
    chunk_index: int
    text: str
    vec: float  # the row's vector similarity, in [0, 1]
    bm25: float = 0.0
    score: float = 0.0
    terms: set[str] = field(default_factory=set)


def bm25(query: str, chunks: list[Chunk], *, k1: float = 1.2, b: float = 0.75) -> None:
    """Okapi BM25 of each chunk against the query's words, the chunks themselves as the corpus."""
    if not chunks:
        return
    docs = [words(c.text) for c in chunks]
    for chunk, doc in zip(chunks, docs, strict=True):
        chunk.terms = set(doc)
    avgdl = sum(len(d) for d in docs) / len(docs) or 1.0
    n = len(docs)
    df = Counter(t for d in docs for t in set(d))
    terms = set(words(query))
    for chunk, doc in zip(chunks, docs, strict=True):
        tf = Counter(doc)
        score = 0.0
        for term in terms:
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * len(doc) / avgdl))
        chunk.bm25 = score


def blend(chunks: list[Chunk], *, bm25_weight: float) -> None:
    """score = (1 - w) * vector similarity + w * BM25 scaled to [0, 1] by the best chunk's."""
    top = max((c.bm25 for c in chunks), default=0.0)
    for chunk in chunks:
        lexical = chunk.bm25 / top if top > 0 else 0.0
        chunk.score = (1 - bm25_weight) * chunk.vec + bm25_weight * lexical


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def mmr(chunks: list[Chunk], *, lam: float, per_row: int, limit: int) -> list[Chunk]:
    """Maximal marginal relevance: each step takes the chunk maximising lam * score - (1 - lam) *
    (its highest word-set similarity to one already taken); never more than `per_row` of a row."""
    picked: list[Chunk] = []
    taken: Counter[int] = Counter()
    remaining = list(chunks)
    while remaining and len(picked) < limit:
        best, best_gain = None, -math.inf
        for chunk in remaining:
            if taken[chunk.row] >= per_row:
                continue
            redundancy = max((_jaccard(chunk.terms, p.terms) for p in picked), default=0.0)
            gain = lam * chunk.score - (1 - lam) * redundancy
            if gain > best_gain:
                best, best_gain = chunk, gain
        if best is None:
            break
        picked.append(best)
        taken[best.row] += 1
        remaining.remove(best)
    return picked


def within_tokens(chunks: list[Chunk], max_output_tokens: int) -> tuple[list[dict[str, Any]], bool]:
    """The chunks' texts within the budget (estimated): the crossing one is cut, the rest dropped."""
    budget = max_output_tokens * CHARS_PER_TOKEN
    kept: list[dict[str, Any]] = []
    for chunk in chunks:
        item = {"row": chunk.row, "chunk_index": chunk.chunk_index, "text": chunk.text}
        if len(chunk.text) <= budget:
            kept.append(item)
            budget -= len(chunk.text)
            continue
        if budget > 0:
            kept.append({**item, "text": chunk.text[:budget], "text_truncated": True})
        return kept, True
    return kept, False
