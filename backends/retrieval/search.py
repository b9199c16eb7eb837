"""The three search modes over one index: FTS, vector, and hybrid (fuse / fts_then_vec).

Each mode produces ranked chunk rowids with raw scores; `hits` then joins them to rag_chunks and
rag_sources in one query and shapes them. Everything here is backend-neutral: the index is read
through a storage.Reader (rag.db or PostgreSQL), which answers in rowids and raw scores. Scores are higher-is-better in [0, 1] everywhere:

    score_fts  = x / (1 + x), x = -bm25           (raw: score_fts_raw = bm25)
    score_vec  = 1 - cosine_distance / 2          (raw: distance_raw in the metric asked for)
    fuse score = the fused value (fusion.py: adaptive z-score fusion, or RRF) scaled over the
                 candidates so the best is 1 and the weakest candidate 0
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from backends.retrieval import fusion
from backends.retrieval.call import Call
from backends.retrieval.filters import FilterSQL
from backends.retrieval.fusion import ResolvedFuse
from backends.retrieval.storage.reader import Reader
from backends.retrieval.storage.sqlite import fts
from gateway.errors import InvalidArgument


class FuseParams(Protocol):
    """Settings of mode "fuse" (rag.search_hybrid's `fuse`): candidates per ranking, the rest resolved."""

    @property
    def fts_k(self) -> int: ...
    @property
    def vec_k(self) -> int: ...
    def resolved(self) -> ResolvedFuse: ...


class FtsThenVecParams(Protocol):
    """Settings of mode "fts_then_vec" (rag.search_hybrid's `fts_then_vec`)."""

    @property
    def candidates_k(self) -> int: ...
    @property
    def rerank_k(self) -> int: ...
    @property
    def vec_metric(self) -> str: ...


class SearchReturn(Protocol):
    """What a hit carries besides its ids and scores (a search tool's `return`)."""

    @property
    def include_title(self) -> bool: ...
    @property
    def include_metadata(self) -> bool: ...
    @property
    def include_snippets(self) -> bool: ...
    @property
    def snippet_tokens(self) -> int: ...


@dataclass
class Scored:
    rowid: int
    score: float
    score_fts: float | None = None
    score_fts_raw: float | None = None
    score_vec: float | None = None
    distance_raw: float | None = None
    debug: dict[str, Any] | None = None


def score_vec(cosine_distance: float) -> float:
    return min(1.0, max(0.0, 1.0 - cosine_distance / 2.0))


def metric_distance(cosine_distance: float, metric: str) -> float:
    """The distance in `metric` between a unit query and a unit stored vector, from the cosine one.

    Stored vectors are unit length (index.py) and text queries are embedded unit length, so
    L2 = sqrt(2 * d_cos) and dot = 1 - d_cos: all three metrics rank alike; the raw value the
    caller sees is the one of the metric asked for (dot reported negated, lower is better, as
    pgvector's <#> does).
    """
    if metric == "l2":
        return math.sqrt(max(0.0, 2.0 * cosine_distance))
    if metric == "dot":
        return -(1.0 - cosine_distance)
    return cosine_distance


def unit_query(query: np.ndarray, dim: int) -> np.ndarray:
    """The query vector at unit length, after the checks a caller's own vector needs."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    if q.shape[0] != dim:
        raise InvalidArgument(f"query vector has {q.shape[0]} dimensions; the index has {dim}")
    norm = float(np.linalg.norm(q))
    if norm == 0.0:
        raise InvalidArgument("the query vector is all zeros")
    return q / norm


# -- the modes -----------------------------------------------------------------------------------
def search_fts(reader: Reader, match: fts.MatchQuery, flt: FilterSQL, *, k: int, offset: int) -> list[Scored]:
    rows = reader.fts_ranked(match, flt, limit=k, offset=offset)
    return [Scored(rowid, fts.normalise_bm25(raw), score_fts=fts.normalise_bm25(raw), score_fts_raw=raw) for rowid, raw in rows]


def search_vector(reader: Reader, query: np.ndarray, flt: FilterSQL, *, k: int) -> list[Scored]:
    unit = unit_query(query, reader.dim)
    found = reader.vector_nearest(unit, k, flt) if k > 0 else []
    return [Scored(rowid, score_vec(d), score_vec=score_vec(d), distance_raw=d) for rowid, d in found]


def search_fuse(
    reader: Reader,
    call: Call,
    match: fts.MatchQuery | None,
    query_vector: Callable[[], np.ndarray],
    flt: FilterSQL,
    params: FuseParams,
    *,
    k: int,
) -> list[Scored]:
    """`query_vector` waits for the query's embedding, which the caller has started: the
    keyword rankings run first, meanwhile. How the rankings merge is fusion.py's."""
    settings = params.resolved()
    if settings.w_fts == 0 and settings.w_vec == 0:
        raise InvalidArgument("fuse: w_fts and w_vec cannot both be 0")
    fts_k = call.clamp(params.fts_k, call.caps.candidates_max)
    vec_k = call.clamp(params.vec_k, call.caps.candidates_max)
    fts_rows = reader.fts_ranked(match, flt, limit=fts_k) if match is not None and settings.w_fts > 0 else []
    # Chunks holding every query word (by default in adaptive: within 20 tokens of each other):
    # rare for a natural-language question (then this list is empty and changes nothing),
    # decisive for a keyword lookup or a section title, where the vector ranking alone would
    # drag the fused order below plain FTS. The blueprint's RRF skips it unless asked.
    all_terms = match.all_terms(settings.all_terms_window) if match is not None and settings.w_all_terms > 0 else None
    all_rows = reader.fts_ranked(all_terms, flt, limit=fts_k) if all_terms is not None else []
    terms = len(match.terms) if match is not None else 0
    signals = None
    if settings.fusion == "adaptive":
        signals = fusion.QuerySignals(
            terms=terms,
            max_idf=reader.rare_term_idf(match, fusion.RARE_IDF) if fts_rows else 0.0,
        )
    query = query_vector()
    call.check_deadline()
    unit = unit_query(query, reader.dim)
    feedback = bool(settings.feedback_docs) and terms >= settings.feedback_min_terms
    pool = None
    if settings.w_vec > 0 and feedback:  # the candidates' vectors: feedback ranks them again
        pool = reader.vector_candidates(unit, vec_k, flt)
        vec_rows = pool.nearest(unit, vec_k)
    elif settings.w_vec > 0:  # the same ranking, with no vectors read back (PostgreSQL: 200 vectors cost ~8 ms)
        vec_rows = reader.vector_nearest(unit, vec_k, flt)
    else:
        vec_rows = []
    call.check_deadline()
    fused = _combine(fts_rows, vec_rows, vec_rows, all_rows, signals, settings)
    if pool is not None and vec_rows:
        # Pseudo-relevance feedback (Rocchio) on the query vector: the top fused chunks, which
        # both rankings vouch for, pull the query towards the vocabulary of the relevant
        # documents; the vector ranking is redone with it and fused again (bench/README.md).
        # Only for long queries by default: a short lookup or a question has one right chunk,
        # which feedback drifts away from.
        # The moved query is ranked over the first search's candidates (twice vec_k, exact
        # floats already read) rather than by a second search, with the feedback chunks added.
        top = [rowid for rowid, _ in fusion.best_first(fused, settings.feedback_docs)]
        rowids, matrix = reader.read_vectors(top)
        if len(matrix):
            moved = unit + settings.feedback_weight * matrix.mean(axis=0)
            moved /= max(float(np.linalg.norm(moved)), 1e-12)
            pool = pool.including(rowids, matrix)  # the feedback chunks themselves compete too
            distances = pool.distances(unit)
            ranked = pool.nearest(moved, vec_k)  # ranks (and z-scores) come from the moved query
            vec_rows = [(rowid, distances[rowid]) for rowid, _ in ranked]  # shown: the caller's query
            fused = _combine(fts_rows, ranked, vec_rows, all_rows, signals, settings)
            call.check_deadline()
    if signals is None:  # RRF: scaled by the best score possible, as the blueprint's fusion is
        used = settings.w_fts + settings.w_vec + (settings.w_all_terms if all_terms is not None else 0.0)
        best_possible = used / (settings.rrf_k0 + 1)
        scale = lambda value: min(1.0, value / best_possible)  # noqa: E731
    else:  # adaptive: over the candidates, so the best is 1 and the weakest 0
        low, high = min(fused.values(), default=0.0), max(fused.values(), default=0.0)
        scale = lambda value: (value - low) / (high - low) if high > low else 1.0  # noqa: E731
    top_hits = _scored(fused, scale, fts_rows, vec_rows, all_rows, k)
    _complete_scores(reader, match, query, top_hits)
    return top_hits


def _combine(
    fts_rows: list[tuple[int, float]],
    ranked_vec: list[tuple[int, float]],
    vec_rows: list[tuple[int, float]],
    all_rows: list[tuple[int, float]],
    signals: fusion.QuerySignals | None,
    settings: ResolvedFuse,
) -> dict[int, float]:
    """The fused score per rowid. Rankings carry bm25 (lower is better) and cosine distances;
    fusion.py wants higher-is-better scores, and `ranked_vec` gives the vector order."""
    if signals is None:
        rankings = [(fts_rows, settings.w_fts), (ranked_vec, settings.w_vec), (all_rows, settings.w_all_terms)]
        return fusion.fuse_rrf(rankings, settings.rrf_k0)
    fts_scores = [(rowid, -bm25) for rowid, bm25 in fts_rows]
    vec_scores = [(rowid, 1.0 - distance) for rowid, distance in ranked_vec]
    fused = fusion.fuse_adaptive(
        fts_scores, vec_scores, signals, w_fts=settings.w_fts, w_vec=settings.w_vec, rare_boost=settings.rare_boost
    )
    if all_rows and settings.w_all_terms > 0:  # a bonus by rank for the chunks holding every query word
        fused = fusion.with_bonus(fused, all_rows, settings.w_all_terms, settings.rrf_k0)
    return fused


def _scored(
    fused: dict[int, float],
    scale: Callable[[float], float],
    fts_rows: list[tuple[int, float]],
    vec_rows: list[tuple[int, float]],
    all_rows: list[tuple[int, float]],
    k: int,
) -> list[Scored]:
    """The top k as Scored hits: fused score scaled to [0, 1], component scores and each
    ranking's rank in debug."""
    top = fusion.best_first(fused, k)
    fts_of = {rowid: (rank, raw) for rank, (rowid, raw) in enumerate(fts_rows, start=1)}
    vec_of = {rowid: (rank, d) for rank, (rowid, d) in enumerate(vec_rows, start=1)}
    all_rank = {rowid: rank for rank, (rowid, _) in enumerate(all_rows, start=1)}
    hits = []
    for rowid, value in top:
        hit = Scored(rowid, scale(value))
        hit.debug = {"rank_fts": None, "rank_vec": None, "rank_all_terms": all_rank.get(rowid)}
        if rowid in fts_of:
            hit.debug["rank_fts"], raw = fts_of[rowid]
            hit.score_fts, hit.score_fts_raw = fts.normalise_bm25(raw), raw
        if rowid in vec_of:
            hit.debug["rank_vec"], distance = vec_of[rowid]
            hit.score_vec, hit.distance_raw = score_vec(distance), distance
        hits.append(hit)
    return hits


def search_fts_then_vec(
    reader: Reader,
    call: Call,
    match: fts.MatchQuery | None,
    query_vector: Callable[[], np.ndarray],
    flt: FilterSQL,
    params: FtsThenVecParams,
    *,
    k: int,
) -> list[Scored]:
    """`query_vector` as in search_fuse."""
    candidates_k = call.clamp(params.candidates_k, call.caps.candidates_max)
    rerank_k = call.clamp(params.rerank_k, call.caps.candidates_max)
    fts_rows = reader.fts_ranked(match, flt, limit=candidates_k) if match is not None else []
    call.check_deadline()
    fts_rank = {rowid: (rank, raw) for rank, (rowid, raw) in enumerate(fts_rows, start=1)}
    query = query_vector()
    call.check_deadline()
    distances = reader.vector_distances(unit_query(query, reader.dim), list(fts_rank))
    order = sorted(distances.items(), key=lambda item: (item[1], fts_rank[item[0]][0]))[: min(rerank_k, k)]
    hits = []
    for vec_rank, (rowid, distance) in enumerate(order, start=1):
        rank, raw = fts_rank[rowid]
        hits.append(
            Scored(
                rowid,
                score_vec(distance),
                score_fts=fts.normalise_bm25(raw),
                score_fts_raw=raw,
                score_vec=score_vec(distance),
                distance_raw=metric_distance(distance, params.vec_metric),
                debug={"rank_fts": rank, "rank_vec": vec_rank},
            )
        )
    return hits


def _complete_scores(reader: Reader, match: fts.MatchQuery | None, query: np.ndarray, hits: list[Scored]) -> None:
    """Fill the side a fused hit was not found by (k rows: two small queries), so every hit
    carries both component scores."""
    need_vec = [h.rowid for h in hits if h.score_vec is None]
    if need_vec:
        distances = reader.vector_distances(unit_query(query, reader.dim), need_vec)
        for hit in hits:
            if hit.rowid in distances:
                hit.score_vec, hit.distance_raw = score_vec(distances[hit.rowid]), distances[hit.rowid]
    need_fts = [h.rowid for h in hits if h.score_fts_raw is None]
    if need_fts and match is not None:
        raws = reader.fts_raw_of(match, need_fts)
        for hit in hits:
            if hit.rowid in raws:
                hit.score_fts, hit.score_fts_raw = fts.normalise_bm25(raws[hit.rowid]), raws[hit.rowid]


# -- shaping -------------------------------------------------------------------------------------
def hits(
    reader: Reader, scored: list[Scored], options: SearchReturn, *, match: fts.MatchQuery | None, keep: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Join ranked rowids to their chunk, document and source; `keep` names the score fields shown."""
    if not scored:
        return []
    rowids = [s.rowid for s in scored]
    rows = reader.hit_rows(rowids)
    snippet_of = reader.snippets(match, rowids, tokens=options.snippet_tokens) if options.include_snippets and match else {}
    out = []
    for s in scored:
        row = rows.get(s.rowid)
        if row is None:  # deleted between ranking and joining (a concurrent sync): skip it
            continue
        hit: dict[str, Any] = {
            "chunk_id": row[1],
            "doc_id": row[2],
            "source_id": row[3],
            "source_name": row[4],
            "score": round(s.score, 6),
        }
        for name in keep:
            value = getattr(s, name)
            hit[name] = round(value, 6) if isinstance(value, float) else value
        if options.include_title:
            hit["title"] = row[5]
        if options.include_metadata:
            hit["metadata"] = json.loads(row[6])
        if options.include_snippets:
            hit["snippet"] = snippet_of.get(s.rowid)
        out.append(hit)
    return out
