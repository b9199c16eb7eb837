"""The /mcp/rag tools, called the way the server calls them (RagHandler.execute_tool: argument
validation, caps, error mapping, output models) on a real index built here through the writer API,
on both backends (rag.db, and PostgreSQL 18 + pgvector) with the same assertions: where the
engines differ by design (bm25 vs ts_rank raw values, FTS5 query syntax) a test says so.

The corpus is small and fully known, so every filter's expected answer is computed in Python from
the documents' metadata and every search mode must return exactly that set.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.retrieval.call import Call, Caps
from backends.retrieval.protocols import SearchIndex
from backends.retrieval.storage.reader import reading
from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord
from gateway.errors import DeadlineExceeded
from gateway.rendering import compact_text
from gateway.runtime import build_runtime
from gateway.services import Services
from gateway.variables import all_variables
from handlers.rag import RagHandler

COMMON = "database"  # a word in every chunk: an FTS query for it matches the whole corpus
TOPICS = {
    "json": "parse json documents with json_extract in mysql",
    "index": "btree index tuning for faster range scans",
    "replica": "replication lag between primary and replica servers",
    "backup": "point in time recovery from a physical backup",
    "vector": "nearest neighbour vector search with embeddings",
    "lock": "row lock waits and deadlock detection",
}


def build_corpus() -> list[dict[str, Any]]:
    """12 documents over 3 sources (source 3 disabled); metadata varies on every filter axis."""
    docs = []
    for n in range(12):
        topic = list(TOPICS)[n % len(TOPICS)]
        source_id = 1 + n % 3
        docs.append(
            {
                "doc_id": f"s{source_id}:{n}",
                "source_id": source_id,
                "title": f"{topic} question {n}",
                "bodies": [f"{TOPICS[topic]} {COMMON} part {i} of doc {n}" for i in range(1 + n % 3)],
                "metadata": {
                    "Score": n - 2,
                    "PostTypeId": 1 + n % 2,
                    "Tags": "".join(f"<{t}>" for t in (topic, "sql" if n % 2 else "nosql", "hot" if n % 3 == 0 else "cold")),
                    "CreationDate": f"2023-{1 + n:02d}-15T12:00:00Z",
                },
            }
        )
    return docs


CORPUS = build_corpus()
SOURCE_NAMES = {1: "alpha", 2: "beta", 3: "gamma"}


class Gateway:
    """A RagHandler over a fresh data directory, with helpers to call tools."""

    def __init__(self, data_dir: Path, **variables: str) -> None:
        self.raw = {"rag-embedding_provider": "hash", "rag-embedding_dim": "64", **variables}
        self.runtime = self.make_runtime()
        self.handler = RagHandler(Services(data_dir=data_dir, store=None, runtime=self.runtime, stats=None, metrics=None))
        asyncio.run(self.handler.init())

    def make_runtime(self, **overrides: str):
        return build_runtime(1, {**self.raw, **overrides}, {}, all_variables(RagHandler.variables))

    def result(self, name: str, args: dict[str, Any], **variables: str) -> dict[str, Any]:
        runtime = self.make_runtime(**variables) if variables else self.runtime
        spec = self.handler.find_tool(name)
        return asyncio.run(self.handler.execute_tool(spec, args, self.handler.context(spec, runtime)))

    def ok(self, name: str, args: dict[str, Any], **variables: str) -> dict[str, Any]:
        result = self.result(name, args, **variables)
        assert not result["isError"], result["structuredContent"]
        payload = result["structuredContent"]
        assert result["content"][0]["text"] == compact_text(payload)  # the model's rendering of the same answer
        return payload

    def error(self, name: str, args: dict[str, Any], **variables: str) -> dict[str, Any]:
        result = self.result(name, args, **variables)
        assert result["isError"], result["structuredContent"]
        return result["structuredContent"]["error"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gw(request, tmp_path_factory) -> Gateway:
    backend: dict[str, str] = {}
    if request.param == "postgresql":
        server = request.getfixturevalue("pgvector_server")
        name = f"mcpgw_tools_{uuid.uuid4().hex[:8]}"
        backend = {"rag-backend": "postgresql", "rag-postgres_dsn": server.create_database(name)}
        request.addfinalizer(lambda: server.drop_database(name))
    gateway = Gateway(tmp_path_factory.mktemp("rag"), **backend)
    gateway.backend = request.param
    index, embedder = gateway.handler.index, gateway.handler.embedder
    for source_id, name in SOURCE_NAMES.items():
        index.upsert_source(source_id, name, enabled=0 if source_id == 3 else 1)
    records = []
    for d in CORPUS:
        chunks = [
            ChunkRecord(
                f"{d['doc_id']}#{i}",
                i,
                d["title"],
                body,
                {"i": i},
                hashlib.sha1(body.encode()).hexdigest(),
                embedder.embed([body])[0],
            )
            for i, body in enumerate(d["bodies"])
        ]
        records.append(
            DocumentRecord(
                d["doc_id"],
                d["source_id"],
                SOURCE_NAMES[d["source_id"]],
                {"id": d["doc_id"]},
                d["title"],
                " ".join(d["bodies"]),
                d["metadata"],
                None,
                chunks,
            )
        )
    index.write_batch(records)
    yield gateway
    asyncio.run(gateway.handler.close())


def test_the_index_other_endpoints_see_is_the_same_on_both_backends(gw: Gateway) -> None:
    """SearchIndex names only what both backends implement: no rag.db path or connection."""
    index = gw.handler.index
    assert gw.handler.opened.open_index() is index and isinstance(index, SearchIndex)
    assert (index.embedding_model_id, index.dim) == (gw.handler.embedder.model_id, 64)
    assert index.meta()["embedding_dim"] == "64"
    in_source_1 = sum(1 for d in CORPUS if d["source_id"] == 1)
    assert index.fetch_all("SELECT count(*) FROM rag_documents WHERE source_id = ?", (1,)) == [(in_source_1,)]
    assert index.totals()["docs"] == len(CORPUS) and index.size_bytes() > 0


def chunk_ids(docs: list[dict[str, Any]]) -> set[str]:
    return {f"{d['doc_id']}#{i}" for d in docs for i in range(len(d["bodies"]))}


def tags_of(d: dict[str, Any]) -> set[str]:
    return set(d["metadata"]["Tags"].strip("<>").split("><"))


ENABLED = [d for d in CORPUS if d["source_id"] != 3]
FILTER_CASES = {
    "none": ({}, ENABLED),
    "source_ids": ({"source_ids": [1]}, [d for d in ENABLED if d["source_id"] == 1]),
    "source_names": ({"source_names": ["beta"]}, [d for d in ENABLED if d["source_id"] == 2]),
    "ids_and_names_intersect": (
        {"source_ids": [1, 2], "source_names": ["beta", "gamma"]},
        [d for d in ENABLED if d["source_id"] == 2],
    ),
    "ids_and_names_disjoint": ({"source_ids": [1], "source_names": ["beta"]}, []),
    "disabled_source_named": ({"source_ids": [3]}, []),
    "doc_ids": ({"doc_ids": ["s1:0", "s2:4", "s3:2"]}, [d for d in ENABLED if d["doc_id"] in ("s1:0", "s2:4")]),
    "min_score": ({"min_score": 5}, [d for d in ENABLED if d["metadata"]["Score"] >= 5]),
    "post_type_ids": ({"post_type_ids": [2]}, [d for d in ENABLED if d["metadata"]["PostTypeId"] == 2]),
    "tags_any": ({"tags_any": ["json", "LOCK"]}, [d for d in ENABLED if tags_of(d) & {"json", "lock"}]),
    "tags_any_empty": ({"tags_any": []}, []),
    "tags_all_empty": ({"tags_all": []}, ENABLED),
    "tags_all": ({"tags_all": ["sql", "hot"]}, [d for d in ENABLED if {"sql", "hot"} <= tags_of(d)]),
    "tags_all_nosql_hot": ({"tags_all": ["nosql", "hot"]}, [d for d in ENABLED if {"nosql", "hot"} <= tags_of(d)]),
    "created_after": (
        {"created_after": "2023-06-15T12:00:00Z"},
        [d for d in ENABLED if d["metadata"]["CreationDate"] > "2023-06-15T12:00:00Z"],
    ),
    "created_before": ({"created_before": "2023-04-01"}, [d for d in ENABLED if d["metadata"]["CreationDate"] < "2023-04-01"]),
    "combined": (
        {"source_names": ["alpha", "beta"], "min_score": 0, "post_type_ids": [1], "created_before": "2023-12-01T00:00:00+00:00"},
        [
            d
            for d in ENABLED
            if d["metadata"]["Score"] >= 0 and d["metadata"]["PostTypeId"] == 1 and d["metadata"]["CreationDate"] < "2023-12-01"
        ],
    ),
}
MODES = {
    "fts": ("rag.search_fts", {"query": COMMON}),
    "vector": ("rag.search_vector", {"query_text": f"{COMMON} question"}),
    "fuse": ("rag.search_hybrid", {"query": COMMON, "mode": "fuse"}),
    "fts_then_vec": ("rag.search_hybrid", {"query": COMMON, "mode": "fts_then_vec"}),
}


@pytest.mark.parametrize("case", list(FILTER_CASES))
def test_every_filter_gives_the_same_exact_answer_in_every_mode(gw: Gateway, case: str) -> None:
    filters, expected_docs = FILTER_CASES[case]
    expected = chunk_ids(expected_docs)
    assert case in ("ids_and_names_disjoint", "disabled_source_named", "tags_any_empty") or expected, (
        "a case must select something"
    )
    for mode, (name, args) in MODES.items():
        out = gw.ok(name, {**args, "k": 50, "filters": filters})
        got = {hit["chunk_id"] for hit in out["results"]}
        assert got == expected, f"{mode} with {case}"


# -- scores and ranking ---------------------------------------------------------------------------
def assert_ranked(results: list[dict[str, Any]]) -> None:
    scores = [hit["score"] for hit in results]
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)


def test_fts_scores_are_normalised_and_follow_bm25(gw: Gateway) -> None:
    out = gw.ok("rag.search_fts", {"query": "json replica", "k": 50})
    results = out["results"]
    assert results and {h["doc_id"] for h in results} == {d["doc_id"] for d in ENABLED if {"json", "replica"} & tags_of(d)}
    assert_ranked(results)
    raws = [h["score_fts_raw"] for h in results]
    assert raws == sorted(raws) and all(r < 0 for r in raws)  # SQLite bm25: lower is better
    for hit in results:
        x = -hit["score_fts_raw"]
        assert hit["score_fts"] == pytest.approx(x / (1 + x), abs=1e-5) == pytest.approx(hit["score"], abs=1e-6)
    assert out["stats"] == {**out["stats"], "k_requested": 50, "k_returned": len(results), "mode": "fts"}


def test_fts_offset_pages_through_the_same_ranking(gw: Gateway) -> None:
    full = [h["chunk_id"] for h in gw.ok("rag.search_fts", {"query": COMMON, "k": 10})["results"]]
    page = [h["chunk_id"] for h in gw.ok("rag.search_fts", {"query": COMMON, "k": 4, "offset": 3})["results"]]
    assert page == full[3:7]


def test_fts_text_is_safe_by_construction_and_fts5_syntax_is_opt_in(gw: Gateway) -> None:
    hostile = 'json" OR * NEAR( AND ) -- ; DROP TABLE rag_chunks; title: ^mysql'
    out = gw.ok("rag.search_fts", {"query": hostile, "k": 5})
    assert out["results"][0]["title"].startswith("json")
    assert gw.error("rag.search_fts", {"query": "?? !!"})["code"] == "INVALID_ARGUMENT"
    if gw.backend == "postgresql":
        # PostgreSQL has no FTS5: syntax "fts5" is read as web-search syntax, which has no errors.
        assert gw.ok("rag.search_fts", {"query": "json -mysql", "syntax": "fts5"})["results"] == []
        assert gw.ok("rag.search_fts", {"query": '"point in time" backup', "syntax": "fts5", "k": 50})["results"]
        for odd in ('json AND ("', "nosuchcolumn:json", "NEAR("):
            gw.ok("rag.search_fts", {"query": odd, "syntax": "fts5"})
        return
    assert gw.ok("rag.search_fts", {"query": "json NOT mysql", "syntax": "fts5"})["results"] == []
    assert gw.ok("rag.search_fts", {"query": "title:backup", "syntax": "fts5", "k": 50})["results"]
    for bad in ('json AND ("', "nosuchcolumn:json", "NEAR("):
        error = gw.error("rag.search_fts", {"query": bad, "syntax": "fts5"})
        assert error["code"] == "INVALID_ARGUMENT" and "FTS5" in error["message"]


def test_snippets_use_fts5_highlighting_and_are_bounded(gw: Gateway) -> None:
    out = gw.ok("rag.search_fts", {"query": "recovery", "return": {"include_snippets": True, "snippet_tokens": 4}})
    snippet = out["results"][0]["snippet"]
    assert "<mark>recovery</mark>" in snippet
    assert len(snippet.replace("<mark>", "").replace("</mark>", "").split()) <= 5
    plain = gw.ok("rag.search_fts", {"query": "recovery", "return": {"include_title": False, "include_metadata": False}})
    assert (
        plain["results"][0]["snippet"] is None
        and plain["results"][0]["title"] is None
        and plain["results"][0]["metadata"] is None
    )


def test_vector_search_by_text_and_by_given_embedding(gw: Gateway) -> None:
    embedder = gw.handler.embedder
    by_text = gw.ok("rag.search_vector", {"query_text": TOPICS["backup"], "k": 5})["results"]
    assert by_text[0]["title"].startswith("backup")
    assert_ranked(by_text)
    for hit in by_text:
        assert hit["score_vec"] == pytest.approx(1 - hit["distance_raw"] / 2, abs=1e-5)

    # A given vector is used as given: the exact vector of one chunk finds that chunk at distance 0.
    target = "s2:10#1"
    body = next(d for d in CORPUS if d["doc_id"] == "s2:10")["bodies"][1]
    vector = embedder.embed([body])[0].astype("<f4")
    b64 = base64.b64encode(vector.tobytes()).decode()
    out = gw.ok("rag.search_vector", {"query_embedding": {"dim": 64, "values_b64": b64}, "k": 3})
    assert out["results"][0]["chunk_id"] == target and out["results"][0]["distance_raw"] == pytest.approx(0, abs=1e-5)
    # ... and its opposite ranks that chunk last.
    negated = base64.b64encode((-vector).tobytes()).decode()
    last = gw.ok("rag.search_vector", {"query_embedding": {"dim": 64, "values_b64": negated}, "k": 50})["results"]
    assert last[-1]["chunk_id"] == target


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"query_embedding": {"dim": 32, "values_b64": base64.b64encode(np.ones(32, "<f4").tobytes()).decode()}}, "dim 32"),
        ({"query_embedding": {"dim": 64, "values_b64": "not base64!"}}, "base64"),
        ({"query_embedding": {"dim": 64, "values_b64": base64.b64encode(b"\0" * 12).decode()}}, "12 bytes"),
        ({"query_embedding": {"dim": 64, "values_b64": base64.b64encode(np.zeros(64, "<f4").tobytes()).decode()}}, "zeros"),
        ({"query_embedding": {"dim": 64, "values_b64": base64.b64encode(np.full(64, np.nan, "<f4").tobytes()).decode()}}, "NaN"),
        ({"query_text": "x", "embedding": {"model": "text-embedding-3-large"}}, "text-embedding-3-large"),
        (
            {
                "query_embedding": {
                    "dim": 64,
                    "model": "other",
                    "values_b64": base64.b64encode(np.ones(64, "<f4").tobytes()).decode(),
                }
            },
            "other",
        ),
        ({}, "exactly one"),
        ({"query_text": "x", "query_embedding": {"dim": 64, "values_b64": ""}}, "exactly one"),
    ],
)
def test_vector_search_refuses_bad_query_vectors(gw: Gateway, args: dict, message: str) -> None:
    error = gw.error("rag.search_vector", args)
    assert error["code"] == "INVALID_ARGUMENT" and message in error["message"]


def test_vector_search_accepts_the_index_model_by_name(gw: Gateway) -> None:
    assert gw.ok("rag.search_vector", {"query_text": "lock", "embedding": {"model": "hash:64"}})["results"]


def test_fuse_is_rrf_with_float_weights_and_debug_ranks(gw: Gateway) -> None:
    fuse = {"fusion": "rrf", "w_fts": 0.3, "w_vec": 0.7, "w_all_terms": 0.45, "rrf_k0": 7.5, "feedback_docs": 0}
    out = gw.ok("rag.search_hybrid", {"query": "json index tuning", "k": 10, "fuse": fuse})
    results = out["results"]
    assert_ranked(results)
    assert out["stats"]["mode"] == "fuse"
    best = (0.3 + 0.7 + 0.45) / (7.5 + 1)
    for hit in results:
        rf, rv, ra = hit["debug"]["rank_fts"], hit["debug"]["rank_vec"], hit["debug"]["rank_all_terms"]
        raw = (0.3 / (7.5 + rf) if rf else 0) + (0.7 / (7.5 + rv) if rv else 0) + (0.45 / (7.5 + ra) if ra else 0)
        assert hit["score"] == pytest.approx(raw / best, abs=1e-5)
        assert hit["score_vec"] is not None  # filled in for FTS-only hits too
    fts_only = gw.ok("rag.search_hybrid", {"query": "json index tuning", "k": 10, "fuse": {"w_vec": 0, "feedback_docs": 0}})[
        "results"
    ]
    assert [h["chunk_id"] for h in fts_only] == [
        h["chunk_id"] for h in gw.ok("rag.search_fts", {"query": "json index tuning"})["results"]
    ]
    vec_only = gw.ok("rag.search_hybrid", {"query": "json index tuning", "k": 10, "fuse": {"w_fts": 0, "feedback_docs": 0}})[
        "results"
    ]
    assert [h["chunk_id"] for h in vec_only] == [
        h["chunk_id"] for h in gw.ok("rag.search_vector", {"query_text": "json index tuning"})["results"]
    ]
    assert gw.error("rag.search_hybrid", {"query": "x", "fuse": {"w_fts": 0, "w_vec": 0}})["code"] == "INVALID_ARGUMENT"


def test_fuse_puts_chunks_with_every_query_word_first(gw: Gateway) -> None:
    # "json" and "mysql" appear together only in the two json documents.
    # The adaptive default ranks the chunks holding every query word within 20 tokens (a bonus);
    # the blueprint's RRF has that third list only when asked for, and so has adaptive without it.
    for fuse in ({}, {"all_terms_window": 0}, {"fusion": "rrf", "w_all_terms": 1.0}):
        out = gw.ok("rag.search_hybrid", {"query": "json mysql", "k": 10, "fuse": fuse})["results"]
        assert {h["doc_id"] for h in out[:2]} == {"s1:0", "s1:6"}
        assert all(h["debug"]["rank_all_terms"] for h in out[:2]) and not any(h["debug"]["rank_all_terms"] for h in out[2:])
    for fuse in ({"w_all_terms": 0}, {"fusion": "rrf"}):
        out = gw.ok("rag.search_hybrid", {"query": "json mysql", "k": 10, "fuse": fuse})["results"]
        assert {h["doc_id"] for h in out[:2]} == {"s1:0", "s1:6"}
        assert not any(h["debug"]["rank_all_terms"] for h in out)


def test_feedback_runs_only_for_queries_with_enough_words(gw: Gateway) -> None:
    def ranked(query: str, fuse: dict[str, Any]) -> list[tuple[str, float]]:
        out = gw.ok("rag.search_hybrid", {"query": query, "k": 10, "fuse": fuse})["results"]
        return [(h["chunk_id"], h["score"]) for h in out]

    short, longer = "json index", "json index tuning replica"
    always = {"feedback_docs": 2, "feedback_weight": 4.0, "feedback_min_terms": 0}
    never = {"feedback_docs": 0}
    gated = {"feedback_docs": 2, "feedback_weight": 4.0, "feedback_min_terms": 4}
    assert ranked(longer, always) != ranked(longer, never)  # feedback changes this query's scores
    assert ranked(longer, gated) == ranked(longer, always)  # 4 words: feedback runs
    assert ranked(short, gated) == ranked(short, never)  # 2 words: it does not


def test_fts_then_vec_reranks_fts_candidates_by_the_metric(gw: Gateway) -> None:
    candidates = {h["chunk_id"] for h in gw.ok("rag.search_fts", {"query": "json backup", "k": 50})["results"]}
    by_metric = {}
    for metric in ("cosine", "l2", "dot"):
        args = {"query": "json backup", "mode": "fts_then_vec", "k": 50, "fts_then_vec": {"vec_metric": metric, "rerank_k": 3}}
        out = gw.ok("rag.search_hybrid", args)
        results = out["results"]
        assert len(results) == 3 and {h["chunk_id"] for h in results} <= candidates
        assert_ranked(results)
        by_metric[metric] = results
    for cos, l2, dot in zip(*by_metric.values()):
        assert cos["chunk_id"] == l2["chunk_id"] == dot["chunk_id"]  # unit vectors: the metrics agree on order
        assert l2["distance_raw"] == pytest.approx(math.sqrt(2 * cos["distance_raw"]), abs=1e-5)
        assert dot["distance_raw"] == pytest.approx(-(1 - cos["distance_raw"]), abs=1e-5)
    distances = [h["distance_raw"] for h in by_metric["cosine"]]
    assert distances == sorted(distances)


def test_unknown_mode_is_invalid_argument(gw: Gateway) -> None:
    error = gw.error("rag.search_hybrid", {"query": "json", "mode": "rerank"})
    assert error["code"] == "INVALID_ARGUMENT" and error["details"][0]["loc"] == "mode"


# -- caps -------------------------------------------------------------------------------------------
def test_k_and_candidate_caps_truncate_and_say_so(gw: Gateway) -> None:
    out = gw.ok("rag.search_fts", {"query": COMMON, "k": 20}, **{"rag-k_max": "4"})
    assert (out["truncated"], out["stats"]["k_requested"], out["stats"]["k_returned"]) == (True, 20, 4)
    out = gw.ok("rag.search_fts", {"query": COMMON, "k": 4, "offset": 3}, **{"rag-candidates_max": "5"})
    assert out["truncated"] and out["stats"]["k_returned"] == 2
    out = gw.ok("rag.search_hybrid", {"query": COMMON, "k": 5, "fuse": {"fts_k": 6, "vec_k": 6}}, **{"rag-candidates_max": "5"})
    assert out["truncated"]
    out = gw.ok("rag.search_hybrid", {"query": COMMON, "k": 5, "mode": "fts_then_vec"}, **{"rag-candidates_max": "5"})
    assert out["truncated"] and len(out["results"]) <= 5
    untouched = gw.ok(
        "rag.search_hybrid", {"query": COMMON, "k": 5, "fuse": {"fts_k": 5, "vec_k": 5}}, **{"rag-candidates_max": "5"}
    )
    assert not untouched["truncated"]
    for name, args in MODES.values():
        out = gw.ok(name, {**args, "k": 3})
        assert not out["truncated"] and out["stats"]["k_returned"] == 3


def test_oversized_query_is_limit_exceeded(gw: Gateway) -> None:
    long_query = "word " * 10
    for name, key in (("rag.search_fts", "query"), ("rag.search_vector", "query_text"), ("rag.search_hybrid", "query")):
        error = gw.error(name, {key: long_query}, **{"rag-query_max_bytes": "16"})
        assert error["code"] == "LIMIT_EXCEEDED" and "rag-query_max_bytes" in error["message"]


def test_response_byte_cap_cuts_results_and_bodies(gw: Gateway) -> None:
    out = gw.ok("rag.search_fts", {"query": COMMON, "k": 50}, **{"rag-response_max_bytes": "2000"})
    assert out["truncated"] and 0 < len(out["results"]) < len(chunk_ids(ENABLED))
    assert len(json.dumps(out, separators=(",", ":")).encode()) <= 2000  # the JSON as sent (compact)
    index = gw.handler.index
    index.write_batch(
        [DocumentRecord("s1:big", 1, "alpha", {"id": "big"}, "big", "x" * 50_000, {}, None, [
            ChunkRecord("s1:big#0", 0, "big", "y" * 50_000, {}, "h-big", gw.handler.embedder.embed(["big"])[0])
        ])]
    )  # fmt: skip
    try:
        doc = gw.ok("rag.get_docs", {"doc_ids": ["s1:big"]}, **{"rag-response_max_bytes": "4096"})
        assert doc["truncated"] and doc["docs"][0]["body_truncated"] and 0 < len(doc["docs"][0]["body"]) < 4096
        chunks = gw.ok("rag.get_chunks", {"chunk_ids": ["s1:big#0", "s1:0#0"]}, **{"rag-response_max_bytes": "4096"})
        assert chunks["truncated"] and chunks["chunks"][0]["body_truncated"] and len(json.dumps(chunks).encode()) <= 4096
    finally:
        index.write_batch([], delete_doc_ids=["s1:big"])


def test_timeout_interrupts_a_running_statement(gw: Gateway) -> None:
    caps = Caps(k_max=50, candidates_max=500, query_max_bytes=8192, response_max_bytes=5_000_000, timeout_ms=50)
    call = Call(caps, deadline=time.monotonic() + caps.timeout_ms / 1000)
    index = gw.handler.index
    endless = (
        "SELECT pg_sleep(30)"
        if gw.backend == "postgresql"
        else "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    )
    began = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="rag-timeout_ms"), reading(index, call) as reader:
        list(reader.execute(endless))
    assert time.monotonic() - began < 2
    assert index.totals()["chunks"] > 0  # the index still serves


def test_timeout_variable_sets_the_call_deadline(gw: Gateway) -> None:
    # The call's deadline is the earlier of mcp-timeout_ms and rag-timeout_ms after its start.
    spec = gw.handler.find_tool("rag.search_fts")
    began = time.monotonic()
    ctx = gw.handler.context(spec, gw.make_runtime(**{"rag-timeout_ms": "10"}))
    assert ctx.deadline - began == pytest.approx(0.010, abs=2e-3)
    call = Call.of(ctx)
    assert call.deadline == ctx.deadline
    early = gw.handler.context(spec, gw.make_runtime(**{"mcp-timeout_ms": "10", "rag-timeout_ms": "60000"}))
    assert early.deadline - time.monotonic() < 0.011


# -- content tools ----------------------------------------------------------------------------------
def test_get_chunks_in_order_with_missing_and_metadata(gw: Gateway) -> None:
    out = gw.ok("rag.get_chunks", {"chunk_ids": ["s2:4#1", "nope#0", "s1:0#0", "s2:4#1"]})
    assert [c["chunk_id"] for c in out["chunks"]] == ["s2:4#1", "s1:0#0"]
    assert out["missing"] == ["nope#0"]
    first = out["chunks"][0]
    assert first["body"].startswith(TOPICS["vector"]) and first["chunk_metadata"] == {"chunk_index": 1, "i": 1}
    assert first["doc_metadata"]["Score"] == 2 and first["source_name"] == "beta"
    assert out["stats"]["k_returned"] == 2
    error = gw.error("rag.get_chunks", {"chunk_ids": ["nope#0"]})
    assert error["code"] == "NOT_FOUND"
    capped = gw.ok("rag.get_chunks", {"chunk_ids": ["s1:0#0", "s2:1#0", "s2:1#1"]}, **{"rag-k_max": "2"})
    assert capped["truncated"] and len(capped["chunks"]) == 2


def test_get_chunks_token_budget_cuts_the_crossing_body(gw: Gateway) -> None:
    ids = ["s1:0#0", "s2:1#0", "s2:1#1"]
    full = gw.ok("rag.get_chunks", {"chunk_ids": ids})["chunks"]
    budget_chars = len(full[0]["body"]) + 10
    out = gw.ok("rag.get_chunks", {"chunk_ids": ids, "max_output_tokens": budget_chars // 4})
    assert out["truncated"]
    assert out["chunks"][0]["body"] == full[0]["body"]
    assert sum(len(c["body"]) for c in out["chunks"]) <= budget_chars
    assert out["chunks"][-1]["body_truncated"]


def test_get_chunks_diversity_pushes_near_duplicates_down(gw: Gateway) -> None:
    # s1:0 and s1:6 are both "json" documents (near-identical text); s2:1 and s1:3 are other topics.
    ids = ["s1:0#0", "s1:6#0", "s2:1#0", "s1:3#0"]
    as_given = [c["chunk_id"] for c in gw.ok("rag.get_chunks", {"chunk_ids": ids, "diversity": {"lambda": 1.0}})["chunks"]]
    assert as_given == ids
    diverse = [c["chunk_id"] for c in gw.ok("rag.get_chunks", {"chunk_ids": ids, "diversity": {"lambda": 0.3}})["chunks"]]
    assert diverse[0] == "s1:0#0" and diverse.index("s1:6#0") == 3


def test_get_docs(gw: Gateway) -> None:
    out = gw.ok("rag.get_docs", {"doc_ids": ["s1:3", "missing"], "return": {"include_body": False}})
    doc = out["docs"][0]
    assert (doc["doc_id"], doc["pk_json"], doc["body"], doc["source_name"]) == ("s1:3", {"id": "s1:3"}, None, "alpha")
    assert doc["metadata"]["PostTypeId"] == 2 and out["missing"] == ["missing"]
    assert gw.error("rag.get_docs", {"doc_ids": ["missing"]})["code"] == "NOT_FOUND"
    assert gw.error("rag.get_docs", {"doc_ids": []})["code"] == "INVALID_ARGUMENT"


def test_admin_stats_counts_each_source_once(gw: Gateway) -> None:
    out = gw.ok("rag.admin.stats", {})
    by_name = {s["source_name"]: s for s in out["sources"]}
    for source_id, name in SOURCE_NAMES.items():
        docs = [d for d in CORPUS if d["source_id"] == source_id]
        assert (by_name[name]["docs"], by_name[name]["chunks"]) == (len(docs), len(chunk_ids(docs)))
    assert by_name["gamma"]["enabled"] is False
    index = out["index"]
    assert index["chunks"] == index["vectors"] == len(chunk_ids(CORPUS)) and index["docs"] == len(CORPUS)
    assert (index["embedding_model"], index["embedding_dim"], index["schema_version"]) == ("hash:64", 64, 1)
    assert index["size_bytes"] > 0 and out["stats"]["mode"] == "stats"


def test_every_tool_is_declared_with_stats_and_truncated(gw: Gateway) -> None:
    names = {t["name"] for t in gw.handler.get_tool_list()}
    assert {
        "rag.search_fts",
        "rag.search_vector",
        "rag.search_hybrid",
        "rag.get_chunks",
        "rag.get_docs",
        "rag.admin.stats",
    } <= names
    for spec in gw.handler.tools.values():
        if spec.name.startswith("rag.search") or spec.name.startswith("rag.get") or spec.name == "rag.admin.stats":
            assert {"truncated", "stats"} <= set(spec.output_schema["properties"])
    assert gw.error("rag.search_fts", {"query": "x", "bogus": 1})["code"] == "INVALID_ARGUMENT"


def test_a_new_index_is_refused_under_another_model(tmp_path: Path) -> None:
    first = Gateway(tmp_path)
    asyncio.run(first.handler.close())
    second = RagHandler(
        Services(
            data_dir=tmp_path, store=None, runtime=first.make_runtime(**{"rag-embedding_dim": "32"}), stats=None, metrics=None
        )
    )
    with pytest.raises(Exception, match="built with embedding model 'hash:64'"):
        asyncio.run(second.init())


def test_meaning_without_shared_words_is_found_with_the_local_model(tmp_path: Path) -> None:
    """The default provider end to end: vector and hybrid search find a paraphrase FTS cannot."""
    gateway = Gateway(tmp_path, **{"rag-embedding_provider": "local", "rag-embedding_dim": "384"})
    try:
        index, embedder = gateway.handler.index, gateway.handler.embedder
        index.upsert_source(1, "kb")
        texts = {
            "kb:1": "Recovering a dropped table from last night's backup file",
            "kb:2": "Speeding up slow queries by adding an index on the join column",
            "kb:3": "Our office cat sleeps on the warm server rack",
        }
        vectors = embedder.embed([f"{t}\n\n{t}" for t in texts.values()])
        index.write_batch(
            [
                DocumentRecord(d, 1, "kb", {"id": d}, t, t, {}, None, [ChunkRecord(f"{d}#0", 0, t, t, {}, d, vectors[i])])
                for i, (d, t) in enumerate(texts.items())
            ]
        )
        query = "restore lost data"
        assert gateway.ok("rag.search_fts", {"query": query})["results"] == []
        assert gateway.ok("rag.search_vector", {"query_text": query})["results"][0]["doc_id"] == "kb:1"
        assert gateway.ok("rag.search_hybrid", {"query": query})["results"][0]["doc_id"] == "kb:1"
    finally:
        asyncio.run(gateway.handler.close())


# -- issue 29: one spelling of the query text, unknown sources, unknown ids --------------------------
@pytest.mark.parametrize(
    ("name", "canonical", "other"),
    [
        ("rag.search_fts", "query", "query_text"),
        ("rag.search_hybrid", "query", "query_text"),
        ("rag.search_vector", "query_text", "query"),
    ],
)
def test_every_search_takes_query_and_query_text(gw: Gateway, name: str, canonical: str, other: str) -> None:
    """Issue 29: rag.search_vector took only query_text (the blueprint's name) and the other two
    only query; a caller using the other tool's spelling got "extra inputs are not permitted"."""
    as_documented = gw.ok(name, {canonical: "json documents", "k": 5})["results"]
    as_other = gw.ok(name, {other: "json documents", "k": 5})["results"]
    assert as_documented and [h["chunk_id"] for h in as_other] == [h["chunk_id"] for h in as_documented]
    assert gw.ok(name, {canonical: "json documents", other: "json documents", "k": 5})["results"]  # the same: fine
    both = gw.error(name, {canonical: "json documents", other: "replica lag", "k": 5})
    assert both["code"] == "INVALID_ARGUMENT" and "not both" in both["message"], both
    spec = gw.handler.find_tool(name)
    assert canonical in spec.input_schema["properties"]  # the blueprint's name stays the documented one
    assert other in spec.input_schema["properties"][canonical]["description"]


@pytest.mark.parametrize("mode", list(MODES))
def test_an_unknown_source_in_a_filter_says_which_sources_exist(gw: Gateway, mode: str) -> None:
    """Issue 29: an unknown source_names (or source_ids) filter returned nothing, silently; it is
    NOT_FOUND naming the sources there are, in every mode (as rag.admin.sync answers an unknown name)."""
    name, args = MODES[mode]
    error = gw.error(name, {**args, "filters": {"source_names": ["alpha", "betta"]}})
    assert error["code"] == "NOT_FOUND", error
    assert "'betta'" in error["message"] and "alpha (1)" in error["message"] and "gamma (3, disabled)" in error["message"]
    assert error["details"]["unknown_source_names"] == ["betta"] and error["details"]["unknown_source_ids"] == []
    assert {s["name"] for s in error["details"]["sources"]} == {"alpha", "beta", "gamma"}
    by_id = gw.error(name, {**args, "filters": {"source_ids": [1, 99]}})
    assert by_id["code"] == "NOT_FOUND" and by_id["details"]["unknown_source_ids"] == [99], by_id
    assert gw.ok(name, {**args, "k": 50, "filters": {"source_names": ["gamma"]}})["results"] == []  # known, disabled


@pytest.mark.parametrize(
    ("tool", "key", "known"), [("rag.get_chunks", "chunk_ids", "s1:0#0"), ("rag.get_docs", "doc_ids", "s1:0")]
)
def test_get_chunks_and_get_docs_answer_unknown_ids_alike(gw: Gateway, tool: str, key: str, known: str) -> None:
    """Issue 29: both tools list unknown ids under `missing` beside what they found, and both are
    NOT_FOUND when none is found, the error's details.missing listing the ids."""
    partial = gw.ok(tool, {key: [known, "nope-1"]})
    assert partial["missing"] == ["nope-1"]
    error = gw.error(tool, {key: ["nope-1", "nope-2", "nope-1"]})
    assert error["code"] == "NOT_FOUND" and error["details"]["missing"] == ["nope-1", "nope-2"], error
