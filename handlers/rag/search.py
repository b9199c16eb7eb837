"""The three search modes over one index: FTS, vector, and hybrid (fuse / fts_then_vec).

Each mode produces ranked chunk rowids with raw scores; `hits` then joins them to rag_chunks and
rag_sources in one query and shapes them. Everything here is backend-neutral: the index is read
through a storage.Reader (rag.db or PostgreSQL), which answers in rowids and raw scores. Scores are higher-is-better in [0, 1] everywhere:

    score_fts  = x / (1 + x), x = -bm25           (raw: score_fts_raw = bm25)
    score_vec  = 1 - cosine_distance / 2          (raw: distance_raw in the metric asked for)
    fuse score = RRF / RRF_max, RRF = w_fts/(k0 + rank_fts) + w_vec/(k0 + rank_vec), ranks from 1
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.errors import InvalidArgument
from handlers.rag import fts
from handlers.rag.filters import FilterSQL
from handlers.rag.limits import Call
from handlers.rag.models import FtsThenVecParams, FuseParams, SearchReturn
from handlers.rag.storage import Reader


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
    found = reader.vector_candidates(unit, k, flt).nearest(unit, k) if k > 0 else []
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
    keyword rankings run first, meanwhile."""
    if params.w_fts == 0 and params.w_vec == 0:
        raise InvalidArgument("fuse: w_fts and w_vec cannot both be 0")
    fts_k = call.clamp(params.fts_k, call.caps.candidates_max)
    vec_k = call.clamp(params.vec_k, call.caps.candidates_max)
    fts_rows = reader.fts_ranked(match, flt, limit=fts_k) if match is not None and params.w_fts > 0 else []
    # Chunks holding every query word: rare for a natural-language question (then this list is
    # empty and changes nothing), decisive for a keyword lookup, where the vector ranking alone
    # would drag the fused order below plain FTS (bench/retrieval_eval.py --known-item).
    all_terms = match.all_terms() if match is not None and params.w_all_terms > 0 else None
    all_rows = reader.fts_ranked(all_terms, flt, limit=fts_k) if all_terms is not None else []
    query = query_vector()
    call.check_deadline()
    unit = unit_query(query, reader.dim)
    pool = reader.vector_candidates(unit, vec_k, flt) if params.w_vec > 0 else None
    vec_rows = pool.nearest(unit, vec_k) if pool is not None else []
    call.check_deadline()
    fused = _rrf(fts_rows, vec_rows, all_rows, params)
    if params.feedback_docs and vec_rows:
        # Pseudo-relevance feedback (Rocchio) on the query vector: the top fused chunks, which
        # both rankings vouch for, pull the query towards the vocabulary of the relevant
        # documents; the vector ranking is redone with it and fused again. Measured on
        # Cranfield: nDCG@10 0.440 -> 0.463 (bench/retrieval_eval.py --sweep). The moved query
        # is ranked over the first search's candidates (twice vec_k, exact floats already read)
        # rather than by a second search, with the feedback chunks added (bench/README.md).
        top = [hit.rowid for hit in sorted(fused.values(), key=lambda h: (-h.score, h.rowid))[: params.feedback_docs]]
        rowids, matrix = reader.read_vectors(top)
        if len(matrix):
            moved = unit + params.feedback_weight * matrix.mean(axis=0)
            moved /= max(float(np.linalg.norm(moved)), 1e-12)
            pool = pool.including(rowids, matrix)  # the feedback chunks themselves compete too
            distances = pool.distances(unit)
            # Ranks come from the moved query; the scores shown stay those of the caller's query.
            vec_rows = [(rowid, distances[rowid]) for rowid, _ in pool.nearest(moved, vec_k)]
            fused = _rrf(fts_rows, vec_rows, all_rows, params)
            call.check_deadline()

    used_weight = params.w_fts + params.w_vec + (params.w_all_terms if all_terms is not None else 0.0)
    best_possible = used_weight / (params.rrf_k0 + 1)
    top_hits = sorted(fused.values(), key=lambda h: (-h.score, h.rowid))[:k]
    for hit in top_hits:
        hit.score = min(1.0, hit.score / best_possible)
    _complete_scores(reader, match, query, top_hits)
    return top_hits


def _rrf(
    fts_rows: list[tuple[int, float]], vec_rows: list[tuple[int, float]], all_rows: list[tuple[int, float]], params: FuseParams
) -> dict[int, Scored]:
    """Reciprocal rank fusion (ranks from 1) with the caller's float weights."""
    k0 = params.rrf_k0
    fused: dict[int, Scored] = {}
    for rank, (rowid, _) in enumerate(all_rows, start=1):
        hit = fused.setdefault(rowid, Scored(rowid, 0.0, debug={"rank_fts": None, "rank_vec": None, "rank_all_terms": None}))
        hit.score += params.w_all_terms / (k0 + rank)
        hit.debug["rank_all_terms"] = rank
    for rank, (rowid, raw) in enumerate(fts_rows, start=1):
        hit = fused.setdefault(rowid, Scored(rowid, 0.0, debug={"rank_fts": None, "rank_vec": None, "rank_all_terms": None}))
        hit.score += params.w_fts / (k0 + rank)
        hit.score_fts, hit.score_fts_raw = fts.normalise_bm25(raw), raw
        hit.debug["rank_fts"] = rank
    for rank, (rowid, distance) in enumerate(vec_rows, start=1):
        hit = fused.setdefault(rowid, Scored(rowid, 0.0, debug={"rank_fts": None, "rank_vec": None, "rank_all_terms": None}))
        hit.score += params.w_vec / (k0 + rank)
        hit.score_vec, hit.distance_raw = score_vec(distance), distance
        hit.debug["rank_vec"] = rank
    return fused


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
    rows = {
        row[0]: row
        for row in reader.execute(
            "SELECT c.chunk_rowid, c.chunk_id, c.doc_id, c.source_id, s.name, c.title, d.metadata_json"
            " FROM rag_chunks c JOIN rag_sources s ON s.source_id = c.source_id JOIN rag_documents d ON d.doc_id = c.doc_id"
            f" WHERE c.chunk_rowid IN ({','.join('?' * len(rowids))})",
            rowids,
        )
    }
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
