"""Keyword search on the PostgreSQL RAG index: the tsvector/GIN half of sqlite/fts.py (index.py holds
the rest of the PostgreSQL storage). The words of a fts.MatchQuery become a tsquery; the GIN index
finds the matches, ts_rank picks the best RERANK_POOL of them, and those are ranked by BM25 over
their tsvectors (k1 1.2, b 0.75, a title occurrence counting TITLE_TF_WEIGHT times, as FTS5's
column weights do): ts_rank alone has no inverse document frequency and measured nDCG@10 0.362
on Cranfield keyword search, BM25 re-ranking 0.394 (rag.db's FTS5: 0.387). ts_headline marks the
snippets. Filters are FilterSQL conditions over `c`, as everywhere."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.drivers import LazyDriver
from backends.retrieval.storage.postgresql.ingest import pg_where

# -- keyword search: the tsvector half of fts.py --------------------------------------------------
# ts_rank weights {D, C, B, A}: the body is D, the title A; 2:1 as FTS5's bm25 column weights.
if TYPE_CHECKING:
    import psycopg
else:  # imported when a PostgreSQL index opens (index.py)
    psycopg = LazyDriver("psycopg")

TS_WEIGHTS = "{0.5, 0.5, 0.5, 1.0}"
TS_NORMALISATION = 1  # rank / (1 + log(document length)): long chunks do not win by length alone
BM25_K1, BM25_B = 1.2, 0.75
TITLE_TF_WEIGHT = 2.0  # fts.TITLE_WEIGHT
RERANK_POOL = 200  # ts_rank's best this many are BM25-ranked (Cranfield: 0.3939 at 200, 0.3943 at all)
LEXEMES_CACHED = 1024  # query texts whose lexemes are remembered (hybrid reads them twice a call)
STATS_TTL_S = 60.0
SAMPLE_FROM = 100_000  # chunks from which the corpus figures are estimated, not counted (200k: 0.5 s)
SAMPLE_ROWS = 5_000  # about this many chunks' pages sampled for the average length

# BM25 over the candidates' tsvectors. Each is first cut to the query's lexemes (ts_delete of
# all its other lexemes), then unnested: unnesting a whole tsvector (~75 lexemes a chunk) to
# keep three had cost 9 of a 17 ms keyword search at 200k chunks; the cut one, with its length
# read once and tf computed in float8, gives the same scores in ~half the time (bench/README).
_BM25 = f"""
SELECT c.chunk_rowid,
       sum(t.idf * x.tf * {BM25_K1 + 1} / (x.tf + {BM25_K1} * ({1 - BM25_B} + {BM25_B} * r.len / %(avgdl)s))) AS score
