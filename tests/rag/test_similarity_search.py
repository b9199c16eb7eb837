"""Issue 28 through the official MCP SDK client against a real gateway: rag.generate_embedding
equals the vector the index stored for the same text; rag.similarity_search over a user's own
PostgreSQL table (PostgreSQL 18 + pgvector, an HNSW-indexed vector(64) column, 10k rows built
with one generate_series) finds the rows a brute-force scan ranks first (recall@10 >= 0.95),
keeps max_output_tokens and the MMR bound of chunks per row, and refuses a query embedded with
a model of another dimension; rag.vector_columns discovers the column; a metadata filter works
end to end on the synced source."""

from __future__ import annotations

import base64
import json
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import numpy as np
import psycopg
import pytest
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

from tests.test_sdk_client import connect

pytestmark = pytest.mark.skipif("rag" not in registered_endpoints(), reason="the rag endpoint is needed")

ROWS = 10_000
DIM = 64
CATEGORIES = ("outdoor", "kitchen", "garden", "office")
DOC_MAP = {
    "doc_id": {"format": "items:{id}"},
    "title": {"concat": [{"col": "name"}]},
    "body": {"concat": [{"col": "body"}]},
    "metadata": {"pick": ["category"]},
}
# 40 cluster centres and a per-row offset, all deterministic functions of the row number: data
# with structure (as embeddings have), built by the database in one statement.
EMBEDDING_SQL = (
    "(SELECT array_agg(sin(((i % 40) + 1) * (j + 1) * 0.7) + 0.35 * sin(i * (j + 3) * 0.013 + j * j) ORDER BY j)"
    " FROM generate_series(0, 63) j)::vector(64)"
)


def _admin(gateway: GatewayProcess, http: Any, statement: str) -> None:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, (statement, result)


def _b64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()


def _parse(text: str) -> np.ndarray:
    return np.array(json.loads(text), dtype=np.float32)


@pytest.fixture(scope="module")
def world(pgvector_server, tmp_path_factory) -> Iterator[dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]
    user_db, index_db = f"mcpgw_simuser_{tag}", f"mcpgw_simidx_{tag}"
    user_dsn = pgvector_server.create_database(user_db)
    index_dsn = pgvector_server.create_database(index_db)
    with psycopg.connect(user_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, category text, body text, embedding vector(64))")
        conn.execute(
            "INSERT INTO docs SELECT i, (ARRAY['outdoor','kitchen','garden','office'])[1 + i % 4],"
            " 'row ' || i || ' about ' || (ARRAY['tents','knives','roses','desks'])[1 + i % 4] || '. '"
            " || repeat('Some longer text of row ' || i || ' with many words. ', CASE WHEN i % 10 = 0 THEN 40 ELSE 2 END),"
            f" {EMBEDDING_SQL} FROM generate_series(1, {ROWS}) i"
        )
        conn.execute("CREATE INDEX docs_embedding_hnsw ON docs USING hnsw (embedding vector_cosine_ops)")
        conn.execute("CREATE TABLE small (id int PRIMARY KEY, body text, embedding vector(8))")
        conn.execute("INSERT INTO small VALUES (1, 'eight dims', '[1,2,3,4,5,6,7,8]')")
        conn.execute("CREATE TABLE secret_vectors (id int PRIMARY KEY, body text, embedding vector(64))")
        conn.execute(f"INSERT INTO secret_vectors SELECT i, 'secret ' || i, {EMBEDDING_SQL} FROM generate_series(1, 50) i")
        conn.execute("ANALYZE docs")
    corpus = tmp_path_factory.mktemp("simsrc") / "items.db"
    with sqlite3.connect(corpus) as src:
        src.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, body TEXT, category TEXT)")
        src.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)",
            [(i, f"item {i}", f"a sturdy thing number {i} for the {CATEGORIES[i % 4]}", CATEGORIES[i % 4]) for i in range(1, 41)],
        )
    variables = {
        "rag-embedding_provider": "hash",
        "rag-embedding_dim": DIM,
        "rag-backend": "postgresql",
        "rag-postgres_dsn": index_dsn,
        # the admin's declaration: public.small.embedding was filled by an 8-dim model
        "rag-vector_column_models": json.dumps({"vec.public.small.embedding": {"provider": "hash", "dim": 8}}),
    }
    with start_gateway(variables=variables) as gateway, gateway.client(timeout=60.0) as http:
        for statement in (
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pgv', 'postgres', '')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, max_rows) "
            f"VALUES ('vec', 'pgsql', '127.0.0.1', {pgvector_server.port}, '{user_db}', 'pgv', 200)",
            f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('items', 'sqlite', '{corpus}')",
            "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s) "
            f"VALUES (1, 'items', 'items', 'items', 'id', '{json.dumps(DOC_MAP)}', 0)",
            "INSERT INTO mcp_query_rules (rule_id, active, target_id, match_pattern, error_msg, apply)"
            " VALUES (28001, 1, 'vec', 'secret_vectors', 'secret_vectors is off limits', 1)",
            "LOAD MCP QUERY RULES TO RUNTIME",
            "LOAD MCP PROFILES TO RUNTIME",
            "LOAD RAG SOURCES TO RUNTIME",
        ):
            _admin(gateway, http, statement)
        deadline = time.monotonic() + 30
        while True:
            started = call_tool(http, gateway, "rag", "rag.admin.sync", {"source_names": ["items"]})["structuredContent"]
            if "error" not in started or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert started.get("accepted") is True, started
        while time.monotonic() < deadline:
            (job,) = call_tool(http, gateway, "rag", "rag.admin.jobs", {"job_id": started["job_id"]})["structuredContent"]["jobs"]
            if job["state"] in ("ok", "failed"):
                break
            time.sleep(0.1)
        assert job["state"] == "ok", job
        yield {"gateway": gateway, "user_dsn": user_dsn, "index_dsn": index_dsn, "corpus": corpus}
    pgvector_server.drop_database(user_db)
    pgvector_server.drop_database(index_db)


