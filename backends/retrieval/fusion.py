"""How rag.search_hybrid (mode fuse) merges its keyword and vector rankings: pure functions.

Two ways, chosen per call by FuseParams.fusion:

- "adaptive" (the default): each ranking's scores are standardised over its own candidates
  (z = (s - mean) / std, per query), and the two are added with per-query weights:
      w_fts = w_fts_base * exp(rare_boost * max(0, max_idf - RARE_IDF)) * exp(CONFIDENCE * z_top_fts)
      w_vec = w_vec_base * (n_terms / TERMS_PIVOT) ** LENGTH_EXPONENT * exp(CONFIDENCE * z_top_vec)
  A candidate one ranking did not return gets that ranking's lowest z. Why, from
  bench/retrieval_eval.py on four collections (bench/README.md, retrieval quality):
  * z-scores rather than ranks: how far a hit stands above the rest of its ranking counts,
    which RRF cannot see (the Q&A collection: RRF 0.69 between FTS 0.47 and vector 0.81).
  * the rare-word factor: a query word few chunks contain (an identifier, a flag, jargon) is
    what the embedding model knows least and FTS matches exactly. Without it the keyword-style
    collection fell from FTS's 0.68 to 0.60-0.65.
  * the length and confidence factors (a long question leans on the vector ranking; a ranking
    sure of its best hit counts more) are measured but off by default: see CONFIDENCE.
  Two additions, both in search.py with their settings in models.FuseParams:
  * a close-words bonus (rank_bonus): the chunks holding every query word within 20 tokens
    (FTS5 NEAR) get up to 2 z-units, fading by rank. Index entries and section titles name one
    thing whose words stand together in the chunk that is about it; this lifted the keyword
    collection above FTS alone and the manual 0.02 above RRF. A long question's words are
    seldom all within 20 tokens, so it rarely changes those.
  * vector feedback (Rocchio, 2 chunks, weight 4) only for queries of 8+ searchable words: a long
    description of a topic has many relevant chunks that feedback finds; a lookup or a question
    has one, and feedback drifts away from it.
- "rrf": reciprocal rank fusion, score = sum of w / (rrf_k0 + rank) (the blueprint's).

Both return {rowid: fused score} (higher is better); search.py sorts and scales it to [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ResolvedFuse:
    """Every setting of mode "fuse", defaults filled in (handlers/rag/models.py FuseParams.resolved)."""

    fusion: str
    rrf_k0: float
    w_fts: float
    w_vec: float
    w_all_terms: float
    all_terms_window: int
    rare_boost: float
    feedback_docs: int
    feedback_weight: float
    feedback_min_terms: int


# The defaults of each fusion, chosen on four collections (bench/retrieval_eval.py, bench/README.md).
# "rrf" alone is the blueprint's plain RRF, the baseline the adaptive default is measured against.
RESOLVED_DEFAULTS = {
    "adaptive": ResolvedFuse("adaptive", rrf_k0=5.0, w_fts=1.0, w_vec=1.5, w_all_terms=2.0, all_terms_window=20, rare_boost=0.5, feedback_docs=2, feedback_weight=4.0, feedback_min_terms=8),
    "rrf": ResolvedFuse("rrf", rrf_k0=60.0, w_fts=1.0, w_vec=1.0, w_all_terms=0.0, all_terms_window=0, rare_boost=0.0, feedback_docs=0, feedback_weight=2.0, feedback_min_terms=0),
}  # fmt: skip

# Scores of one ranking, best first: (rowid, score), higher is better.
Ranking = Sequence[tuple[int, float]]

# The constants of "adaptive", chosen on the four collections (leave-one-out in bench/README.md).
# The grid (bench/retrieval_eval.py) also tried CONFIDENCE 0.25 and LENGTH_EXPONENT 0.5 / 1.0: on
# the four collections together neither raised the worst goal margin, so both are off by default
# and kept as parameters an experiment can turn on.
CONFIDENCE = 0.0  # how much a ranking's standout best hit raises its weight
RARE_IDF = 5.0  # bm25's idf above which a query word counts as rare (in < ~0.7 % of chunks)
TERMS_PIVOT = 4.0  # query words at which the length factor is 1
LENGTH_EXPONENT = 0.0


@dataclass(frozen=True)
class QuerySignals:
    """What the adaptive weights look at, besides the rankings themselves."""

    terms: int  # searchable words in the query (stop words dropped)
    max_idf: float  # bm25's idf of the query's rarest word that occurs in the index (0: none)


def idf(doc_count: int, total: int) -> float:
    """bm25's (and FTS5's) idf of a word found in `doc_count` of `total` chunks."""
    value = math.log((total - doc_count + 0.5) / (doc_count + 0.5)) if total > 0 else 0.0
    return max(value, 1e-6)


def standardised(ranking: Ranking) -> tuple[dict[int, float], float, float]:
    """(z-score per rowid, the lowest z, the best hit's z); flat or single scores give z = 0."""
    if not ranking:
        return {}, 0.0, 0.0
    values = [score for _, score in ranking]
    mean = math.fsum(values) / len(values)
    spread = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    if spread <= 1e-12:
        return {rowid: 0.0 for rowid, _ in ranking}, 0.0, 0.0
    z = {rowid: (score - mean) / spread for rowid, score in ranking}
    return z, (min(values) - mean) / spread, (ranking[0][1] - mean) / spread


def adaptive_weights(
    signals: QuerySignals,
    z_top_fts: float,
    z_top_vec: float,
    *,
    w_fts: float,
    w_vec: float,
    rare_boost: float,
    confidence: float = CONFIDENCE,
    length_exponent: float = LENGTH_EXPONENT,
) -> tuple[float, float]:
    """The two halves' weights for this query (see the module docstring)."""
    fts = w_fts * math.exp(rare_boost * max(0.0, signals.max_idf - RARE_IDF)) * math.exp(confidence * z_top_fts)
    length = (max(1, signals.terms) / TERMS_PIVOT) ** length_exponent
    vec = w_vec * length * math.exp(confidence * z_top_vec)
    return fts, vec


def fuse_adaptive(
    fts_rows: Ranking,
    vec_rows: Ranking,
    signals: QuerySignals,
    *,
    w_fts: float,
    w_vec: float,
    rare_boost: float,
    confidence: float = CONFIDENCE,
    length_exponent: float = LENGTH_EXPONENT,
) -> dict[int, float]:
    """Weighted sum of per-query z-scores; a ranking that is empty or weighted 0 adds nothing.
    `confidence` and `length_exponent` are the module's constants unless an experiment varies them."""
    z_fts, floor_fts, top_fts = standardised(fts_rows)
    z_vec, floor_vec, top_vec = standardised(vec_rows)
    weight_fts, weight_vec = adaptive_weights(
        signals,
        top_fts,
        top_vec,
        w_fts=w_fts,
        w_vec=w_vec,
        rare_boost=rare_boost,
        confidence=confidence,
        length_exponent=length_exponent,
    )
    fused: dict[int, float] = {}
    for z, floor, weight in ((z_fts, floor_fts, weight_fts), (z_vec, floor_vec, weight_vec)):
        if not z or weight == 0:
            continue
        for rowid in z_fts.keys() | z_vec.keys():
            fused[rowid] = fused.get(rowid, 0.0) + weight * z.get(rowid, floor)
    return fused


def fuse_rrf(rankings: Sequence[tuple[Ranking, float]], k0: float) -> dict[int, float]:
    """Reciprocal rank fusion (ranks from 1) of (ranking, weight) pairs."""
    fused: dict[int, float] = {}
    for ranking, weight in rankings:
        for rank, (rowid, _) in enumerate(ranking, start=1):
            fused[rowid] = fused.get(rowid, 0.0) + weight / (k0 + rank)
    return fused


def rank_bonus(ranking: Ranking, weight: float, k0: float) -> dict[int, float]:
    """adaptive's bonus for the chunks of a precision ranking (all query words, close together):
    weight x (k0 + 1) / (k0 + rank), so its best hit gets `weight` (in z-score units) and the
    bonus fades down the list as RRF's terms do."""
    return {rowid: weight * (k0 + 1) / (k0 + rank) for rank, (rowid, _) in enumerate(ranking, start=1)}


def with_bonus(fused: dict[int, float], ranking: Ranking, weight: float, k0: float) -> dict[int, float]:
    """`fused` with rank_bonus added to the candidates it already holds (a chunk neither ranking
    found is not brought in by the bonus alone)."""
    for rowid, bonus in rank_bonus(ranking, weight, k0).items():
        if rowid in fused:
            fused[rowid] += bonus
    return fused


def best_first(fused: Mapping[int, float], k: int) -> list[tuple[int, float]]:
    """The top k (rowid, score), ties broken by rowid so the order is deterministic."""
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
