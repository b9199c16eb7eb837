"""Admin-defined tools and endpoints (MCP TOOLS, backends/custom_tools.py, gateway/surface.py) end to
end: one real gateway, real MariaDB, PostgreSQL and SQLite targets, tools defined with the CLI
(`mcp-gateway admin`), called through the official MCP SDK client; injection attempts through
every parameter type; LOADs that fail atomically naming the field; tools switched off per
endpoint; a toolset at its own path with its own token, serving a pinned built-in tool."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import psycopg
import pymysql
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import REPO_ROOT, GatewayProcess, call_tool, start_gateway

TOOLSET_TOKEN = "support-agent-token-0123456789"
ORDERS = [(1, 7, "2026-01-05", "12.50", "open"), (2, 7, "2026-02-10", "99.00", "shipped"), (3, 8, "2026-02-11", "5.00", "open")]
PARAMS = [
    {"name": "customer_id", "type": "integer", "minimum": 1, "maximum": 1000000, "description": "The customer."},
    {"name": "since", "type": "date", "required": False, "default": "2000-01-01"},
    {"name": "statuses", "type": "array", "items": "string", "max_items": 5, "max_length": 20,
     "required": False, "default": ["open", "shipped", "cancelled"]},
    {"name": "note", "type": "string", "required": False, "max_length": 200, "default": "x"},
]  # fmt: skip
STATEMENT = (
    "SELECT id, placed_on, total, :note AS note FROM orders WHERE customer_id = :customer_id "
    "AND placed_on >= :since AND status IN (:statuses) ORDER BY id"
)


def q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def cli(gateway: GatewayProcess, statement: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "admin", statement, "--data-dir", str(gateway.data_dir)],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def admin(gateway: GatewayProcess, statement: str, *, ok: bool = True) -> dict[str, Any]:
    with gateway.client(timeout=30.0) as http:
        result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
    assert result["isError"] is not ok, result
    return result["structuredContent"]


def wait_for(predicate: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def tool_names(gateway: GatewayProcess, endpoint: str, token: str | None = None) -> list[str]:
    with gateway.client(timeout=30.0) as http:
        headers = {"Authorization": f"Bearer {token or gateway.tokens[endpoint]}", "Content-Type": "application/json"}
        answer = http.post(f"/mcp/{endpoint}", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["result"]["tools"]]


def tool_row(name: str, target: str, endpoint: str = "query", statement: str = STATEMENT, params: Any = PARAMS) -> str:
    return (
        "INSERT OR REPLACE INTO mcp_tools (tool_name, endpoint, target_id, description, statement, parameters) VALUES "
        f"({q(name)}, {q(endpoint)}, {q(target)}, 'Orders of one customer placed since a date, by status.', "
        f"{q(statement)}, {q(json.dumps(params))})"
    )


@pytest.fixture(scope="module")
def gateway(mariadb_db: dict, postgres_db: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    sqlite_path = tmp_path_factory.mktemp("custom") / "orders.db"
    create = "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, placed_on DATE, total DECIMAL(10,2), status VARCHAR(20))"
    with pymysql.connect(**mariadb_db, autocommit=True) as my, my.cursor() as cur:
        cur.execute(create)
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", ORDERS)
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute(create)
        pg.cursor().executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", ORDERS)
    with sqlite3.connect(sqlite_path) as lite:
        lite.execute(create)
        lite.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", ORDERS)
    with start_gateway() as process:
        for statement in (
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('my', 'root', '')",
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'trust')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('maria', 'mysql', '127.0.0.1', {mariadb_db['port']}, '{mariadb_db['database']}', 'my')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('pg', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg')",
            f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('lite', 'sqlite', {q(str(sqlite_path))})",
            "LOAD MCP PROFILES TO RUNTIME",
        ):
            admin(process, statement)
        for target in ("maria", "pg", "lite"):  # defined with the CLI, as an operator would
            answer = cli(process, tool_row(f"orders_{target}", target))
            assert answer.returncode == 0, answer.stderr
        answer = cli(process, "LOAD MCP TOOLS TO RUNTIME")
        assert answer.returncode == 0, answer.stderr + answer.stdout
        wait_for(lambda: "orders_lite" in tool_names(process, "query"))
        yield process


@contextlib.asynccontextmanager
async def session(gateway: GatewayProcess, endpoint: str, token: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token or gateway.tokens[endpoint]}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
        Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode="auto", raise_exceptions=True) as client,
    ):
        yield client


def sdk(gateway: GatewayProcess, endpoint: str, calls: list[tuple[str, dict[str, Any]]], token: str | None = None) -> Any:
    async def run() -> Any:
        async with session(gateway, endpoint, token) as client:
            listed = await client.list_tools()
            results = [await client.call_tool(name, args) for name, args in calls]
            return listed, results

    return anyio.run(run)


def count_orders(mariadb_db: dict, postgres_db: dict) -> tuple[int, int]:
    with pymysql.connect(**mariadb_db) as my, my.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM orders")
        mine = cur.fetchone()[0]
    with psycopg.connect(**postgres_db) as pg:
        theirs = pg.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
    return mine, theirs


@pytest.mark.parametrize("target", ["maria", "pg", "lite"])
def test_custom_tool_is_listed_and_answers_with_bound_parameters(gateway: GatewayProcess, target: str) -> None:
    name = f"orders_{target}"
    listed, (result, narrowed, bad) = sdk(
        gateway,
        "query",
        [
            (name, {"customer_id": 7, "note": "it's -- fine"}),
            (name, {"customer_id": 7, "since": "2026-02-01", "statuses": ["shipped"]}),
            (name, {"customer_id": 0}),
        ],
    )
    tool = next(t for t in listed.tools if t.name == name)
    assert tool.annotations.read_only_hint is True
    schema = tool.input_schema
    assert schema["required"] == ["customer_id"] and schema["properties"]["customer_id"]["maximum"] == 1000000
    assert schema["properties"]["statuses"]["maxItems"] == 5
    assert tool.output_schema["properties"]["rows"]
    assert result.is_error is False, result.structured_content
    content = result.structured_content
    assert [row[0] for row in content["rows"]] == [1, 2] and content["rows"][0][3] == "it's -- fine"
    assert content["stats"]["digest"]
    assert [row[0] for row in narrowed.structured_content["rows"]] == [2]
    assert bad.is_error is True and bad.structured_content["error"]["code"] == "INVALID_ARGUMENT"
    assert "customer_id" in bad.structured_content["error"]["message"]


def test_injection_through_every_parameter_type_changes_nothing(
    gateway: GatewayProcess, mariadb_db: dict, postgres_db: dict
) -> None:
    before = count_orders(mariadb_db, postgres_db)
    attacks = [
        {"customer_id": 7, "note": "x'; DROP TABLE orders; --"},
        {"customer_id": 7, "note": "' OR '1'='1"},
        {"customer_id": 7, "note": "/* */ UNION SELECT 1,2,3,4 -- %s %(x)s $1 ?"},
        {"customer_id": 7, "statuses": ["open') OR ('1'='1", "'; DROP TABLE x--"]},
        {"customer_id": "7 OR 1=1"},
        {"customer_id": 7, "since": "2026-01-01' OR '1'='1"},
        {"customer_id": 7, "since": "2026-13-45"},
        {"customer_id": 7, "since": 1767225600},
        {"customer_id": 7, "statuses": ["open"] * 10_000},
        {"customer_id": 7, "statuses": "open"},
        {"customer_id": 7, "extra": "1"},
    ]
    for target in ("maria", "pg", "lite"):
        _, results = sdk(gateway, "query", [(f"orders_{target}", args) for args in attacks])
        outcomes = []
        for args, result in zip(attacks, results):
            content = result.structured_content
            if result.is_error:
                assert content["error"]["code"] == "INVALID_ARGUMENT", (target, args, content)
                outcomes.append("refused")
            else:  # bound harmlessly: the text was a value, which matched nothing or only customer 7's rows
                assert all(row[0] in (1, 2) for row in content["rows"]), (target, args, content)
                if "note" in args:
                    assert content["rows"] and content["rows"][0][3] == args["note"]
                outcomes.append("bound")
        assert outcomes == ["bound"] * 4 + ["refused"] * 7, (target, outcomes)
    assert count_orders(mariadb_db, postgres_db) == before


@pytest.mark.parametrize(
    ("row", "named"),
    [
        (tool_row("bad_write", "maria", statement="DELETE FROM orders WHERE id = :id", params=[{"name": "id", "type": "integer"}]),
         "mcp_tools 'bad_write': statement"),
        (tool_row("bad_mismatch", "pg", statement="SELECT * FROM orders WHERE id = :idd", params=[{"name": "id", "type": "integer"}]),
         ":idd"),
        (tool_row("bad_type", "lite", statement="SELECT * FROM orders WHERE id = :id", params=[{"name": "id", "type": "uuid"}]),
         "mcp_tools 'bad_type': parameters 'id': type"),
        (tool_row("bad_target", "nowhere"), "mcp_tools 'bad_target': target_id"),
        (tool_row("bad_ident", "maria", statement="SELECT * FROM :tbl", params=[{"name": "tbl", "type": "string"}]),
         "mcp_tools 'bad_ident': statement"),
    ],
)  # fmt: skip
def test_invalid_row_fails_the_load_atomically_naming_the_field(gateway: GatewayProcess, row: str, named: str) -> None:
    admin(gateway, row)
    answer = cli(gateway, "LOAD MCP TOOLS TO RUNTIME")
    assert answer.returncode != 0
    assert named in answer.stdout + answer.stderr, answer.stdout + answer.stderr
    admin(gateway, "DELETE FROM mcp_tools WHERE tool_name LIKE 'bad_%'")
    assert {"orders_maria", "orders_pg", "orders_lite"} <= set(tool_names(gateway, "query"))  # as they were
    _, (result,) = sdk(gateway, "query", [("orders_pg", {"customer_id": 8})])
    assert [row[0] for row in result.structured_content["rows"]] == [3]


def test_identifier_parameter_only_from_its_enum(gateway: GatewayProcess) -> None:
    params = [{"name": "col", "type": "identifier", "enum": ["total", "placed_on"]}]
    admin(gateway, tool_row("orders_sorted", "pg", statement="SELECT id FROM orders ORDER BY :col DESC, id", params=params))
    admin(gateway, "LOAD MCP TOOLS TO RUNTIME")
    wait_for(lambda: "orders_sorted" in tool_names(gateway, "query"))
    _, (by_total, injected) = sdk(
        gateway, "query", [("orders_sorted", {"col": "total"}), ("orders_sorted", {"col": "id; DROP TABLE orders"})]
    )
    assert [row[0] for row in by_total.structured_content["rows"]] == [2, 1, 3]
    assert injected.is_error and injected.structured_content["error"]["code"] == "INVALID_ARGUMENT"
    admin(gateway, "DELETE FROM mcp_tools WHERE tool_name = 'orders_sorted'")
    admin(gateway, "LOAD MCP TOOLS TO RUNTIME")


def test_disabled_tool_disappears_and_its_call_is_refused(gateway: GatewayProcess) -> None:
    admin(gateway, "SET mcp-query_tools_disabled = 'orders_m*,explain_sql'")
    admin(gateway, "LOAD MCP VARIABLES TO RUNTIME")
    try:
        wait_for(lambda: "orders_maria" not in tool_names(gateway, "query"))
        names = tool_names(gateway, "query")
        assert "explain_sql" not in names and "orders_pg" in names and "run_sql_readonly" in names
        _, (refused,) = sdk(gateway, "query", [("orders_maria", {"customer_id": 7})])
        assert refused.is_error and refused.structured_content["error"]["code"] == "PERMISSION_DENIED"
        assert "disabled" in refused.structured_content["error"]["message"]
    finally:
        admin(gateway, "SET mcp-query_tools_disabled = ''")
        admin(gateway, "LOAD MCP VARIABLES TO RUNTIME")
    wait_for(lambda: "orders_maria" in tool_names(gateway, "query"))


def test_toolset_serves_exactly_its_tools_with_its_own_token(gateway: GatewayProcess) -> None:
    admin(
        gateway,
        "INSERT INTO mcp_endpoints (endpoint, title, instructions, builtin_tools, auth_tokens, tools_disabled) VALUES "
        "('support', 'Support', 'Answer questions about orders.', 'query/run_sql_readonly@pg query/list_targets query/list_tables', "
        f"{q(TOOLSET_TOKEN)}, 'list_tab*')",
    )
    admin(gateway, tool_row("support_orders", "maria", endpoint="support"))
    admin(gateway, "LOAD MCP TOOLS TO RUNTIME")
    wait_for(lambda: gateway.client().post("/mcp/support").status_code != 404)
    listed, (pinned, elsewhere, custom, disabled) = sdk(
        gateway,
        "support",
        [
            ("run_sql_readonly", {"sql": "SELECT current_database() LIKE 'mcpgw%' AS pg"}),
            ("run_sql_readonly", {"sql": "SELECT 1", "target_id": "maria"}),
            ("support_orders", {"customer_id": 8}),
            ("list_tables", {}),
        ],
        token=TOOLSET_TOKEN,
    )
    assert sorted(t.name for t in listed.tools) == ["list_targets", "run_sql_readonly", "support_orders"]
    run_sql = next(t for t in listed.tools if t.name == "run_sql_readonly")
    assert "target_id" not in run_sql.input_schema["properties"]
    assert pinned.is_error is False and pinned.structured_content["target_id"] == "pg"
    assert elsewhere.is_error and "pg" in elsewhere.structured_content["error"]["message"]
    assert [row[0] for row in custom.structured_content["rows"]] == [3]
    assert disabled.is_error and disabled.structured_content["error"]["code"] == "PERMISSION_DENIED"
    assert "support_orders" not in tool_names(gateway, "query")
    from server_process import post_rpc

    with gateway.client() as http:  # the 2026-07-28 era on the toolset too
        modern = post_rpc(http, gateway, "support", "tools/call", {"name": "support_orders", "arguments": {"customer_id": 8}},
                          modern=True, token=TOOLSET_TOKEN)  # fmt: skip
        assert modern.status_code == 200 and modern.json()["result"]["resultType"] == "complete", modern.text
        assert modern.json()["result"]["structuredContent"]["rows"][0][0] == 3
    with gateway.client() as http:  # the seven endpoints' tokens do not open it
        for endpoint in ("query", "admin"):
            refused = http.post("/mcp/support", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers={"Authorization": f"Bearer {gateway.tokens[endpoint]}"})  # fmt: skip
            assert refused.status_code == 401, refused.text
        refused = http.post("/mcp/query", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                            headers={"Authorization": f"Bearer {TOOLSET_TOKEN}"})  # fmt: skip
        assert refused.status_code == 401
    admin(gateway, "DELETE FROM mcp_endpoints WHERE endpoint = 'support'")
    admin(gateway, "DELETE FROM mcp_tools WHERE tool_name = 'support_orders'")
    admin(gateway, "LOAD MCP TOOLS TO RUNTIME")
    wait_for(lambda: gateway.client().post("/mcp/support").status_code == 404)


def test_structured_admin_edits_validate_and_are_audited(gateway: GatewayProcess) -> None:
    def call(name: str, **arguments: Any) -> dict[str, Any]:
        with gateway.client(timeout=30.0) as http:
            return call_tool(http, gateway, "admin", name, arguments)

    bad = call(
        "admin.upsert_custom_tool", tool_name="pct_orders", target_id="maria", description="Orders by status pattern.",
        statement="SELECT id FROM orders WHERE status LIKE :pattern AND id = :missing",
        parameters=[{"name": "pattern", "type": "string", "max_length": 20}],
    )  # fmt: skip
    assert bad["isError"] and ":missing" in bad["structuredContent"]["error"]["message"]
    assert "pct_orders" not in json.dumps(call("admin.list_custom_tools")["structuredContent"])  # nothing kept
    # A literal % in the statement: pymysql formats the text with %, so it must come through intact.
    good = call(
        "admin.upsert_custom_tool", tool_name="pct_orders", target_id="maria", description="Orders of a status, but not 'x%'.",
        statement="SELECT id, '100%' AS pct FROM orders WHERE status LIKE :pattern AND status NOT LIKE 'x%' ORDER BY id",
        parameters=[{"name": "pattern", "type": "string", "max_length": 20}], cache_ttl_ms=60000,
    )  # fmt: skip
    assert not good["isError"], good
    assert not call("admin.load_to_runtime", module="MCP TOOLS")["isError"]
    wait_for(lambda: "pct_orders" in tool_names(gateway, "query"))
    _, (opened, again, shipped) = sdk(
        gateway,
        "query",
        [("pct_orders", {"pattern": "op%"}), ("pct_orders", {"pattern": "op%"}), ("pct_orders", {"pattern": "ship%"})],
    )
    assert opened.structured_content["rows"] == [[1, "100%"], [3, "100%"]], opened.structured_content
    assert opened.structured_content["stats"]["cache"] == "miss"
    assert again.structured_content["stats"]["cache"] == "hit"  # cached by statement and values ...
    assert shipped.structured_content["rows"] == [[2, "100%"]]  # ... another value is another entry
    assert shipped.structured_content["stats"]["cache"] == "miss"
    audit = call("admin.audit", limit=20)["structuredContent"]
    assert "admin.upsert_custom_tool" in json.dumps(audit)
    listed = call("admin.list_custom_tools")["structuredContent"]["rows"]
    assert any(r["key"] == "pct_orders" and r["runtime"] for r in listed)
    assert not call("admin.delete_custom_tool", tool_name="pct_orders")["isError"]
    assert not call("admin.load_to_runtime", module="MCP TOOLS")["isError"]
    wait_for(lambda: "pct_orders" not in tool_names(gateway, "query"))


def test_query_rules_see_the_custom_tools_name(gateway: GatewayProcess) -> None:
    admin(
        gateway,
        "INSERT INTO mcp_query_rules (rule_id, active, tool_name, error_msg, apply) VALUES (26001, 1, 'orders_lite', 'orders_lite is closed for maintenance', 1)",
    )
    admin(gateway, "LOAD MCP QUERY RULES TO RUNTIME")
    try:
        wait_for(lambda: sdk(gateway, "query", [("orders_lite", {"customer_id": 7})])[1][0].is_error)
        _, (blocked, other) = sdk(gateway, "query", [("orders_lite", {"customer_id": 7}), ("orders_pg", {"customer_id": 7})])
        assert "maintenance" in blocked.structured_content["error"]["message"]
        assert other.is_error is False
    finally:
        admin(gateway, "DELETE FROM mcp_query_rules WHERE rule_id = 26001")
        admin(gateway, "LOAD MCP QUERY RULES TO RUNTIME")


def test_modern_era_tools_list_has_a_short_ttl(gateway: GatewayProcess) -> None:
    from server_process import post_rpc

    with gateway.client(timeout=30.0) as http:
        answer = post_rpc(http, gateway, "query", "tools/list", {}, modern=True).json()["result"]
    assert 0 < answer["ttlMs"] <= 5000
    assert "orders_pg" in [t["name"] for t in answer["tools"]]
