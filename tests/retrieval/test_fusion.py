"""Hybrid fusion (backends/retrieval/fusion.py) on constructed score lists, and the signals it reads."""

from __future__ import annotations

import math

import apsw
import pytest

from backends.retrieval import fusion
from backends.retrieval.filters import FilterSQL
from backends.retrieval.storage.sqlite import fts
from handlers.rag.models import RESOLVED_DEFAULTS, FuseParams

SHORT = fusion.QuerySignals(terms=4, max_idf=0.0)  # length factor 1, no rare word


def test_standardised_scores_are_z_scores_with_floor_and_top() -> None:
    z, floor, top = fusion.standardised([(1, 4.0), (2, 2.0), (3, 0.0)])
    spread = math.sqrt(8 / 3)
    assert z == pytest.approx({1: 2 / spread, 2: 0.0, 3: -2 / spread})
    assert (floor, top) == pytest.approx((-2 / spread, 2 / spread))
    assert fusion.standardised([(1, 3.0), (2, 3.0)]) == ({1: 0.0, 2: 0.0}, 0.0, 0.0)  # flat: no information
    assert fusion.standardised([]) == ({}, 0.0, 0.0)


def test_a_hit_both_rankings_like_beats_a_hit_only_one_likes() -> None:
    fts_rows = [(1, 9.0), (2, 8.5), (3, 1.0), (4, 0.5)]
    vec_rows = [(5, 0.9), (2, 0.85), (6, 0.3), (7, 0.2)]
    fused = fusion.fuse_adaptive(fts_rows, vec_rows, SHORT, w_fts=1.0, w_vec=1.0, rare_boost=0.0, confidence=0.0)
    assert fusion.best_first(fused, 1) == [(2, pytest.approx(fused[2]))]
    assert set(fused) == {1, 2, 3, 4, 5, 6, 7}


def test_a_missing_score_is_the_rankings_floor_not_zero() -> None:
    # rowid 9 is only in the keyword list, at its top; rowid 8 only in the vector list, at its
    # bottom. With a floor of z = -1.22 for the half a hit is missing from, 9 outranks 8; a zero
    # (the mean) for "missing" would have rated 8's absence from the keyword list as average.
    fts_rows = [(9, 3.0), (1, 2.0), (2, 1.0)]
    vec_rows = [(1, 0.9), (2, 0.8), (8, 0.1)]
    fused = fusion.fuse_adaptive(fts_rows, vec_rows, SHORT, w_fts=1.0, w_vec=1.0, rare_boost=0.0, confidence=0.0)
    z_fts, floor_fts, _ = fusion.standardised(fts_rows)
    z_vec, floor_vec, _ = fusion.standardised(vec_rows)
    assert fused[9] == pytest.approx(z_fts[9] + floor_vec)
    assert fused[8] == pytest.approx(floor_fts + z_vec[8])
    assert fused[9] > fused[8]


def test_a_weight_of_zero_leaves_the_other_rankings_order() -> None:
    fts_rows = [(1, 5.0), (2, 4.0), (3, 1.0)]
    vec_rows = [(3, 0.9), (2, 0.5), (1, 0.1)]
    only_fts = fusion.fuse_adaptive(fts_rows, vec_rows, SHORT, w_fts=1.0, w_vec=0.0, rare_boost=0.0)
    assert [r for r, _ in fusion.best_first(only_fts, 3)] == [1, 2, 3]
    only_vec = fusion.fuse_adaptive([], vec_rows, SHORT, w_fts=1.0, w_vec=1.0, rare_boost=0.0)
    assert [r for r, _ in fusion.best_first(only_vec, 3)] == [3, 2, 1]


# The two rankings disagree about their best hit: 1 for keywords, 2 for vectors, each equally sure.
DISAGREE_FTS = [(1, 10.0), (2, 6.0), (3, 5.0), (4, 4.0)]
DISAGREE_VEC = [(2, 0.80), (1, 0.60), (3, 0.50), (4, 0.40)]


def winner(signals: fusion.QuerySignals, **kw: float) -> int:
    settings = {"w_fts": 1.0, "w_vec": 1.0, "rare_boost": 1.0, "confidence": 0.25, "length_exponent": 0.5, **kw}
    return fusion.best_first(fusion.fuse_adaptive(DISAGREE_FTS, DISAGREE_VEC, signals, **settings), 1)[0][0]


