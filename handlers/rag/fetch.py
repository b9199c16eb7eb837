"""`rag.fetch_from_source`: re-read the authoritative rows behind indexed documents.

doc_id -> rag_documents (source_id, pk_json) -> the runtime RAG SOURCES row (target_id, table,
primary key columns) -> one parameterised primary-key lookup per document on that target's
pooled, read-only connection. The caller names columns, never SQL: every column (and the
configured key columns) must exist in the table as the engine describes it, and only then is
it quoted for the dialect. Caps: limits.max_rows rows and limits.max_bytes of row JSON (also
bounded by rag-response_max_bytes); what a cap leaves out is listed with LIMIT_EXCEEDED and
`truncated` is set. A document that cannot be fetched gets its own error entry (NOT_FOUND,
UNAVAILABLE, ...) while the others are still served.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from backends.pools import TargetPools
from backends.retrieval.ingest.sources_config import SourceSpec
from backends.retrieval.protocols import SearchIndex
from backends.sql import identity_settings
from backends.targets import Target, default_schema
from backends.values import json_safe
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, LimitExceeded, NotFound, Unavailable
from gateway.tools import CallContext, ToolInput, ToolOutput, tool

log = logging.getLogger("mcp_gateway.rag.fetch")

ROW_ENVELOPE_BYTES = 64  # the {"doc_id":..,"source_name":..,"row":..} around each row, roughly


class FetchLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_rows: int = Field(10, ge=1, le=1000, description="Most rows returned.")
    max_bytes: int = Field(200_000, ge=256, le=64 * 1024 * 1024, description="Most bytes of row JSON returned.")


class FetchFromSourceIn(ToolInput):
    doc_ids: list[str] = Field(min_length=1, max_length=1000, description="doc_ids from rag.search_* or rag.get_docs.")
    columns: list[str] | None = Field(
        None, max_length=256, description="Columns to return; omitted: every column of the source table."
    )
    limits: FetchLimits = Field(default_factory=FetchLimits)


class FetchedRow(BaseModel):
    doc_id: str
    source_name: str
    row: dict[str, Any]


class FetchError(BaseModel):
    doc_id: str
    code: str
    message: str


class FetchStats(BaseModel):
    ms: int
    rows: int


class FetchFromSourceOut(ToolOutput):
    rows: list[FetchedRow]
    errors: list[FetchError] = Field(
        description="Documents not returned, each with a code: NOT_FOUND, UNAVAILABLE, LIMIT_EXCEEDED, ..."
    )
    truncated: bool
    stats: FetchStats


def pick_columns(available: list[str], wanted: list[str]) -> tuple[list[str], list[str]]:
    """(real column names for `wanted`, names that match no column). Exact match first,
    then a unique case-insensitive one (MySQL column names are case-insensitive)."""
    by_lower: dict[str, list[str]] = {}
    for name in available:
        by_lower.setdefault(name.lower(), []).append(name)
    chosen, unknown = [], []
    for name in wanted:
        if name in available:
            chosen.append(name)
        elif len(by_lower.get(name.lower(), [])) == 1:
            chosen.append(by_lower[name.lower()][0])
        else:
            unknown.append(name)
    return list(dict.fromkeys(chosen)), unknown


def fit_row(row: dict[str, Any], budget: int) -> tuple[dict[str, Any], bool]:
    """Shorten the longest string values until the row's JSON fits `budget` bytes."""
    size = len(orjson.dumps(row))
    if size <= budget:
        return row, False
    row = dict(row)
    while size > budget:
        strings = [(len(v.encode()), k) for k, v in row.items() if isinstance(v, str) and v]
        if not strings:
            return row, True  # nothing left to shorten; the caller drops the row
        length, key = max(strings)
        keep = max(0, length - (size - budget) - 8)
        row[key] = row[key].encode()[:keep].decode(errors="ignore")
        size = len(orjson.dumps(row))
    return row, True


