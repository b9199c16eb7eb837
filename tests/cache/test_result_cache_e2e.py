"""The query result cache end to end: real gateways, real MariaDB and PostgreSQL, the official
MCP SDK client on /mcp/query and /mcp/cache, once with the embedded store (one gateway, two
workers: A and B are the same server, reached over fresh connections) and once with Redis
(two gateway instances sharing a test-owned Redis database: A and B are different servers).

Every scenario changes the database behind the cache's back (direct driver writes), so a
stale answer would show: a hit is proven by old data coming back, an invalidation by new data.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import httpx2
import psycopg
import pymysql
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, call_tool, free_port, start_gateway

REDIS_TEST_URL = "redis://127.0.0.1:6379/13"  # test-owned database number, flushed by these tests
TTL = 60_000


# -- plumbing ------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def session(gateway: GatewayProcess, endpoint: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {gateway.tokens[endpoint]}"}
    async with (
        httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as http,
        Client(streamable_http_client(gateway.url(endpoint), http_client=http), mode="auto", raise_exceptions=True) as client,
    ):
        yield client


SQL_TOOLS = {"run_sql_readonly", "sample_rows", "sample_distinct", "explain_sql"}


def with_stats(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """These tests read stats.cache: the SQL tools return stats when asked (stats=true)."""
    return {"stats": True, **arguments} if name in SQL_TOOLS else arguments


async def ok(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, with_stats(name, arguments))
    assert result.is_error is False, result.structured_content
    return result.structured_content


async def fails(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert result.is_error is True, result.structured_content
    return result.structured_content["error"]


def rpc(gateway: GatewayProcess, endpoint: str, name: str, **arguments: Any) -> dict[str, Any]:
    """One call over a fresh HTTPS connection: with several workers, any of them may answer."""
    with gateway.client() as http:
        result = call_tool(http, gateway, endpoint, name, with_stats(name, arguments))
    assert result["isError"] is False, result
    return result["structuredContent"]


def admin(gateway: GatewayProcess, *statements: str) -> int:
    """Run admin statements; wait until every worker serves the runtime the last LOAD made."""
    version = 0
    for statement in statements:
        out = rpc(gateway, "admin", "admin.sql", statement=statement)
        version = max(version, int(out.get("runtime_version") or 0))
    if version:
        wait_runtime(gateway, version)
    return version


def wait_runtime(gateway: GatewayProcess, version: int, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = httpx.get(f"{gateway.base_url}/metrics", verify=gateway.ssl_context(), timeout=5).text
        served = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("mcp_gateway_runtime_version{")]
        if served and min(served) >= version:
            return
        time.sleep(0.05)
    raise AssertionError(f"runtime {version} not applied by every worker within {timeout_s} s")


def set_config(gateway: GatewayProcess, **variables: Any) -> None:
    version = 0
    for name, value in variables.items():
        version = rpc(gateway, "config", "set_config", variable_name=name, value=str(value))["runtime_version"]
    wait_runtime(gateway, version)


@dataclass
class Deployment:
    store: str
    a: GatewayProcess
    b: GatewayProcess  # the same server as a (embedded: two workers), or a second instance (redis)
    maria: dict
    pg: dict

    def gateways(self) -> tuple[GatewayProcess, ...]:
        return (self.a,) if self.a is self.b else (self.a, self.b)


def write(deployment: Deployment, engine: str, sql: str) -> None:
    """Change the data behind the gateway's back."""
    if engine == "maria":
        conn = pymysql.connect(**deployment.maria, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(sql)
        conn.close()
    else:
        with psycopg.connect(**deployment.pg, autocommit=True) as conn:
            conn.execute(sql)


def seed(maria: dict, pg: dict, maria_b: str) -> None:
    conn = pymysql.connect(**{k: v for k, v in maria.items() if k != "database"}, autocommit=True)
    with conn.cursor() as cur:
        for database, prefix in ((maria["database"], "m"), (maria_b, "mb")):
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{maria_b}`")
            cur.execute(f"CREATE TABLE `{database}`.items (id INT PRIMARY KEY, name VARCHAR(200), price INT)")
            cur.execute(
                f"INSERT INTO `{database}`.items VALUES " + ", ".join(f"({i}, '{prefix}-{i}', {i * 10})" for i in range(1, 41))
            )
        cur.execute(f"CREATE TABLE `{maria['database']}`.other (id INT PRIMARY KEY)")
    conn.close()
    with psycopg.connect(**pg, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA b")
        for schema, prefix in (("public", "p"), ("b", "pb")):
            conn.execute(f"CREATE TABLE {schema}.items (id int PRIMARY KEY, name text, price int)")
            conn.execute(f"INSERT INTO {schema}.items SELECT i, '{prefix}-' || i, i * 10 FROM generate_series(1, 40) i")
        conn.execute("CREATE TABLE other (id int PRIMARY KEY)")


def profiles(maria: dict, pg: dict) -> list[str]:
    return [
        "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('maria', 'root', '')",
        "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', '')",
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, cache_ttl_ms) "
        f"VALUES ('maria', 'mysql', '127.0.0.1', 3306, '{maria['database']}', 'maria', {TTL})",
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, cache_ttl_ms) "
        f"VALUES ('pg', 'pgsql', '127.0.0.1', 5432, '{pg['dbname']}', 'pg', {TTL})",
        "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
        f"VALUES ('pg_rules', 'pgsql', '127.0.0.1', 5432, '{pg['dbname']}', 'pg')",
        "LOAD MCP PROFILES TO RUNTIME",
    ]


def flush_redis() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=2).flushdb()
    except redis.RedisError as exc:
        from conftest import _unavailable  # fails under CI=true, skips on a laptop without Redis

        _unavailable("Redis at 127.0.0.1:6379", exc)


@pytest.fixture(scope="module")
def seeded(mariadb_db: dict, postgres_db: dict) -> Iterator[str]:
    """The test data, once per module; yields the second MariaDB database's name."""
    maria_b = mariadb_db["database"] + "_b"
    seed(mariadb_db, postgres_db, maria_b)
    yield maria_b
    conn = pymysql.connect(**{k: v for k, v in mariadb_db.items() if k != "database"}, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{maria_b}`")
    conn.close()


@pytest.fixture(scope="module", params=["embedded", "redis"])
def deployment(request: pytest.FixtureRequest, seeded: str, mariadb_db: dict, postgres_db: dict) -> Iterator[Deployment]:
    with contextlib.ExitStack() as stack:
        if request.param == "embedded":
            a = b = stack.enter_context(start_gateway(workers=2))
        else:
            flush_redis()
            stack.callback(flush_redis)
            with ThreadPoolExecutor(2) as pool:  # two instances sharing one store, started side by side
                a, b = pool.map(stack.enter_context, [start_gateway(variables={"cache-redis_url": REDIS_TEST_URL}) for _ in "ab"])
        deployed = Deployment(request.param, a, b, mariadb_db, postgres_db)
        for gateway in deployed.gateways():
            admin(gateway, *profiles(mariadb_db, postgres_db))
        yield deployed


@pytest.fixture(autouse=True)
def empty_cache(deployment: Deployment) -> None:
    rpc(deployment.a, "cache", "clear_cache")


def scenario(body: Any) -> None:
    anyio.run(body)


def names(out: dict[str, Any]) -> list[Any]:
    return [row[0] for row in out["rows"]]


# -- scenarios -----------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_miss_then_hit_bypass_and_a_refused_statement_never_cached(deployment: Deployment, engine: str) -> None:
    sql = "SELECT name, price FROM items WHERE id <= 3 ORDER BY id"

    async def body() -> None:
        async with session(deployment.a, "query") as q, session(deployment.a, "cache") as c:
            first = await ok(q, "run_sql_readonly", target_id=engine, sql=sql)
            assert first["stats"]["cache"] == "miss" and first["stats"]["cache_store"] == "stored"
            write(deployment, engine, "UPDATE items SET name = 'changed' WHERE id = 1")
            time.sleep(0.02)
            again = await ok(q, "run_sql_readonly", target_id=engine, sql="select name,price from items where id<=3 order by id")
            assert again["stats"]["cache"] == "hit" and again["stats"]["cache_age_ms"] >= 15  # same statement, other spelling
            assert again["rows"] == first["rows"] and again["rows"][0][0] != "changed"  # served from the cache
            fresh = await ok(q, "run_sql_readonly", target_id=engine, sql=sql, cache="bypass")
            assert fresh["stats"]["cache"] == "bypass" and fresh["rows"][0][0] == "changed"
            sampled = [await ok(q, "sample_rows", target_id=engine, table="items", limit=2) for _ in range(2)]
            assert [s["stats"]["cache"] for s in sampled] == ["miss", "hit"]
            distinct = [await ok(q, "sample_distinct", target_id=engine, table="items", column="price % 3") for _ in range(2)]
            assert [d["stats"]["cache"] for d in distinct] == ["miss", "hit"] and distinct[0]["rows"] == distinct[1]["rows"]
            before = (await ok(c, "get_cache_stats", target_id=engine))["misses"]
            for refused in ("DELETE FROM items", "SELECT 1; DROP TABLE items", "SELECT name FROM items FOR UPDATE"):
                error = await fails(q, "run_sql_readonly", target_id=engine, sql=refused)
                assert error["code"] == "INVALID_ARGUMENT"
            stats = await ok(c, "get_cache_stats", target_id=engine)
            assert stats["misses"] == before  # a refused statement is not even looked up
            entries = (await ok(c, "get_cache_entries", target_id=engine, order_by="hits"))["entries"]
            assert len(entries) == 3 and not any(re.search("DELETE|DROP|UPDATE", e["digest_text"]) for e in entries)
            assert entries[0]["hits"] >= 1 and "rows" not in entries[0] and "changed" not in str(entries)
            write(
                deployment,
                engine,
                "UPDATE items SET name = CONCAT('m-', id) WHERE id = 1"
                if engine == "maria"
                else "UPDATE items SET name = 'p-1' WHERE id = 1",
            )

    scenario(body)


def test_expiry_and_a_lowered_ttl(deployment: Deployment) -> None:
    async def body() -> None:
        async with session(deployment.a, "query") as q, session(deployment.a, "cache") as c:
            set_ttl = await ok(c, "set_cache_ttl", target_id="pg", ttl_ms=1000)
            assert set_ttl["module"] == "MCP PROFILES" and set_ttl["target_ids"] == ["pg"]
            wait_runtime(deployment.a, set_ttl["runtime_version"])
            sql = "SELECT count(*) FROM items"
            states = [(await ok(q, "run_sql_readonly", target_id="pg", sql=sql))["stats"]["cache"] for _ in range(2)]
            time.sleep(1.05)
            states.append((await ok(q, "run_sql_readonly", target_id="pg", sql=sql))["stats"]["cache"])
            assert states == ["miss", "hit", "miss"]
            wait_runtime(deployment.a, (await ok(c, "set_cache_ttl", target_id="pg", ttl_ms=TTL))["runtime_version"])
            stats = await ok(c, "get_cache_stats", target_id="pg")  # the miss's store dropped the expired entry
            assert stats["expirations"] >= 1 and stats["targets"][0]["ttl_ms"] == TTL

    scenario(body)


def test_lru_eviction_by_entries_and_by_bytes_and_oversize_not_cached(deployment: Deployment) -> None:
    gateway = deployment.a

    async def body() -> None:
        async with session(gateway, "query") as q, session(gateway, "cache") as c:

            async def state(sql: str) -> str:
                return (await ok(q, "run_sql_readonly", target_id="maria", sql=sql))["stats"]["cache_store"] or "hit"

            one, two, three = (f"SELECT name FROM items WHERE id = {i}" for i in (1, 2, 3))
            set_config(gateway, **{"cache-max_entries": 2})
            assert [await state(one), await state(two), await state(one)] == ["stored", "stored", "hit"]
            time.sleep(0.6)  # the hit's LRU position reaches the shared store (within half a second)
            assert await state(three) == "stored"  # evicts two, the least recently used
            assert await state(one) == "hit" and await state(two) == "stored"
            set_config(gateway, **{"cache-max_entries": 10000, "cache-max_bytes": 4096, "cache-max_entry_bytes": 2048})
            await ok(c, "clear_cache")
            wide = "SELECT id, REPEAT(name, 14) AS r FROM items WHERE id <= {n} ORDER BY id"  # ~1.2 KB each
            assert [await state(wide.format(n=n)) for n in (17, 18, 19, 20)] == ["stored"] * 4  # 4 do not fit in 4 KB
            assert await state("SELECT id, REPEAT(name, 40) AS r FROM items ORDER BY id") == "too_large"  # > 2 KB
            stats = await ok(c, "get_cache_stats", target_id="maria")
            assert stats["bytes"] <= 4096 and stats["targets"][0]["by_reason"]["max_bytes"] >= 1
            assert stats["targets"][0]["by_reason"]["max_entries"] >= 1
            assert await state(wide.format(n=20)) == "hit" and await state(wide.format(n=17)) == "stored"  # the oldest went
        set_config(gateway, **{"cache-max_bytes": 67108864, "cache-max_entry_bytes": 1048576})

    scenario(body)


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_invalidation_by_table_and_by_pattern_reaches_every_worker_and_instance(deployment: Deployment, engine: str) -> None:
    by_table, by_pattern = "SELECT name FROM items WHERE id = 5", "SELECT sum(price) AS total FROM items"

    def run(gateway: GatewayProcess, sql: str) -> dict[str, Any]:
        return rpc(gateway, "query", "run_sql_readonly", target_id=engine, sql=sql)

    async def body() -> None:
        assert run(deployment.a, by_table)["stats"]["cache"] == "miss"
        assert run(deployment.a, by_pattern)["stats"]["cache"] == "miss"
        assert run(deployment.b, by_table)["stats"]["cache"] == "hit"  # B serves what A cached
        write(deployment, engine, "UPDATE items SET name = 'renamed', price = price + 1 WHERE id = 5")
        assert names(run(deployment.b, by_table)) == [f"{'m' if engine == 'maria' else 'p'}-5"]  # still cached
        async with session(deployment.b, "cache") as c:
            assert (await ok(c, "invalidate_cache", target_id=engine, table="ITEMS", digest_pattern="WHERE .*id"))["dropped"] == 1
            out = await ok(c, "invalidate_cache", digest_pattern=r"sum\(price\)")
            assert out["dropped"] == 1 and out["store"] == deployment.store
            assert (await fails(c, "invalidate_cache", digest_pattern="(unclosed"))["code"] == "INVALID_ARGUMENT"
            assert (await fails(c, "invalidate_cache"))["code"] == "INVALID_ARGUMENT"
        for gateway in (deployment.a, deployment.b, deployment.a, deployment.b):  # fresh connections: any worker
            assert names(run(gateway, by_table)) == ["renamed"]
            assert run(gateway, by_pattern)["rows"][0][0] in (8201, "8201")  # 10 * (1+...+40) + 1
        write(deployment, engine, f"UPDATE items SET name = '{'m' if engine == 'maria' else 'p'}-5', price = 50 WHERE id = 5")

    scenario(body)


def test_load_of_a_changed_profile_drops_its_entries(deployment: Deployment) -> None:
    sql = "SELECT name FROM items WHERE id = 7"
    assert rpc(deployment.a, "query", "run_sql_readonly", target_id="pg", sql=sql)["stats"]["cache"] == "miss"
    assert rpc(deployment.a, "query", "run_sql_readonly", target_id="maria", sql=sql)["stats"]["cache"] == "miss"
    for gateway in deployment.gateways():  # instances share one configuration (cluster-wide in practice)
        admin(gateway, "UPDATE mcp_target_profiles SET timeout_ms = 2500 WHERE target_id = 'pg'", "LOAD MCP PROFILES TO RUNTIME")
    stats = rpc(deployment.a, "cache", "get_cache_stats")
    by_target = {t["target_id"]: t for t in stats["targets"]}
    assert by_target["pg"]["entries"] == 0 and by_target["pg"]["by_reason"]["profile_changed"] >= 1
    assert by_target["maria"]["entries"] == 1  # other targets keep theirs
    assert rpc(deployment.b, "query", "run_sql_readonly", target_id="pg", sql=sql)["stats"]["cache"] == "miss"


def test_a_rules_cache_ttl_caches_only_what_it_matches(deployment: Deployment) -> None:
    for gateway in deployment.gateways():
        admin(
            gateway,
            "DELETE FROM mcp_query_rules",
            "INSERT INTO mcp_query_rules (rule_id, active, target_id, match_pattern, apply) VALUES (10, 1, 'pg_rules', 'FROM items', 1)",
            "INSERT INTO mcp_query_rules (rule_id, active, target_id, match_pattern, cache_ttl, apply) VALUES (20, 1, 'pg', 'no_cache_please', 0, 1)",
        )

    async def body() -> None:
        async with session(deployment.a, "query") as q, session(deployment.a, "cache") as c:
            for gateway in deployment.gateways():
                async with session(gateway, "cache") as each:
                    out = await ok(each, "set_cache_ttl", rule_id=10, ttl_ms=TTL)
                    assert out["module"] == "MCP QUERY RULES"
                    wait_runtime(gateway, out["runtime_version"])
            matched = [
                await ok(q, "run_sql_readonly", target_id="pg_rules", sql="SELECT name FROM items WHERE id = 9") for _ in range(2)
            ]
            assert [m["stats"]["cache"] for m in matched] == ["miss", "hit"] and matched[0]["stats"]["rules"] == [10]
            other = [await ok(q, "run_sql_readonly", target_id="pg_rules", sql="SELECT count(*) FROM other") for _ in range(2)]
            assert [o["stats"]["cache"] for o in other] == ["off", "off"]  # the target itself caches nothing
            excluded = [await ok(q, "run_sql_readonly", target_id="pg", sql="SELECT 1 AS no_cache_please") for _ in range(2)]
            assert [e["stats"]["cache"] for e in excluded] == ["off", "off"]  # a rule's 0 excludes it from pg's cache
            assert (await fails(c, "set_cache_ttl", rule_id=999, ttl_ms=1))["code"] == "NOT_FOUND"

    scenario(body)
    for gateway in deployment.gateways():
        admin(gateway, "DELETE FROM mcp_query_rules", "LOAD MCP QUERY RULES TO RUNTIME")


def test_never_served_to_another_target_or_schema(deployment: Deployment) -> None:
    sql = "SELECT name FROM items WHERE id = 2"

    async def body() -> None:
        async with session(deployment.a, "query") as q:
            seen = {}
            for target, schema in (
                ("maria", None),
                ("maria", deployment.maria["database"] + "_b"),
                ("pg", None),
                ("pg", "b"),
                ("pg_rules", None),
            ):
                args = {"target_id": target, "sql": sql, **({"schema": schema} if schema else {})}
                first = await ok(q, "run_sql_readonly", **args)
                expected_state = "off" if target == "pg_rules" else "miss"
                assert first["stats"]["cache"] == expected_state, (target, schema)
                seen[(target, schema)] = names(first)
            assert seen == {
                ("maria", None): ["m-2"], ("maria", deployment.maria["database"] + "_b"): ["mb-2"],
                ("pg", None): ["p-2"], ("pg", "b"): ["pb-2"], ("pg_rules", None): ["p-2"],
            }  # fmt: skip

    scenario(body)


def test_warm_cache_then_hit_and_prometheus_metrics(deployment: Deployment) -> None:
    async def body() -> None:
        async with session(deployment.a, "cache") as c, session(deployment.b, "query") as q:
            warmed = await ok(c, "warm_cache", target_id="pg", queries=[
                "SELECT name FROM items WHERE id = 11", "DELETE FROM items", "SELECT * FROM no_such_table",
            ])  # fmt: skip
            assert [r["status"] for r in warmed["results"]] == ["cached", "refused", "failed"] and warmed["cached"] == 1
            assert (await ok(q, "run_sql_readonly", target_id="pg", sql="SELECT name FROM items WHERE id = 11"))["stats"][
                "cache"
            ] == "hit"
            missed = await ok(q, "run_sql_readonly", target_id="pg", sql="SELECT name FROM items WHERE id = 13")
            assert missed["stats"]["cache"] == "miss"
            nothing = await ok(c, "warm_cache", target_id="pg_rules", queries=["SELECT 1"])
            assert nothing["results"][0]["status"] == "not_cacheable"
            assert (await fails(c, "warm_cache", target_id="nope", queries=["SELECT 1"]))["code"] == "NOT_FOUND"
        expected = (r'^mcp_cache_hits_total\{target_id="pg"\} [1-9]', r"^mcp_cache_entries [1-9]", r"^mcp_cache_bytes [1-9]")
        deadline = time.monotonic() + 10  # counters fold in within 0.1 s, the gauges within 0.5 s
        while True:
            text = httpx.get(f"{deployment.b.base_url}/metrics", verify=deployment.b.ssl_context(), timeout=5).text
            if all(re.search(pattern, text, re.MULTILINE) for pattern in expected) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for pattern in expected:
            assert re.search(pattern, text, re.MULTILINE), (pattern, text[-3000:])
        assert "mcp_cache_misses_total" in text and "mcp_cache_evictions_total" in text

    scenario(body)


def test_redis_outage_and_restart_degrade_to_uncached_calls(deployment: Deployment, tmp_path: Any) -> None:
    """The gateway is switched (at runtime) to a Redis server of the test's own, which then
    stops and starts again: calls are answered uncached meanwhile, and cached again after."""
    port, password = free_port(), "s3cret-redis-pw"

    def start_redis() -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--requirepass", password, "--dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while (
            subprocess.run(
                ["redis-cli", "-p", str(port), "-a", password, "--no-auth-warning", "ping"], capture_output=True
            ).stdout.strip()
            != b"PONG"
        ):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        return process

    server = start_redis()
    gateway = deployment.a
    try:
        set_config(gateway, **{"cache-redis_url": f"redis://:{password}@127.0.0.1:{port}/0"})
        shown = rpc(gateway, "config", "get_config", variable_name="cache-redis_url")["value"]
        assert password not in shown and shown == f"redis://:********@127.0.0.1:{port}/0"
        sql = "SELECT name FROM items WHERE id = 12"

        def state() -> str:
            return rpc(gateway, "query", "run_sql_readonly", target_id="pg", sql=sql)["stats"]["cache"]

        assert [state(), state()] == ["miss", "hit"]
        server.terminate()
        server.wait(timeout=10)
        assert [state(), state()] == ["unavailable", "unavailable"]  # answered, uncached
        with gateway.client() as http:
            down = call_tool(http, gateway, "cache", "get_cache_stats", {})
        assert down["isError"] is True and down["structuredContent"]["error"]["code"] == "UNAVAILABLE"
        assert password not in str(down)
        server = start_redis()  # a restart: empty, the gateway reconnects on its own
        time.sleep(1.1)
        assert [state(), state()] == ["miss", "hit"]
        assert password not in gateway.log_path.read_text(errors="replace")
    finally:
        server.terminate()
        server.wait(timeout=10)
        set_config(gateway, **{"cache-redis_url": REDIS_TEST_URL if deployment.store == "redis" else ""})


def test_admin_flush_cache_drops_the_results_of_one_target_or_all(deployment: Deployment) -> None:
    sql = "SELECT name FROM items WHERE id = 5"
    for target in ("pg", "maria"):
        assert rpc(deployment.a, "query", "run_sql_readonly", target_id=target, sql=sql)["stats"]["cache"] == "miss"
    flushed = rpc(deployment.a, "admin", "admin_flush_cache", cache_type="query_results", target_id="pg")
    assert flushed["flushed"] == {"query_results": 1} and flushed["workers_flushed"] == flushed["workers"]
    assert rpc(deployment.b, "query", "run_sql_readonly", target_id="pg", sql=sql)["stats"]["cache"] == "miss"
    assert rpc(deployment.b, "query", "run_sql_readonly", target_id="maria", sql=sql)["stats"]["cache"] == "hit"
    everything = rpc(deployment.a, "admin", "admin_flush_cache", cache_type="all")
    assert everything["flushed"]["query_results"] == 2 and "readonly_shapes" in everything["flushed"]
    assert rpc(deployment.b, "query", "run_sql_readonly", target_id="maria", sql=sql)["stats"]["cache"] == "miss"


def test_cache_changes_are_audited(deployment: Deployment) -> None:
    rpc(deployment.a, "cache", "set_cache_ttl", target_id="maria", ttl_ms=TTL)
    rpc(deployment.a, "cache", "invalidate_cache", target_id="maria")
    rows = rpc(deployment.a, "admin", "admin.audit", since=time.time() - 60, limit=50)["rows"]
    by_action = {row["action"]: row for row in reversed(rows)}  # rows come newest first: the newest of each wins
    assert by_action["set_cache_ttl"]["endpoint"] == "cache" and by_action["set_cache_ttl"]["outcome"] == "ok"
    assert (
        by_action["set_cache_ttl"]["after"]["target_ids"] == ["maria"]
        and len(by_action["set_cache_ttl"]["token_fingerprint"]) == 12
    )
    assert by_action["invalidate_cache"]["arguments"]["target_id"] == "maria"
