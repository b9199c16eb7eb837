"""The shared filter model as one SQL condition over rag_chunks (alias `c`), with bound parameters.

Every search mode uses the same `FilterSQL`: FTS joins it into its MATCH query, vector search
turns it into the allowed rowid set the ANN index searches within, fts_then_vec applies it to
the FTS candidates. One translation means one behaviour. User values are only ever bound
parameters; the SQL text is built from fixed fragments.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import apsw

from backends.retrieval.metadata import normalise_timestamp


class Filters(Protocol):
    """The filters of a search, as the tools' input model (handlers/rag/models.py Filters) carries
    them: None leaves a field out; lists within a field are OR."""

    @property
    def source_ids(self) -> Sequence[int] | None: ...
    @property
    def source_names(self) -> Sequence[str] | None: ...
    @property
    def doc_ids(self) -> Sequence[str] | None: ...
    @property
    def min_score(self) -> float | None: ...
    @property
    def post_type_ids(self) -> Sequence[int] | None: ...
    @property
    def tags_any(self) -> Sequence[str] | None: ...
    @property
    def tags_all(self) -> Sequence[str] | None: ...
    @property
    def created_after(self) -> datetime | None: ...
    @property
    def created_before(self) -> datetime | None: ...


class MetadataClause(Protocol):
    """One condition on a metadata key (handlers/rag/models.py MetadataFilter): every field given
    must hold; a list-valued key holds when one of its elements does."""

    key: str
    eq: str | float | bool | None
    in_: Sequence[str | float | bool] | None
    gt: float | datetime | None
    gte: float | datetime | None
    lt: float | datetime | None
    lte: float | datetime | None
    exists: bool | None


@dataclass(frozen=True)
class FilterSQL:
    where: str  # "TRUE" when nothing narrows the search (TRUE/FALSE: the same in SQLite and PostgreSQL)
    params: tuple[Any, ...] = ()
    narrows: bool = False  # False: every chunk of every enabled source passes


def _marks(values: list[Any]) -> str:
    return ",".join("?" * len(values))


def build_filter(filters: Filters, *, all_sources_enabled: bool, dialect: str = "json1") -> FilterSQL:
    """Translate `filters` into a WHERE fragment over `c` (rag_chunks); `dialect` ("json1": rag.db, or
    "jsonb": the PostgreSQL index) picks the JSON functions of the generic metadata clauses."""
    clauses: list[str] = []
    params: list[Any] = []
    user_narrows = False

    def add(clause: str, values: list[Any]) -> None:
        clauses.append(clause)
        params.extend(values)

    if filters.source_ids is not None:
        add(f"c.source_id IN ({_marks(filters.source_ids)})" if filters.source_ids else "FALSE", list(filters.source_ids))
        user_narrows = True
    if filters.source_names is not None:
        # A separate condition from source_ids: both given means the intersection.
        names = list(filters.source_names)
        add(f"c.source_id IN (SELECT source_id FROM rag_sources WHERE name IN ({_marks(names)}))" if names else "FALSE", names)
        user_narrows = True
    if not all_sources_enabled:
        add("c.source_id IN (SELECT source_id FROM rag_sources WHERE enabled = 1)", [])
    if filters.doc_ids is not None:
        add(f"c.doc_id IN ({_marks(filters.doc_ids)})" if filters.doc_ids else "FALSE", list(filters.doc_ids))
        user_narrows = True
    if filters.min_score is not None:
        add("c.doc_score >= ?", [filters.min_score])
        user_narrows = True
    if filters.post_type_ids is not None:
        ids = list(filters.post_type_ids)
        add(f"c.post_type_id IN ({_marks(ids)})" if ids else "FALSE", ids)
        user_narrows = True
    if filters.tags_any is not None:  # "any of no tags" admits nothing, like an empty id list
        tags = sorted({t.strip().lower() for t in filters.tags_any})
        add(f"c.doc_id IN (SELECT doc_id FROM rag_doc_tags WHERE tag IN ({_marks(tags)}))" if tags else "FALSE", tags)
        user_narrows = True
    if filters.tags_all:  # "all of no tags" holds for every document: no condition
        tags = sorted({t.strip().lower() for t in filters.tags_all})
        add(
            f"c.doc_id IN (SELECT doc_id FROM rag_doc_tags WHERE tag IN ({_marks(tags)}) GROUP BY doc_id HAVING count(*) = ?)",
            [*tags, len(tags)],
        )
        user_narrows = True
    if filters.created_after is not None:
        add("c.created_at > ?", [normalise_timestamp(filters.created_after)])
        user_narrows = True
    if filters.created_before is not None:
        add("c.created_at < ?", [normalise_timestamp(filters.created_before)])
        user_narrows = True
    for clause in getattr(filters, "metadata", None) or ():
        sql, values = metadata_condition(clause, dialect)
        add(sql, values)
        user_narrows = True
    if not clauses:
        return FilterSQL(where="TRUE")
    return FilterSQL(where=" AND ".join(clauses), params=tuple(params), narrows=user_narrows or not all_sources_enabled)


def all_sources_enabled(conn: apsw.Connection) -> bool:
    for (disabled,) in conn.execute("SELECT count(*) FROM rag_sources WHERE enabled = 0"):
        return disabled == 0
    return True


# -- generic metadata clauses ------------------------------------------------------------------
# The same meaning on both index backends, pushed into SQL: a clause holds for a chunk when its
# document's metadata value at `key` (or, for a list value, one of its elements) passes every
# test given. Strings compare with strings, numbers numerically with numbers, booleans with
# booleans (no coercion: "5" is not 5); date bounds compare text values read as timestamps
# (ISO 8601, naive = UTC). User values and keys are only ever bound parameters.
_TZ_TAIL = r"\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)$"
_ISO = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"


def sqlite_path(key: str) -> str:
    return '$."' + key + '"'


def _jsonpath_key(key: str) -> str:
    return '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _is_date(value: Any) -> bool:
    return isinstance(value, datetime)


def metadata_condition(clause: MetadataClause, dialect: str) -> tuple[str, list[Any]]:
    """One clause as a condition over `c` (its document's metadata_json), with its parameters."""
    eq = [clause.eq] if clause.eq is not None else []
    values = [*eq, *(clause.in_ or [])] if (clause.eq is not None or clause.in_ is not None) else None
    bounds = [(op, getattr(clause, op)) for op in ("gt", "gte", "lt", "lte") if getattr(clause, op) is not None]
    numeric = [(op, v) for op, v in bounds if not _is_date(v)]
    dates = [(op, normalise_timestamp(v)) for op, v in bounds if _is_date(v)]
    symbol = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
    parts: list[str] = []
    params: list[Any] = []
    if dialect == "jsonb":
        doc = "d.metadata_json::jsonb"
        tests: list[str] = []
        variables: dict[str, Any] = {}
        if values is not None:
            if not values:
                return "FALSE", []
            alts = []
            for i, value in enumerate(values):
                variables[f"v{i}"] = value
                alts.append(f"@ == $v{i}")
            tests.append("(" + " || ".join(alts) + ")")
        for i, (op, value) in enumerate(numeric):
            variables[f"n{i}"] = value
            tests.append(f"@ {symbol[op]} $n{i}")
        if clause.exists is True or tests:
            path = _jsonpath_key(clause.key) + " ? (" + (" && ".join(tests) if tests else "@ != null") + ")"
            parts.append(f"jsonb_path_exists({doc}, ?::jsonpath, ?::jsonb, true)")
            params += [path, _json(variables)]
        if clause.exists is False:
            parts.append(f"NOT jsonb_path_exists({doc}, ?::jsonpath, '{{}}'::jsonb, true)")
            params.append(_jsonpath_key(clause.key) + " ? (@ != null)")
        if dates:
            stamp = "CASE WHEN e.v ~ ? THEN e.v::timestamptz ELSE e.v::timestamp AT TIME ZONE 'UTC' END"
            tests_sql = " AND ".join(f"{stamp} {symbol[op]} ?::timestamptz" for op, _ in dates)
            parts.append(
                f"EXISTS (SELECT 1 FROM jsonb_array_elements_text(CASE jsonb_typeof({doc} -> ?) WHEN 'array' THEN"
                f" {doc} -> ? WHEN 'string' THEN jsonb_build_array({doc} -> ?) ELSE '[]'::jsonb END) e(v)"
                f" WHERE e.v ~ ? AND {tests_sql})"
            )
            params += [clause.key, clause.key, clause.key, _ISO]
            for _, value in dates:
                params += [_TZ_TAIL, value]
        return _documents_where(parts), params
    each = "json_each(d.metadata_json, ?) j"
    path = sqlite_path(clause.key)
    if values is not None:
        if not values:
            return "FALSE", []
        alts = []
        texts = [v for v in values if isinstance(v, str)]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if texts:
            alts.append(f"(j.type = 'text' AND j.value IN ({_marks(texts)}))")
            params_texts: list[Any] = texts
        else:
            params_texts = []
        if numbers:
            alts.append(f"(j.type IN ('integer', 'real') AND j.value IN ({_marks(numbers)}))")
        kinds = sorted({"true" if v else "false" for v in values if isinstance(v, bool)})
        if kinds:
            alts.append(f"j.type IN ({', '.join(repr(k) for k in kinds)})")
        parts.append(f"EXISTS (SELECT 1 FROM {each} WHERE {' OR '.join(alts)})")
        params += [path, *params_texts, *numbers]
    if numeric:
        tests_sql = " AND ".join(f"j.value {symbol[op]} ?" for op, _ in numeric)
        parts.append(f"EXISTS (SELECT 1 FROM {each} WHERE j.type IN ('integer', 'real') AND {tests_sql})")
        params += [path, *(v for _, v in numeric)]
    if dates:
        stamp = "strftime('%Y-%m-%dT%H:%M:%SZ', j.value)"
        tests_sql = " AND ".join(f"{stamp} {symbol[op]} ?" for op, _ in dates)
        parts.append(f"EXISTS (SELECT 1 FROM {each} WHERE j.type = 'text' AND {stamp} IS NOT NULL AND {tests_sql})")
        params += [path, *(v for _, v in dates)]
    if clause.exists is not None:
        parts.append(("" if clause.exists else "NOT ") + f"EXISTS (SELECT 1 FROM {each} WHERE j.type != 'null')")
        params.append(path)
    return _documents_where(parts), params


def _documents_where(parts: list[str]) -> str:
    """The clause's tests are on the document's metadata (rag_documents), one semi-join per clause."""
    return "c.doc_id IN (SELECT d.doc_id FROM rag_documents d WHERE " + " AND ".join(parts or ["TRUE"]) + ")"


def _json(value: Any) -> str:
    return json.dumps(value)


def metadata_keys(doc_maps: Sequence[str]) -> set[str]:
    """The metadata keys the sources' doc_map_json pick (after rename)."""
    keys: set[str] = set()
    for raw in doc_maps:
        try:
            meta = (json.loads(raw or "{}") or {}).get("metadata") or {}
        except (ValueError, AttributeError):
            continue
        rename = meta.get("rename") or {}
        keys.update(str(rename.get(col, col)) for col in meta.get("pick") or ())
    return keys