class _SourceTable:
    """A source's table resolved on its target: schema, table, whitelisted columns, the SQL."""

    def __init__(self, spec: SourceSpec, target: Target, catalog: Any, wanted: list[str] | None) -> None:
        schema_part, _, table = spec.table.rpartition(".")
        self.schema = default_schema(target, schema_part or None)
        self.table = table
        available = [c["name"] for c in catalog.columns(self.schema, table)]
        if not available:
            raise NotFound(f"source {spec.name}: table {spec.table} not found on target {target.target_id}")
        keys, missing_keys = pick_columns(available, list(spec.pk_columns))
        if missing_keys:
            raise Unavailable(f"source {spec.name}: key column(s) {', '.join(missing_keys)} not in {spec.table}")
        columns, unknown = pick_columns(available, wanted) if wanted else (available, [])
        if unknown:
            raise InvalidArgument(f"column(s) {', '.join(unknown)} not in the table of source {spec.name}")
        quote, p = target.engine.quote, target.engine.placeholder  # whitelisted names only
        where = " AND ".join(f"{quote(k)} = {p}" for k in keys)
        self.keys = keys
        self.sql = f"SELECT {', '.join(quote(c) for c in columns)} FROM {quote(self.schema)}.{quote(table)} WHERE {where} LIMIT 1"


