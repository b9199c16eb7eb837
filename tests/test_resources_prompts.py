"""MCP resources, prompts and the one-call schema overview (issue 28) through a real gateway and
the official MCP SDK client, in both protocol eras.

Three targets (MariaDB as a SELECT-only account, PostgreSQL, SQLite) hold the same shop: customers,
orders (a foreign key and an index) and `secrets`, which a query rule blocks. Checked: the
capabilities initialize/discover advertise; resources listed (every page) and read on each
target, `secrets` absent from lists and NOT_FOUND when read, also through the read_resource tool;
the built-in and an admin-defined prompt (MCP PROMPTS) fetched with their arguments filled, and a
question template recorded by llm.question_template_add offered as a prompt; get_schema_info
answering a summary with suggested calls past mcp-query_summary_threshold, and full detail below it.
"""

from __future__ import annotations

import json
import secrets as random
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import psycopg
import pymysql
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from server_process import GatewayProcess, call_tool, post_rpc, start_gateway

MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}
SHOP = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR(50) NOT NULL)",
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL, total INTEGER, "
    "FOREIGN KEY (customer_id) REFERENCES customers (id))",
    "CREATE INDEX orders_by_customer ON orders (customer_id)",
    "CREATE TABLE secrets (id INTEGER PRIMARY KEY, token VARCHAR(50))",
)
EXTRA_TABLES = 12  # SQLite only: past mcp-query_summary_threshold (10 here)


@asynccontextmanager
async def connect(gateway: GatewayProcess, endpoint: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {gateway.tokens[endpoint]}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(30.0)) as http,
        Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode=mode, raise_exceptions=True) as client,
    ):
        yield client


def admin(gateway: GatewayProcess, http: Any, statement: str) -> dict[str, Any]:
    result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is False, result
    return result["structuredContent"]


@pytest.fixture(scope="module")
def gateway(mariadb_db: dict, postgres_db: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    user, password = f"r28_{random.token_hex(4)}", random.token_hex(12)
    root = pymysql.connect(**mariadb_db, autocommit=True)
    with root.cursor() as cur:
        for statement in SHOP:
            cur.execute(statement)
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        cur.execute(f"GRANT SELECT ON `{mariadb_db['database']}`.* TO '{user}'@'%'")
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        for statement in SHOP:
            pg.execute(statement)
    lite_path = tmp_path_factory.mktemp("r28") / "shop.db"
    lite = sqlite3.connect(lite_path)
    for statement in SHOP:
        lite.execute(statement)
    lite.executemany("INSERT INTO customers VALUES (?, ?)", [(1, "Ada Lovelace"), (2, "Grace Hopper")])
    for n in range(EXTRA_TABLES):
        lite.execute(f"CREATE TABLE extra_{n:02d} (id INTEGER PRIMARY KEY, v TEXT)")
    lite.commit()
    lite.close()
    try:
        variables = {"mcp-query_summary_threshold": 10, "rag-embedding_provider": "hash"}
        with start_gateway(variables=variables) as process, process.client(timeout=30) as http:
            for statement in (
                f"INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('maria', '{user}', '{password}')",
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'trust')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, description) "
                f"VALUES ('maria', 'mysql', '127.0.0.1', 3306, '{mariadb_db['database']}', 'maria', 'shop on MariaDB')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, description) "
                f"VALUES ('pg', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg', 'shop on PostgreSQL')",
                f"INSERT INTO mcp_target_profiles (target_id, protocol, database, description) VALUES ('lite', 'sqlite', '{lite_path}', 'shop on SQLite')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, database, description, allow_discovery) "
                f"VALUES ('lite_closed', 'sqlite', '{lite_path}', 'no discovery', 0)",
                "LOAD MCP PROFILES TO RUNTIME",
                "INSERT INTO mcp_query_rules (rule_id, active, match_pattern, error_msg, apply) "
                "VALUES (1, 1, '\\bsecrets\\b', 'secrets are off limits', 1)",
                "LOAD MCP QUERY RULES TO RUNTIME",
                "INSERT INTO mcp_prompts (endpoint, prompt_name, title, description, arguments, template) VALUES "
                "('query', 'top_customers', 'Top customers', 'Who orders most', "
                '\'[{"name": "n", "description": "how many", "required": true}]\', '
                "'List the top {n} customers by number of orders, with their totals.')",
                "LOAD MCP PROMPTS TO RUNTIME",
                "SAVE MCP PROMPTS TO DISK",
            ):
                admin(process, http, statement)
            deadline = time.monotonic() + 15  # the worker follows the last LOAD (prompts) within a second
            while time.monotonic() < deadline:
                listed = post_rpc(http, process, "query", "prompts/list").json().get("result", {}).get("prompts", [])
                if "top_customers" in {p["name"] for p in listed}:
                    break
                time.sleep(0.2)
            yield process
    finally:
        with root.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        root.close()


