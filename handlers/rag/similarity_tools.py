"""rag.similarity_search and rag.vector_columns: semantic search over a user's own tables with
vector columns (PostgreSQL + pgvector), through the one read-only SQL path (ReadOnlySql: query
rules, the read-only check, the target's caps). The database's own ANN index finds the rows; the
rows' text is chunked, re-ranked with BM25, diversified with MMR and cut at a token budget
(backends/retrieval/rerank.py). The engine's SQL is its own (backends/engines/<engine>.py,
`vector_search`)."""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from backends.binding import marker
from backends.retrieval import rerank
from backends.retrieval.call import Call
from backends.retrieval.embeddings import index_embedding_config, make_embedder
from backends.retrieval.ingest.chunking import ChunkingSpec, chunk_text
from backends.retrieval.protocols import Embedder
from backends.sql import ReadOnlySql, Statement
from gateway.errors import ConfigError, InvalidArgument, PermissionDenied
from gateway.tools import CallContext, tool
from handlers.rag.limits import ENVELOPE_BYTES, json_size
from handlers.rag.models import (
    SimilaritySearchIn,
    SimilaritySearchOut,
    Stats,
    VectorColumnsIn,
    VectorColumnsOut,
)

DISCOVERY_TTL_S = 5.0


def _similarity(metric: str, distance: float) -> float:
    if metric == "cosine":
        return max(0.0, min(1.0, 1.0 - distance / 2.0))
    if metric == "l2":
        return 1.0 / (1.0 + distance)
    return max(0.0, min(1.0, (1.0 - distance) / 2.0))  # <#> is the negated inner product