def test_a_rare_query_word_tips_the_balance_to_the_keyword_ranking() -> None:
    long_question = fusion.QuerySignals(terms=16, max_idf=0.0)
    assert winner(long_question) == 2  # a long question: the embedding model leads
    assert winner(fusion.QuerySignals(terms=16, max_idf=fusion.RARE_IDF + 0.2)) == 2  # slightly rare: not enough
    assert winner(fusion.QuerySignals(terms=16, max_idf=fusion.RARE_IDF + 2.0)) == 1  # an identifier-like word
    assert winner(fusion.QuerySignals(terms=16, max_idf=fusion.RARE_IDF + 2.0), rare_boost=0.0) == 2  # boost off


def test_longer_queries_lean_on_the_vector_ranking() -> None:
    weights = [
        fusion.adaptive_weights(
            fusion.QuerySignals(terms=n, max_idf=0.0), 0.0, 0.0, w_fts=1.0, w_vec=1.0, rare_boost=1.0, length_exponent=0.5
        )
        for n in (1, 4, 16)
    ]
    assert [w_fts for w_fts, _ in weights] == [1.0, 1.0, 1.0]
    assert [w_vec for _, w_vec in weights] == pytest.approx([0.5, 1.0, 2.0])  # (n / 4) ** 0.5


def test_a_ranking_sure_of_its_best_hit_counts_more() -> None:
    w_fts, w_vec = fusion.adaptive_weights(SHORT, 3.0, 1.0, w_fts=1.0, w_vec=1.0, rare_boost=0.0, confidence=0.25)
    assert w_fts / w_vec == pytest.approx(math.exp(0.25 * 2.0))
    assert fusion.adaptive_weights(SHORT, 3.0, 1.0, w_fts=1.0, w_vec=1.0, rare_boost=0.0) == (1.0, 1.0)  # default: off


def test_rrf_is_the_weighted_sum_of_reciprocal_ranks() -> None:
    fused = fusion.fuse_rrf([([(1, 0.0), (2, 0.0)], 1.0), ([(2, 0.0), (3, 0.0)], 0.5)], k0=60)
    assert fused == pytest.approx({1: 1 / 61, 2: 1 / 62 + 0.5 / 61, 3: 0.5 / 62})


def test_best_first_breaks_ties_by_rowid() -> None:
    assert fusion.best_first({5: 1.0, 3: 1.0, 9: 2.0, 1: 0.5}, 3) == [(9, 2.0), (3, 1.0), (5, 1.0)]


def test_idf_is_bm25s() -> None:
    assert fusion.idf(3, 1000) == pytest.approx(math.log(997.5 / 3.5))
    assert fusion.idf(900, 1000) == 1e-6  # FTS5 floors a negative idf


def test_fuse_settings_take_their_fusions_defaults() -> None:
    assert FuseParams().resolved() == RESOLVED_DEFAULTS["adaptive"]
    blueprint = FuseParams(fusion="rrf").resolved()
    assert (blueprint.rrf_k0, blueprint.w_fts, blueprint.w_vec, blueprint.w_all_terms, blueprint.feedback_docs) == (
        60,
        1,
        1,
        0,
        0,
    )
    given = FuseParams(fusion="rrf", rrf_k0=20, w_vec=1.25, feedback_docs=3).resolved()
    assert (given.rrf_k0, given.w_vec, given.feedback_docs, given.feedback_weight) == (20, 1.25, 3, 2.0)


# -- the rare-word signal on a real FTS5 table -------------------------------------------------------
@pytest.fixture()
def conn() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    db.execute("CREATE VIRTUAL TABLE rag_fts_chunks USING fts5(chunk_id UNINDEXED, title, body, tokenize='porter unicode61')")
    rows = []
    for n in range(1000):
        words = ["common"]
        if n < 3:
            words.append("zygomorphic")
        if n < 6:  # the most chunks a word may be in and still count as rare at idf 5 in 1,000
            words.append("borderline")
        if n < 7:
            words.append("frequentish")
        rows.append((f"c{n}", "", " ".join(words)))
    db.execute("BEGIN")
    for row in rows:
        db.execute("INSERT INTO rag_fts_chunks(chunk_id, title, body) VALUES (?, ?, ?)", row)
    db.execute("COMMIT")
    return db