def sdk_call(gateway: GatewayProcess, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    async def scenario() -> tuple[bool, dict[str, Any]]:
        async with connect(gateway, "rag", mode="auto") as client:
            try:
                result = await client.call_tool(name, arguments)
            except Exception as exc:  # raise_exceptions: a tool error arrives as an exception
                return True, {"error": str(exc)}
            return bool(result.is_error), result.structured_content

    return anyio.run(scenario)


def test_generate_embedding_equals_the_stored_vector(world: dict[str, Any]) -> None:
    with psycopg.connect(world["index_dsn"]) as conn:
        stored = conn.execute("SELECT title, body, embedding::text FROM rag_chunks ORDER BY chunk_id LIMIT 3").fetchall()
    assert len(stored) == 3
    texts = [f"{title}\n\n{body}" for title, body, _ in stored]  # the default input_template
    is_error, out = sdk_call(world["gateway"], "rag.generate_embedding", {"texts": texts})
    assert not is_error, out
    assert out["dim"] == DIM and out["model"].startswith("hash") and len(out["embeddings"]) == 3
    for (_, _, vector), item in zip(stored, out["embeddings"], strict=True):
        got = np.frombuffer(base64.b64decode(item["values_b64"]), dtype="<f4")
        assert item["dim"] == DIM and item["model"] == out["model"]
        assert np.array_equal(got, _parse(vector))  # bit for bit
    # The vector is query_embedding's form: rag.search_vector finds its own chunk at distance 0.
    is_error, single = sdk_call(world["gateway"], "rag.generate_embedding", {"text": texts[0]})
    query = {"dim": DIM, "values_b64": single["embeddings"][0]["values_b64"], "model": single["model"]}
    is_error, found = sdk_call(world["gateway"], "rag.search_vector", {"query_embedding": query, "k": 1})
    assert not is_error and found["results"][0]["distance_raw"] == pytest.approx(0, abs=1e-5), found


def test_generate_embedding_is_bounded(world: dict[str, Any]) -> None:
    is_error, out = sdk_call(world["gateway"], "rag.generate_embedding", {"texts": ["x"] * 65})
    assert is_error and "texts" in json.dumps(out), out
    is_error, out = sdk_call(world["gateway"], "rag.generate_embedding", {"text": "x", "texts": ["y"]})
    assert is_error and "exactly one of text and texts" in json.dumps(out), out
    is_error, out = sdk_call(world["gateway"], "rag.generate_embedding", {"text": "x" * 9000})
    assert is_error and "rag-query_max_bytes" in json.dumps(out), out


def test_metadata_filter_on_the_synced_source_matches_sql_where(world: dict[str, Any]) -> None:
    with sqlite3.connect(world["corpus"]) as src:
        expected = {f"items:{i}" for (i,) in src.execute("SELECT id FROM items WHERE category = 'garden'")}
    filters = {"metadata": [{"key": "category", "eq": "garden"}]}
    is_error, out = sdk_call(world["gateway"], "rag.search_hybrid", {"query": "sturdy thing", "k": 50, "filters": filters})
    assert not is_error, out
    assert {h["doc_id"] for h in out["results"]} == expected and out["warnings"] == []


def test_vector_columns_discovers_the_column_and_its_index(world: dict[str, Any]) -> None:
    is_error, out = sdk_call(world["gateway"], "rag.vector_columns", {"target_id": "vec"})
    assert not is_error, out
    by_table = {c["table"]: c for c in out["columns"]}
    docs = by_table["docs"]
    assert (docs["column"], docs["dim"], docs["metric"], docs["index"]) == ("embedding", 64, "cosine", "hnsw:docs_embedding_hnsw")
    assert docs["text_columns"] == ["category", "body"] and docs["key_columns"] == ["id"] and docs["embeddable"] is True
    assert by_table["small"]["embeddable"] is True  # its declared model makes 8 dims


def test_similarity_search_recall_at_10_against_brute_force(world: dict[str, Any]) -> None:
    rng = np.random.default_rng(28)
    with psycopg.connect(world["user_dsn"]) as conn:
        seeds = [
            _parse(v)
            for (v,) in conn.execute(
                "SELECT embedding::text FROM docs WHERE id = ANY(%s)", ([int(i) for i in rng.integers(1, ROWS, 20)],)
            )
        ]
        queries = [(s + rng.normal(0, 0.15, DIM)).astype(np.float32) for s in seeds]
        conn.execute("SET enable_indexscan = off")  # the exact answer: a sequential scan
        truth = [
            [
                r
                for (r,) in conn.execute(
                    "SELECT id FROM docs ORDER BY embedding <=> %s::vector LIMIT 10",
                    ("[" + ",".join(map(str, q.tolist())) + "]",),
                )
            ]
            for q in queries
        ]
    hits = 0
    for query, exact in zip(queries, truth, strict=True):
        args = {"target_id": "vec", "table": "docs", "query_embedding": {"dim": DIM, "values_b64": _b64(query)}, "k": 10}
        is_error, out = sdk_call(world["gateway"], "rag.similarity_search", args)
        assert not is_error, out
        assert out["index"] == "hnsw:docs_embedding_hnsw" and out["metric"] == "cosine"
        found = [row["key"]["id"] for row in out["rows"]]
        hits += len(set(found) & set(exact))
    # The statement's form (OPERATOR(public.<=>), a bound vector) is one the planner answers with the HNSW index.
    with psycopg.connect(world["user_dsn"]) as conn:
        plan = conn.execute(
            "EXPLAIN SELECT id FROM docs WHERE embedding IS NOT NULL ORDER BY embedding OPERATOR(public.<=>) CAST(%s AS public.vector) LIMIT 10",
            ("[" + ",".join(map(str, queries[0].tolist())) + "]",),
        ).fetchall()
    assert "docs_embedding_hnsw" in str(plan), plan
    recall = hits / (10 * len(queries))
    print(f"recall@10 = {recall:.3f} over {len(queries)} queries")
    assert recall >= 0.95, recall


def test_similarity_search_chunks_respect_the_budget_and_the_mmr_bound(world: dict[str, Any]) -> None:
    args = {
        "target_id": "vec",
        "table": "docs",
        "query_text": "row 120 about tents, longer text with many words",
        "k": 30,
        "chunk_chars": 200,
        "max_chunks_per_row": 2,
        "max_chunks": 40,
        "max_output_tokens": 600,
        "lambda": 0.5,
    }
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", args)
    assert not is_error, out
    assert len(out["rows"]) == 30 and out["chunks"]
    per_row: dict[int, int] = {}
    for chunk in out["chunks"]:
        per_row[chunk["key"]["id"]] = per_row.get(chunk["key"]["id"], 0) + 1
        assert set(chunk) >= {"key", "chunk_index", "text", "score", "score_vec", "score_bm25"}
    assert max(per_row.values()) <= 2, per_row
    assert sum(len(c["text"]) for c in out["chunks"]) <= 600 * 4
    assert out["truncated"] is True  # the budget cut the chunks
    keys = {row["key"]["id"] for row in out["rows"]}
    assert set(per_row) <= keys  # every chunk comes from a row found
    # lambda = 1 with one chunk per row: the chunks follow relevance, one per row
    is_error, strict = sdk_call(world["gateway"], "rag.similarity_search", {**args, "lambda": 1.0, "max_chunks_per_row": 1})
    assert not is_error and len({c["key"]["id"] for c in strict["chunks"]}) == len(strict["chunks"])
    scores = [c["score"] for c in strict["chunks"]]
    assert scores == sorted(scores, reverse=True)


def test_similarity_search_refuses_a_model_of_another_dimension(world: dict[str, Any]) -> None:
    # small.embedding is declared as filled by hash:8 (rag-vector_column_models): query_text is embedded with it
    args = {"target_id": "vec", "table": "small", "query_text": "eight dims"}
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", args)
    assert not is_error and [r["key"] for r in out["rows"]] == [{"id": 1}], out
    # an undeclared 16-dim column: the index's 64-dim model cannot embed for it
    with psycopg.connect(world["user_dsn"], autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS wide (id int PRIMARY KEY, body text, embedding vector(16))")
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", {"target_id": "vec", "table": "wide", "query_text": "x"})
    text = json.dumps(out)
    assert is_error and "dim 16" in text and "dim 64" in text and "rag-vector_column_models" in text, out
    is_error, out = sdk_call(
        world["gateway"],
        "rag.similarity_search",
        {"target_id": "vec", "table": "small", "query_embedding": {"dim": 4, "values_b64": _b64(np.ones(4))}},
    )
    assert is_error and "dim 4" in json.dumps(out), out
    is_error, out = sdk_call(
        world["gateway"], "rag.similarity_search", {"target_id": "items", "table": "items", "query_text": "x"}
    )
    assert is_error and "PostgreSQL" in json.dumps(out) and "sqlite-vec" in json.dumps(out), out
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", {"target_id": "vec", "table": "nope", "query_text": "x"})
    assert is_error and "no vector column" in json.dumps(out), out


def test_a_table_a_rule_blocks_is_neither_listed_nor_searched(world: dict[str, Any]) -> None:
    is_error, out = sdk_call(world["gateway"], "rag.vector_columns", {"target_id": "vec"})
    assert not is_error and "secret_vectors" not in json.dumps(out), out
    query = {"dim": DIM, "values_b64": _b64(np.ones(DIM))}
    is_error, out = sdk_call(
        world["gateway"], "rag.similarity_search", {"target_id": "vec", "table": "secret_vectors", "query_embedding": query}
    )
    assert is_error and "off limits" in json.dumps(out) and "secret 1" not in json.dumps(out), out


@pytest.mark.parametrize(
    "hostile",
    [
        {"table": 'docs" WHERE false; DROP TABLE docs; --'},
        {"table": "docs", "key_columns": ["id\", (SELECT string_agg(body, ',') FROM secret_vectors) AS \"x"]},
        {"table": "docs", "text_columns": ["(SELECT body FROM secret_vectors LIMIT 1)"]},
        {"table": "docs", "vector_column": "embedding <=> embedding) --"},
    ],
)
def test_identifiers_cannot_inject_sql(world: dict[str, Any], hostile: dict[str, Any]) -> None:
    query = {"dim": DIM, "values_b64": _b64(np.ones(DIM))}
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", {"target_id": "vec", "query_embedding": query, **hostile})
    assert is_error and "secret" not in json.dumps(out).replace("secret_vectors", ""), out
    with psycopg.connect(world["user_dsn"]) as conn:
        assert conn.execute("SELECT count(*) FROM docs").fetchone()[0] == ROWS


def test_asking_more_rows_than_one_hnsw_scan_gives_says_so(world: dict[str, Any]) -> None:
    query = {"dim": DIM, "values_b64": _b64(np.ones(DIM))}
    args = {"target_id": "vec", "table": "docs", "query_embedding": query, "k": 150, "max_output_tokens": 50}
    is_error, out = sdk_call(world["gateway"], "rag.similarity_search", args)
    assert not is_error, out
    assert len(out["rows"]) == 40  # pgvector's default hnsw.ef_search bounds one index scan
    assert any("hnsw.ef_search" in w for w in out["warnings"]), out["warnings"]
    assert sum(len(c["text"]) for c in out["chunks"]) <= 50 * 4 and out["truncated"] is True
