"""Input and output models of the /mcp/rag tools (seed 000's contracts, plus what we add).

Every list argument has a length bound so a request cannot make the server build an unbounded
SQL parameter list; the caps that depend on runtime variables (k, candidates, bytes) are applied
by the tools themselves and reported with `truncated`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from backends.retrieval.fusion import RESOLVED_DEFAULTS, ResolvedFuse
from gateway.tools import INT64_MAX, INT64_MIN, ToolInput, ToolOutput

MAX_FILTER_VALUES = 1000  # per filter list
MAX_IDS = 1000  # chunk_ids / doc_ids per get_* call (rag-k_max then cuts what is returned)
# Bounds of the counts a caller asks for: far above what the rag-* caps serve (those clamp and say
# `truncated`), far below what overflows SQLite's 64-bit integers.
MAX_K = 1_000_000
MAX_WEIGHT = 1_000_000.0
SourceId = Annotated[int, Field(ge=0, le=INT64_MAX)]
MetadataInt = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


# -- shared pieces ---------------------------------------------------------------------------
MetadataKey = Annotated[str, Field(min_length=1, max_length=128, pattern=r'^[^"\\\x00-\x1f]+$')]
MetadataNumber = Annotated[float, Field(ge=-1e15, le=1e15)]
MetadataValue = Annotated[str, Field(max_length=1000)] | bool | MetadataNumber
MetadataBound = MetadataNumber | datetime


class MetadataFilter(ToolInput):
    """A condition on one metadata key (as the source's doc_map_json picks it): every field given must
    hold. A list value holds when one of its elements does. Strings match strings, numbers numbers,
    booleans booleans; date bounds (ISO 8601 text, naive = UTC) compare the values as timestamps."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    key: MetadataKey = Field(..., description="The metadata key, exactly as stored (e.g. category).")
    eq: MetadataValue | None = Field(None, description="Equal to this value.")
    in_: list[MetadataValue] | None = Field(
        None, alias="in", max_length=MAX_FILTER_VALUES, description="Equal to one of these values (with eq: either)."
    )
    gt: MetadataBound | None = Field(None, description="Greater than (a number, or a date/time for dates).")
    gte: MetadataBound | None = Field(None, description="At least.")
    lt: MetadataBound | None = Field(None, description="Less than.")
    lte: MetadataBound | None = Field(None, description="At most.")
    exists: bool | None = Field(None, description="true: the key has a non-null value; false: it has none.")


class Filters(ToolInput):
    """The shared filter model: every field narrows the result; lists within a field are OR."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    source_ids: list[SourceId] | None = Field(None, max_length=MAX_FILTER_VALUES, description="Only these sources.")
    source_names: list[str] | None = Field(
        None, max_length=MAX_FILTER_VALUES, description="Only these sources, by name (intersected with source_ids)."
    )
    doc_ids: list[str] | None = Field(None, max_length=MAX_FILTER_VALUES, description="Only chunks of these documents.")
    min_score: float | None = Field(None, ge=-1e15, le=1e15, description="Documents whose metadata Score is at least this.")
    post_type_ids: list[MetadataInt] | None = Field(
        None, max_length=MAX_FILTER_VALUES, description="Metadata PostTypeId in this list."
    )
    tags_any: list[str] | None = Field(
        None, max_length=MAX_FILTER_VALUES, description="Documents with at least one of these tags."
    )
    tags_all: list[str] | None = Field(None, max_length=MAX_FILTER_VALUES, description="Documents with every one of these tags.")
    created_after: datetime | None = Field(None, description="Metadata CreationDate strictly after this (ISO 8601; naive = UTC).")
    created_before: datetime | None = Field(None, description="Metadata CreationDate strictly before this.")
    metadata: list[MetadataFilter] | None = Field(
        None,
        max_length=32,
        description='Conditions on any metadata key, all of which must hold: [{"key": "category", "eq": "outdoor"}, '
        '{"key": "price", "gte": 10, "lt": 20}, {"key": "published", "gte": "2024-01-01"}, {"key": "tags", "in": ["a", "b"]}, '
        '{"key": "author", "exists": true}]. A key no indexed source picks is reported in warnings.',
    )


class SearchReturn(ToolInput):
    include_title: bool = True
    include_metadata: bool = True
    include_snippets: bool = Field(False, description="Add FTS5-highlighted snippets of the matched terms (bounded).")
    snippet_tokens: int = Field(24, ge=1, le=64, description="Most tokens per snippet.")


class Stats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k_requested: int
    k_returned: int
    ms: float
    mode: str
    vector_fewer_than_k: bool = Field(
        False,
        description="The filtered vector search stopped before finding k chunks that pass the filter (PostgreSQL's "
        "hnsw.max_scan_tuples), though more may exist: narrow the filter or raise the limit.",
    )


class Hit(BaseModel):
    """One search result. `score` is higher-is-better in [0, 1] in every mode."""

    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    doc_id: str
    source_id: int
    source_name: str
    score: float
    score_fts: float | None = None  # bm25 mapped to [0,1): x/(1+x) with x = -bm25
    score_fts_raw: float | None = None  # SQLite bm25(), lower is better
    score_vec: float | None = None  # 1 - cosine_distance/2
    distance_raw: float | None = None  # in the metric used: cosine distance, L2 distance, or -dot
    title: str | None = None
    metadata: dict[str, Any] | None = None
    snippet: str | None = None
    debug: dict[str, Any] | None = None


class IndexBuild(BaseModel):
    model_config = ConfigDict(extra="forbid")

    building: bool = Field(description="True: a sync is writing the index; results cover only what is indexed so far.")
    documents: int = Field(description="Documents the running sync has written so far.")
    of: int | None = Field(description="Rows the running sync has to read (None until its sources are counted).")
    sources: list[str]
    job_id: str
    message: str


class SearchOutput(ToolOutput):
    results: list[Hit]
    truncated: bool
    stats: Stats
    index: IndexBuild | None = Field(
        None, description="Present while a sync is building the index: its progress (results cover what is indexed so far)."
    )
    warnings: list[str] = Field(
        default_factory=list, description="What the caller may not have meant (a filter on a key no document has)."
    )


def _also_spelled(data: Any, name: str, other: str) -> Any:
    """The search tools take the query text as `query` (fts, hybrid) or `query_text` (vector, the
    blueprint's names); each also accepts the other spelling, which is read as its own."""
    if isinstance(data, dict) and other in data:
        data = dict(data)
        given = data.pop(other)
        if name in data and data[name] != given:
            raise ValueError(f"give {name} or {other} (the same thing), not both")
        data[name] = given
    return data


# -- rag.search_fts ----------------------------------------------------------------------------
class SearchFtsIn(ToolInput):
    query: str = Field(
        ...,
        min_length=1,
        description="Words to look for. Quoted into FTS5 syntax unless syntax='fts5'. (query_text is accepted too.)",
    )
    syntax: Literal["text", "fts5"] = Field(
        "text", description="text: any of the words, ranked by bm25 (safe for any input). fts5: the query is FTS5 MATCH syntax."
    )
    k: int = Field(10, ge=1, le=MAX_K, description="Results wanted (capped by rag-k_max).")
    offset: int = Field(
        0, ge=0, le=MAX_K, description="Skip this many ranked results (offset + k is capped by rag-candidates_max)."
    )
    filters: Filters = Field(default_factory=Filters)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _query_text(cls, data: Any) -> Any:
        return _also_spelled(data, "query", "query_text")


# -- rag.search_vector -------------------------------------------------------------------------
class QueryEmbedding(ToolInput):
    dim: int = Field(..., ge=1, le=16384)
    values_b64: str = Field(..., description="float32 little-endian values, base64 encoded; used as given.")
    model: str | None = Field(None, description="Model that produced the vector; refused unless it is the index's model.")


class EmbeddingOptions(ToolInput):
    model: str | None = Field(None, description="Must equal the index's embedding model if given.")


class SearchVectorIn(ToolInput):
    query_text: str | None = Field(
        None, min_length=1, description="Text to embed with the index's model. (query is accepted too, as in rag.search_hybrid.)"
    )
    query_embedding: QueryEmbedding | None = Field(None, description="A precomputed query vector (instead of query_text).")
    k: int = Field(10, ge=1, le=MAX_K, description="Results wanted (capped by rag-k_max).")
    filters: Filters = Field(default_factory=Filters)
    embedding: EmbeddingOptions | None = None
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _query(cls, data: Any) -> Any:
        return _also_spelled(data, "query_text", "query")


# -- rag.search_hybrid -------------------------------------------------------------------------
class FuseParams(ToolInput):
    """Settings of mode "fuse". Left out, a setting takes its fusion's default (RESOLVED_DEFAULTS)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    fusion: Literal["adaptive", "rrf"] = Field(
        "adaptive",
        description="adaptive: per-query z-scores of both rankings, weighted by query length, rare words and each "
        "ranking's confidence. rrf: reciprocal rank fusion (with no other setting: the blueprint's k0 60, equal weights).",
    )
    fts_k: int = Field(100, ge=1, le=MAX_K, description="FTS candidates fused (capped by rag-candidates_max).")
    vec_k: int = Field(100, ge=1, le=MAX_K, description="Vector candidates fused (capped by rag-candidates_max).")
    rrf_k0: float | None = Field(
        None,
        ge=0,
        le=MAX_WEIGHT,
        description="RRF constant: score = w_fts/(k0+rank_fts) + w_vec/(k0+rank_vec). adaptive: how fast the all-terms "
        "bonus fades, w_all_terms*(k0+1)/(k0+rank).",
    )
    w_fts: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="Weight of the keyword ranking.")
    w_vec: float | None = Field(None, ge=0, le=MAX_WEIGHT, description="Weight of the vector ranking.")
    w_all_terms: float | None = Field(
        None,
        ge=0,
        le=MAX_WEIGHT,
        description="Weight of a third ranking: the FTS matches that contain every query word (a precision signal). "
        "adaptive: the bonus its best hit gets, in z-score units (0: off).",
    )
    all_terms_window: int | None = Field(
        None,
        ge=0,
        le=1000,
        description="The all-terms ranking keeps a chunk only when the query words occur within this many tokens of "
        "each other (FTS5 NEAR; 0: anywhere in the chunk; PostgreSQL: anywhere).",
    )
    rare_boost: float | None = Field(
        None,
        ge=0,
        le=10,
        description="adaptive: how much a rare query word (bm25 idf above 5) raises the keyword ranking's weight (0: off).",
    )
    feedback_docs: int | None = Field(
        None,
        ge=0,
        le=20,
        description="Pseudo-relevance feedback: move the query vector towards the top N fused chunks and redo the vector ranking (0: off).",
    )
    feedback_weight: float | None = Field(
        None, ge=0, le=10, description="Weight of the feedback centroid added to the unit query vector."
    )
    feedback_min_terms: int | None = Field(
        None,
        ge=0,
        le=64,
        description="Feedback only for queries with at least this many searchable words (0: every query). A long "
        "description of a topic gains from feedback; a keyword lookup or a question loses.",
    )

    def resolved(self) -> ResolvedFuse:
        defaults = RESOLVED_DEFAULTS[self.fusion]
        given = {name: getattr(self, name) for name in ResolvedFuse.__dataclass_fields__ if name != "fusion"}
        return replace(defaults, **{name: value for name, value in given.items() if value is not None})


class FtsThenVecParams(ToolInput):
    candidates_k: int = Field(200, ge=1, le=MAX_K, description="FTS candidates re-ranked (capped by rag-candidates_max).")
    rerank_k: int = Field(50, ge=1, le=MAX_K, description="Re-ranked candidates kept; results are the top k of them.")
    vec_metric: Literal["cosine", "l2", "dot"] = "cosine"


class SearchHybridIn(ToolInput):
    query: str = Field(..., min_length=1, description="A question or keywords. (query_text is accepted too.)")
    k: int = Field(10, ge=1, le=MAX_K, description="Results wanted (capped by rag-k_max).")
    mode: Literal["fuse", "fts_then_vec"] = Field(
        "fuse",
        description="fuse: FTS and vector rankings merged (see fuse.fusion). fts_then_vec: FTS candidates re-ranked by vector similarity.",
    )
    filters: Filters = Field(default_factory=Filters)
    fuse: FuseParams = Field(default_factory=FuseParams)
    fts_then_vec: FtsThenVecParams = Field(default_factory=FtsThenVecParams)
    return_: SearchReturn = Field(default_factory=SearchReturn, alias="return")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _query_text(cls, data: Any) -> Any:
        return _also_spelled(data, "query", "query_text")


# -- rag.get_chunks ----------------------------------------------------------------------------
class ChunksReturn(ToolInput):
    include_title: bool = True
    include_doc_metadata: bool = True
    include_chunk_metadata: bool = True


class Diversity(ToolInput):
    lambda_: float = Field(0.5, ge=0, le=1, alias="lambda", description="1 = keep the given order; 0 = most diverse.")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class GetChunksIn(ToolInput):
    chunk_ids: list[str] = Field(..., min_length=1, max_length=MAX_IDS, description="In ranking order (best first).")
    return_: ChunksReturn = Field(default_factory=ChunksReturn, alias="return")
    diversity: Diversity | None = Field(None, description="Re-order by maximal marginal relevance over the chunk vectors.")
    max_output_tokens: int | None = Field(
        None,
        ge=1,
        le=100_000_000,
        description="Budget for the returned bodies, estimated at 4 characters per token; the last body is cut.",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Chunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    chunk_id: str
    doc_id: str
    source_id: int
    source_name: str
    title: str | None = None
    body: str
    body_truncated: bool = False
    doc_metadata: dict[str, Any] | None = None
    chunk_metadata: dict[str, Any] | None = None


class GetChunksOut(ToolOutput):
    chunks: list[Chunk]
    missing: list[str] = Field(description="Ids looked up but not in the index.")
    not_looked_up: int = Field(0, description="Distinct ids past rag-k_max, not looked up (truncated is true then).")
    truncated: bool
    stats: Stats


# -- rag.get_docs ------------------------------------------------------------------------------
class DocsReturn(ToolInput):
    include_body: bool = True
    include_metadata: bool = True


class GetDocsIn(ToolInput):
    doc_ids: list[str] = Field(..., min_length=1, max_length=MAX_IDS)
    return_: DocsReturn = Field(default_factory=DocsReturn, alias="return")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    doc_id: str
    source_id: int
    source_name: str
    pk_json: dict[str, Any]
    title: str
    body: str | None = None
    body_truncated: bool = False
    metadata: dict[str, Any] | None = None
    updated_at: str | None = None


class GetDocsOut(ToolOutput):
    docs: list[Doc]
    missing: list[str] = Field(description="Ids looked up but not in the index.")
    not_looked_up: int = Field(0, description="Distinct ids past rag-k_max, not looked up (truncated is true then).")
    truncated: bool
    stats: Stats


# -- rag.admin.stats ---------------------------------------------------------------------------
class AdminStatsIn(ToolInput):
    pass


class SourceStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source_id: int
    source_name: str
    enabled: bool
    docs: int
    chunks: int
    last_sync: str | None
    last_error: str | None


class IndexStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    docs: int
    chunks: int
    vectors: int
    size_bytes: int
    schema_version: int
    embedding_model: str
    embedding_dim: int


class AdminStatsOut(ToolOutput):
    sources: list[SourceStats]
    index: IndexStats
    jobs: list[dict[str, Any]] = Field(
        description="The most recent sync jobs, newest first, with live progress (rag.admin.jobs has the full shape)."
    )
    truncated: bool
    stats: Stats


# -- rag.generate_embedding --------------------------------------------------------------------
MAX_EMBED_TEXTS = 64


class GenerateEmbeddingIn(ToolInput):
    text: str | None = Field(None, description="One text to embed (bounded by rag-query_max_bytes).")
    texts: list[str] | None = Field(
        None, max_length=MAX_EMBED_TEXTS, description=f"Several texts (at most {MAX_EMBED_TEXTS}), embedded in one batch."
    )


class Embedding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Position of the text in the request.")
    dim: int
    values_b64: str = Field(description="float32 little-endian values, base64 encoded (query_embedding's form).")
    model: str


class GenerateEmbeddingOut(ToolOutput):
    model: str = Field(description="The embedding model id (provider:model), as the index records it.")
    dim: int
    embeddings: list[Embedding]
    truncated: bool
    stats: Stats


# -- rag.similarity_search / rag.vector_columns --------------------------------------------------
Identifier = Annotated[str, Field(min_length=1, max_length=128)]


class VectorColumnsIn(ToolInput):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    target_id: str | None = Field(None, max_length=256, description="The target (default: the default target).")
    schema_: Identifier | None = Field(None, alias="schema", description="The schema (default: the target's).")
    table: Identifier | None = Field(None, description="Only this table.")


class VectorColumn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    table_schema: str
    table: str
    column: str
    type: str
    dim: int | None = Field(description="Declared dimension (None: not declared).")
    index: str | None = Field(description="The ANN index the search would use (am:name), None: exact scan.")
    metric: str
    text_columns: list[str]
    key_columns: list[str]
    embeddable: bool = Field(description="The gateway's embedding model has this dimension: query_text works.")


class VectorColumnsOut(ToolOutput):
    target_id: str | None
    embedding_model: str
    embedding_dim: int
    columns: list[VectorColumn]
    truncated: bool
    stats: Stats


class SimilaritySearchIn(ToolInput):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, populate_by_name=True)

    target_id: str | None = Field(None, max_length=256, description="The target (default: the default target).")
    schema_: Identifier | None = Field(None, alias="schema", description="The table's schema (default: the target's).")
    table: Identifier = Field(..., description="A table with a vector column (rag.vector_columns lists them).")
    vector_column: Identifier | None = Field(None, description="Default: the table's only (or first) vector column.")
    text_columns: list[Identifier] | None = Field(None, max_length=32, description="Default: every text column.")
    key_columns: list[Identifier] | None = Field(None, max_length=16, description="Default: the primary key.")
    query_text: str | None = Field(
        None, min_length=1, description="Text embedded with the gateway's model (dimensions must match)."
    )
    query_embedding: QueryEmbedding | None = Field(None, description="A vector of the column's model instead of query_text.")
    k: int = Field(10, ge=1, le=1000, description="Rows the vector index is asked for (capped by the target's max_rows).")
    metric: Literal["cosine", "l2", "inner_product"] | None = Field(
        None, description="Default: the metric of the column's ANN index (cosine without one)."
    )
    chunk_chars: int = Field(1000, ge=100, le=20000, description="Chunk size (characters) the rows' text is cut into.")
    bm25_weight: float = Field(0.3, ge=0, le=1, description="Weight of BM25 against the row's vector similarity.")
    lambda_: float = Field(0.6, alias="lambda", ge=0, le=1, description="MMR: 1 = relevance only, lower = more diverse.")
    max_chunks_per_row: int = Field(2, ge=1, le=100, description="At most this many chunks of one row.")
    max_chunks: int = Field(20, ge=1, le=1000, description="At most this many chunks.")
    max_output_tokens: int = Field(2000, ge=1, le=1_000_000, description="Budget of chunk text (about 4 characters a token).")


class FoundRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: dict[str, Any]
    distance: float
    score_vec: float


class FoundChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: dict[str, Any]
    chunk_index: int
    text: str
    text_truncated: bool = False
    score: float
    score_vec: float
    score_bm25: float


class SimilaritySearchOut(ToolOutput):
    target_id: str | None
    table: str
    vector_column: str
    text_columns: list[str]
    key_columns: list[str]
    metric: str
    index: str | None = Field(description="The ANN index the database searched through (None: an exact scan).")
    rows: list[FoundRow] = Field(description="The rows the vector search found, nearest first.")
    chunks: list[FoundChunk] = Field(description="Their text's chunks, re-ranked (BM25, MMR), within max_output_tokens.")
    truncated: bool
    warnings: list[str] = Field(default_factory=list)
    stats: Stats
