"""Discovery through a real gateway process with the official MCP SDK client (which validates
every structuredContent against the tool's outputSchema): an agent meeting an unknown shop
database goes from list_targets to a correct join in three calls, then profiles, harvests and
searches it, and records what it learnt."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest
from server_process import GatewayProcess, call_tool, start_gateway

from tests.query.shop import build_postgres
from tests.query.test_query_e2e import admin, connect


@pytest.fixture(scope="module")
def gateway(postgres_db: dict) -> Iterator[GatewayProcess]:
    build_postgres(postgres_db, "shop", foreign_keys=False)
    with start_gateway() as process, process.client() as http:
        admin(
            process,
            http,
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, default_schema) VALUES ('pg', 'postgres', 'shop')",
        )
        admin(
            process,
            http,
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, description) "
            f"VALUES ('shop', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg', 'the web shop')",
        )
        assert admin(process, http, "LOAD MCP PROFILES TO RUNTIME")["ok"] is True
        deadline = time.monotonic() + 10
        while (
            time.monotonic() < deadline
            and not call_tool(http, process, "query", "list_targets", {})["structuredContent"]["targets"]
        ):
            time.sleep(0.2)
        yield process


def test_three_calls_to_a_correct_join(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query") as client:
            targets = await client.call_tool("list_targets", {})
            target_id = targets.structured_content["default_target_id"]
            joins = await client.call_tool("suggest_joins", {"target_id": target_id, "table_a": "orders", "table_b": "customers"})
            assert joins.is_error is False, joins.structured_content
            best = joins.structured_content["candidates"][0]
            assert (best["from_columns"], best["to_table"], best["to_columns"]) == (["customer_id"], "customers", ["id"])
            assert best["confidence"] >= 0.8
            rows = await client.call_tool("run_sql_readonly", {"target_id": target_id, "sql": best["example_sql"]})
            assert rows.is_error is False and rows.structured_content["row_count"] == 10

            profile = await client.call_tool("table_profile", {"table": "orders"})
            assert profile.is_error is False and profile.structured_content["row_count"] == 100
            column = await client.call_tool("column_profile", {"table": "customers", "column": "email"})
            assert column.structured_content["pattern_hints"][0]["pattern"] == "email"
            run = await client.call_tool("discovery.run_static", {"schema_filter": "shop"})
            assert run.structured_content["state"] == "ok" and run.structured_content["counts"]["tables"] == 5
            run_id = run.structured_content["run_id"]
            found = await client.call_tool("catalog_search", {"query": "parcels", "target_id": target_id})  # the seed's spelling
            assert [r["name"] for r in found.structured_content["results"]] == ["shop.addresses.street"]
            agent = await client.call_tool("agent.run_start", {"target_id": target_id, "run_id": run_id, "model": "sdk"})
            agent_run_id = agent.structured_content["agent_run_id"]
            note = await client.call_tool("llm.note_add", {"target_id": target_id, "run_id": run_id, "agent_run_id": agent_run_id,
                                                          "body": "orders.total is in euros"})  # fmt: skip
            assert note.is_error is False
            hits = await client.call_tool("llm.search", {"query": "euros", "target_id": target_id})
            assert hits.structured_content["results"][0]["kind"] == "note"

    anyio.run(scenario)
