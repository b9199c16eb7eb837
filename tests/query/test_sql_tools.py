"""The SQL tools (run_sql_readonly, explain_sql, sample_rows, sample_distinct) on real MariaDB,
PostgreSQL and SQLite, through the handler's real execute path (validation, thread, result
shaping). The `sql_env` fixture and helpers here are shared by the other SQL test modules."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

from backends.declarations import BACKEND_CONFIG_MODULES, BACKEND_VARIABLES
from gateway.store import ConfigStore
from gateway.variables import all_variables
from handlers.query import QueryHandler
from handlers.query.sql_tools import SqlResult
from tests.query import add_auth, add_target, error, make_services, ok, reload

Handler = QueryHandler
VARIABLES = {v.name: v for v in BACKEND_VARIABLES}
MODULES = {m.name: m for m in BACKEND_CONFIG_MODULES}
ENGINES = ("maria", "pg", "lite")
ROWS = 50

MYSQL_DDL = [
    "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(50) NOT NULL, price DECIMAL(8,2), created DATE, data BLOB, note TEXT)",
    "CREATE TABLE `weird name; DROP` (id INT PRIMARY KEY)",
    "INSERT INTO `weird name; DROP` VALUES (1), (2), (3)",
]
PG_DDL = [
    "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, price numeric(8,2), created date, data bytea, note text)",
    'CREATE TABLE "weird name; DROP" (id int PRIMARY KEY)',
    'INSERT INTO "weird name; DROP" VALUES (1), (2), (3)',
    "CREATE SCHEMA sales",
    "CREATE TABLE sales.items (id int PRIMARY KEY, region text)",
    "INSERT INTO sales.items VALUES (1, 'north')",
]
SQLITE_DDL = [
    "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price NUMERIC, created TEXT, data BLOB, note TEXT)",
    'CREATE TABLE "weird name; DROP" (id INTEGER PRIMARY KEY)',
    'INSERT INTO "weird name; DROP" VALUES (1), (2), (3)',
]


def item_rows() -> list[tuple[Any, ...]]:
    colours = ["red", "green", "blue", "red", "red"]
    return [
        (i, colours[i % 5], f"{i}.50", f"2024-01-{(i % 28) + 1:02d}", bytes([i, 255]), None if i % 2 else f"note {i}")
        for i in range(1, ROWS + 1)
    ]


def make_store(data_dir: Path) -> ConfigStore:
    store = ConfigStore(data_dir, variables=all_variables(VARIABLES.values()), modules=list(MODULES.values()))
    store.initialize()
    store.load_to_runtime("MCP VARIABLES")
    return store


def set_variable(store: ConfigStore, handler: QueryHandler, name: str, value: str) -> None:
    store.set_variable(name, value)
    store.load_to_runtime("MCP VARIABLES")
    reload(store, handler)


def seed(mariadb_db: dict, postgres_db: dict, lite_path: Path) -> None:
    rows = item_rows()
    conn = pymysql.connect(**mariadb_db, autocommit=True)
    with conn.cursor() as cur:
        for statement in MYSQL_DDL:
            cur.execute(statement)
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s)", rows)
    conn.close()
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        for statement in PG_DDL:
            pg.execute(statement)
        with pg.cursor() as cur:
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s)", rows)
    lite = sqlite3.connect(lite_path)
    for statement in SQLITE_DDL:
        lite.execute(statement)
    lite.executemany("INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", rows)
    lite.commit()
    lite.close()


def configure(store: ConfigStore, mariadb_db: dict, postgres_db: dict, lite_path: Path) -> None:
    add_auth(store, "maria_auth", mariadb_db["user"], mariadb_db["password"])
    add_auth(store, "pg_auth", postgres_db["user"], "")
    common = {"host": "127.0.0.1", "timeout_ms": 5000}
    add_target(
        store, "maria", "mysql", port=mariadb_db["port"], database=mariadb_db["database"], auth_profile_id="maria_auth", **common
    )
    add_target(
        store, "pg", "pgsql", port=postgres_db["port"], database=postgres_db["dbname"], auth_profile_id="pg_auth", **common
    )
    add_target(store, "lite", "sqlite", database=str(lite_path), timeout_ms=5000)
    add_target(store, "pg_small", "pgsql", port=postgres_db["port"], database=postgres_db["dbname"], auth_profile_id="pg_auth", max_rows=5, allow_explain=0, **common)  # fmt: skip
    store.load_to_runtime("MCP PROFILES")


@pytest.fixture(scope="module")
def sql_env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("sqltools")
    lite_path = tmp / "lite.db"
    seed(mariadb_db, postgres_db, lite_path)
    store = make_store(tmp / "data")
    configure(store, mariadb_db, postgres_db, lite_path)
    handler = Handler(make_services(store))
    yield {"handler": handler, "store": store, "maria": mariadb_db, "pg": postgres_db, "lite": lite_path}
    handler.pools.close()
    store.close()


# -- run_sql_readonly ----------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_values_come_back_json_safe_and_typed(sql_env: dict, engine: str) -> None:
    out = ok(
        sql_env["handler"],
        "run_sql_readonly",
        target_id=engine,
        sql="SELECT id, name, price, created, data, note FROM items WHERE id = 2",
        stats=True,
    )
    assert [c["name"] for c in out["columns"]] == ["id", "name", "price", "created", "data", "note"]
    assert out["rows"] == [[2, "blue", "2.50", "2024-01-03", {"$bytes_b64": "Av8="}, "note 2"]] or engine == "lite"
    if engine == "lite":  # SQLite has no DECIMAL or DATE: NUMERIC affinity stores 2.5
        assert out["rows"] == [[2, "blue", 2.5, "2024-01-03", {"$bytes_b64": "Av8="}, "note 2"]]
    types = {c["name"]: c["type"] for c in out["columns"]}
    assert types["price"] == {"maria": "newdecimal", "pg": "numeric", "lite": "real"}[engine]
    assert out["row_count"] == 1 and out["truncated"] is False and "truncated_reason" not in out
    assert out["stats"]["ms"] > 0 and out["stats"]["digest"].startswith("0x")


@pytest.mark.parametrize("engine", ENGINES)
def test_sql_answers_are_their_output_models_own_json(sql_env: dict, engine: str) -> None:
    """run_sql_readonly, sample_rows and sample_distinct build their answer's JSON directly
    (gateway.tools.Shaped): it must be exactly what validating it into the model and
    serialising it back gives, whatever the result (rows, none, truncated, stats asked)."""
    handler = sql_env["handler"]
    answers = [
        ok(
            handler,
            "run_sql_readonly",
            target_id=engine,
            sql="SELECT id, name, price, created, data, note FROM items ORDER BY id",
        ),
        ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT id FROM items ORDER BY id", max_rows=3, stats=True),
        ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT id FROM items WHERE id < 0"),
        ok(handler, "sample_rows", target_id=engine, table="items", limit=2, stats=True),
        ok(handler, "sample_distinct", target_id=engine, table="items", column="name", limit=2),
    ]
    for answer in answers:
        model = SqlResult.model_validate(answer)
        assert model.__pydantic_serializer__.to_python(model, mode="json", by_alias=True) == answer
    assert answers[1]["truncated"] is True and answers[1]["stats"]["max_rows"] == 3 and "stats" not in answers[0]


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_decimals_keep_every_digit_without_an_exponent(sql_env: dict, engine: str) -> None:
    out = ok(
        sql_env["handler"],
        "run_sql_readonly",
        target_id=engine,
        sql="SELECT CAST(-0.0000000001 AS DECIMAL(20,10)), CAST(0 AS DECIMAL(20,10)), CAST(1000 AS DECIMAL(6,0))",
    )
    assert out["rows"] == [["-0.0000000001", "0.0000000000", "1000"]]


@pytest.mark.parametrize("engine", ENGINES)
def test_row_cap_reports_truncation_by_reading_one_more_row(sql_env: dict, engine: str) -> None:
    handler = sql_env["handler"]
    capped = ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT id FROM items ORDER BY id", max_rows=10)
    assert [r[0] for r in capped["rows"]] == list(range(1, 11))
    assert capped["truncated"] is True and capped["truncated_reason"] == "max_rows"
    exact = ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT id FROM items", max_rows=ROWS)
    assert exact["row_count"] == ROWS and exact["truncated"] is False


def test_target_max_rows_caps_the_request(sql_env: dict) -> None:
    out = ok(sql_env["handler"], "run_sql_readonly", target_id="pg_small", sql="SELECT id FROM items", max_rows=1000, stats=True)
    assert out["row_count"] == 5 and out["truncated"] is True and out["stats"]["max_rows"] == 5


@pytest.mark.parametrize("engine", ENGINES)
def test_byte_cap_truncates(sql_env: dict, engine: str) -> None:
    handler, store = sql_env["handler"], sql_env["store"]
    set_variable(store, handler, "mcp-query_max_response_bytes", "1024")
    try:
        out = ok(handler, "run_sql_readonly", target_id=engine, sql="SELECT id, name, data FROM items ORDER BY id", stats=True)
    finally:
        set_variable(store, handler, "mcp-query_max_response_bytes", "1000000")
    assert 0 < out["row_count"] < ROWS
    assert out["truncated"] is True and out["truncated_reason"] == "max_bytes"
    assert out["stats"]["result_bytes"] <= 1024


@pytest.mark.parametrize(
    ("engine", "slow_sql"),
    [
        ("pg", "SELECT count(*) FROM generate_series(1, 500000000)"),
        (
            "maria",
            "SELECT count(*) FROM information_schema.columns a, information_schema.columns b, information_schema.columns c",
        ),
        ("lite", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"),
    ],
)
def test_server_side_timeout(sql_env: dict, engine: str, slow_sql: str) -> None:
    err = error(sql_env["handler"], "run_sql_readonly", target_id=engine, sql=slow_sql, timeout_sec=0.3)
    assert err["code"] == "DEADLINE_EXCEEDED"
    # The connection is usable afterwards.
    assert ok(sql_env["handler"], "run_sql_readonly", target_id=engine, sql="SELECT 1 AS one")["rows"] == [[1]]


def test_schema_argument_switches_and_restores(sql_env: dict) -> None:
    handler = sql_env["handler"]
    pg = ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT region FROM items", schema="sales")
    assert pg["rows"] == [["north"]]
    assert ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT count(*) FROM items")["rows"] == [[ROWS]]
    maria = ok(handler, "run_sql_readonly", target_id="maria", sql="SELECT DATABASE()", schema="information_schema")
    assert maria["rows"] == [["information_schema"]]
    after = ok(handler, "run_sql_readonly", target_id="maria", sql="SELECT DATABASE()")
    assert after["rows"] == [[sql_env["maria"]["database"]]]


@pytest.mark.parametrize("engine", ENGINES)
def test_database_errors_are_translated(sql_env: dict, engine: str) -> None:
    err = error(sql_env["handler"], "run_sql_readonly", target_id=engine, sql="SELECT nope FROM items")
    assert err["code"] == "INVALID_ARGUMENT" and "nope" in err["message"]
    assert "Traceback" not in err["message"]


def test_show_and_describe(sql_env: dict) -> None:
    handler = sql_env["handler"]
    tables = ok(handler, "run_sql_readonly", target_id="maria", sql="SHOW TABLES")
    assert ["items"] in tables["rows"]
    described = ok(handler, "run_sql_readonly", target_id="maria", sql="DESCRIBE items")
    assert described["rows"][0][0] == "id"
    assert ok(handler, "run_sql_readonly", target_id="pg", sql="SHOW search_path")["row_count"] == 1
    for engine in ENGINES:  # plain EXPLAIN is a read statement too
        assert ok(handler, "run_sql_readonly", target_id=engine, sql="EXPLAIN SELECT * FROM items WHERE id = 1")["row_count"] >= 1


COMMON_QUERIES = [
    "WITH a AS (SELECT id FROM items WHERE id < 4) SELECT count(*) FROM a",
    "SELECT id FROM items WHERE id = 1 UNION SELECT id FROM items WHERE id = 2",
    "(SELECT id FROM items ORDER BY id LIMIT 2)",
    "SELECT * FROM (SELECT id, name FROM items) AS s WHERE s.id = 3",
    "SELECT id, ROW_NUMBER() OVER (ORDER BY id DESC) AS rn FROM items ORDER BY id LIMIT 3",
    "SELECT name, COUNT(*) FROM items GROUP BY name HAVING COUNT(*) > 5 ORDER BY name",
    "SELECT id FROM items WHERE note IS NULL AND price BETWEEN 1 AND 5 ORDER BY id",
    "SELECT id FROM items WHERE name IN ('red', 'blue') AND id IN (SELECT id FROM items WHERE id < 10) ORDER BY id",
    "SELECT CASE WHEN id > 25 THEN 'big' ELSE 'small' END AS size, COUNT(*) FROM items GROUP BY 1 ORDER BY 1",
    "SELECT LOWER(name), LENGTH(name), COALESCE(note, 'none') FROM items WHERE id = 1",
    "SELECT id FROM items ORDER BY id LIMIT 3 OFFSET 5",
    "SELECT id FROM items WHERE name LIKE 'r%' AND id < 5 ORDER BY id -- a trailing comment",
]


@pytest.mark.parametrize("engine", ENGINES)
def test_common_read_statements_run_on_every_engine(sql_env: dict, engine: str) -> None:
    """The regenerated text must still be what each engine accepts (sqlglot round-trips per dialect)."""
    for sql in COMMON_QUERIES:
        ok(sql_env["handler"], "run_sql_readonly", target_id=engine, sql=sql)
    assert ok(sql_env["handler"], "run_sql_readonly", target_id=engine, sql=COMMON_QUERIES[-1])["rows"] == [[3], [4]]


# -- explain_sql -------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_explain_returns_a_plan_without_running(sql_env: dict, engine: str) -> None:
    out = ok(sql_env["handler"], "explain_sql", target_id=engine, sql="SELECT * FROM items WHERE id = 3")
    assert out["plan"] and out["analyze"] is False
    if engine == "pg":
        assert out["plan"][0]["Plan"]["Node Type"] in ("Index Scan", "Bitmap Heap Scan", "Seq Scan")
    elif engine == "maria":
        assert "query_block" in out["plan"]
    else:
        assert "detail" in out["plan"][0]


def test_explain_refusals(sql_env: dict) -> None:
    handler = sql_env["handler"]
    assert "ANALYZE" in error(handler, "explain_sql", target_id="pg", sql="SELECT 1", analyze=True)["message"]
    assert "allow_explain" in error(handler, "explain_sql", target_id="pg_small", sql="SELECT 1")["message"]
    assert error(handler, "explain_sql", target_id="pg", sql="EXPLAIN SELECT 1")["code"] == "INVALID_ARGUMENT"
    assert error(handler, "explain_sql", target_id="pg", sql="DELETE FROM items")["code"] == "INVALID_ARGUMENT"


# -- sample_rows / sample_distinct ---------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_sample_rows_with_expressions(sql_env: dict, engine: str) -> None:
    out = ok(
        sql_env["handler"],
        "sample_rows",
        target_id=engine,
        table="items",
        columns=["id", "upper(name)"],
        where="name = 'red' AND id > 10",
        order_by="id DESC",
        limit=3,
    )
    assert [r[0] for r in out["rows"]] == [50, 49, 48]
    assert {r[1] for r in out["rows"]} == {"RED"}
    assert out["truncated"] is True and out["row_count"] == 3


@pytest.mark.parametrize("engine", ENGINES)
def test_sample_rows_quotes_identifiers(sql_env: dict, engine: str) -> None:
    out = ok(sql_env["handler"], "sample_rows", target_id=engine, table="weird name; DROP", limit=10)
    assert sorted(r[0] for r in out["rows"]) == [1, 2, 3] and out["truncated"] is False
    missing = error(sql_env["handler"], "sample_rows", target_id=engine, table='items" ; DROP TABLE items; --')
    assert missing["code"] == "NOT_FOUND"  # quoted as one name: a table that does not exist


def test_sample_rows_schema(sql_env: dict) -> None:
    out = ok(sql_env["handler"], "sample_rows", target_id="pg", schema="sales", table="items")
    assert out["rows"] == [[1, "north"]]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("where", "1=1; DROP TABLE items"),
        ("where", "id = 1 UNION SELECT 1"),
        ("where", "id = 1) OR (1=1"),
        ("where", "pg_sleep(5) IS NULL"),
        ("where", "id IN (SELECT id FROM items FOR UPDATE)"),
        ("where", "id = 1 ORDER BY 1"),
        ("order_by", "id; DELETE FROM items"),
        ("order_by", "id LIMIT 100000"),
        ("columns", ["id FROM items; DROP TABLE items --"]),
        ("columns", ["sleep(5)"]),
        ("columns", ["id, name"]),
    ],
)
def test_sample_rows_refuses_hostile_fragments(sql_env: dict, field: str, value: Any) -> None:
    err = error(sql_env["handler"], "sample_rows", target_id="pg", table="items", **{field: value})
    assert err["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("engine", ENGINES)
def test_sample_distinct_counts_most_frequent_first(sql_env: dict, engine: str) -> None:
    out = ok(sql_env["handler"], "sample_distinct", target_id=engine, table="items", column="name", limit=2)
    assert [c["name"] for c in out["columns"]] == ["value", "count"]
    assert out["rows"] == [["red", 30], ["blue", 10]]  # ties sorted by value
    assert out["truncated"] is True
    filtered = ok(sql_env["handler"], "sample_distinct", target_id=engine, table="items", column="name", where="id <= 5")
    assert filtered["rows"][0] == ["red", 3] and filtered["truncated"] is False


def test_unknown_target_and_bad_arguments(sql_env: dict) -> None:
    handler = sql_env["handler"]
    assert error(handler, "run_sql_readonly", target_id="nope", sql="SELECT 1")["code"] == "NOT_FOUND"
    assert error(handler, "run_sql_readonly", target_id="pg", sql="")["code"] == "INVALID_ARGUMENT"
    assert error(handler, "run_sql_readonly", target_id="pg", sql="SELECT 1", max_rows=0)["code"] == "INVALID_ARGUMENT"
    assert error(handler, "run_sql_readonly", target_id="pg", sql="SELECT 1", extra=1)["code"] == "INVALID_ARGUMENT"


# -- end to end: the real server and the official MCP SDK client -----------------------------------


@pytest.fixture(scope="module")
def served(sql_env: dict) -> Iterator[Any]:
    from server_process import call_tool, start_gateway

    pg = sql_env["pg"]
    statements = [
        "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'unused')",
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
        f"VALUES ('pg', 'pgsql', '127.0.0.1', {pg['port']}, '{pg['dbname']}', 'pg')",
        "INSERT INTO mcp_query_rules (rule_id, active, match_pattern, error_msg, apply) VALUES (1, 1, 'secret_table', 'off limits', 1)",
        "LOAD MCP PROFILES TO RUNTIME",
        "LOAD MCP QUERY RULES TO RUNTIME",
    ]
    with start_gateway() as gateway, gateway.client() as http:
        for statement in statements:
            result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
            assert result["isError"] is False, result
        deadline = time.monotonic() + 10  # workers follow the runtime within about a second
        while not call_tool(http, gateway, "query", "list_targets", {})["structuredContent"]["targets"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        yield gateway


def _registered() -> bool:
    from server_process import registered_endpoints

    return "query" in registered_endpoints()


@pytest.mark.skipif(not _registered(), reason="QueryHandler is not in handlers.HANDLER_CLASSES yet")
def test_sql_tools_over_https_with_the_sdk_client(served: Any) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def scenario() -> None:
        headers = {"Authorization": f"Bearer {served.tokens['query']}"}
        async with (
            httpx2.AsyncClient(headers=headers, verify=served.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
            Client(streamable_http_client(served.url("query"), http_client=http), mode="auto", raise_exceptions=True) as client,
        ):
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"run_sql_readonly", "explain_sql", "sample_rows", "sample_distinct"} <= names
            out = await client.call_tool("run_sql_readonly", {"sql": "SELECT id, price, created, data FROM items WHERE id = 2"})
            assert out.is_error is False  # the SDK validated structuredContent against outputSchema
            assert out.structured_content["rows"] == [[2, "2.50", "2024-01-03", {"$bytes_b64": "Av8="}]]
            plan = await client.call_tool("explain_sql", {"sql": "SELECT * FROM items WHERE id = 2"})
            assert plan.is_error is False and plan.structured_content["plan"]
            sample = await client.call_tool("sample_distinct", {"table": "items", "column": "name", "limit": 1})
            assert sample.structured_content["rows"] == [["red", 30]] and sample.structured_content["truncated"] is True
            hostile = await client.call_tool("run_sql_readonly", {"sql": "SELECT 1; COMMIT; DROP TABLE items"})
            assert hostile.is_error is True and hostile.structured_content["error"]["code"] == "INVALID_ARGUMENT"
            blocked = await client.call_tool("run_sql_readonly", {"sql": "SELECT * FROM secret_table"})
            assert blocked.structured_content["error"]["message"] == "off limits"

    anyio.run(scenario)


@pytest.mark.skipif(not _registered(), reason="QueryHandler is not in handlers.HANDLER_CLASSES yet")
def test_compact_text_for_the_model_json_when_asked(served: Any) -> None:
    """The text block is a compact table (header, one line per row, count and truncated) while
    structuredContent keeps the typed JSON; format=json, the mcp-text_format variable and a
    client of an era before structuredContent get the JSON text."""
    import json

    from server_process import call_tool

    sql = "SELECT id, name, price, note FROM items WHERE id IN (2, 3) ORDER BY id"
    with served.client() as http:
        compact = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql})
        assert compact["structuredContent"]["columns"][2] == {"name": "price", "type": "numeric"}
        assert "stats" not in compact["structuredContent"]  # asked for with stats=true
        assert "truncated_reason" not in compact["structuredContent"] and "message" not in compact["structuredContent"]
        with_stats = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql, "stats": True})
        assert with_stats["structuredContent"]["stats"]["max_rows"] > 0
        assert with_stats["content"][0]["text"] == compact["content"][0]["text"]  # never in the text block
        assert (
            compact["content"][0]["text"]
            == "id\tname\tprice\tnote\n2\tblue\t2.50\tnote 2\n3\tred\t3.50\tNULL\n2 rows; truncated: false"
        )
        capped = call_tool(http, served, "query", "run_sql_readonly", {"sql": "SELECT id FROM items ORDER BY id", "max_rows": 2})
        assert capped["content"][0]["text"].splitlines()[-1] == "2 rows; truncated: true (max_rows)"
        as_json = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql, "format": "json"})
        assert json.loads(as_json["content"][0]["text"]) == as_json["structuredContent"]
        old_era = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql}, version="2025-03-26")
        assert json.loads(old_era["content"][0]["text"]) == old_era["structuredContent"]
        bad = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql, "format": "yaml"})
        assert bad["isError"] and bad["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"
        refused = call_tool(http, served, "query", "run_sql_readonly", {"sql": "DELETE FROM items"})
        assert json.loads(refused["content"][0]["text"])["error"]["code"] == "INVALID_ARGUMENT"  # errors stay JSON
        listing = call_tool(http, served, "query", "list_targets", {})["content"][0]["text"].splitlines()
        assert listing[0] == "targets: 1" and listing[1].startswith("target_id\t") and listing[2].startswith("pg\t")
        set_json = {"statement": "UPDATE global_variables SET variable_value = 'json' WHERE variable_name = 'mcp-text_format'"}
        for statement in (set_json["statement"], "LOAD MCP VARIABLES TO RUNTIME"):
            assert call_tool(http, served, "admin", "admin.sql", {"statement": statement})["isError"] is False
        try:
            deadline = time.monotonic() + 10
            while True:
                answer = call_tool(http, served, "query", "run_sql_readonly", {"sql": sql})
                if answer["content"][0]["text"].startswith("{"):
                    break
                assert time.monotonic() < deadline, answer["content"][0]["text"]
                time.sleep(0.2)
            assert json.loads(answer["content"][0]["text"]) == answer["structuredContent"]
        finally:
            reset = "UPDATE global_variables SET variable_value = 'compact' WHERE variable_name = 'mcp-text_format'"
            for statement in (reset, "LOAD MCP VARIABLES TO RUNTIME"):
                call_tool(http, served, "admin", "admin.sql", {"statement": statement})
