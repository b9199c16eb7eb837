"""/mcp/rag: the retrieval tools of seed 000 over the index: <data_dir>/rag.db, or PostgreSQL +
pgvector shared by a cluster (rag-backend; the tools read either through storage.Reader).

Search tools return identifiers and scores; rag.get_chunks / rag.get_docs return content. Every
tool enforces the rag-* caps (limits.py) and reports `truncated` and `stats`.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import anyio
import numpy as np

from gateway.errors import InvalidArgument, Unavailable
from gateway.store import ConfigModule, ConfigStore
from gateway.tools import CallContext, tool
from gateway.variables import Variable
from handlers.rag import content, fts, search
from handlers.rag.build_status import BuildWatch
from handlers.rag.embeddings import index_embedding_config
from handlers.rag.fetch import FetchTools
from handlers.rag.filters import FilterSQL, build_filter
from handlers.rag.index import RagIndex, open_rag_index
from handlers.rag.ingest.commands import add_commands
from handlers.rag.ingest.demo import start_demo_in_background
from handlers.rag.ingest.reconcile import apply_source_changes, source_states
from handlers.rag.ingest.sources_config import RAG_SOURCES_MODULE
from handlers.rag.ingest.tools import SyncTools
from handlers.rag.job_liveness import this_member
from handlers.rag.limits import Call, fit_to_bytes, ids_not_found
from handlers.rag.metrics import RagIndexCollector
from handlers.rag.models import (
    AdminStatsIn,
    AdminStatsOut,
    Filters,
    GetChunksIn,
    GetChunksOut,
    GetDocsIn,
    GetDocsOut,
    SearchFtsIn,
    SearchHybridIn,
    SearchOutput,
    SearchVectorIn,
    Stats,
)
from handlers.rag.pg_index import PgRagIndex
from handlers.rag.storage import Reader, reading

_ENVELOPE_BYTES = 512  # room for `truncated`, `stats` and the keys around the result list


RECENT_JOBS_IN_STATS = 5
FOLLOW_INTERVAL_S = 1.0  # how often each process looks for vectors other processes committed

log = logging.getLogger(__name__)


def _v(name: str, kind: str, default: Any, help: str, **kw: Any) -> Variable:
    return Variable(name=name, kind=kind, default=str(default), help=help, **kw)


RAG_VARIABLES: tuple[Variable, ...] = (
    _v("rag-k_max", "int", 50, "Most results one rag search returns, and most ids one rag.get_* call serves.", minimum=1, maximum=1000),
    _v("rag-candidates_max", "int", 500, "Most candidates a rag search ranks (fts_k, vec_k, candidates_k, offset + k).", minimum=1, maximum=100_000),
    _v("rag-query_max_bytes", "int", 8192, "Longest rag query text, in bytes; longer is LIMIT_EXCEEDED.", minimum=16, maximum=1_048_576),
    _v("rag-response_max_bytes", "int", 5_000_000, "Largest rag tool response, in bytes of JSON; results beyond it are cut (truncated: true).", minimum=1024, maximum=64_000_000),
    _v("rag-timeout_ms", "int", 2000, "Deadline of one rag tool call, in milliseconds (DEADLINE_EXCEEDED past it).", minimum=10, maximum=600_000),
    _v("rag-embedding_provider", "enum", "local", "Embedding provider of the index: local (all-MiniLM-L6-v2, offline), openai, ollama, or hash (tests only).", choices=("local", "openai", "ollama", "hash"), restart_required=True),
    _v("rag-embedding_model", "str", "", "Embedding model name (openai/ollama); empty for local's own model.", restart_required=True),
    _v("rag-embedding_api_base", "str", "", "Base URL of the openai/ollama embedding API.", restart_required=True),
    _v("rag-embedding_api_key", "str", "", "API key of the embedding provider.", secret=True, restart_required=True),
    _v("rag-embedding_dim", "int", 384, "Width of the embedding vectors (must match the model; fixed per index).", minimum=1, maximum=16384, restart_required=True),
    _v("rag-query_cache_entries", "int", 1024, "Query embeddings kept in the LRU cache (0: no cache).", minimum=0, maximum=1_000_000, restart_required=True),
    _v("rag-backend", "enum", "sqlite", "Where the RAG index lives: sqlite (rag.db in the data directory) or postgresql (rag-postgres_dsn, with pgvector; shared by every instance of a cluster).", choices=("sqlite", "postgresql"), restart_required=True),
    _v("rag-postgres_dsn", "str", "", "PostgreSQL DSN of the RAG index when rag-backend is postgresql (pgvector 0.8+ installed).", secret=True, restart_required=True),
    _v("rag-postgres_hnsw_type", "enum", "halfvec", "What the HNSW index on PostgreSQL holds: halfvec (2 bytes a dimension; candidates rescored with the stored float32 vectors) or vector (4); fixed per index.", choices=("halfvec", "vector"), restart_required=True),
)  # fmt: skip


class RagHandler(SyncTools, FetchTools):
    """The search and content tools are here; rag.admin.sync/rag.admin.jobs come from SyncTools
    (ingestion) and rag.fetch_from_source from FetchTools."""

    endpoint: ClassVar[str] = "rag"
    title: ClassVar[str] = "Retrieval index"
    instructions: ClassVar[str] = (
        "Search with rag.search_hybrid (best default), rag.search_fts (exact words) or rag.search_vector (meaning); "
        "then fetch text for the chunk_ids you keep with rag.get_chunks. Scores are higher-is-better in [0, 1]."
    )
    variables: ClassVar[tuple[Variable, ...]] = RAG_VARIABLES
    timeout_variable: ClassVar[str] = "rag-timeout_ms"
    example_call: ClassVar[tuple[str, dict[str, Any]] | None] = (
        "rag.search_hybrid",
        {"query": "how do I sort a list", "k": 3},
    )
    config_modules: ClassVar[tuple[ConfigModule, ...]] = (RAG_SOURCES_MODULE,)

    index: RagIndex | PgRagIndex | None = None
    # Hybrid searches embed their query here while their own thread runs the keyword half: the
    # ONNX model and SQLite both release the GIL, so on two cores the two halves overlap.
    _embedding_thread: ThreadPoolExecutor | None = None

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self._closing = threading.Event()  # stops a purge of removed sources and the follower at shutdown
        self._follower: threading.Thread | None = None
        # search results say when the index is building
        self.build_watch = BuildWatch(self._local_job_status, member=lambda: this_member(self.services.runtime.variables))

    def _local_job_status(self, job_id: str) -> dict[str, Any] | None:
        job = self.jobs.jobs.get(job_id) if self.jobs is not None else None
        return job.status() if job is not None else None

    # -- the command line ------------------------------------------------------------------
    @classmethod
    def add_cli(cls, commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
        add_commands(commands, open_store=open_store)

    @classmethod
    def add_serve_options(cls, serve: argparse.ArgumentParser) -> None:
        serve.add_argument("--no-demo", action="store_true", help="do not build the demo corpus on first start")

    @classmethod
    def before_serve(cls, args: argparse.Namespace, *, data_dir: Path, store: ConfigStore, first_start: bool) -> None:
        """The demo corpus: built on first start, synced in the background beside the workers."""
        if not args.no_demo:
            start_demo_in_background(data_dir, store=store, first_start=first_start)

    @classmethod
    def scrape_collectors(cls, data_dir: Path, runtime: Callable[[], Any]) -> list[Any]:
        """The index's size and sync state, read from the index (rag.db or PostgreSQL, as rag-backend
        says) when /metrics is scraped (handlers/rag/metrics.py)."""
        return [RagIndexCollector(Path(data_dir), runtime)]

    # -- lifecycle -------------------------------------------------------------------------
    async def init(self) -> None:
        await anyio.to_thread.run_sync(self._open)

    def _open(self) -> None:
        from handlers.rag.embeddings import QueryEmbeddingCache, make_embedder

        runtime = self.services.runtime
        embedder = make_embedder(index_embedding_config(runtime))
        if runtime.var("rag-embedding_provider") == "local":
            # Load the model now, not inside the first search: loading takes about a second,
            # which would spend most of that call's rag-timeout_ms.
            embedder.embed(["warm up"])
        self.embedder = embedder
        self.query_cache = QueryEmbeddingCache(embedder, max_entries=runtime.var("rag-query_cache_entries"))
        self._embedding_thread = ThreadPoolExecutor(max_workers=2, thread_name_prefix="rag-query-embed")
        self.index = open_rag_index(runtime, self.services.data_dir, embedding_model_id=embedder.model_id, dim=embedder.dim)
        if isinstance(self.index, RagIndex):
            # Load (or rebuild) the ANN now: done inside the first search it would hold the search
            # lock for a second (snapshot) to minutes (rebuild at 1M vectors) and blow rag-timeout_ms.
            self.index.vectors.refresh(self.index.conn)
            self._follower = threading.Thread(target=self._follow_index, args=(self.index,), name="rag-ann-follower", daemon=True)
            self._follower.start()
        self.services.rag_index, self.services.rag_embedder = self.index, embedder
        self.start_ingest()

    def on_runtime_change(self, old: Any, new: Any) -> None:
        """A LOAD RAG SOURCES: enabled flags reach the index, removed sources are purged
        (handlers/rag/ingest/reconcile.py)."""
        super().on_runtime_change(old, new)
        if self.index is None or old is None:
            return
        before, after = old.table("runtime_rag_sources"), new.table("runtime_rag_sources")
        if before is not after and before != after:
            apply_source_changes(self.index, self.services.data_dir, source_states(before), source_states(after), self._closing)

    def _follow_index(self, index: RagIndex) -> None:
        """Keep the ANN index level with syncs by other processes (another worker, the demo
        build, `mcp-gateway rag sync`), so a search never replays a large change log: one tiny
        query a second when nothing changed, batches of vectors.CATCH_UP_BATCH when it did."""
        while not self._closing.wait(FOLLOW_INTERVAL_S):
            try:
                index.vectors.catch_up(index.conn, stop=self._closing)
            except Exception:  # noqa: BLE001 - searches catch up on their own meanwhile
                log.warning("catching the ANN index up failed; retrying", exc_info=True)

    async def close(self) -> None:
        self._closing.set()
        if self._follower is not None:
            await anyio.to_thread.run_sync(self._follower.join, 10)  # at most one batch in flight
        await anyio.to_thread.run_sync(self.stop_ingest)
        if self._embedding_thread is not None:
            self._embedding_thread.shutdown(wait=False, cancel_futures=True)
        if self.index is not None:
            index, self.index = self.index, None
            self.services.rag_index = self.services.rag_embedder = None
            await anyio.to_thread.run_sync(index.close)
        await super().close()

    # -- helpers ---------------------------------------------------------------------------
    def _index(self) -> Any:
        if self.index is None:
            raise Unavailable("the RAG index is not open")
        return self.index

    def _filter(self, reader: Reader, filters: Filters) -> FilterSQL:
        return build_filter(filters, all_sources_enabled=reader.all_sources_enabled())

    def _query_vector(self, text: str) -> np.ndarray:
        return self.query_cache.embed_query(text)

    def _query_vector_soon(self, text: str) -> Callable[[], np.ndarray]:
        """Start embedding `text` (unless cached) and return the call that waits for it."""
        vector = self.query_cache.lookup(text)
        if vector is not None:
            return lambda: vector
        if self._embedding_thread is None:
            return lambda: self._query_vector(text)
        return self._embedding_thread.submit(self._query_vector, text).result

    def _check_model(self, index: Any, model: str | None) -> None:
        name = index.embedding_model_id.split(":", 1)[-1]
        if model is not None and model not in (index.embedding_model_id, name, name.split("@", 1)[0]):
            raise InvalidArgument(
                f"the index was built with embedding model {index.embedding_model_id!r}; a query embedded by {model!r} "
                "cannot be compared with it"
            )

    def _search_output(
        self, call: Call, results: list[dict[str, Any]], *, k_requested: int, mode: str, reader: Reader
    ) -> SearchOutput:
        fitted, cut = fit_to_bytes(results, call.caps.response_max_bytes - _ENVELOPE_BYTES)
        stats = Stats(
            k_requested=k_requested, k_returned=len(fitted), ms=call.ms(), mode=mode, vector_fewer_than_k=reader.fewer_than_k
        )
        return SearchOutput(
            results=fitted,
            truncated=call.truncated or cut,
            stats=stats,
            index=self.build_watch.note(self._index()),
        )

    # -- search tools ----------------------------------------------------------------------
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
            flt = self._filter(reader, args.filters)
            scored = search.search_fts(reader, match, flt, k=k, offset=args.offset)
            results = search.hits(reader, scored, args.return_, match=match, keep=("score_fts", "score_fts_raw"))
        return self._search_output(call, results, k_requested=args.k, mode="fts", reader=reader)

    @tool("rag.search_vector", title="Semantic search", read_only=True)
    def search_vector(self, args: SearchVectorIn, ctx: CallContext) -> SearchOutput:
        """Nearest chunks by meaning. Give query_text (embedded with the index's model) or
        query_embedding {dim, values_b64: float32 little-endian, base64}, used as given. score_vec
        in [0,1] is 1 - cosine_distance/2; distance_raw is the cosine distance."""
        index, call = self._index(), Call.of(ctx)
        if (args.query_text is None) == (args.query_embedding is None):
            raise InvalidArgument("give exactly one of query_text and query_embedding")
        self._check_model(index, args.embedding.model if args.embedding else None)
        match = None
        if args.query_text is not None:
            call.check_query(args.query_text, name="query_text")
            query = self._query_vector(args.query_text)
            match = fts.build_match(args.query_text)  # for snippets only
        else:
            self._check_model(index, args.query_embedding.model)
            query = _decode_embedding(args.query_embedding.values_b64, args.query_embedding.dim, index.dim)
        call.check_deadline()
        k = call.clamp(args.k, call.caps.k_max)
        with reading(index, call) as reader:
            flt = self._filter(reader, args.filters)
            scored = search.search_vector(reader, query, flt, k=k)
            results = search.hits(reader, scored, args.return_, match=match, keep=("score_vec", "distance_raw"))
        return self._search_output(call, results, k_requested=args.k, mode="vector", reader=reader)

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
        query = self._query_vector_soon(args.query)
        k = call.clamp(args.k, call.caps.k_max)
        keep = ("score_fts", "score_fts_raw", "score_vec", "distance_raw", "debug")
        with reading(index, call) as reader:
            flt = self._filter(reader, args.filters)
            if args.mode == "fuse":
                scored = search.search_fuse(reader, call, match, query, flt, args.fuse, k=k)
            else:
                scored = search.search_fts_then_vec(reader, call, match, query, flt, args.fts_then_vec, k=k)
            results = search.hits(reader, scored, args.return_, match=match, keep=keep)
        return self._search_output(call, results, k_requested=args.k, mode=args.mode, reader=reader)

    # -- content tools ---------------------------------------------------------------------
    @tool("rag.get_chunks", title="Fetch chunks", read_only=True)
    def get_chunks(self, args: GetChunksIn, ctx: CallContext) -> GetChunksOut:
        """Chunk text for grounding, by chunk_id, in the order given. Optional: diversity
        {lambda} re-orders by maximal marginal relevance (pushes near-duplicates down), and
        max_output_tokens caps the total body text (about 4 characters per token). Ids not in
        the index are listed in `missing`; NOT_FOUND if none is."""
        index, call = self._index(), Call.of(ctx)
        wanted = list(dict.fromkeys(args.chunk_ids))
        served = wanted[: call.clamp(len(wanted), call.caps.k_max)]
        with reading(index, call) as reader:
            chunks, rowids = content.load_chunks(reader, served, args.return_)
            if not chunks:
                raise ids_not_found("chunk_ids", args.chunk_ids, wanted, served)
            if args.diversity is not None:
                chunks = content.mmr_order(reader, chunks, rowids, lam=args.diversity.lambda_)
        if args.max_output_tokens is not None:
            chunks, cut = content.apply_token_budget(chunks, args.max_output_tokens)
            call.truncated |= cut
        fitted, cut = fit_to_bytes(chunks, call.caps.response_max_bytes - _ENVELOPE_BYTES, text_field="body")
        missing = [c for c in served if c not in rowids]
        return GetChunksOut(
            chunks=fitted,
            missing=missing,
            not_looked_up=len(wanted) - len(served),
            truncated=call.truncated or cut,
            stats=Stats(k_requested=len(args.chunk_ids), k_returned=len(fitted), ms=call.ms(), mode="chunks"),
        )

    @tool("rag.get_docs", title="Fetch documents", read_only=True)
    def get_docs(self, args: GetDocsIn, ctx: CallContext) -> GetDocsOut:
        """Whole canonical documents by doc_id (title, body, metadata, pk_json of the source
        row). Bodies can be long: prefer rag.get_chunks for grounding. Ids not in the index are
        listed in `missing`; NOT_FOUND if none is."""
        index, call = self._index(), Call.of(ctx)
        wanted = list(dict.fromkeys(args.doc_ids))
        served = wanted[: call.clamp(len(wanted), call.caps.k_max)]
        with reading(index, call) as reader:
            docs = content.load_docs(reader, served, args.return_)
        if not docs:
            raise ids_not_found("doc_ids", args.doc_ids, wanted, served)
        fitted, cut = fit_to_bytes(
            docs, call.caps.response_max_bytes - _ENVELOPE_BYTES, text_field="body" if args.return_.include_body else None
        )
        found = {d["doc_id"] for d in docs}
        return GetDocsOut(
            docs=fitted,
            missing=[d for d in served if d not in found],
            not_looked_up=len(wanted) - len(served),
            truncated=call.truncated or cut,
            stats=Stats(k_requested=len(args.doc_ids), k_returned=len(fitted), ms=call.ms(), mode="docs"),
        )

    @tool("rag.admin.stats", title="Index statistics", read_only=True)
    def admin_stats(self, args: AdminStatsIn, ctx: CallContext) -> AdminStatsOut:
        """Per-source document and chunk counts with the last sync, and the index's size,
        schema version and embedding model."""
        index, call = self._index(), Call.of(ctx)
        with reading(index, call) as reader:
            counts = index.source_counts()
            sources = [
                {
                    "source_id": row[0],
                    "source_name": row[1],
                    "enabled": bool(row[2]),
                    "docs": counts.get(row[0], {}).get("docs", 0),
                    "chunks": counts.get(row[0], {}).get("chunks", 0),
                    "last_sync": row[3],
                    "last_error": row[4],
                }
                for row in reader.execute(
                    "SELECT s.source_id, s.name, s.enabled, st.last_ok_at, st.last_error FROM rag_sources s"
                    " LEFT JOIN rag_sync_state st ON st.source_id = s.source_id ORDER BY s.source_id"
                )
            ]
            meta = index.meta()
            totals = index.totals()
        size = index.size_bytes()
        jobs = self.jobs
        return AdminStatsOut(
            sources=sources,
            jobs=jobs.recent(RECENT_JOBS_IN_STATS) if jobs is not None else [],
            index={
                **totals,
                "size_bytes": size,
                "schema_version": int(meta.get("schema_version", 0)),
                "embedding_model": meta.get("embedding_model", ""),
                "embedding_dim": int(meta.get("embedding_dim", 0)),
            },
            truncated=False,
            stats=Stats(k_requested=0, k_returned=len(sources), ms=call.ms(), mode="stats"),
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