def test_rare_term_idf_is_the_rarest_counted_words_idf(conn: apsw.Connection) -> None:
    rare = fts.rare_term_idf(conn, fts.build_match("common zygomorphic borderline"), 1000, fusion.RARE_IDF)
    assert rare == pytest.approx(fusion.idf(3, 1000))
    assert fts.rare_term_idf(conn, fts.build_match("common borderline"), 1000, fusion.RARE_IDF) == pytest.approx(
        fusion.idf(6, 1000)
    )
    assert fusion.idf(6, 1000) >= fusion.RARE_IDF > fusion.idf(7, 1000)
    # In 7 chunks a word is no longer rare; a word in none says nothing; fts5 syntax is not analysed.
    assert fts.rare_term_idf(conn, fts.build_match("common frequentish absentword"), 1000, fusion.RARE_IDF) == 0.0
    assert fts.rare_term_idf(conn, fts.build_match("zygomorphic", syntax="fts5"), 1000, fusion.RARE_IDF) == 0.0
    assert fts.rare_term_idf(conn, None, 1000, fusion.RARE_IDF) == 0.0


# -- the all-terms bonus: every query word, close together ---------------------------------------------
def test_rank_bonus_gives_the_best_hit_the_weight_and_fades_by_rank() -> None:
    bonus = fusion.rank_bonus([(7, 3.0), (8, 2.0), (9, 1.0)], 2.0, 5.0)
    assert bonus == pytest.approx({7: 2.0, 8: 2.0 * 6 / 7, 9: 2.0 * 6 / 8})
    fused = fusion.with_bonus({7: 0.5, 9: 1.0, 10: 0.0}, [(7, 3.0), (8, 2.0), (9, 1.0)], 2.0, 5.0)
    # 8 is in neither ranking's candidates: the bonus alone does not bring it in.
    assert fused == pytest.approx({7: 2.5, 9: 1.0 + 1.5, 10: 0.0})


def test_the_windowed_all_terms_form_is_a_near_group() -> None:
    match = fts.build_match("augmented assignment statement")
    assert match.all_terms().expression == '"augmented" AND "assignment" AND "statement"'
    near = match.all_terms(20)
    assert near.expression == 'NEAR("augmented" "assignment" "statement", 20)' and near.window == 20
    assert fts.build_match("one").all_terms(20) is None  # a single word: the any-words ranking already is it
    assert fts.build_match('"a" NEAR b', syntax="fts5").all_terms(20) is None


def test_near_keeps_chunks_whose_query_words_are_close(conn: apsw.Connection) -> None:
    filler = " ".join(f"w{n}" for n in range(40))
    conn.execute(
        "INSERT INTO rag_fts_chunks(rowid, chunk_id, title, body) VALUES (5001, 'close', '', ?)",
        (f"augmented assignment {filler}",),
    )
    conn.execute(
        "INSERT INTO rag_fts_chunks(rowid, chunk_id, title, body) VALUES (5002, 'apart', '', ?)",
        (f"augmented {filler} assignment",),
    )
    match = fts.build_match("augmented assignment")
    everywhere = fts.ranked(conn, match.all_terms(), FilterSQL("TRUE", ()), limit=10)
    close = fts.ranked(conn, match.all_terms(20), FilterSQL("TRUE", ()), limit=10)
    assert {rowid for rowid, _ in everywhere} == {5001, 5002}
    assert [rowid for rowid, _ in close] == [5001]


def test_the_adaptive_default_adds_the_close_words_bonus_and_long_query_feedback() -> None:
    default = FuseParams().resolved()
    assert (default.w_all_terms, default.all_terms_window, default.rrf_k0) == (2.0, 20, 5.0)
    assert (default.feedback_docs, default.feedback_weight, default.feedback_min_terms) == (2, 4.0, 8)
    blueprint = FuseParams(fusion="rrf").resolved()  # no third ranking, no feedback
    assert (blueprint.w_all_terms, blueprint.all_terms_window, blueprint.feedback_docs) == (0.0, 0, 0)