class FetchTools:
    def __init__(self, index: Callable[[], SearchIndex], pools: TargetPools | None) -> None:
        self._index = index  # the open index (UNAVAILABLE while it is not): doc_id -> source row key
        self._pools = pools  # the database targets' pools (services.targets), where the rows are read

    @tool("rag.fetch_from_source", title="Fetch source rows", read_only=True)
    def fetch_from_source(self, args: FetchFromSourceIn, ctx: CallContext) -> FetchFromSourceOut:
        """Re-read the current rows behind indexed documents from their source database, by
        primary key (no SQL accepted). Use it when you need authoritative or extra columns
        the index does not hold. Name columns to keep the answer small; limits cap rows and
        bytes (truncated=true says something was left out). Each document that cannot be
        fetched is listed in `errors` with a code."""
        started = time.monotonic()
        index, pools = self._index(), self._pools
        if pools is None:
            raise Unavailable("database targets are not initialised")
        doc_ids = list(dict.fromkeys(args.doc_ids))
        docs = self._documents(index, doc_ids)
        specs = self._sources(ctx)
        response_cap = ctx.runtime.variables.get("rag-response_max_bytes")
        budget = min(args.limits.max_bytes, response_cap) if response_cap else args.limits.max_bytes
        rows: list[FetchedRow] = []
        errors: list[FetchError] = []
        truncated = False
        tables: dict[int, _SourceTable | GatewayError] = {}
        for position, doc_id in enumerate(doc_ids):
            ctx.check_deadline()
            if len(rows) >= args.limits.max_rows or budget <= ROW_ENVELOPE_BYTES:
                truncated = True
                errors += [
                    FetchError(doc_id=d, code=LimitExceeded.code, message="not fetched: limits.max_rows or max_bytes reached")
                    for d in doc_ids[position:]
                ]
                break
            doc = docs.get(doc_id)
            try:
                if doc is None:
                    raise NotFound("doc_id is not in the index")
                spec = specs.get(doc["source_id"])
                if spec is None:
                    raise NotFound(f"source {doc['source_name']} is no longer configured (runtime_rag_sources)")
                row = self._fetch_one(pools, spec, doc, args.columns, tables, identity_settings(ctx))
            except GatewayError as exc:
                errors.append(FetchError(doc_id=doc_id, code=exc.code, message=exc.message))
                continue
            if row is None:
                errors.append(FetchError(doc_id=doc_id, code=NotFound.code, message="the source row no longer exists"))
                continue
            row, cut = fit_row(row, budget - ROW_ENVELOPE_BYTES)
            size = len(orjson.dumps(row)) + ROW_ENVELOPE_BYTES
            if size > budget:  # could not shrink enough (no text to cut)
                truncated = True
                errors.append(FetchError(doc_id=doc_id, code=LimitExceeded.code, message="the row does not fit limits.max_bytes"))
                continue
            truncated = truncated or cut
            budget -= size
            rows.append(FetchedRow(doc_id=doc_id, source_name=doc["source_name"], row=row))
        stats = FetchStats(ms=int((time.monotonic() - started) * 1000), rows=len(rows))
        return FetchFromSourceOut(rows=rows, errors=errors, truncated=truncated, stats=stats)

    @staticmethod
    def _documents(index: Any, doc_ids: list[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            sql = (
                f"SELECT doc_id, source_id, source_name, pk_json FROM rag_documents WHERE doc_id IN ({','.join('?' * len(part))})"
            )
            for doc_id, source_id, source_name, pk_json in index.fetch_all(sql, part):
                found[doc_id] = {"source_id": source_id, "source_name": source_name, "pk": json.loads(pk_json)}
        return found

    @staticmethod
    def _sources(ctx: CallContext) -> dict[int, SourceSpec]:
        specs = {}
        for row in ctx.runtime.table("runtime_rag_sources"):
            try:
                spec = SourceSpec.from_row(row)
            except GatewayError:  # validated at LOAD; a row that no longer parses serves nothing
                continue
            specs[spec.source_id] = spec
        return specs

    @staticmethod
    def _fetch_one(
        pools: TargetPools,
        spec: SourceSpec,
        doc: dict[str, Any],
        columns: list[str] | None,
        tables: dict[int, Any],
        identity: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        try:
            target = pools.resolve(spec.target_id)
        except NotFound as exc:
            raise Unavailable(f"source {spec.name}: {exc.message}") from None
        cached = tables.get(spec.source_id)
        if isinstance(cached, GatewayError):
            raise cached  # the same failure for every document of this source
        try:
            return FetchTools._read_row(pools, target, spec, doc, columns, tables, identity)
        except Unavailable as exc:
            tables[spec.source_id] = exc  # do not wait for an unreachable target once per document
            raise

    @staticmethod
    def _read_row(
        pools: TargetPools,
        target: Target,
        spec: SourceSpec,
        doc: dict[str, Any],
        columns: list[str] | None,
        tables: dict[int, Any],
        identity: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        cached = tables.get(spec.source_id)
        with pools.connection(target.target_id) as (target, conn):
            try:
                if cached is None:
                    try:
                        cached = _SourceTable(spec, target, target.engine.catalog(conn), columns)
                    except GatewayError as exc:
                        tables[spec.source_id] = exc
                        raise
                    tables[spec.source_id] = cached
                missing = [k for k in spec.pk_columns if k not in doc["pk"]]
                if missing:
                    raise NotFound(f"the index entry lacks key column(s) {', '.join(missing)}")
                params = tuple(doc["pk"][k] for k in spec.pk_columns)
                engine = target.engine
                # the caller's identity (mcp-oauth_db_settings), for row-level security, as in backends/sql.py
                with engine.settings_scope(conn, identity) if identity and engine.local_settings else contextlib.nullcontext():
                    cursor = conn.cursor()
                    try:
                        cursor.execute(cached.sql, params)
                        names = [d[0] for d in cursor.description]
                        found = cursor.fetchone()
                    finally:
                        cursor.close()
            except GatewayError:
                raise
            except target.engine.errors as exc:
                if target.engine.broken(conn):
                    raise  # the pool answers UNAVAILABLE
                if isinstance(target.engine.translate(exc), DeadlineExceeded):
                    raise DeadlineExceeded(f"source {spec.name}: the lookup exceeded the target's timeout_ms") from exc
                log.warning("fetch from source %s failed: %s", spec.name, type(exc).__name__)
                raise GatewayError(f"source {spec.name}: the lookup failed ({type(exc).__name__})") from exc
        if found is None:
            return None
        return {name: json_safe(value) for name, value in zip(names, found)}
