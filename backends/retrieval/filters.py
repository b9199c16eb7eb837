"""The shared filter model as one SQL condition over rag_chunks (alias `c`), with bound parameters.

Every search mode uses the same `FilterSQL`: FTS joins it into its MATCH query, vector search
turns it into the allowed rowid set the ANN index searches within, fts_then_vec applies it to
the FTS candidates. One translation means one behaviour. User values are only ever bound
parameters; the SQL text is built from fixed fragments.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class FilterSQL:
    where: str  # "TRUE" when nothing narrows the search (TRUE/FALSE: the same in SQLite and PostgreSQL)
    params: tuple[Any, ...] = ()
    narrows: bool = False  # False: every chunk of every enabled source passes


def _marks(values: list[Any]) -> str:
    return ",".join("?" * len(values))


def build_filter(filters: Filters, *, all_sources_enabled: bool) -> FilterSQL:
    """Translate `filters` into a WHERE fragment over `c` (rag_chunks)."""
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
    if not clauses:
        return FilterSQL(where="TRUE")
    return FilterSQL(where=" AND ".join(clauses), params=tuple(params), narrows=user_narrows or not all_sources_enabled)


def all_sources_enabled(conn: apsw.Connection) -> bool:
    for (disabled,) in conn.execute("SELECT count(*) FROM rag_sources WHERE enabled = 0"):
        return disabled == 0
    return True
