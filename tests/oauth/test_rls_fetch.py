"""rag.fetch_from_source under row-level security: the source rows are re-read with the caller's
identity set transaction-locally (as backends/sql.py does for SQL tools), so a user fetching
another user's indexed documents gets NOT_FOUND for them, and nothing of theirs stays on the
pooled session. In process: a real index, real PostgreSQL, the tool run as the server runs it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.declarations import BACKEND_VARIABLES
from backends.pools import TargetPools
from backends.profiles import PROFILES_MODULE
from backends.retrieval.ingest.sources_config import RAG_SOURCES_MODULE
from backends.retrieval.storage.sqlite.index import DocumentRecord, RagIndex
from gateway.call import Caller
from gateway.services import Services
from gateway.store import ConfigStore
from gateway.tools import ToolHandler
from gateway.variables import all_variables
from handlers.rag.fetch import FetchTools
from tests.query import add_auth, add_target, insert


class FetchHandler(ToolHandler):
    endpoint = "rag"
    tool_groups = (FetchTools,)

    def __init__(self, services: Services, index: RagIndex) -> None:
        super().__init__(services)
        self.index = index

    def make_groups(self) -> list[object]:
        return [FetchTools(lambda: self.index, self.services.targets)]


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory, rls_db: dict[str, Any]) -> Iterator[FetchHandler]:
    tmp: Path = tmp_path_factory.mktemp("rls-fetch")
    store = ConfigStore(tmp / "data", variables=all_variables(BACKEND_VARIABLES), modules=[PROFILES_MODULE, RAG_SOURCES_MODULE])
    store.initialize()
    store.set_variable("mcp-oauth_db_settings", "app.user_id=sub")
    store.load_to_runtime("MCP VARIABLES")
    add_auth(store, "rls", rls_db["role"], rls_db["password"])
    add_target(
        store, "notes_db", "pgsql", host="127.0.0.1", port=rls_db["port"], database=rls_db["dbname"], auth_profile_id="rls"
    )
    store.load_to_runtime("MCP PROFILES")
    insert(
        store,
        "rag_sources",
        source_id=1,
        name="notes",
        target_id="notes_db",
        table_name="notes",
        pk_column="id",
        doc_map_json='{"body": {"concat": [{"col": "body"}]}}',
    )
    store.load_to_runtime("RAG SOURCES")
    runtime = store.read_runtime()
    pools = TargetPools(runtime)
    index = RagIndex.open(tmp / "rag.db", embedding_model_id="test-model", dim=4)
    index.upsert_source(1, "notes")
    index.write_batch(
        [
            DocumentRecord(
                doc_id=f"notes:{i}",
                source_id=1,
                source_name="notes",
                pk_json={"id": i},
                title="",
                body="b",
                metadata={},
                updated_at=None,
            )
            for i in range(1, 9)  # ids 1-5 are alice's rows, 6-8 bob's
        ]
    )
    services = Services(data_dir=tmp, store=store, runtime=runtime, stats=None, metrics=None, targets=pools)  # type: ignore[arg-type]
    yield FetchHandler(services, index)
    index.close()
    pools.close()
    store.close()


def _fetch(handler: FetchHandler, caller: Caller) -> dict[str, Any]:
    spec = handler.find_tool("rag.fetch_from_source")
    assert spec is not None
    ctx = handler.context(spec, handler.services.runtime, caller=caller)
    doc_ids = [f"notes:{i}" for i in range(1, 9)]
    result = asyncio.run(handler.execute_tool(spec, {"doc_ids": doc_ids}, ctx))
    assert result["isError"] is False, result
    return result["structuredContent"]


def test_each_user_fetches_only_their_rows(handler: FetchHandler) -> None:
    alice = Caller(subject="alice", admitted="oauth")
    bob = Caller(subject="bob", admitted="oauth")
    for _ in range(3):  # alternating on the same pooled sessions
        for caller, mine in ((alice, 5), (bob, 3)):
            out = _fetch(handler, caller)
            assert {row["row"]["owner"] for row in out["rows"]} == {caller.subject}
            assert len(out["rows"]) == mine
            assert {e["code"] for e in out["errors"]} == {"NOT_FOUND"} and len(out["errors"]) == 8 - mine
    static = _fetch(handler, Caller(token_fingerprint="abc"))  # no user: no row
    assert static["rows"] == []
