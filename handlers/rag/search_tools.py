"""rag.search_fts, rag.search_vector and rag.search_hybrid: the search modes of
backends/retrieval/search.py over the open index, shaped into their tool outputs."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backends.retrieval import search
from backends.retrieval.build_status import BuildWatch
from backends.retrieval.call import Call
from backends.retrieval.embeddings.queries import QueryVectors
from backends.retrieval.filters import FilterSQL, build_filter, metadata_keys
from backends.retrieval.storage.reader import Index, Reader, reading
from backends.retrieval.storage.sqlite import fts
from gateway.errors import InvalidArgument, NotFound
from gateway.tools import CallContext, tool
from handlers.rag.limits import ENVELOPE_BYTES, fit_to_bytes
from handlers.rag.models import Filters, IndexBuild, SearchFtsIn, SearchHybridIn, SearchOutput, SearchVectorIn, Stats


class SearchTools:
    def __init__(self, index: Callable[[], Index], queries: Callable[[], QueryVectors], build_watch: BuildWatch) -> None:
        self._index = index  # the open index (UNAVAILABLE while it is not)
        self._queries = queries  # query vectors with the index's model
        self._build_watch = build_watch  # says in each result when a sync is building the index

    @tool("rag.search_fts", title="Keyword search", read_only=True)
    def search_fts(self, args: SearchFtsIn, ctx: CallContext) -> SearchOutput:
        """Keyword (BM25) search over the indexed chunks. Returns chunk ids, scores (score_fts in
        [0,1], higher is better; score_fts_raw is the BM25 value, negated: lower is better) and, on
        request, highlighted snippets; fetch text with rag.get_chunks.
        The query's words are matched (any of them, stemmed); syntax "fts5" takes FTS5 query
        syntax as written (web-search syntax on PostgreSQL)."""
        index, call = self._index(), Call.of(ctx)
        call.check_query(args.query)
        match = fts.build_match(args.query, syntax=args.syntax)
        if match is None:
            raise InvalidArgument("the query has no searchable words")
        call.truncated |= match.terms_dropped
        k = call.clamp(args.k, call.caps.k_max)
        k = max(0, call.clamp(args.offset + k, call.caps.candidates_max) - args.offset)
        with reading(index, call) as reader:
            flt = _filter(reader, args.filters)
            warnings = _warnings(reader, args.filters)
            scored = search.search_fts(reader, match, flt, k=k, offset=args.offset)
            results = search.hits(reader, scored, args.return_, match=match, keep=("score_fts", "score_fts_raw"))
        return self._output(index, call, results, k_requested=args.k, mode="fts", reader=reader, warnings=warnings)

    @tool("rag.search_vector", title="Semantic search", read_only=True)
    def search_vector(self, args: SearchVectorIn, ctx: CallContext) -> SearchOutput:
        """Nearest chunks by meaning. Give query_text (embedded with the index's model; `query`
        is accepted as another spelling, as in the other search tools) or
        query_embedding {dim, values_b64: float32 little-endian, base64}, used as given. score_vec
        in [0,1] is 1 - cosine_distance/2; distance_raw is the cosine distance."""
        index, call = self._index(), Call.of(ctx)
        if (args.query_text is None) == (args.query_embedding is None):
            raise InvalidArgument("give exactly one of query_text (or query) and query_embedding")
        _check_model(index, args.embedding.model if args.embedding else None)
        match = None
        if args.query_text is not None:
            call.check_query(args.query_text, name="query_text")
            query = self._queries().now(args.query_text)
            match = fts.build_match(args.query_text)  # for snippets only
        else:
            _check_model(index, args.query_embedding.model)
            query = _decode_embedding(args.query_embedding.values_b64, args.query_embedding.dim, index.dim)
        call.check_deadline()
        k = call.clamp(args.k, call.caps.k_max)
        with reading(index, call) as reader:
            flt = _filter(reader, args.filters)
            warnings = _warnings(reader, args.filters)
            scored = search.search_vector(reader, query, flt, k=k)
            results = search.hits(reader, scored, args.return_, match=match, keep=("score_vec", "distance_raw"))
        return self._output(index, call, results, k_requested=args.k, mode="vector", reader=reader, warnings=warnings)

    @tool("rag.search_hybrid", title="Hybrid search", read_only=True)
    def search_hybrid(self, args: SearchHybridIn, ctx: CallContext) -> SearchOutput:
        """Keyword and semantic search combined: the best default. mode "fuse" merges the FTS
        and vector rankings; fuse.fusion "adaptive" (default) adds per-query z-scores of both,
        leaning on the vector ranking for long questions and on FTS when a query word is rare
        (an identifier, a flag), and "rrf" is reciprocal rank fusion (weights w_fts/w_vec,
        constant rrf_k0; candidates fts_k/vec_k either way); feedback_docs > 0 adds
        pseudo-relevance feedback. mode "fts_then_vec" takes the top candidates_k FTS matches and
        re-ranks them by vector similarity (vec_metric cosine|l2|dot), keeping rerank_k. score
        in [0,1], higher is better; score_fts/score_vec and the raw values are given alongside,
        and debug.rank_fts/rank_vec show where each hit ranked."""
        index, call = self._index(), Call.of(ctx)
        call.check_query(args.query)
        match = fts.build_match(args.query)
        if match is not None:
            call.truncated |= match.terms_dropped
        query = self._queries().soon(args.query)  # embedded meanwhile, on its own thread
        k = call.clamp(args.k, call.caps.k_max)
        keep = ("score_fts", "score_fts_raw", "score_vec", "distance_raw", "debug")
        with reading(index, call) as reader:
            flt = _filter(reader, args.filters)
            warnings = _warnings(reader, args.filters)
            if args.mode == "fuse":
                scored = search.search_fuse(reader, call, match, query, flt, args.fuse, k=k)
            else:
                scored = search.search_fts_then_vec(reader, call, match, query, flt, args.fts_then_vec, k=k)
            results = search.hits(reader, scored, args.return_, match=match, keep=keep)
        return self._output(index, call, results, k_requested=args.k, mode=args.mode, reader=reader, warnings=warnings)

    def _output(
        self,
        index: Index,
        call: Call,
        results: list[dict[str, Any]],
        *,
        k_requested: int,
        mode: str,
        reader: Reader,
        warnings: Sequence[str] = (),
    ) -> SearchOutput:
        fitted, cut = fit_to_bytes(
            results, call.caps.response_max_bytes - ENVELOPE_BYTES - len(json.dumps({"warnings": list(warnings)})) - 32
        )  # the key beside results
        stats = Stats(
            k_requested=k_requested, k_returned=len(fitted), ms=call.ms(), mode=mode, vector_fewer_than_k=reader.fewer_than_k
        )
        building = self._build_watch.note(index)
        return SearchOutput(
            results=fitted,
            truncated=call.truncated or cut,
            stats=stats,
            index=IndexBuild(**dataclasses.asdict(building)) if building is not None else None,
            warnings=list(warnings),
        )


def _filter(reader: Reader, filters: Filters) -> FilterSQL:
    _check_sources(reader, filters)
    return build_filter(filters, all_sources_enabled=reader.all_sources_enabled(), dialect=reader.dialect)


# The blueprint's filters read denormalised columns; a filter on one no document fills matches nothing.
_HOT_FILTERS = (
    (("min_score",), "SELECT 1 FROM rag_chunks WHERE doc_score IS NOT NULL LIMIT 1", "a Score"),
    (("post_type_ids",), "SELECT 1 FROM rag_chunks WHERE post_type_id IS NOT NULL LIMIT 1", "a PostTypeId"),
    (("tags_any", "tags_all"), "SELECT 1 FROM rag_doc_tags LIMIT 1", "Tags"),
    (("created_after", "created_before"), "SELECT 1 FROM rag_chunks WHERE created_at IS NOT NULL LIMIT 1", "a CreationDate"),
)


def _warnings(reader: Reader, filters: Filters) -> list[str]:
    """A filter on a key no document has matches nothing: say so (instead of a silent empty result)."""
    out = []
    for fields, probe, what in _HOT_FILTERS:
        given = [f for f in fields if getattr(filters, f) not in (None, [])]
        if given and not list(reader.execute(probe)):
            out.append(
                f"filter {'/'.join(given)}: no indexed document has {what} in its metadata, so it matches nothing;"
                ' filter your own metadata keys with filters.metadata, e.g. [{"key": "category", "eq": "outdoor"}]'
            )
    if not filters.metadata:
        return out
    known = metadata_keys([raw for (raw,) in reader.execute("SELECT doc_map_json FROM rag_sources")])
    lowered = {k.lower(): k for k in known}
    for clause in filters.metadata:
        if clause.key in known:
            continue
        hint = f" (did you mean {lowered[clause.key.lower()]!r}?)" if clause.key.lower() in lowered else ""
        picked = ", ".join(sorted(known)[:20]) or "none"
        out.append(
            f"metadata filter on key {clause.key!r}: no source's doc_map_json picks this key, so no document has it{hint};"
            f" keys picked: {picked}"
        )
    return out


MAX_SOURCES_NAMED = 50  # sources listed in the error for an unknown one


def _check_sources(reader: Reader, filters: Filters) -> None:
    """An unknown source in a filter is NOT_FOUND naming the sources there are (as rag.admin.sync
    answers for an unknown name), not a silent empty result: a typo must not read as "no match"."""
    if not filters.source_names and not filters.source_ids:
        return
    sources = [
        (int(sid), str(name), bool(enabled))
        for sid, name, enabled in reader.execute("SELECT source_id, name, enabled FROM rag_sources ORDER BY name")
    ]
    names, ids = {name for _, name, _ in sources}, {sid for sid, _, _ in sources}
    unknown_names = [n for n in dict.fromkeys(filters.source_names or ()) if n not in names]
    unknown_ids = [i for i in dict.fromkeys(filters.source_ids or ()) if i not in ids]
    if not unknown_names and not unknown_ids:
        return
    asked = [f"named {n!r}" for n in unknown_names[:10]] + [f"with source_id {i}" for i in unknown_ids[:10]]
    listed = ", ".join(f"{name} ({sid}{'' if enabled else ', disabled'})" for sid, name, enabled in sources[:MAX_SOURCES_NAMED])
    more = f" and {len(sources) - MAX_SOURCES_NAMED} more" if len(sources) > MAX_SOURCES_NAMED else ""
    raise NotFound(
        f"filters: no rag source {' or '.join(asked)} in the index; its sources are: {listed or 'none'}{more} "
        "(a source is indexed from its first sync on)",
        details={
            "unknown_source_names": unknown_names,
            "unknown_source_ids": unknown_ids,
            "sources": [
                {"source_id": sid, "name": name, "enabled": enabled} for sid, name, enabled in sources[:MAX_SOURCES_NAMED]
            ],
        },
    )


def _check_model(index: Index, model: str | None) -> None:
    name = index.embedding_model_id.split(":", 1)[-1]
    if model is not None and model not in (index.embedding_model_id, name, name.split("@", 1)[0]):
        raise InvalidArgument(
            f"the index was built with embedding model {index.embedding_model_id!r}; a query embedded by {model!r} "
            "cannot be compared with it"
        )


def _decode_embedding(values_b64: str, dim: int, index_dim: int) -> np.ndarray:
    """A caller's query vector, exactly as sent (float32 little-endian), after shape checks."""
    if dim != index_dim:
        raise InvalidArgument(f"query_embedding has dim {dim}; the index's vectors have {index_dim}")
    try:
        raw = base64.b64decode(values_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidArgument("query_embedding.values_b64 is not valid base64") from exc
    if len(raw) != 4 * dim:
        raise InvalidArgument(f"query_embedding.values_b64 holds {len(raw)} bytes; dim {dim} needs {4 * dim}")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vector)):
        raise InvalidArgument("query_embedding has NaN or infinite values")
    if not np.any(vector):
        raise InvalidArgument("query_embedding is all zeros")
    return vector