FROM ({{candidates}}) c
CROSS JOIN LATERAL (
    SELECT length(c.fts) AS len, ts_delete(c.fts, tsvector_to_array(ts_delete(c.fts, %(lexemes)s::text[]))) AS own OFFSET 0
) r
CROSS JOIN LATERAL (
    SELECT u.lexeme, cardinality(u.weights) + {TITLE_TF_WEIGHT - 1}::float8 * cardinality(array_positions(u.weights, 'A')) AS tf
    FROM unnest(r.own) u
) x
JOIN unnest(%(lexemes)s::text[], %(idfs)s::float8[]) AS t (lexeme, idf) ON t.lexeme = x.lexeme
GROUP BY c.chunk_rowid
"""


class TermStats:
    """BM25's corpus figures for one index, cached STATS_TTL_S: chunk count, average tsvector
    length, and the document frequency of each query lexeme met (one GIN count each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read_at = -math.inf
        self._corpus = (0.0, 1.0)
        self._df: dict[str, float] = {}
        self._lexemes: OrderedDict[str, list[str]] = OrderedDict()  # query text -> its lexemes, most recent last

    def idfs(self, conn: psycopg.Connection, text: str) -> tuple[list[str], list[float], float]:
        """(the lexemes of `text`, their idf, the average chunk length)."""
        with self._lock:
            if time.monotonic() - self._read_at > STATS_TTL_S:
                self._corpus = corpus_figures(conn)
                self._df, self._read_at = {}, time.monotonic()
            lexemes = self._lexemes.get(text)
            if lexemes is not None and all(lexeme in self._df for lexeme in lexemes):
                self._lexemes.move_to_end(text)
                return lexemes, self._idf_list(lexemes), max(self._corpus[1], 1.0)
            # Cached counts the statement need not redo: those of lexemes that may be the text's
            # (a stem starts as its word does; a miss only costs a count, never a wrong one).
            starts = {word[:3] for word in text.lower().split()}
            known = [lexeme for lexeme in self._df if lexeme[:3] in starts]
        # One round trip: the text's lexemes, and the document frequency of those not known.
        rows = conn.execute(
            "SELECT l, CASE WHEN l = ANY(%s::text[]) THEN NULL ELSE"
            " (SELECT count(*) FROM rag_chunks WHERE fts @@ to_tsquery('simple', quote_literal(l)))::float8 END"
            " FROM (SELECT DISTINCT lexeme AS l FROM unnest(to_tsvector('english', %s))) x",
            (known, text),
        ).fetchall()
        lexemes = [lexeme for lexeme, _ in rows]
        with self._lock:
            for lexeme, df in rows:
                if df is not None:
                    self._df[lexeme] = df
                elif lexeme not in self._df:  # the cache was reset meanwhile: count it now
                    self._df[lexeme] = conn.execute(
                        "SELECT count(*)::float8 FROM rag_chunks WHERE fts @@ to_tsquery('simple', quote_literal(%s))", (lexeme,)
                    ).fetchone()[0]
            self._lexemes[text] = lexemes
            while len(self._lexemes) > LEXEMES_CACHED:
                self._lexemes.popitem(last=False)
            return lexemes, self._idf_list(lexemes), max(self._corpus[1], 1.0)

    def _idf_list(self, lexemes: list[str]) -> list[float]:
        n = self._corpus[0]
        return [math.log(1 + (n - self._df[x] + 0.5) / (self._df[x] + 0.5)) for x in lexemes]

    def rare_idf(self, conn: psycopg.Connection, text: str, threshold: float) -> float:
        """fts.rare_term_idf on PostgreSQL: bm25's idf, log((N - df + 0.5) / (df + 0.5)), of the
        query's rarest word when it exceeds `threshold` (else 0); words in no chunk do not count."""
        lexemes, _, _ = self.idfs(conn, text)
        with self._lock:
            n = self._corpus[0]
            idfs = [math.log((n - self._df[x] + 0.5) / (self._df[x] + 0.5)) for x in lexemes if self._df.get(x)]
        best = max(idfs, default=0.0)
        return best if best > threshold else 0.0


def corpus_figures(conn: psycopg.Connection) -> tuple[float, float]:
    """(chunk count, average tsvector length) for BM25. Exact up to SAMPLE_FROM chunks; past
    that, a full scan costs seconds inside a search call (1M chunks: 2.2-4.6 s), so the count is
    the planner's (ANALYZE/autovacuum keep it) and the average that of a fixed page sample."""
    estimate = conn.execute("SELECT reltuples::float8 FROM pg_class WHERE oid = 'rag_chunks'::regclass").fetchone()[0]
    if estimate < SAMPLE_FROM:  # small, or never analysed (-1): exact
        return conn.execute("SELECT count(*)::float8, coalesce(avg(length(fts)), 1)::float8 FROM rag_chunks").fetchone()
    percent = min(100.0, 100.0 * SAMPLE_ROWS / estimate)
    avgdl = conn.execute(
        "SELECT avg(length(fts))::float8 FROM rag_chunks TABLESAMPLE SYSTEM (%s) REPEATABLE (1)", (percent,)
    ).fetchone()[0]
    return estimate, avgdl or 1.0


def tsquery_sql(match: Any) -> tuple[str, str]:
    """(SQL expression with one placeholder, its parameter) for a fts.MatchQuery.

    Text syntax: the quoted words, OR-ed (or AND-ed for MatchQuery.all_terms); each is \\w+
    only, so the to_tsquery text holds no operator but ours. FTS5 syntax has no PostgreSQL
    equivalent: it is read as web-search syntax ("quoted phrase", -word, or), never an error."""
    if match.user_syntax:
        return "websearch_to_tsquery('english', %s)", match.expression
    joiner = " & " if " AND " in match.expression else " | "
    return "to_tsquery('english', %s)", joiner.join(words_of(match))


def fts_ranked(
    conn: psycopg.Connection,
    match: Any,
    stats: TermStats,
    *,
    where: str = "TRUE",
    params: Sequence[Any] = (),
    limit: int,
    offset: int = 0,
) -> list[tuple[int, float]]:
    """(chunk_rowid, raw) best first; raw is -BM25 (lower is better, as FTS5's bm25), or -ts_rank
    for a query in web-search syntax (whose words are not a plain list)."""
    if limit <= 0:
        return []
    query, text = tsquery_sql(match)
    if not match.user_syntax:
        lexemes, idfs, avgdl = stats.idfs(conn, " ".join(words_of(match)))
        condition, named = named_where(where, params)
        candidates = (
            f"SELECT c.chunk_rowid, c.fts FROM rag_chunks c, {query.replace('%s', '%(text)s')} q WHERE c.fts @@ q AND ({condition})"
            f" ORDER BY ts_rank(%(weights)s, c.fts, q, {TS_NORMALISATION}) DESC, c.chunk_rowid LIMIT %(pool)s"
        )
        rows = conn.execute(
            _BM25.replace("{candidates}", candidates) + " ORDER BY score DESC, c.chunk_rowid LIMIT %(limit)s OFFSET %(offset)s",
            {
                **named,
                "text": text,
                "weights": TS_WEIGHTS,
                "pool": max(RERANK_POOL, limit + offset),
                "avgdl": avgdl,
                "lexemes": lexemes,
                "idfs": idfs,
                "limit": limit,
                "offset": offset,
            },
        ).fetchall()
        return [(int(r), -float(s)) for r, s in rows]
    rows = conn.execute(
        f"SELECT c.chunk_rowid, ts_rank(%s, c.fts, q, {TS_NORMALISATION}) AS r FROM rag_chunks c, {query} q"
        f" WHERE c.fts @@ q AND ({pg_where(where)}) ORDER BY r DESC, c.chunk_rowid LIMIT %s OFFSET %s",
        (TS_WEIGHTS, text, *params, limit, offset),
    ).fetchall()
    return [(int(r), -float(s)) for r, s in rows]


def fts_raw_of(conn: psycopg.Connection, match: Any, stats: TermStats, rowids: Sequence[int]) -> dict[int, float]:
    """The raw score fts_ranked gives these chunks (those a vector search found), matching ones only."""
    if not rowids:
        return {}
    query, text = tsquery_sql(match)
    if match.user_syntax:
        sql = (
            f"SELECT c.chunk_rowid, ts_rank(%s, c.fts, q, {TS_NORMALISATION}) FROM rag_chunks c, {query} q"
            " WHERE c.chunk_rowid = ANY(%s) AND c.fts @@ q"
        )
        return {int(r): -float(s) for r, s in conn.execute(sql, (TS_WEIGHTS, text, list(rowids)))}
    lexemes, idfs, avgdl = stats.idfs(conn, " ".join(words_of(match)))
    candidates = (
        f"SELECT c.chunk_rowid, c.fts FROM rag_chunks c, {query.replace('%s', '%(text)s')} q"
        " WHERE c.chunk_rowid = ANY(%(rowids)s) AND c.fts @@ q"
    )
    params = {"text": text, "rowids": list(rowids), "avgdl": avgdl, "lexemes": lexemes, "idfs": idfs}
    return {int(r): -float(s) for r, s in conn.execute(_BM25.replace("{candidates}", candidates), params)}


def named_where(where: str, params: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """A FilterSQL condition with `?` placeholders as named ones (%(f0)s ...), to share a statement
    with named parameters; the text is built from fixed fragments, values stay parameters."""
    parts = where.split("?")
    if len(parts) - 1 != len(params):
        raise ValueError("filter placeholders and parameters differ in number")
    condition = parts[0] + "".join(f"%(f{i})s{part}" for i, part in enumerate(parts[1:]))
    return condition, {f"f{i}": value for i, value in enumerate(params)}


def words_of(match: Any) -> list[str]:
    return [term[1:-1].replace('""', '"') for term in match.terms]


def fts_snippets(
    conn: psycopg.Connection, match: Any, rowids: Sequence[int], *, tokens: int, open_mark: str, close_mark: str
) -> dict[int, str]:
    """ts_headline of the body (the title when the body does not match), the matches marked.
    Whether the body matches is read from the stored tsvector's body lexemes (weight D), not by
    parsing the body a second time."""
    if not rowids:
        return {}
    query, text = tsquery_sql(match)
    options = (
        f"StartSel={open_mark}, StopSel={close_mark}, MaxWords={max(2, tokens)}, MinWords={max(1, tokens // 2)}, ShortWord=0"
    )
    rows = conn.execute(
        f"SELECT c.chunk_rowid, CASE WHEN ts_filter(c.fts, '{{d}}') @@ q THEN ts_headline('english', c.body, q, %s)"
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