SCHEMAS = {"maria": None, "pg": "public", "lite": "main"}  # maria: its database


def schema_of(target: str, mariadb_db: dict) -> str:
    return SCHEMAS[target] or mariadb_db["database"]


def test_capabilities_advertise_what_each_endpoint_serves(gateway: GatewayProcess) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}
    expected = {
        "query": {"resources", "prompts"},
        "rag": {"resources", "prompts"},
        "config": {"resources"},
        "stats": set(),
        "admin": set(),
        "cache": set(),
        "ai": set(),
    }
    with gateway.client() as http:
        for endpoint, served in expected.items():
            legacy = post_rpc(http, gateway, endpoint, "initialize", params).json()["result"]["capabilities"]
            modern = post_rpc(http, gateway, endpoint, "server/discover", modern=True).json()["result"]["capabilities"]
            for capabilities in (legacy, modern):
                assert set(capabilities) == {"tools"} | served, (endpoint, capabilities)
                if "resources" in served:
                    assert capabilities["resources"] == {"subscribe": False, "listChanged": False}
            if "prompts" not in served:
                answer = post_rpc(http, gateway, endpoint, "prompts/list").json()
                assert answer["error"]["code"] == -32601, answer
            if "resources" not in served:
                answer = post_rpc(http, gateway, endpoint, "resources/list").json()
                assert answer["error"]["code"] == -32601, answer


async def all_resources(client: Client) -> list[Any]:
    found, cursor = [], None
    while True:
        page = await client.list_resources(cursor=cursor)
        found += page.resources
        cursor = page.next_cursor
        if not cursor:
            return found


@pytest.mark.parametrize("mode", MODES)
def test_resources_listed_and_read_on_three_engines(gateway: GatewayProcess, mariadb_db: dict, mode: str) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query", mode) as client:
            assert client.protocol_version == MODES[mode]
            caps = client.server_capabilities
            assert caps.resources is not None and caps.prompts is not None
            uris = {r.uri for r in await all_resources(client)}
            templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
            assert templates == {"db://{target_id}", "db://{target_id}/{schema}", "db://{target_id}/{schema}/{table}"}
            for target in ("maria", "pg", "lite"):
                schema = schema_of(target, mariadb_db)
                base = f"db://{target}/{schema}"
                assert f"db://{target}" in uris and base in uris
                assert {f"{base}/customers", f"{base}/orders"} <= uris, (target, sorted(uris))
                assert f"{base}/secrets" not in uris  # the rule blocks it
                listed = json.loads((await client.read_resource(base)).contents[0].text)
                names = {t["name"] for t in listed["tables"]}
                assert {"customers", "orders"} <= names and "secrets" not in names, (target, names)
                read = await client.read_resource(f"{base}/orders")
                (content,) = read.contents
                assert content.mime_type == "application/json"
                table = json.loads(content.text)
                assert [c["name"] for c in table["columns"]] == ["id", "customer_id", "total"]
                assert [c["key"] for c in table["columns"]][0] == "PRI"
                # MariaDB shows table_constraints to no SELECT-only account: keys come from key_column_usage
                assert (table["primary_key"] or {}).get("columns") == ["id"], (target, table)
                assert [fk["referenced_table"] for fk in table["foreign_keys"]] == ["customers"], (target, table)
                assert any(i["columns"] == ["customer_id"] for i in table["indexes"]), (target, table["indexes"])
                with pytest.raises(MCPError) as blocked:
                    await client.read_resource(f"{base}/secrets")
                assert blocked.value.code == -32602 and blocked.value.data["code"] == "NOT_FOUND"
            for attack in (
                "db://lite/main/SECRETS",  # SQLite reads it whatever the case: the rule is asked as the catalog spells it
                "db://lite/main/Secrets",
                "db://pg/public/secret",  # a near miss: the error's closest names must not reveal the hidden table
                "db://pg/public/..%2Fsecrets",
                "db://pg/public%2Fsecrets",
            ):
                with pytest.raises(MCPError) as hidden:
                    await client.read_resource(attack)
                assert hidden.value.code == -32602 and hidden.value.data["code"] == "NOT_FOUND", attack
                closest = hidden.value.data.get("details", {}).get("closest", [])
                assert "secrets" not in [n.lower() for n in closest] and "closest: secrets" not in str(hidden.value), attack
            # allow_discovery=0: the target is listed, none of its schemas or tables
            assert "db://lite_closed" in uris and not [u for u in uris if u.startswith("db://lite_closed/")]
            closed = json.loads((await client.read_resource("db://lite_closed")).contents[0].text)
            assert closed["schemas"] == [] and closed["capabilities"] == ["readonly_sql", "explain"]
            with pytest.raises(MCPError) as refused:
                await client.read_resource("db://lite_closed/main/customers")
            assert refused.value.code == -32602 and "allow_discovery=0" in str(refused.value)
            with pytest.raises(MCPError) as missing:
                await client.read_resource("db://nope/x/y")
            assert missing.value.code == -32602 and missing.value.data["code"] == "NOT_FOUND"
            with pytest.raises(MCPError) as foreign:
                await client.read_resource("file:///etc/passwd")
            assert foreign.value.data["code"] == "NOT_FOUND"

    anyio.run(scenario)


