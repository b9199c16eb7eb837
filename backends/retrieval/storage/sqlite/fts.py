"""Keyword search over rag_fts_chunks: turning user text into a safe MATCH, ranking, snippets.

With syntax "text" (the default) the user's words are each quoted as an FTS5 string and joined
with OR, so no input can be an FTS5 syntax error or reach an FTS5 operator; bm25 ranks chunks
that match more (and rarer) words higher. Common English function words are dropped (unless the
query has nothing else) because they match most chunks: they cost time at scale and add noise.
With syntax "fts5" the text is an FTS5 query as written, and a parse error is INVALID_ARGUMENT.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import apsw

from backends.retrieval.filters import FilterSQL
from backends.retrieval.storage.sqlite.ann_filter import FIRST_CHECK, admits_many, batch_check
from gateway.errors import InvalidArgument

# bm25 column weights (chunk_id, title, body). A title match says more about what a chunk is
# about than one in a long body; the value is tuned on Cranfield (bench/retrieval_eval.py).
TITLE_WEIGHT = 2.0
BODY_WEIGHT = 1.0
MAX_TERMS = 64  # OR-ing more terms than this costs time and adds nothing to the ranking
SNIPPET_MAX_CHARS = 600  # a "token" can be a long run without separators: bound the text too
MARK_OPEN, MARK_CLOSE, ELLIPSIS = "<mark>", "</mark>", "…"

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "if",
        "in",
        "into",
        "is",
        "it",
        "no",
        "not",
        "of",
        "on",
        "or",
        "such",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "will",
        "with",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "when",
        "where",
        "why",
        "do",
        "does",
        "did",
        "can",
        "could",
        "should",
        "would",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "his",
        "her",
        "its",
        "has",
        "have",
        "had",
        "been",
        "being",
        "from",
        "so",
        "than",
        "too",
        "very",
        "about",
    ]
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class MatchQuery:
    expression: str
    user_syntax: bool  # True: a parse error is the caller's, not ours
    terms_dropped: bool = False
    terms: tuple[str, ...] = ()  # the quoted terms (text syntax only)
    window: int = 0  # all_terms(window > 0): the terms within this many tokens (FTS5 NEAR)

    def all_terms(self, window: int = 0) -> MatchQuery | None:
        """The conjunctive form (every term must match), or None when it would add nothing.
        With `window`, every term must occur within `window` tokens of the others: FTS5's
        NEAR group. A short keyword query ("augmented assignment", a section title) names one
        thing, and the chunk that names it holds its words together, not scattered through a
        long body (bench/README.md, retrieval quality)."""
        if self.user_syntax or len(self.terms) < 2:
            return None
        if window > 0:
            return MatchQuery(f"NEAR({' '.join(self.terms)}, {window})", user_syntax=False, terms=self.terms, window=window)
        return MatchQuery(" AND ".join(self.terms), user_syntax=False, terms=self.terms)


def build_match(text: str, *, syntax: str = "text") -> MatchQuery | None:
    """The MATCH expression for `text`, or None when it holds no searchable word."""
    if syntax == "fts5":
        return MatchQuery(text, user_syntax=True)
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    content = [w for w in words if w not in STOPWORDS] or words
    if not content:
        return None
    dropped = len(content) > MAX_TERMS
    terms = ['"' + w.replace('"', '""') + '"' for w in content[:MAX_TERMS]]
    return MatchQuery(" OR ".join(terms), user_syntax=False, terms_dropped=dropped, terms=tuple(terms))


def _execute(conn: apsw.Connection, match: MatchQuery, sql: str, params: tuple) -> apsw.Cursor:
    """The statement started (apsw runs its first step here, where FTS5 parses the MATCH)."""
    try:
        return conn.execute(sql, params)
    except apsw.SQLError as exc:
        if match.user_syntax:
            raise InvalidArgument("the query is not valid FTS5 syntax (see the SQLite FTS5 query syntax)") from exc
        raise


def _run(conn: apsw.Connection, match: MatchQuery, sql: str, params: tuple) -> list[tuple]:
    return list(_execute(conn, match, sql, params))


def ranked(
    conn: apsw.Connection,
    match: MatchQuery,
    flt: FilterSQL,
    *,
    limit: int,
    offset: int = 0,
    narrowing: dict[str, Any] | None = None,
) -> list[tuple[int, float]]:
    """(chunk_rowid, bm25) best first (bm25 is negative; lower is better), filters applied in SQL.

    `narrowing` is the filter's `ann_filter.sql_filter` form when the caller has it already
    (a hybrid search computes it once for both halves); a batch check means a broad filter."""
    if limit <= 0:
        return []
    if flt.narrows:
        if narrowing is not None:
            allowed_many = narrowing.get("allowed_many")
        else:
            allowed_many = batch_check(conn, flt.where, flt.params) if admits_many(conn, flt.where, flt.params) else None
        if allowed_many is not None:
            found = _ranked_checking(conn, match, allowed_many, need=limit + offset)
            if found is not None:
                return found[offset:]
    # With no filter, skip the join: FTS rows and chunks match one to one, and looking up every
    # matching chunk before the sort cost 2-3x at 1M chunks (p95 60 -> 20-30 ms, bench/README.md).
    join = "" if flt.where == "TRUE" else " JOIN rag_chunks c ON c.chunk_rowid = f.rowid"
    sql = (
        f"SELECT f.rowid, bm25(rag_fts_chunks, 0.0, ?, ?) AS r FROM rag_fts_chunks f{join}"
        f" WHERE rag_fts_chunks MATCH ? AND {flt.where} ORDER BY r, f.rowid LIMIT ? OFFSET ?"
    )
    return [
        (r, float(s))
        for r, s in _run(conn, match, sql, (TITLE_WEIGHT, BODY_WEIGHT, match.expression, *flt.params, limit, offset))
    ]


# The best matches a broad filter is checked against, at most: need x CHECK_FACTOR, at least
# CHECK_MIN. A filter passing fewer of them than needed goes back to the join; the bound keeps
# SQLite's sort of the matches a bounded one when a word matches most of the index.
CHECK_FACTOR = 50
CHECK_MIN = 5_000


def _ranked_checking(
    conn: apsw.Connection, match: MatchQuery, allowed_many: Callable[[list[int]], Collection[int]], *, need: int
) -> list[tuple[int, float]] | None:
    """A broad filter (thousands of chunks or more): rank the matches as if unfiltered, then
    check the best ones against the filter in growing batches until `need` pass. Joining each
    match to rag_chunks first cost more than the ranking itself (bench/README.md: a 5 % source
    filter took 2.5x the unfiltered search at 1M chunks). None: too few of the best passed."""
    cap = max(CHECK_FACTOR * need, CHECK_MIN)
    sql = (
        "SELECT rowid, bm25(rag_fts_chunks, 0.0, ?, ?) AS r FROM rag_fts_chunks"
        " WHERE rag_fts_chunks MATCH ? ORDER BY r, rowid LIMIT ?"
    )
    cursor = _execute(conn, match, sql, (TITLE_WEIGHT, BODY_WEIGHT, match.expression, cap))  # read lazily
    found: list[tuple[int, float]] = []
    seen, step = 0, max(FIRST_CHECK, 2 * need)
    while len(found) < need and (batch := list(itertools.islice(cursor, step))):
        seen += len(batch)
        passed = allowed_many([rowid for rowid, _ in batch])
        found += [(rowid, float(score)) for rowid, score in batch if rowid in passed]
        step *= 2
    if len(found) < need and seen >= cap:
        return None  # more matches exist beyond the cap: the join ranks them all
    return found[:need]


def bm25_of(conn: apsw.Connection, match: MatchQuery, rowids: list[int]) -> dict[int, float]:
    """bm25 of specific chunks (those a vector search found) for the same query."""
    if not rowids:
        return {}
    sql = (
        "SELECT rowid, bm25(rag_fts_chunks, 0.0, ?, ?) FROM rag_fts_chunks"
        f" WHERE rag_fts_chunks MATCH ? AND rowid IN ({','.join('?' * len(rowids))})"
    )
    return {r: float(s) for r, s in _run(conn, match, sql, (TITLE_WEIGHT, BODY_WEIGHT, match.expression, *rowids))}


def rare_term_idf(conn: apsw.Connection, match: MatchQuery | None, total: int, threshold: float) -> float:
    """bm25's idf of the query's rarest word, when some word is rarer than `threshold` (else 0).

    A word counts when it is in at most the number of chunks whose idf is `threshold`; each
    word's count stops one past that, so a frequent word costs a bounded read of its doclist
    (~0.7 % of the chunks at idf 5), not a count of all its matches. Words in no chunk are not
    counted: they say nothing about this index."""
    if match is None or match.user_syntax or total <= 0:
        return 0.0
    most = math.floor((total + 0.5 - 0.5 * math.exp(threshold)) / (1.0 + math.exp(threshold)))
    if most < 1:
        return 0.0
    sql = "SELECT count(*) FROM (SELECT 1 FROM rag_fts_chunks WHERE rag_fts_chunks MATCH ? LIMIT ?)"
    counts = [conn.execute(sql, (term, most + 1)).fetchall()[0][0] for term in match.terms]
    rare = [count for count in counts if 0 < count <= most]
    return max(math.log((total - count + 0.5) / (count + 0.5)) for count in rare) if rare else 0.0


def snippets(conn: apsw.Connection, match: MatchQuery, rowids: list[int], *, tokens: int) -> dict[int, str]:
    """FTS5's own highlighted snippet of the best-matching column, per chunk that matches."""
    if not rowids:
        return {}
    sql = (
        "SELECT rowid, snippet(rag_fts_chunks, -1, ?, ?, ?, ?) FROM rag_fts_chunks"
        f" WHERE rag_fts_chunks MATCH ? AND rowid IN ({','.join('?' * len(rowids))})"
    )
    rows = _run(conn, match, sql, (MARK_OPEN, MARK_CLOSE, ELLIPSIS, tokens, match.expression, *rowids))
    return {r: (s if len(s) <= SNIPPET_MAX_CHARS else s[:SNIPPET_MAX_CHARS] + ELLIPSIS) for r, s in rows}


def normalise_bm25(raw: float) -> float:
    """bm25 (lower is better, <= 0) -> [0, 1), higher is better, independent of the result set."""
    x = max(0.0, -raw)
    return x / (1.0 + x)
