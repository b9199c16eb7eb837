"""The `RAG SOURCES` config module: the rag_sources admin table, validated at LOAD.

Admins edit `rag_sources` like the other admin tables, then `LOAD RAG SOURCES TO RUNTIME`
(which validates every row and refuses the whole LOAD if one is malformed) and `SAVE RAG
SOURCES TO DISK`. A sync reads `runtime_rag_sources` through `SourceSpec.from_row`.

A source names no host and no password: `target_id` is an MCP PROFILES target, resolved when
the sync starts, whose auth profile carries the credentials.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from backends.retrieval.ingest.chunking import ChunkingSpec
from backends.retrieval.ingest.docmap import IDENTIFIER, DocMap
from gateway.errors import ConfigError
from gateway.store import ConfigModule
from gateway.variables import Variable

DEFAULT_INPUT_TEMPLATE = "{title}\n\n{body}"
_EMBEDDING_KEYS = {
    "provider",
    "model",
    "dim",
    "batch_size",
    "timeout_ms",
    "api_base",
    "api_key",
    "max_retries",
    "backoff_ms",
    "intra_op_threads",
    "input",
}


@dataclass(frozen=True)
class SourceSpec:
    """One runtime rag_sources row, parsed and checked."""

    source_id: int
    name: str
    enabled: bool
    target_id: str
    table: str
    pk_columns: tuple[str, ...]
    watermark_column: str
    where_sql: str
    doc_map: DocMap
    chunking: ChunkingSpec
    embedding: dict[str, Any] = field(default_factory=dict)  # provider settings for make_embedder
    input_template: str = DEFAULT_INPUT_TEMPLATE
    sync_interval_s: int = 0
    key_scan_interval_s: int = 0
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def select_columns(self) -> tuple[str, ...]:
        """Keys first, then the watermark, then whatever the document map reads."""
        ordered = list(self.pk_columns)
        for col in ([self.watermark_column] if self.watermark_column else []) + sorted(self.doc_map.columns):
            if col not in ordered:
                ordered.append(col)
        return tuple(ordered)

    def key_columns(self) -> tuple[str, ...]:
        """What the deletion scan reads: enough to compute every doc_id."""
        return tuple(dict.fromkeys([*self.pk_columns, *sorted(self.doc_map.doc_id_columns)]))

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SourceSpec:
        name = str(row.get("name") or "")
        where = f"rag_sources {name!r}"
        if not name or len(name) > 64 or not all(ch.isalnum() or ch in "_-." for ch in name):
            raise ConfigError(f"rag_sources: name must be 1-64 letters, digits or _ - . (got {name!r})")
        table = str(row.get("table_name") or "")
        if not table or not all(IDENTIFIER.match(part) for part in table.split(".")) or table.count(".") > 1:
            raise ConfigError(f"{where}: table_name must be a table or schema.table name, got {table!r}")
        pk_columns = tuple(part.strip() for part in str(row.get("pk_column") or "").split(",") if part.strip())
        if not pk_columns or not all(IDENTIFIER.match(c) for c in pk_columns):
            raise ConfigError(f"{where}: pk_column must name the primary key column(s), comma separated")
        watermark = str(row.get("watermark_column") or "").strip()
        if watermark and not IDENTIFIER.match(watermark):
            raise ConfigError(f"{where}: watermark_column {watermark!r} is not a column name")
        where_sql = str(row.get("where_sql") or "").strip()
        if ";" in where_sql:
            raise ConfigError(f"{where}: where_sql is a condition, not statements (no ';')")
        if not str(row.get("target_id") or "").strip():
            raise ConfigError(f"{where}: target_id is required (the MCP PROFILES target that reaches the source)")
        try:
            doc_map = DocMap.from_json(_json(row, "doc_map_json", where), table=table, pk_columns=pk_columns)
            chunking = ChunkingSpec.from_json(_json(row, "chunking_json", where))
        except ConfigError as exc:
            raise ConfigError(exc.message if exc.message.startswith(where) else f"{where}: {exc.message}") from None
        embedding = _json(row, "embedding_json", where)
        unknown = set(embedding) - _EMBEDDING_KEYS
        if unknown:
            raise ConfigError(f"{where}: embedding_json has unknown key(s) {', '.join(sorted(unknown))}")
        template = embedding.pop("input", DEFAULT_INPUT_TEMPLATE)
        if not isinstance(template, str) or not ("{body}" in template or "{title}" in template):
            raise ConfigError(f"{where}: embedding_json.input must be a template using {{title}} and/or {{body}}")
        try:
            template.format(title="", body="")
        except (KeyError, IndexError, ValueError):
            raise ConfigError(f"{where}: embedding_json.input may use only {{title}} and {{body}}") from None
        intervals = {}
        for column in ("sync_interval_s", "key_scan_interval_s", "source_id"):
            value = row.get(column) or 0
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{where}: {column} must be a non-negative integer")
            intervals[column] = value
        if not intervals["source_id"]:
            raise ConfigError(f"{where}: source_id must be a positive integer")
        return cls(
            source_id=intervals["source_id"],
            name=name,
            enabled=bool(row.get("enabled", 1)),
            target_id=str(row["target_id"]).strip(),
            table=table,
            pk_columns=pk_columns,
            watermark_column=watermark,
            where_sql=where_sql,
            doc_map=doc_map,
            chunking=chunking,
            embedding=embedding,
            input_template=template,
            sync_interval_s=intervals["sync_interval_s"],
            key_scan_interval_s=intervals["key_scan_interval_s"],
            raw=dict(row),
        )


def _json(row: Mapping[str, Any], column: str, where: str) -> dict[str, Any]:
    text = row.get(column) or "{}"
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {column} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {column} must be a JSON object")
    return value


def build_rag_sources(
    memory: Mapping[str, list[dict[str, Any]]], _variables: Mapping[str, Variable]
) -> dict[str, list[dict[str, Any]]]:
    """ConfigModule.build: every row must parse, or the LOAD changes nothing."""
    errors = []
    for row in memory["rag_sources"]:
        try:
            SourceSpec.from_row(row)
        except ConfigError as exc:
            errors.append(exc.message)
    if errors:
        raise ConfigError("; ".join(errors), details=errors)
    return {"runtime_rag_sources": [dict(row) for row in memory["rag_sources"]]}


RAG_SOURCES_MODULE = ConfigModule("RAG SOURCES", ("rag_sources",), build_rag_sources)


def runtime_sources(rows: Any) -> dict[str, SourceSpec]:
    """Runtime rows -> specs by name (rows already validated at LOAD)."""
    return {spec.name: spec for spec in (SourceSpec.from_row(row) for row in rows)}