def test_read_resource_tool_for_clients_without_resources(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query") as client:
            listed = await client.call_tool("read_resource", {"list": True})
            assert listed.is_error is False
            uris = {r["uri"] for r in listed.structured_content["resources"]}
            assert "db://pg/public/orders" in uris and "db://pg/public/secrets" not in uris
            read = await client.call_tool("read_resource", {"uri": "db://pg/public/customers"})
            assert read.is_error is False and read.structured_content["contents"]["table"] == "customers"
            blocked = await client.call_tool("read_resource", {"uri": "db://pg/public/secrets"})
            assert blocked.is_error is True and blocked.structured_content["error"]["code"] == "NOT_FOUND"
        async with connect(gateway, "config") as client:
            status = json.loads((await client.read_resource("gateway://status")).contents[0].text)
            assert status["version"] and {e["endpoint"] for e in status["endpoints"]} >= {"query", "rag"}

    anyio.run(scenario)


@pytest.mark.parametrize("mode", MODES)
def test_prompts_builtin_and_admin_defined(gateway: GatewayProcess, mode: str) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query", mode) as client:
            prompts = {p.name: p for p in (await client.list_prompts()).prompts}
            assert {"explore_database", "top_customers"} <= set(prompts)
            assert [(a.name, a.required) for a in prompts["top_customers"].arguments] == [("n", True)]
            explore = await client.get_prompt("explore_database", {"target_id": "pg", "goal": "which customer orders most"})
            text = explore.messages[0].content.text
            assert "which customer orders most" in text and 'target_id="pg"' in text and "get_schema_info" in text
            top = await client.get_prompt("top_customers", {"n": "5"})
            assert top.messages[0].role == "user"
            assert top.messages[0].content.text == "List the top 5 customers by number of orders, with their totals."
            with pytest.raises(MCPError) as missing:
                await client.get_prompt("top_customers", {})
            assert missing.value.code == -32602 and "n is required" in str(missing.value)
            with pytest.raises(MCPError) as unknown:
                await client.get_prompt("no_such_prompt", {})
            assert unknown.value.code == -32602
        async with connect(gateway, "rag", mode) as client:
            cited = await client.get_prompt("answer_with_citations", {"question": "how to sort a list", "k": "4"})
            text = cited.messages[0].content.text
            assert "how to sort a list" in text and "k=4" in text and "[chunk_id]" in text

    anyio.run(scenario)


def test_a_bad_admin_prompt_changes_nothing(gateway: GatewayProcess) -> None:
    with gateway.client(timeout=30) as http:
        admin(
            gateway,
            http,
            "INSERT INTO mcp_prompts (endpoint, prompt_name, description, arguments, template) "
            "VALUES ('query', 'broken', 'uses an undeclared argument', '[]', 'Tell me about {table}')",
        )
        answer = call_tool(http, gateway, "admin", "admin.sql", {"statement": "LOAD MCP PROMPTS TO RUNTIME"})
        assert answer["isError"] is True and "undeclared argument(s) table" in answer["structuredContent"]["error"]["message"]
        admin(gateway, http, "DELETE FROM mcp_prompts WHERE prompt_name = 'broken'")
        listed = post_rpc(http, gateway, "query", "prompts/list").json()["result"]["prompts"]
        assert "broken" not in {p["name"] for p in listed} and "top_customers" in {p["name"] for p in listed}


def test_question_template_offered_as_prompt(gateway: GatewayProcess) -> None:
    with gateway.client(timeout=30) as http:
        run = call_tool(http, gateway, "query", "discovery.run_static", {"target_id": "pg"})["structuredContent"]
        started = call_tool(http, gateway, "query", "agent.run_start", {"target_id": "pg", "run_id": run["run_id"]})
        assert started["isError"] is False, started
        added = call_tool(
            http,
            gateway,
            "query",
            "llm.question_template_add",
            {
                "agent_run_id": started["structuredContent"]["agent_run_id"],
                "question": "How many orders did a customer place?",
                "sql_template": "SELECT count(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.name = {name}",
            },
        )
        assert added["isError"] is False, added
        name = f"question_template_{added['structuredContent']['id']}"
        got = post_rpc(http, gateway, "query", "prompts/get", {"name": name, "arguments": {"name": "O'Brien"}}).json()
        text = got["result"]["messages"][0]["content"]["text"]
        assert "WHERE c.name = 'O''Brien'" in text and "run_sql_readonly" in text


def test_schema_overview_summarizes_past_the_threshold(gateway: GatewayProcess) -> None:
    async def scenario() -> None:
        async with connect(gateway, "query") as client:
            big = (await client.call_tool("get_schema_info", {"target_id": "lite"})).structured_content
            assert big["summarized"] is True and big["detail"] == "summary"
            assert big["table_total"] == 2 + EXTRA_TABLES  # secrets hidden
            (main,) = big["schemas"]
            assert main["summary"]["total"] == 2 + EXTRA_TABLES and main["summary"]["per_type"] == {"table": 14}
            tools = [c["tool"] for c in big["suggested_calls"]]
            assert tools[0] == "get_schema_info" and "list_tables" in tools, big["suggested_calls"]
            small = (await client.call_tool("get_schema_info", {"target_id": "pg"})).structured_content
            assert small["summarized"] is False and small["detail"] == "full" and small["suggested_calls"] == []
            tables = {t["name"]: t for t in small["schemas"][0]["tables"]}
            assert set(tables) == {"customers", "orders"}
            assert tables["orders"]["foreign_keys"][0]["referenced_table"] == "customers"
            names = (await client.call_tool("get_schema_info", {"target_id": "lite", "detail": "names"})).structured_content
            assert "secrets" not in names["schemas"][0]["names"] and len(names["schemas"][0]["names"]) == 14
            full = await client.call_tool("get_schema_info", {"target_id": "lite", "detail": "full", "name_filter": "ord"})
            assert [t["name"] for t in full.structured_content["schemas"][0]["tables"]] == ["orders"]

    anyio.run(scenario)


def test_bad_requests_get_structured_errors(gateway: GatewayProcess) -> None:
    bad = [
        ("prompts/get", {"name": "top_customers", "arguments": ["5"]}, "INVALID_ARGUMENT"),
        ("prompts/get", {"name": "top_customers", "arguments": {"n": 5}}, "INVALID_ARGUMENT"),
        ("prompts/get", {"name": "top_customers", "arguments": {"n": "x" * 10_001}}, "INVALID_ARGUMENT"),
        ("prompts/get", {"name": "top_customers", "arguments": {"n": "5", "extra": "1"}}, "INVALID_ARGUMENT"),
        ("prompts/get", {"name": ["top_customers"]}, "NOT_FOUND"),
        ("resources/read", {"uri": 7}, "INVALID_ARGUMENT"),
        ("resources/read", {"uri": "db://pg/" + "x" * 3000}, "INVALID_ARGUMENT"),
        ("resources/list", {"cursor": "not-a-cursor"}, "INVALID_ARGUMENT"),
        ("prompts/list", {"cursor": "b:1"}, "INVALID_ARGUMENT"),
    ]
    with gateway.client(timeout=30) as http:
        for method, params, code in bad:
            response = post_rpc(http, gateway, "query", method, params)
            assert response.status_code == 200, (method, params, response.text)
            error = response.json()["error"]
            assert error["code"] == -32602 and error["data"]["code"] == code, (method, params, error)
        tool = call_tool(http, gateway, "query", "read_resource", {})
        assert tool["isError"] is True and tool["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"


def test_rag_documents_as_resources(gateway: GatewayProcess) -> None:
    doc_map = {
        "doc_id": {"format": "customer:{id}"},
        "title": {"concat": [{"col": "name"}]},
        "body": {"concat": [{"col": "name"}]},
    }
    with gateway.client(timeout=30) as http:
        admin(
            gateway,
            http,
            "INSERT INTO rag_sources (source_id, name, target_id, table_name, pk_column, doc_map_json, sync_interval_s) "
            f"VALUES (1, 'people', 'lite', 'customers', 'id', '{json.dumps(doc_map)}', 0)",
        )
        admin(gateway, http, "LOAD RAG SOURCES TO RUNTIME")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            started = call_tool(http, gateway, "rag", "rag.admin.sync", {"source_names": ["people"]})["structuredContent"]
            if started.get("accepted"):
                break
            time.sleep(0.2)
        while time.monotonic() < deadline:
            docs = call_tool(http, gateway, "rag", "rag.get_docs", {"doc_ids": ["customer:2"]})
            if not docs["isError"]:
                break
            time.sleep(0.2)

    async def scenario() -> None:
        async with connect(gateway, "rag") as client:
            uris = {r.uri for r in await all_resources(client)}
            assert "rag://sources/people" in uris
            source = json.loads((await client.read_resource("rag://sources/people")).contents[0].text)
            assert [d["doc_id"] for d in source["documents"]] == ["customer:1", "customer:2"]
            doc = json.loads((await client.read_resource("rag://documents/customer%3A2")).contents[0].text)
            assert doc["title"] == "Grace Hopper" and doc["pk_json"] == {"id": 2} and doc["source_name"] == "people"
            with pytest.raises(MCPError) as missing:
                await client.read_resource("rag://documents/customer%3A9")
            assert missing.value.code == -32602 and missing.value.data["code"] == "NOT_FOUND"

    anyio.run(scenario)


def test_an_admin_prompt_on_a_tools_only_endpoint_is_advertised_there(gateway: GatewayProcess) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "0"}}

    def capabilities(http: Any) -> dict[str, Any]:
        return post_rpc(http, gateway, "stats", "initialize", params).json()["result"]["capabilities"]

    def settle(http: Any, served: bool) -> None:
        deadline = time.monotonic() + 10
        while ("prompts" in capabilities(http)) != served and time.monotonic() < deadline:
            time.sleep(0.2)

    with gateway.client(timeout=30) as http:
        admin(
            gateway,
            http,
            "INSERT INTO mcp_prompts (endpoint, prompt_name, description, template) "
            "VALUES ('stats', 'slow_calls', 'Find the slowest tools', 'Call show_tool_usage and name the three slowest tools.')",
        )
        admin(gateway, http, "LOAD MCP PROMPTS TO RUNTIME")
        settle(http, True)
        assert capabilities(http) == {"tools": {"listChanged": False}, "prompts": {"listChanged": False}}
        modern = post_rpc(http, gateway, "stats", "server/discover", modern=True).json()["result"]["capabilities"]
        assert "prompts" in modern and "resources" not in modern
        got = post_rpc(http, gateway, "stats", "prompts/get", {"name": "slow_calls"}).json()["result"]
        assert got["messages"][0]["content"]["text"].startswith("Call show_tool_usage")
        admin(gateway, http, "DELETE FROM mcp_prompts WHERE endpoint = 'stats'")
        admin(gateway, http, "LOAD MCP PROMPTS TO RUNTIME")
        settle(http, False)
        assert capabilities(http) == {"tools": {"listChanged": False}}
        assert post_rpc(http, gateway, "stats", "prompts/list").json()["error"]["code"] == -32601


def test_a_read_over_the_byte_cap_is_limit_exceeded(gateway: GatewayProcess) -> None:
    def read(http: Any) -> dict[str, Any]:
        return post_rpc(http, gateway, "query", "resources/read", {"uri": "db://lite/main"}).json()

    with gateway.client(timeout=30) as http:
        assert "result" in read(http)
        admin(gateway, http, "SET mcp-resources_max_bytes = 1024")
        admin(gateway, http, "LOAD MCP VARIABLES TO RUNTIME")
        try:
            deadline = time.monotonic() + 10
            while "result" in (answer := read(http)) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert answer["error"]["code"] == -32602 and answer["error"]["data"]["code"] == "LIMIT_EXCEEDED", answer
            assert "mcp-resources_max_bytes" in answer["error"]["message"]
            tool = call_tool(http, gateway, "query", "read_resource", {"uri": "db://lite/main"})
            assert tool["isError"] is True and tool["structuredContent"]["error"]["code"] == "LIMIT_EXCEEDED"
        finally:
            admin(gateway, http, "SET mcp-resources_max_bytes = 1000000")
            admin(gateway, http, "LOAD MCP VARIABLES TO RUNTIME")
