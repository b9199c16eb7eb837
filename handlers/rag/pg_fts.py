"""Keyword search on the PostgreSQL RAG index: the tsvector/GIN half of fts.py (pg_index.py holds
the rest of the PostgreSQL storage). The words of a fts.MatchQuery become a tsquery; ts_rank
ranks, ts_headline marks the snippets. Filters are FilterSQL conditions over `c`, as everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from handlers.rag.pg_ingest import pg_where

# -- keyword search: the tsvector half of fts.py --------------------------------------------------
# ts_rank weights {D, C, B, A}: the body is D, the title A; 2:1 as FTS5's bm25 column weights.
TS_WEIGHTS = "{0.5, 0.5, 0.5, 1.0}"
TS_NORMALISATION = 1  # rank / (1 + log(document length)): long chunks do not win by length alone


def tsquery_sql(match: Any) -> tuple[str, str]:
    """(SQL expression with one placeholder, its parameter) for a fts.MatchQuery.

    Text syntax: the quoted words, OR-ed (or AND-ed for MatchQuery.all_terms); each is \\w+
    only, so the to_tsquery text holds no operator but ours. FTS5 syntax has no PostgreSQL
    equivalent: it is read as web-search syntax ("quoted phrase", -word, or), never an error."""
    if match.user_syntax:
        return "websearch_to_tsquery('english', %s)", match.expression
    words = [term[1:-1].replace('""', '"') for term in match.terms]
    joiner = " & " if " AND " in match.expression else " | "
    return "to_tsquery('english', %s)", joiner.join(words)


def fts_ranked(
    conn: psycopg.Connection, match: Any, *, where: str = "TRUE", params: Sequence[Any] = (), limit: int, offset: int = 0
) -> list[tuple[int, float]]:
    """(chunk_rowid, raw) best first; raw is -ts_rank (lower is better, as bm25's sign)."""
    if limit <= 0:
        return []
    query, text = tsquery_sql(match)
    rows = conn.execute(
        f"SELECT c.chunk_rowid, ts_rank(%s, c.fts, q, {TS_NORMALISATION}) AS r FROM rag_chunks c, {query} q"
        f" WHERE c.fts @@ q AND ({pg_where(where)}) ORDER BY r DESC, c.chunk_rowid LIMIT %s OFFSET %s",
        (TS_WEIGHTS, text, *params, limit, offset),
    ).fetchall()
    return [(int(r), -float(s)) for r, s in rows]


def fts_raw_of(conn: psycopg.Connection, match: Any, rowids: Sequence[int]) -> dict[int, float]:
    if not rowids:
        return {}
    query, text = tsquery_sql(match)
    return {
        int(r): -float(s)
        for r, s in conn.execute(
            f"SELECT c.chunk_rowid, ts_rank(%s, c.fts, q, {TS_NORMALISATION}) FROM rag_chunks c, {query} q"
            " WHERE c.chunk_rowid = ANY(%s) AND c.fts @@ q",
            (TS_WEIGHTS, text, list(rowids)),
        )
    }


def fts_snippets(
    conn: psycopg.Connection, match: Any, rowids: Sequence[int], *, tokens: int, open_mark: str, close_mark: str
) -> dict[int, str]:
    """ts_headline of the body (the title when the body does not match), the matches marked."""
    if not rowids:
        return {}
    query, text = tsquery_sql(match)
    options = (
        f"StartSel={open_mark}, StopSel={close_mark}, MaxWords={max(2, tokens)}, MinWords={max(1, tokens // 2)}, ShortWord=0"
    )
    rows = conn.execute(
        f"SELECT c.chunk_rowid, CASE WHEN to_tsvector('english', c.body) @@ q THEN ts_headline('english', c.body, q, %s)"
        f" ELSE ts_headline('english', c.title, q, %s) END FROM rag_chunks c, {query} q WHERE c.chunk_rowid = ANY(%s) AND c.fts @@ q",
        (options, options, text, list(rowids)),
    ).fetchall()
    return {int(r): s for r, s in rows}


def hit_rows(conn: psycopg.Connection, rowids: Sequence[int]) -> dict[int, tuple[Any, ...]]:
    """{rowid: (rowid, chunk_id, doc_id, source_id, source_name, title, document metadata_json)}, as search.hits joins."""
    if not rowids:
        return {}
    rows = conn.execute(
        "SELECT c.chunk_rowid, c.chunk_id, c.doc_id, c.source_id, s.name, c.title, d.metadata_json"
        " FROM rag_chunks c JOIN rag_sources s ON s.source_id = c.source_id JOIN rag_documents d ON d.doc_id = c.doc_id"
        " WHERE c.chunk_rowid = ANY(%s)",
        (list(rowids),),
    ).fetchall()
    return {int(row[0]): tuple(row) for row in rows}