class SimilarityTools:
    def __init__(self, sql: Callable[[], ReadOnlySql], targets: Any, embedder: Callable[[], Embedder]) -> None:
        self._sql = sql
        self._targets = targets
        self._embedder = embedder
        # A table's vector columns as similarity_search last discovered them, for DISCOVERY_TTL_S:
        # one catalog round trip fewer per search (the search statement itself always runs).
        self._discovered: dict[tuple[str, str, str], tuple[float, list[dict[str, Any]]]] = {}
        self._column_embedders: dict[str, Embedder] = {}  # declared columns' models, by their configuration

    def _search_engine(self, target_id: str | None) -> Any:
        if self._targets is None:
            raise InvalidArgument("no database targets are configured")
        target = self._targets.resolve(target_id)
        search = target.engine.vector_search
        if search is None:
            raise InvalidArgument(f"target {target.target_id!r} is {target.engine.title}: {target.engine.vector_search_refusal}")
        return target, search

    def _columns(self, ctx: CallContext, target: Any, search: Any, schema: str | None, table: str | None) -> list[dict[str, Any]]:
        schema = schema or target.engine.default_schema(target)
        params = {"schema": schema, **({"table": table} if table else {})}
        sql = search.columns_sql(marker("schema"), marker("table") if table else None)
        out = self._sql().run(
            ctx, Statement(sql=sql, target_id=target.target_id, tool_name="rag.vector_columns", params=params, cache="bypass")
        )
        names = [c["name"] for c in out["columns"]]
        return [dict(zip(names, row, strict=True)) for row in out["rows"]]

    def _searchable(self, ctx: CallContext, target: Any, search: Any, row: dict[str, Any], op: str) -> bool:
        """Whether the query rules let rag.similarity_search run its statement on this column
        (checked without running it: the rules and the read-only check only)."""
        keys = [c for c in (row["key_columns"] or "").split(",") if c] or ["ctid"]
        texts = [c for c in (row["text_columns"] or "").split(",") if c]
        sql = search.nearest_sql(
            row["table_schema"],
            row["table_name"],
            row["column_name"],
            row["type"],
            keys,
            texts,
            op,
            marker("q"),
            1,
            row["vector_schema"],
        )
        try:
            self._sql().prepare(
                ctx, Statement(sql=sql, target_id=target.target_id, tool_name="rag.similarity_search", params={"q": "[0]"})
            )
        except (InvalidArgument, PermissionDenied):
            return False
        return True

    @tool("rag.vector_columns", title="Vector columns of a target", read_only=True)
    def vector_columns(self, args: VectorColumnsIn, ctx: CallContext) -> VectorColumnsOut:
        """The vector columns (pgvector vector/halfvec) of a target's tables, compact: dimension,
        the ANN index and metric a search would use, text and key columns, and whether the
        gateway's embedding model fits (query_text works) — the discovery call before
        rag.similarity_search."""
        call = Call.of(ctx)
        target, search = self._search_engine(args.target_id)
        embedder = self._embedder()
        rows = self._columns(ctx, target, search, args.schema_, args.table)
        columns = []
        for row in rows:
            op, metric, index = search.metric_of(row["indexes"], None)
            if not self._searchable(ctx, target, search, row, op):
                continue  # a query rule refuses the search: the table is not listed
            dim = int(row["dim"]) if row["dim"] and int(row["dim"]) > 0 else None
            columns.append(
                {
                    "table_schema": row["table_schema"],
                    "table": row["table_name"],
                    "column": row["column_name"],
                    "type": row["type"],
                    "dim": dim,
                    "index": index,
                    "metric": metric,
                    "text_columns": [c for c in (row["text_columns"] or "").split(",") if c],
                    "key_columns": [c for c in (row["key_columns"] or "").split(",") if c],
                    "embeddable": dim == (self._column_embedder(ctx, {**row, "target_id": target.target_id}) or embedder).dim,
                }
            )
        return VectorColumnsOut(
            target_id=target.target_id,
            embedding_model=embedder.model_id,
            embedding_dim=embedder.dim,
            columns=columns,
            truncated=call.truncated,
            stats=Stats(k_requested=len(columns), k_returned=len(columns), ms=call.ms(), mode="vector_columns"),
        )

    @tool("rag.similarity_search", title="Similarity search over a table", read_only=True)
    def similarity_search(self, args: SimilaritySearchIn, ctx: CallContext) -> SimilaritySearchOut:
        """Semantic search over one of your own tables with a pgvector column: the query
        (query_text, embedded with the gateway's model, or query_embedding of the column's model)
        goes to the database's own ANN index (HNSW/IVFFlat, ORDER BY distance LIMIT k); the rows
        found are chunked (chunk_chars), the chunks re-ranked by BM25 against query_text blended
        with the row's vector similarity (bm25_weight), picked by MMR (lambda; at most
        max_chunks_per_row of one row) and cut at max_output_tokens. Returns the rows (keys,
        distance) and the chunks with their row keys. Vector, text and key columns are discovered
        (rag.vector_columns) unless given. Runs through the read-only path: query rules and the
        target's caps apply."""
        call = Call.of(ctx)
        if (args.query_text is None) == (args.query_embedding is None):
            raise InvalidArgument("give exactly one of query_text and query_embedding")
        target, search = self._search_engine(args.target_id)
        schema = args.schema_ or target.engine.default_schema(target)
        cache_key = (target.target_id, schema, args.table)
        cached = self._discovered.get(cache_key)
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_TTL_S:
            found = cached[1]
        else:
            found = self._columns(ctx, target, search, schema, args.table)
            if len(self._discovered) >= 1024:
                self._discovered.clear()
            self._discovered[cache_key] = (time.monotonic(), found)
        if not found:
            raise InvalidArgument(f"table {schema}.{args.table} has no vector column (or does not exist, or is not visible)")
        if args.vector_column is not None:
            found = [c for c in found if c["column_name"] == args.vector_column]
            if not found:
                raise InvalidArgument(f"{schema}.{args.table}.{args.vector_column} is not a vector column")
        column = found[0]
        warnings = []
        if args.vector_column is None and len(found) > 1:
            warnings.append(f"the table has several vector columns; searched {column['column_name']!r} (pass vector_column)")
        dim = int(column["dim"]) if column["dim"] and int(column["dim"]) > 0 else None
        texts = (
            list(args.text_columns)
            if args.text_columns is not None
            else [c for c in (column["text_columns"] or "").split(",") if c]
        )
        keys = (
            list(args.key_columns) if args.key_columns is not None else [c for c in (column["key_columns"] or "").split(",") if c]
        )
        if not keys:
            raise InvalidArgument(f"{schema}.{args.table} has no primary key: pass key_columns")
        if not texts:
            raise InvalidArgument(f"{schema}.{args.table} has no text column: pass text_columns")
        query = self._query_vector(args, call, ctx, dim, {**column, "target_id": target.target_id})
        op, metric, index = search.metric_of(column["indexes"], args.metric)
        if index is None:
            warnings.append(f"no ANN index of metric {metric} on {column['column_name']!r}: the database scans the table exactly")
        limit = call.clamp(args.k, target.max_rows)
        sql = search.nearest_sql(
            schema,
            args.table,
            column["column_name"],
            column["type"],
            keys,
            texts,
            op,
            marker("q"),
            limit,
            column["vector_schema"],
        )
        out = self._sql().run(
            ctx,
            Statement(
                sql=sql,
                target_id=target.target_id,
                tool_name="rag.similarity_search",
                params={"q": search.vector_literal(query)},
                cache="bypass",
            ),
        )
        call.truncated |= bool(out.get("truncated")) and out.get("truncated_reason") != "max_rows"
        if index is not None and len(out["rows"]) < limit:
            warnings.append(
                f"the index scan returned {len(out['rows'])} of the {limit} rows asked for: one ANN index scan stops at the"
                " database's search width (pgvector: hnsw.ef_search, 40 by default; an admin can raise it, e.g. ALTER DATABASE"
                " ... SET hnsw.ef_search = 200, or enable hnsw.iterative_scan), or the table has fewer rows"
            )
        call.check_deadline()
        rows, chunks = [], []
        spec = ChunkingSpec(
            unit="chars", chunk_size=args.chunk_chars, overlap=args.chunk_chars // 10, min_chunk_size=args.chunk_chars // 5
        )
        for position, row in enumerate(out["rows"]):
            key = dict(zip(keys, row[: len(keys)], strict=True))
            distance = float(row[-1])
            similarity = _similarity(metric, distance)
            rows.append({"key": key, "distance": distance, "score_vec": similarity})
            text = "\n".join(str(v) for v in row[len(keys) : len(keys) + len(texts)] if v not in (None, ""))
            for i, piece in enumerate(chunk_text(text, spec)):
                chunks.append(rerank.Chunk(row=position, chunk_index=i, text=piece, vec=similarity))
        rerank.bm25(args.query_text or "", chunks)
        rerank.blend(chunks, bm25_weight=args.bm25_weight if args.query_text else 0.0)
        picked = rerank.mmr(chunks, lam=args.lambda_, per_row=args.max_chunks_per_row, limit=args.max_chunks)
        call.truncated |= len(picked) < len(chunks) and len(picked) == args.max_chunks
        budgeted, cut = rerank.within_tokens(picked, args.max_output_tokens)
        by_key = {(c.row, c.chunk_index): c for c in picked}
        result_chunks = []
        room = call.caps.response_max_bytes - ENVELOPE_BYTES - json_size(rows) - json_size(warnings)
        for item in budgeted:
            chunk = by_key[(item["row"], item["chunk_index"])]
            entry = {
                "key": rows[item["row"]]["key"],
                "chunk_index": item["chunk_index"],
                "text": item["text"],
                "text_truncated": item.get("text_truncated", False),
                "score": round(chunk.score, 6),
                "score_vec": round(chunk.vec, 6),
                "score_bm25": round(chunk.bm25, 6),
            }
            room -= json_size(entry) + 1
            if room < 0:
                cut = True
                break
            result_chunks.append(entry)
        return SimilaritySearchOut(
            target_id=target.target_id,
            table=f"{schema}.{args.table}",
            vector_column=column["column_name"],
            text_columns=texts,
            key_columns=keys,
            metric=metric,
            index=index,
            rows=rows,
            chunks=result_chunks,
            truncated=call.truncated or cut,
            warnings=warnings,
            stats=Stats(k_requested=args.k, k_returned=len(rows), ms=call.ms(), mode="similarity"),
        )

    def _column_embedder(self, ctx: CallContext, column: dict[str, Any]) -> Embedder | None:
        """The embedder of the model the admin declared for this column (rag-vector_column_models),
        or None when none is declared."""
        raw = str(ctx.runtime.var("rag-vector_column_models") or "").strip()
        if not raw:
            return None
        try:
            declared = json.loads(raw)
        except ValueError:
            raise InvalidArgument("rag-vector_column_models is not a JSON object; fix the variable") from None
        if not isinstance(declared, dict):
            raise InvalidArgument("rag-vector_column_models is not a JSON object; fix the variable")
        target_id = column.get("target_id")
        spec = declared.get(f"{target_id}.{column['table_schema']}.{column['table_name']}.{column['column_name']}")
        if spec is None:
            return None
        if isinstance(spec, str):
            spec = {"model": spec}
        if not isinstance(spec, dict) or set(spec) - {"provider", "model", "dim", "api_base"}:
            raise InvalidArgument("rag-vector_column_models: a column's model is a name or {provider, model, dim, api_base}")
        config = {**index_embedding_config(ctx.runtime), **spec}
        key = json.dumps(config, sort_keys=True, default=str)
        embedder = self._column_embedders.get(key)
        if embedder is None:
            try:
                embedder = make_embedder(config)
            except ConfigError as exc:
                raise InvalidArgument(f"rag-vector_column_models: {exc}") from None
            if len(self._column_embedders) >= 16:
                self._column_embedders.clear()
            self._column_embedders[key] = embedder
        return embedder

    def _query_vector(
        self, args: SimilaritySearchIn, call: Call, ctx: CallContext, dim: int | None, column: dict[str, Any]
    ) -> np.ndarray:
        name = f"{column['table_name']}.{column['column_name']}"
        if args.query_embedding is not None:
            given = args.query_embedding
            if dim is not None and given.dim != dim:
                raise InvalidArgument(f"query_embedding has dim {given.dim}; {name} holds vectors of dim {dim}")
            try:
                raw = base64.b64decode(given.values_b64, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise InvalidArgument("query_embedding.values_b64 is not valid base64") from exc
            if len(raw) != 4 * given.dim:
                raise InvalidArgument(f"query_embedding.values_b64 holds {len(raw)} bytes; dim {given.dim} needs {4 * given.dim}")
            vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            if not np.all(np.isfinite(vector)):
                raise InvalidArgument("query_embedding has NaN or infinite values")
            return vector
        embedder = self._column_embedder(ctx, column) or self._embedder()
        if dim is not None and dim != embedder.dim:
            raise InvalidArgument(
                f"{name} holds vectors of dim {dim}; the embedding model {embedder.model_id!r} makes dim {embedder.dim}: "
                "its vectors cannot be compared with this column's. Declare the column's model in rag-vector_column_models, "
                "or pass query_embedding made with it."
            )
        call.check_query(args.query_text or "", name="query_text")
        return embedder.embed([args.query_text or ""])[0]
