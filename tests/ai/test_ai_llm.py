"""The llm.* tools of /mcp/ai end to end: the official SDK client, a real TLS gateway, a real chat
model server on loopback (both wire formats, scripted replies) and real MariaDB and PostgreSQL.

What the model writes only ever runs through the read-only path: writes, stacked statements,
sleeps and INTO OUTFILE are refused and fed back (never run; the data is checked unchanged).
Every request the model server received is checked for secrets: the database password, the API
key and the gateway's tokens never appear in a prompt.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pymysql
import pytest
from server_process import GatewayProcess, default_tokens, start_gateway

from tests.ai.gateway_env import add_targets, fails, ok, set_variables, with_client
from tests.ai.llm_server import LlmServer, Reply, Seen

API_KEY = "sk-test-" + secrets.token_hex(12)
SECOND_AI_TOKEN = "tok-ai-second-" + secrets.token_hex(12)  # its own rate-limit budget
DB_PASSWORD = "pw-" + secrets.token_hex(12)
ORDERS = [(1, "alice", "120.50"), (2, "bob", "30.00"), (3, "alice", "79.50"), (4, "carol", "5.25")]


@dataclass
class Env:
    gateway: GatewayProcess
    http: httpx.Client
    llm: LlmServer
    maria: dict[str, Any]
    pg: dict[str, Any]

    def secrets(self) -> list[str]:
        return [API_KEY, DB_PASSWORD, SECOND_AI_TOKEN, *self.gateway.tokens.values()]


def _orders_ddl(money: str) -> str:
    return f"CREATE TABLE orders (id INT PRIMARY KEY, customer VARCHAR(40) NOT NULL, amount {money} NOT NULL)"


@pytest.fixture(scope="module")
def env(llm: LlmServer, mariadb_db: dict, postgres_db: dict) -> Iterator[Env]:
    user = f"ai_{uuid.uuid4().hex[:8]}"
    maria = pymysql.connect(**mariadb_db, autocommit=True)
    with maria.cursor() as cur:
        cur.execute(_orders_ddl("DECIMAL(10,2)"))
        cur.executemany("INSERT INTO orders VALUES (%s, %s, %s)", ORDERS)
        cur.execute("CREATE TABLE customers (name VARCHAR(40) PRIMARY KEY, city VARCHAR(40))")
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{DB_PASSWORD}'")
        cur.execute(f"GRANT SELECT ON `{mariadb_db['database']}`.* TO '{user}'@'%'")
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        pg.execute(_orders_ddl("NUMERIC(10,2)"))
        pg.cursor().executemany("INSERT INTO orders VALUES (%s, %s, %s)", ORDERS)
    variables = {
        "ai-provider": "openai",
        "ai-api_base": llm.url,
        "ai-model": "test-model",
        "ai-api_key": API_KEY,
        "ai-timeout_ms": 1500,
        "ai-max_retries": 2,
        "ai-repair_rounds": 3,
    }
    try:
        tokens = default_tokens()
        tokens["ai"] += "," + SECOND_AI_TOKEN
        with start_gateway(variables=variables, tokens=tokens) as gateway, gateway.client() as http:
            add_targets(
                gateway,
                http,
                [
                    f"INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('maria', '{user}', '{DB_PASSWORD}')",
                    f"INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', '{DB_PASSWORD}')",
                    "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, timeout_ms) "
                    f"VALUES ('shop_maria', 'mysql', '127.0.0.1', 3306, '{mariadb_db['database']}', 'maria', 2000)",
                    "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, timeout_ms) "
                    f"VALUES ('shop_pg', 'pgsql', '127.0.0.1', {postgres_db['port']}, '{postgres_db['dbname']}', 'pg', 2000)",
                ],
            )
            yield Env(gateway, http, llm, mariadb_db, postgres_db)
    finally:
        with maria.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        maria.close()


def assert_no_secrets(env: Env, seen: list[Seen]) -> None:
    assert seen, "the model server received nothing"
    for request in seen:
        sent = str(request.body)
        for secret in env.secrets():
            assert secret not in sent, f"a secret reached the model in {request.path}"
        assert request.headers.get("authorization") == f"Bearer {API_KEY}"  # the key goes in the header only


def orders_unchanged(env: Env) -> None:
    maria = pymysql.connect(**env.maria)
    try:
        with maria.cursor() as cur:
            cur.execute("SELECT id, customer, CAST(amount AS CHAR) FROM orders ORDER BY id")
            assert [tuple(r) for r in cur.fetchall()] == ORDERS
    finally:
        maria.close()
    with psycopg.connect(**env.pg) as pg:
        rows = pg.execute("SELECT id, customer, amount::text FROM orders ORDER BY id").fetchall()
        assert rows == ORDERS


def test_llm_query_builds_the_prompt_runs_the_sql_and_answers(env: Env) -> None:
    sql = "SELECT customer, SUM(amount) AS total FROM orders GROUP BY customer ORDER BY total DESC"
    env.llm.script(Reply(f"Here you go:\n```sql\n{sql};\n```"), Reply("alice spent the most: 200.00."))

    async def scenario(client: Any) -> dict[str, Any]:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"llm.query", "llm.analyze", "llm.generate", "anomaly.detect", "anomaly.list", "recommendation.get"} <= names
        return await ok(client, "llm.query", {"question": "Which customer spent the most on orders?", "target_id": "shop_maria"})

    out = with_client(env.gateway, scenario)
    assert out["sql"] == sql and out["rounds"] == 1 and out["attempts"] == []
    assert out["columns"] == ["customer", "total"] and out["rows"][0] == ["alice", "200.00"] and out["row_count"] == 3
    assert out["answer"] == "alice spent the most: 200.00." and out["truncated"] is False
    assert out["schema_tables"] == 2 and out["usage"] == {
        "model": "test-model",
        "model_calls": 2,
        "prompt_tokens": 22,
        "completion_tokens": 14,
    }
    first, second = env.llm.requests
    assert first.path == "/v1/chat/completions"
    assert first.body["model"] == "test-model" and first.body["max_tokens"] == 1024 and first.body["stream"] is False
    prompt = first.prompt_text
    assert "TABLE orders" in prompt and "amount decimal(10,2)" in prompt.lower() and "customers" in prompt
    assert prompt.index("TABLE orders") < prompt.index("TABLE customers")  # the table the question names comes first
    assert "Which customer spent the most" in prompt and "MySQL/MariaDB" in prompt
    assert "alice\t200.00" in second.prompt_text  # the answer call sees the rows
    assert_no_secrets(env, env.llm.requests)


def test_statements_that_write_sleep_or_export_are_refused_and_fed_back(env: Env) -> None:
    env.llm.script(
        Reply("```sql\nDROP TABLE orders\n```"),
        Reply("```sql\nSELECT * FROM orders; DELETE FROM orders\n```"),
        Reply("```sql\nSELECT pg_sleep(60)\n```"),
        Reply("```sql\nSELECT count(*) AS n FROM orders\n```"),
        Reply("There are 4 orders."),
    )
    out = with_client(env.gateway, lambda c: ok(c, "llm.query", {"question": "How many orders?", "target_id": "shop_pg"}))
    assert out["rounds"] == 4 and out["rows"] == [[4]] and out["answer"] == "There are 4 orders."
    assert [a["code"] for a in out["attempts"]] == ["INVALID_ARGUMENT"] * 3
    assert [a["sql"] for a in out["attempts"]] == [
        "DROP TABLE orders",
        "SELECT * FROM orders; DELETE FROM orders",
        "SELECT pg_sleep(60)",
    ]
    # Each refusal went back to the model with its reason, in the same conversation.
    repair = env.llm.requests[1].body["messages"]
    assert repair[-2] == {"role": "assistant", "content": "```sql\nDROP TABLE orders\n```"}
    assert "failed with INVALID_ARGUMENT" in repair[-1]["content"] and out["attempts"][0]["message"] in repair[-1]["content"]
    assert len(env.llm.requests[3].body["messages"]) == 2 + 2 * 3

    # A model that never writes a statement that may run: the rounds end, nothing ran.
    env.llm.script(*[Reply("```sql\nSELECT * FROM orders INTO OUTFILE '/tmp/ai-test-out'\n```")] * 4)
    error = with_client(
        env.gateway, lambda c: fails(c, "llm.query", {"question": "Export the orders", "target_id": "shop_maria"})
    )
    assert error["code"] == "INVALID_ARGUMENT" and "4 round(s)" in error["message"]
    assert len(error["details"]["attempts"]) == 4 and len(env.llm.requests) == 4
    orders_unchanged(env)
    assert_no_secrets(env, env.llm.requests)


def test_replies_without_sql_and_database_errors_are_repaired(env: Env) -> None:
    env.llm.script(
        Reply("I cannot answer that without more information."),
        Reply("```sql\nSELECT nosuchcolumn FROM orders\n```"),
        Reply("```sql\nSELECT MAX(amount) FROM orders\n```"),
        Reply("The largest order is 120.50."),
    )
    out = with_client(
        env.gateway, lambda c: ok(c, "llm.query", {"question": "largest order", "target_id": "shop_pg", "max_rows": 5})
    )
    assert out["rounds"] == 3 and out["rows"] == [["120.50"]]
    assert out["attempts"][0] == {"sql": None, "code": "INVALID_ARGUMENT", "message": "the reply contained no SQL statement"}
    assert out["attempts"][1]["sql"] == "SELECT nosuchcolumn FROM orders"
    assert (
        "nosuchcolumn" in out["attempts"][1]["message"] and "(42703)" in out["attempts"][1]["message"]
    )  # PostgreSQL's own reason
    assert "nosuchcolumn" in env.llm.requests[2].prompt_text  # fed back to the model


def test_provider_failures_retries_and_timeouts(env: Env) -> None:
    started = time.monotonic()
    env.llm.script(Reply(status=429, headers={"Retry-After": "0.6"}), Reply("Four score."))
    out = with_client(env.gateway, lambda c: ok(c, "llm.generate", {"prompt": "Say something"}))
    assert out["text"] == "Four score." and len(env.llm.requests) == 2
    assert time.monotonic() - started >= 0.6  # Retry-After was honoured

    env.llm.script(*[Reply(status=503)] * 5)
    error = with_client(env.gateway, lambda c: fails(c, "llm.generate", {"prompt": "Say something"}))
    assert error["code"] == "UNAVAILABLE" and "3 attempt(s)" in error["message"] and "HTTP 503" in error["message"]
    assert len(env.llm.requests) == 3  # 1 + ai-max_retries
    assert API_KEY not in error["message"] and "scripted failure" not in error["message"]

    env.llm.script(Reply(raw_body=b"<html>proxy error</html>"))
    error = with_client(env.gateway, lambda c: fails(c, "llm.generate", {"prompt": "x"}))
    assert error["code"] == "UNAVAILABLE" and "not JSON" in error["message"]

    env.llm.script(Reply(raw_body=b'{"choices": []}'))
    error = with_client(env.gateway, lambda c: fails(c, "llm.query", {"question": "How many orders?", "target_id": "shop_pg"}))
    assert error["code"] == "UNAVAILABLE" and "without a message" in error["message"]

    env.llm.script(Reply("late", delay_s=3.0))
    started = time.monotonic()
    error = with_client(env.gateway, lambda c: fails(c, "llm.generate", {"prompt": "x"}))
    assert error["code"] == "UNAVAILABLE" and "did not answer within 1500 ms" in error["message"]
    assert time.monotonic() - started < 2.8 and len(env.llm.requests) == 1  # a slow answer is not retried
    assert_no_secrets(env, env.llm.requests)


def test_llm_analyze_explains_a_statement_and_profiles_a_table(env: Env) -> None:
    env.llm.script(Reply("A sequential scan over orders; fine at this size."))
    out = with_client(
        env.gateway,
        lambda c: ok(
            c,
            "llm.analyze",
            {"target_id": "shop_pg", "sql": "SELECT * FROM orders WHERE customer = 'alice'", "question": "Is it fast?"},
        ),
    )
    assert out["explanation"] == "A sequential scan over orders; fine at this size."
    assert len(out["rows"]) == 2 and out["plan"][0]["Plan"]["Node Type"] == "Seq Scan"
    prompt = env.llm.requests[0].prompt_text
    assert "Seq Scan" in prompt and "Is it fast?" in prompt

    env.llm.script(Reply("customer has 3 distinct values."))
    out = with_client(env.gateway, lambda c: ok(c, "llm.analyze", {"target_id": "shop_maria", "table": "orders"}))
    profile = dict(zip(out["columns"], out["rows"][0], strict=True))
    assert profile["row_count"] == 4 and profile["customer.distinct"] == 3 and profile["amount.max"] == "120.50"
    assert "Profile of table orders" in env.llm.requests[0].prompt_text
    error = with_client(
        env.gateway, lambda c: fails(c, "llm.analyze", {"target_id": "shop_maria", "sql": "SELECT 1", "table": "orders"})
    )
    assert error["code"] == "INVALID_ARGUMENT"
    error = with_client(env.gateway, lambda c: fails(c, "llm.analyze", {"target_id": "shop_maria", "table": "no_such_table"}))
    assert error["code"] == "NOT_FOUND"
    assert_no_secrets(env, env.llm.requests)


def test_ollama_wire_format(env: Env) -> None:
    set_variables(env.gateway, env.http, ai_provider="ollama")
    try:
        env.llm.script(Reply("```sql\nSELECT customer FROM orders WHERE amount > 100\n```"), Reply("Only alice."))
        out = with_client(
            env.gateway, lambda c: ok(c, "llm.query", {"question": "Who ordered above 100?", "target_id": "shop_pg"})
        )
        assert out["rows"] == [["alice"]] and out["answer"] == "Only alice."
        first = env.llm.requests[0]
        assert first.path == "/api/chat" and first.body["stream"] is False
        assert first.body["options"] == {"num_predict": 1024, "temperature": 0} and first.body["model"] == "test-model"
        assert_no_secrets(env, env.llm.requests)
    finally:
        set_variables(env.gateway, env.http, ai_provider="openai")


def test_rate_limit_and_prompt_limit(env: Env) -> None:
    set_variables(env.gateway, env.http, ai_calls_per_minute=2)
    try:
        env.llm.script()

        async def scenario(client: Any) -> dict[str, Any]:
            await ok(client, "llm.generate", {"prompt": "one", "context": "some material", "max_tokens": 5000})
            await ok(client, "llm.generate", {"prompt": "two"})
            return await fails(client, "llm.generate", {"prompt": "three"})

        error = with_client(env.gateway, scenario, token=SECOND_AI_TOKEN)
        assert error["code"] == "LIMIT_EXCEEDED" and 0 < error["details"]["retry_after_s"] <= 60
        assert len(env.llm.requests) == 2
        set_variables(env.gateway, env.http, ai_calls_per_minute=100)  # the same token, a larger budget
        assert (
            with_client(env.gateway, lambda c: ok(c, "llm.generate", {"prompt": "four"}), token=SECOND_AI_TOKEN)["text"] == "OK"
        )
        first = env.llm.requests[0].body
        assert first["max_tokens"] == 1024  # never above ai-max_tokens
        assert first["messages"][0] == {"role": "system", "content": "Use this material:\nsome material"}
    finally:
        set_variables(env.gateway, env.http, ai_calls_per_minute=60)
    error = with_client(env.gateway, lambda c: fails(c, "llm.generate", {"prompt": "x" * 40_000}))
    assert error["code"] == "LIMIT_EXCEEDED" and "ai-prompt_max_chars" in error["message"]


def test_without_a_provider_llm_tools_say_what_to_set(env: Env) -> None:
    set_variables(env.gateway, env.http, ai_provider="")
    try:
        env.llm.script()
        error = with_client(env.gateway, lambda c: fails(c, "llm.query", {"question": "q", "target_id": "shop_pg"}))
        assert (
            error["code"] == "UNAVAILABLE"
            and "ai-provider" in error["message"]
            and "LOAD MCP VARIABLES TO RUNTIME" in error["message"]
        )
        assert error["details"] == {"missing_variables": ["ai-provider"]}
        assert env.llm.requests == []
        listed = with_client(env.gateway, lambda c: ok(c, "anomaly.list", {}))  # needs no model
        assert listed["truncated"] is False
    finally:
        set_variables(env.gateway, env.http, ai_provider="openai")
