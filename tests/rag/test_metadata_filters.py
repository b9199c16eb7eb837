"""Filters on any metadata key (issue 28): a user's own table with a `category` column, mapped by
its doc_map_json (the real DocMap code), indexed on both backends; every metadata clause must
select exactly the rows the same condition selects as a SQL WHERE on the user's table, in every
search mode; a key no source picks is reported in `warnings`; bad clauses are INVALID_ARGUMENT."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import uuid
from typing import Any

import pytest

from backends.retrieval.ingest.docmap import DocMap
from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord
from tests.rag.test_search_tools import Gateway

CATEGORIES = ("outdoor", "kitchen", "garden", "office")
DOC_MAP = {
    "doc_id": {"format": "items:{id}"},
    "title": {"concat": [{"col": "name"}]},
    "body": {"concat": [{"col": "name"}, {"lit": " "}, {"col": "body"}]},
    "metadata": {"pick": ["category", "price", "published", "in_stock", "note"], "rename": {"in_stock": "stock"}},
}


def user_table() -> sqlite3.Connection:
    """The user's own table: 60 items over 4 categories, prices, dates, and a sometimes-NULL note."""
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, body TEXT, category TEXT, price REAL, published TEXT,"
        " in_stock INTEGER, note TEXT)"
    )
    rows = [
        (
            i,
            f"item {i}",
            f"a sturdy database thing number {i} for the {CATEGORIES[i % 4]}",
            CATEGORIES[i % 4],
            round(1.5 * i, 2),
            f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:30:00" + ("Z" if i % 2 else ""),
            i % 3 == 0,
            None if i % 5 else f"note {i}",
        )
        for i in range(1, 61)
    ]
    db.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return db


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def gw(request, tmp_path_factory):
    backend: dict[str, str] = {}
    if request.param == "postgresql":
        server = request.getfixturevalue("pgvector_server")
        name = f"mcpgw_metaflt_{uuid.uuid4().hex[:8]}"
        backend = {"rag-backend": "postgresql", "rag-postgres_dsn": server.create_database(name)}
        request.addfinalizer(lambda: server.drop_database(name))
    gateway = Gateway(tmp_path_factory.mktemp("ragmeta"), **backend)
    index, embedder = gateway.handler.index, gateway.handler.embedder
    index.upsert_source(1, "items", doc_map_json=DOC_MAP)
    doc_map = DocMap.from_json(DOC_MAP, table="items", pk_columns=("id",))
    db = user_table()
    records = []
    for row in db.execute("SELECT * FROM items"):
        row = dict(row)
        row["in_stock"] = bool(row["in_stock"])  # a boolean column, as PostgreSQL or MySQL would give it
        doc_id, title, body, metadata = doc_map.map_row(row)
        chunk = ChunkRecord(f"{doc_id}#0", 0, title, body, {}, hashlib.sha1(body.encode()).hexdigest(), embedder.embed([body])[0])
        records.append(DocumentRecord(doc_id, 1, "items", {"id": row["id"]}, title, body, metadata, None, [chunk]))
    index.write_batch(records)
    gateway.db = db
    yield gateway
    asyncio.run(gateway.handler.close())


def where(db: sqlite3.Connection, condition: str, params: tuple[Any, ...] = ()) -> set[str]:
    return {f"items:{i}" for (i,) in db.execute(f"SELECT id FROM items WHERE {condition}", params)}


# (metadata clauses, the same condition as SQL over the user's table)
CASES = {
    "eq": ([{"key": "category", "eq": "outdoor"}], "category = 'outdoor'"),
    "in": ([{"key": "category", "in": ["kitchen", "garden"]}], "category IN ('kitchen', 'garden')"),
    "eq_and_in_mean_either": ([{"key": "category", "eq": "office", "in": ["garden"]}], "category IN ('office', 'garden')"),
    "numeric_range": ([{"key": "price", "gte": 15, "lt": 40.5}], "price >= 15 AND price < 40.5"),
    "number_eq": ([{"key": "price", "eq": 30}], "price = 30"),
    "date_range": (
        [{"key": "published", "gt": "2024-03-10T00:00:00Z", "lte": "2024-08-01"}],
        "published > '2024-03-10T00:00:00' AND substr(published, 1, 19) <= '2024-08-01T00:00:00'",
    ),
    "boolean": ([{"key": "stock", "eq": True}], "in_stock = 1"),
    "exists": ([{"key": "note", "exists": True}], "note IS NOT NULL"),
    "not_exists": ([{"key": "note", "exists": False}], "note IS NULL"),
    "several_clauses_all_hold": (
        [{"key": "category", "eq": "outdoor"}, {"key": "price", "lte": 45}],
        "category = 'outdoor' AND price <= 45",
    ),
    "no_coercion_string_vs_number": ([{"key": "price", "eq": "30"}], "FALSE"),
    "empty_in": ([{"key": "category", "in": []}], "FALSE"),
}
MODES = {
    "fts": ("rag.search_fts", {"query": "database"}),
    "vector": ("rag.search_vector", {"query_text": "sturdy database thing"}),
    "hybrid": ("rag.search_hybrid", {"query": "sturdy database thing"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_metadata_clause_matches_exactly_what_sql_where_matches(gw: Gateway, case: str) -> None:
    clauses, condition = CASES[case]
    expected = where(gw.db, condition)
    for mode, (tool, args) in MODES.items():
        out = gw.ok(tool, {**args, "k": 100, "filters": {"metadata": clauses}})
        got = {hit["doc_id"] for hit in out["results"]}
        assert got == expected, (mode, case, sorted(got ^ expected))
        assert out["warnings"] == []


def test_blueprint_filters_keep_their_contract_beside_metadata(gw: Gateway) -> None:
    """tags_any on a key the source does not have still admits nothing; combined with metadata."""
    out = gw.ok("rag.search_fts", {"query": "database", "k": 100, "filters": {"tags_any": ["outdoor"]}})
    assert out["results"] == []
    (warning,) = out["warnings"]  # not silence: the source has no tags, and the way to filter is named
    assert "tags_any" in warning and "no indexed document has Tags" in warning and "filters.metadata" in warning
    both = gw.ok(
        "rag.search_fts",
        {
            "query": "database",
            "k": 100,
            "filters": {"doc_ids": ["items:4", "items:5"], "metadata": [{"key": "category", "eq": "outdoor"}]},
        },
    )
    assert [h["doc_id"] for h in both["results"]] == ["items:4"]


def test_a_key_no_document_has_is_a_warning_not_silence(gw: Gateway) -> None:
    out = gw.ok("rag.search_fts", {"query": "database", "k": 10, "filters": {"metadata": [{"key": "Category", "eq": "outdoor"}]}})
    assert out["results"] == []
    (warning,) = out["warnings"]
    assert "'Category'" in warning and "did you mean 'category'" in warning and "price" in warning


@pytest.mark.parametrize(
    "clause",
    [
        {"key": "", "eq": "x"},
        {"key": 'a"b', "eq": "x"},
        {"key": "price", "gt": "not a date"},
        {"key": "category", "like": "out%"},
        {"key": "category", "in": ["x"] * 1001},
    ],
)
def test_bad_metadata_clauses_are_invalid_argument(gw: Gateway, clause: dict[str, Any]) -> None:
    error = gw.error("rag.search_fts", {"query": "database", "filters": {"metadata": [clause]}})
    assert error["code"] == "INVALID_ARGUMENT", error
