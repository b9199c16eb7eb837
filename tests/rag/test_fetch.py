"""rag.fetch_from_source end to end: a real index written through its writer API, on both
backends (rag.db, and PostgreSQL 18 + pgvector) with the same assertions, RAG SOURCES and MCP
PROFILES loaded through the ConfigStore, rows re-read from real MariaDB, PostgreSQL and SQLite by
primary key."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest

from backends.declarations import BACKEND_VARIABLES
from backends.pools import TargetPools
from backends.profiles import PROFILES_MODULE
from backends.retrieval.ingest.sources_config import RAG_SOURCES_MODULE
from backends.retrieval.storage.postgresql.index import PgRagIndex
from backends.retrieval.storage.sqlite.index import DocumentRecord, RagIndex
from gateway.services import Services
from gateway.store import ConfigStore
from gateway.tools import ToolHandler
from gateway.variables import all_variables
from handlers.rag.fetch import FetchTools, fit_row
from tests.backends.test_pools import free_port
from tests.query import add_auth, add_target, call, error, insert, ok

BIG = "x" * 50_000


class FetchHandler(ToolHandler):
    """The smallest handler serving rag.fetch_from_source over one index and the targets' pools."""

    endpoint = "rag"
    tool_groups = (FetchTools,)

    def __init__(self, services: Services, index: RagIndex | PgRagIndex) -> None:
        super().__init__(services)
        self.index = index

    def make_groups(self) -> list[object]:
        return [FetchTools(lambda: self.index, self.services.targets)]


def body_map(col: str) -> str:
    return json.dumps({"body": {"concat": [{"col": col}]}})


@pytest.fixture(scope="module")
def configured(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict]:
    """The source tables on three engines, and a config store whose runtime has their targets and RAG sources."""
    conn = pymysql.connect(**mariadb_db, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE posts (Id INT PRIMARY KEY, Title VARCHAR(200), Body TEXT, Score DECIMAL(6,2), Secret VARCHAR(20))"
        )
        cur.executemany(
            "INSERT INTO posts VALUES (%s, %s, %s, %s, %s)",
            [(1, "One", "first", 1.5, "s1"), (2, "Two", "second", 2, "s2"), (3, "Big", BIG, 0, "s3")],
        )
    conn.close()
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute("CREATE SCHEMA inv")
        pg.execute("CREATE TABLE inv.items (id int, part int, name text, added date, PRIMARY KEY (id, part))")
        pg.execute("INSERT INTO inv.items VALUES (7, 1, 'bolt', '2024-05-01'), (7, 2, 'nut', NULL)")
    tmp = tmp_path_factory.mktemp("fetch")
    lite_path = tmp / "notes.db"
    lite = sqlite3.connect(lite_path)
    lite.execute("CREATE TABLE notes (note_id INTEGER PRIMARY KEY, text TEXT, raw BLOB)")
    lite.execute("INSERT INTO notes VALUES (10, 'hello', x'00ff')")
    lite.commit()
    lite.close()

    store = ConfigStore(tmp / "data", variables=all_variables(BACKEND_VARIABLES), modules=[PROFILES_MODULE, RAG_SOURCES_MODULE])
    store.initialize()
    store.load_to_runtime("MCP VARIABLES")
    store.set_variable("mcp-query_pool_timeout_ms", "300")
    store.load_to_runtime("MCP VARIABLES")
    add_auth(store, "maria", mariadb_db["user"], mariadb_db["password"])
    add_auth(store, "pg", postgres_db["user"])
    add_target(
        store,
        "maria",
        "mysql",
        host="127.0.0.1",
        port=mariadb_db["port"],
        database=mariadb_db["database"],
        auth_profile_id="maria",
    )
    add_target(
        store, "pg", "pgsql", host="127.0.0.1", port=postgres_db["port"], database=postgres_db["dbname"], auth_profile_id="pg"
    )
    add_target(store, "lite", "sqlite", database=str(lite_path), allow_discovery=0)  # fetch does not need discovery rights
    add_target(store, "down", "pgsql", host="127.0.0.1", port=free_port(), database="x", auth_profile_id="pg")
    store.load_to_runtime("MCP PROFILES")
    sources = [
        (1, "stack_posts", "maria", "posts", "Id", body_map("Body")),
        (2, "inventory", "pg", "inv.items", "id,part", body_map("name")),
        (3, "notes", "lite", "notes", "note_id", body_map("text")),
        (4, "offline", "down", "things", "id", body_map("body")),
    ]
    for source_id, name, target_id, table, pk, doc_map in sources:
        insert(
            store,
            "rag_sources",
            source_id=source_id,
            name=name,
            target_id=target_id,
            table_name=table,
            pk_column=pk,
            doc_map_json=doc_map,
        )
    store.load_to_runtime("RAG SOURCES")
    runtime = store.read_runtime()
    pools = TargetPools(runtime)
    yield {"store": store, "runtime": runtime, "pools": pools, "sources": sources, "tmp": tmp}
    pools.close()
    store.close()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def env(request: pytest.FixtureRequest, configured: dict) -> Iterator[dict]:
    """The documents indexed in rag.db or in PostgreSQL; the handler reads the index it is given."""
    tmp: Path = configured["tmp"]
    if request.param == "postgresql":
        server = request.getfixturevalue("pgvector_server")
        name = f"mcpgw_fetch_{uuid.uuid4().hex[:8]}"
        index = PgRagIndex.open(server.create_database(name), embedding_model_id="test-model", dim=4)
        request.addfinalizer(lambda: server.drop_database(name))
    else:
        index = RagIndex.open(tmp / "rag.db", embedding_model_id="test-model", dim=4)
    docs = [
        ("posts:1", 1, "stack_posts", {"Id": 1}),
        ("posts:2", 1, "stack_posts", {"Id": 2}),
        ("posts:3", 1, "stack_posts", {"Id": 3}),
        ("posts:99", 1, "stack_posts", {"Id": 99}),  # indexed, since deleted at the source
        ("items:7:2", 2, "inventory", {"id": 7, "part": 2}),
        ("items:7:1", 2, "inventory", {"id": 7, "part": 1}),
        ("notes:10", 3, "notes", {"note_id": 10}),
        ("things:1", 4, "offline", {"id": 1}),
        ("things:2", 4, "offline", {"id": 2}),
        ("gone:1", 5, "removed_source", {"id": 1}),  # its source is no longer configured
    ]
    for source_id, name, *_ in configured["sources"]:
        index.upsert_source(source_id, name)
    index.upsert_source(5, "removed_source")
    index.write_batch(
        [
            DocumentRecord(doc_id=d, source_id=s, source_name=n, pk_json=pk, title="", body="b", metadata={}, updated_at=None)
            for d, s, n, pk in docs
        ]
    )
    services = Services(
        data_dir=tmp,
        store=configured["store"],
        runtime=configured["runtime"],
        stats=None,  # type: ignore[arg-type]
        metrics=None,  # type: ignore[arg-type]
        targets=configured["pools"],
    )
    yield {"handler": FetchHandler(services, index)}
    index.close()


