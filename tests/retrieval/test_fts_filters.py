"""FTS ranking under a broad filter (backends/retrieval/storage/sqlite/fts.py `_ranked_checking`): every match ranked
once, the best checked against the filter in batches. On a real index, its list equals the
straightforward join of every match to rag_chunks, for every filter kind, with offsets."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from backends.retrieval.filters import FilterSQL, build_filter
from backends.retrieval.storage.sqlite import ann_filter, fts
from backends.retrieval.storage.sqlite.index import RagIndex
from handlers.rag.models import Filters
from tests.retrieval.records import EMBEDDER, doc

WORDS = ["river", "stone", "garden", "window", "lamp", "cloud", "bridge", "letter"]


@pytest.fixture(scope="module")
def conn(tmp_path_factory: pytest.TempPathFactory):
    rng = random.Random(3)
    idx = RagIndex.open(Path(tmp_path_factory.mktemp("ftsf")) / "rag.db", embedding_model_id=EMBEDDER.model_id, dim=EMBEDDER.dim)
    for source_id in (1, 2, 3):
        idx.upsert_source(source_id, f"src{source_id}", backend_type="sqlite")
    docs = []
    for d in range(1200):
        bodies = [" ".join(rng.choices(WORDS, k=rng.randint(3, 25)) + ["filler"] * rng.randint(0, 20)) for _ in range(2)]
        docs.append(doc(f"d{d}", bodies, source_id=rng.choice((1, 1, 2, 3)), metadata={"Score": rng.randint(0, 9)}))
    idx.write_batch(docs)
    yield idx.conn
    idx.close()


@pytest.fixture(autouse=True)
def broad_means_over_50_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ann_filter, "EXACT_MAX_ROWIDS", 50)  # 2,400 chunks here, not a million


def joined(conn, match: fts.MatchQuery, flt: FilterSQL, limit: int, offset: int) -> list[tuple[int, float]]:
    sql = (
        "SELECT f.rowid, bm25(rag_fts_chunks, 0.0, ?, ?) AS r FROM rag_fts_chunks f JOIN rag_chunks c ON c.chunk_rowid = f.rowid"
        f" WHERE rag_fts_chunks MATCH ? AND {flt.where} ORDER BY r, f.rowid LIMIT ? OFFSET ?"
    )
    args = (fts.TITLE_WEIGHT, fts.BODY_WEIGHT, match.expression, *flt.params, limit, offset)
    return [(r, float(s)) for r, s in conn.execute(sql, args)]


@pytest.mark.parametrize(
    "filters",
    [
        {"source_ids": [2]},
        {"source_ids": [1, 3]},
        {"source_names": ["src3"]},
        {"min_score": 7},
        {"source_ids": [1], "min_score": 5},
        {"doc_ids": ["d1", "d2", "d3"]},  # narrow: the explicit-set path, for comparison
    ],
)
@pytest.mark.parametrize(("query", "limit", "offset"), [("river lamp", 10, 0), ("bridge", 100, 0), ("cloud letter", 20, 30)])
def test_broad_filters_rank_like_the_join(conn, filters: dict, query: str, limit: int, offset: int) -> None:
    flt = build_filter(Filters(**filters), all_sources_enabled=True)
    match = fts.build_match(query)
    got = fts.ranked(conn, match, flt, limit=limit, offset=offset)
    assert got == joined(conn, match, flt, limit, offset)
    assert len(got) > 0 or "doc_ids" in filters


def test_a_filter_that_passes_nothing_returns_nothing(conn) -> None:
    flt = build_filter(Filters(min_score=100), all_sources_enabled=True)
    assert fts.ranked(conn, fts.build_match("river"), flt, limit=10) == []


def test_fts5_syntax_errors_are_invalid_argument_on_the_checking_path(conn) -> None:
    from gateway.errors import InvalidArgument

    flt = build_filter(Filters(source_ids=[1]), all_sources_enabled=True)
    with pytest.raises(InvalidArgument):
        fts.ranked(conn, fts.build_match("river AND (lamp", syntax="fts5"), flt, limit=10)


@pytest.mark.parametrize("filters", [{"source_ids": [3]}, {"min_score": 9}])
def test_a_filter_passing_too_few_of_the_best_falls_back_to_the_join(conn, filters: dict, monkeypatch) -> None:
    monkeypatch.setattr(fts, "CHECK_FACTOR", 1)
    monkeypatch.setattr(fts, "CHECK_MIN", 40)  # only the best 40 matches are checked
    calls = []
    checking = fts._ranked_checking
    monkeypatch.setattr(fts, "_ranked_checking", lambda *a, **k: calls.append(r := checking(*a, **k)) or r)
    flt = build_filter(Filters(**filters), all_sources_enabled=True)
    match = fts.build_match("river")
    assert fts.ranked(conn, match, flt, limit=30) == joined(conn, match, flt, 30, 0)
    assert calls == [None]  # the check gave up, the join answered