def fetch(env: dict, **args) -> dict:
    return ok(env["handler"], "rag.fetch_from_source", **args)


def test_rows_from_every_engine_with_requested_columns(env: dict) -> None:
    out = fetch(env, doc_ids=["posts:1", "items:7:1", "notes:10"], columns=None)
    assert out["errors"] == [] and out["truncated"] is False
    rows = {r["doc_id"]: r for r in out["rows"]}
    assert rows["posts:1"] == {
        "doc_id": "posts:1",
        "source_name": "stack_posts",
        "row": {"Id": 1, "Title": "One", "Body": "first", "Score": "1.50", "Secret": "s1"},
    }
    assert rows["items:7:1"]["row"] == {"id": 7, "part": 1, "name": "bolt", "added": "2024-05-01"}
    assert rows["notes:10"]["row"] == {"note_id": 10, "text": "hello", "raw": {"$bytes_b64": "AP8="}}
    only = fetch(env, doc_ids=["posts:2", "items:7:2"], columns=["title", "Id", "name"])  # case-insensitive on MySQL
    # Columns are checked per source: 'title'/'Id' are not in inv.items, 'name' is not in posts.
    assert only["rows"] == []
    assert {e["code"] for e in only["errors"]} == {"INVALID_ARGUMENT"}
    only = fetch(env, doc_ids=["posts:2"], columns=["title", "Id"])
    assert only["rows"][0]["row"] == {"Title": "Two", "Id": 2}


def test_order_and_per_document_errors(env: dict) -> None:
    out = fetch(env, doc_ids=["nope:1", "posts:2", "posts:99", "gone:1", "things:1", "things:2", "items:7:2", "posts:2"])
    assert [r["doc_id"] for r in out["rows"]] == ["posts:2", "items:7:2"]  # duplicates served once
    errors = {e["doc_id"]: (e["code"], e["message"]) for e in out["errors"]}
    assert errors["nope:1"] == ("NOT_FOUND", "doc_id is not in the index")
    assert errors["posts:99"] == ("NOT_FOUND", "the source row no longer exists")
    assert errors["gone:1"][0] == "NOT_FOUND" and "no longer configured" in errors["gone:1"][1]
    for doc_id in ("things:1", "things:2"):
        code, message = errors[doc_id]
        assert code == "UNAVAILABLE" and message.startswith("target down is unreachable")
        assert "127.0.0.1" not in message


def test_columns_are_a_whitelist_not_sql(env: dict) -> None:
    for column in ("Title FROM posts; --", "Secret`", "*", "1", "Id) OR (1=1"):
        out = fetch(env, doc_ids=["posts:1"], columns=[column])
        assert out["rows"] == []
        assert out["errors"][0]["code"] == "INVALID_ARGUMENT" and "not in the table" in out["errors"][0]["message"]


def test_row_and_byte_caps(env: dict) -> None:
    out = fetch(env, doc_ids=["posts:1", "posts:2", "items:7:1", "notes:10"], limits={"max_rows": 2})
    assert [r["doc_id"] for r in out["rows"]] == ["posts:1", "posts:2"] and out["truncated"] is True
    assert [(e["doc_id"], e["code"]) for e in out["errors"]] == [("items:7:1", "LIMIT_EXCEEDED"), ("notes:10", "LIMIT_EXCEEDED")]
    out = fetch(env, doc_ids=["posts:3", "posts:1"], columns=["Id", "Body"], limits={"max_bytes": 2000})
    big = out["rows"][0]["row"]
    assert out["truncated"] is True and big["Id"] == 3 and 0 < len(big["Body"]) < 2000
    assert len(json.dumps(out["rows"])) <= 2000 + 200
    assert fit_row({"a": 1, "b": 2}, 5) == ({"a": 1, "b": 2}, True)  # nothing to shorten: the caller drops it


def test_bad_requests_are_invalid_argument(env: dict) -> None:
    handler = env["handler"]
    for args in (
        {"doc_ids": []},
        {"doc_ids": ["a"], "limits": {"max_rows": 0}},
        {"doc_ids": ["a"], "limits": {"rows": 1}},
        {"doc_ids": ["a"], "sql": "SELECT 1"},
    ):
        assert error(handler, "rag.fetch_from_source", **args)["code"] == "INVALID_ARGUMENT"
    is_error, payload = call(handler, "rag.fetch_from_source", doc_ids=["posts:1"])
    assert not is_error and payload["stats"]["rows"] == 1
