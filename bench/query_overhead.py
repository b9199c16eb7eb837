"""What run_sql_readonly costs over the driver: a point query through the gateway against the
same query sent by the driver directly, for MariaDB and PostgreSQL, with 1 and 16 concurrent
clients. Goal: gateway p50 <= 1.5 x direct p50 + 1 ms.

    direct    one connection per client (autocommit), cursor.execute + fetchall
    gateway   --mode server: tools/call run_sql_readonly over HTTPS to a real `mcp-gateway
              serve` (1 worker, keep-alive httpx client per client thread);
              --mode handler: QueryHandler.execute_tool in-process (validation, thread hop,
              rules, parser, read-only transaction, digest), without HTTP/TLS/JSON-RPC.
              --mode auto (default) uses server when the build serves /mcp/query.

Also reported: the per-call cost of the parser check alone, and of counting a rule hit with
an UPSERT into config.db per call versus the in-memory counter flushed once a second.

    python bench/query_overhead.py --json bench/out/query_overhead.json [--calls 400] [--mode auto]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

import psycopg  # noqa: E402
import pymysql  # noqa: E402

from handlers.base import CallContext  # noqa: E402
from handlers.query.readonly import check_readonly  # noqa: E402
from handlers.query.rules import RuleHits  # noqa: E402

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
ROWS = 10_000
POOL_MAX = 16


def point_sql() -> str:
    return f"SELECT id, name, val FROM points WHERE id = {random.randint(1, ROWS)}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies_ms: list[float], wall_s: float) -> dict[str, float]:
    return {
        "calls": len(latencies_ms),
        "p50_ms": round(statistics.median(latencies_ms), 3),
        "p95_ms": round(percentile(latencies_ms, 0.95), 3),
        "throughput_per_s": round(len(latencies_ms) / wall_s, 1),
    }


# -- databases --------------------------------------------------------------------------------


def create_databases(name: str) -> tuple[dict, dict]:
    rows = [(i, f"name {i}", i * 7) for i in range(1, ROWS + 1)]
    admin = pymysql.connect(**MARIADB, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute(f"CREATE TABLE `{name}`.points (id INT PRIMARY KEY, name VARCHAR(40), val INT)")
        cur.executemany(f"INSERT INTO `{name}`.points VALUES (%s, %s, %s)", rows)
    admin.close()
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as pg:
        pg.execute(f'CREATE DATABASE "{name}"')
    with psycopg.connect(**POSTGRES, dbname=name, autocommit=True) as pg:
        pg.execute("CREATE TABLE points (id int PRIMARY KEY, name text, val int)")
        with pg.cursor() as cur:
            cur.executemany("INSERT INTO points VALUES (%s, %s, %s)", rows)
        pg.execute("ANALYZE points")
    return {**MARIADB, "database": name}, {**POSTGRES, "dbname": name}


def drop_databases(name: str) -> None:
    admin = pymysql.connect(**MARIADB, autocommit=True)
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    admin.close()
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def direct_caller(engine: str, settings: dict) -> Callable[[], Callable[[], None]]:
    def make() -> Callable[[], None]:
        if engine == "maria":
            conn = pymysql.connect(**settings, autocommit=True)

            def call() -> None:
                with conn.cursor() as cur:
                    cur.execute(point_sql())
                    cur.fetchall()

            return call
        pg = psycopg.connect(**settings, autocommit=True)
        return lambda: pg.execute(point_sql()).fetchall()

    return make


# -- running clients ---------------------------------------------------------------------------


def run_threads(make_call: Callable[[], Callable[[], None]], clients: int, calls_per_client: int) -> dict[str, float]:
    latencies: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(clients + 1)

    def client() -> None:
        call = make_call()
        for _ in range(10):
            call()  # warm up: connections, pools, caches
        ready.wait()
        mine = []
        for _ in range(calls_per_client):
            started = time.perf_counter()
            call()
            mine.append((time.perf_counter() - started) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return summary(latencies, time.perf_counter() - started)


def server_caller(gateway: Any, tool: str, arguments: Callable[[], dict]) -> Callable[[], Callable[[], None]]:
    def make() -> Callable[[], None]:
        client = gateway.client()
        headers = {**gateway.auth("query"), "MCP-Protocol-Version": "2025-06-18", "Accept": "application/json, text/event-stream"}

        def call() -> None:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments()},
            }
            answer = client.post("/mcp/query", json=body, headers=headers).json()
            if answer["result"].get("isError"):
                raise RuntimeError(answer)

        return call

    return make


def run_handler(handler: Any, tool: str, arguments: Callable[[], dict], clients: int, calls_per_client: int) -> dict[str, float]:
    """Concurrent calls on one event loop, as the server makes them."""
    spec = handler.find_tool(tool)

    async def one() -> float:
        ctx = CallContext(endpoint="query", tool_name=spec.name, runtime=handler.services.runtime, deadline=time.monotonic() + 30)
        started = time.perf_counter()
        result = await handler.execute_tool(spec, arguments(), ctx)
        if result["isError"]:
            raise RuntimeError(result)
        return (time.perf_counter() - started) * 1000

    async def client(out: list[float]) -> None:
        for _ in range(10):
            await one()
        out.extend([await one() for _ in range(calls_per_client)])

    async def main() -> tuple[list[float], float]:
        latencies: list[float] = []
        started = time.perf_counter()
        await asyncio.gather(*(client(latencies) for _ in range(clients)))
        return latencies, time.perf_counter() - started

    latencies, wall = asyncio.run(main())
    return summary(latencies, wall)


# -- the gateway -------------------------------------------------------------------------------


def bootstrap_toml(maria: dict, pg: dict) -> tuple[str, dict[str, str]]:
    from server_process import default_tokens

    tokens = default_tokens()
    lines = ["[variables]", f'"mcp-query_pool_max" = {POOL_MAX}']
    lines += [f'"mcp-{endpoint}_endpoint_auth" = "{token}"' for endpoint, token in tokens.items()]
    lines += ["", "[[mcp_auth_profiles]]", 'auth_profile_id = "maria"', 'db_username = "root"', 'db_password = ""']
    lines += ["", "[[mcp_auth_profiles]]", 'auth_profile_id = "pg"', 'db_username = "postgres"', 'db_password = ""']
    for target_id, protocol, port, database in (("maria", "mysql", 3306, maria["database"]), ("pg", "pgsql", 5432, pg["dbname"])):
        lines += ["", "[[mcp_target_profiles]]", f'target_id = "{target_id}"', f'protocol = "{protocol}"', 'host = "127.0.0.1"']
        lines += [f"port = {port}", f'database = "{database}"', f'auth_profile_id = "{target_id}"']
    return "\n".join(lines) + "\n", tokens


def start_server(tmp: Path, maria: dict, pg: dict) -> Any:
    import os
    import subprocess

    from server_process import GatewayProcess, _wait_healthy, free_port, gateway_command

    data_dir, config_path, log_path = tmp / "data", tmp / "gateway.toml", tmp / "gateway.log"
    data_dir.mkdir()
    port = free_port()
    text, tokens = bootstrap_toml(maria, pg)
    config_path.write_text(text.replace("[variables]", f'[variables]\n"mcp-port" = {port}\n"mcp-use_ssl" = true', 1))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")]))
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            gateway_command(data_dir, config_path, port, workers=1), cwd=tmp, env=env, stdout=log_file, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    gateway = GatewayProcess(
        base_url=f"https://127.0.0.1:{port}", tokens=tokens, ca_path=data_dir / "tls" / "cert.pem", data_dir=data_dir,
        config_path=config_path, log_path=log_path, process=process,
    )  # fmt: skip
    _wait_healthy(gateway, 60)
    return gateway


def in_process_handler(tmp: Path, maria: dict, pg: dict) -> Any:
    from tests.query import add_auth, add_target, make_services
    from tests.query.test_sql_tools import Handler, make_store

    store = make_store(tmp / "data")
    store.set_variable("mcp-query_pool_max", str(POOL_MAX))
    store.load_to_runtime("MCP VARIABLES")
    add_auth(store, "maria", "root", "")
    add_auth(store, "pg", "postgres", "")
    add_target(store, "maria", "mysql", host="127.0.0.1", port=3306, database=maria["database"], auth_profile_id="maria")
    add_target(store, "pg", "pgsql", host="127.0.0.1", port=5432, database=pg["dbname"], auth_profile_id="pg")
    store.load_to_runtime("MCP PROFILES")
    return Handler(make_services(store)), store


# -- micro measurements --------------------------------------------------------------------------


def micro(tmp: Path, repeats: int = 2000) -> dict[str, float]:
    from tests.query.test_sql_tools import make_store

    started = time.perf_counter()
    for _ in range(repeats):
        check_readonly(point_sql(), "pgsql", row_cap=201)
    parser_us = (time.perf_counter() - started) / repeats * 1e6
    store = make_store(tmp / "micro")
    conn = store.conn()
    started = time.perf_counter()
    for i in range(repeats // 4):
        conn.execute(
            "INSERT INTO stats_mcp_query_rules (rule_id, username, target_id, hits) VALUES (?, 'u', 't', 1)"
            " ON CONFLICT (rule_id, username, target_id) DO UPDATE SET hits = hits + 1",
            (i % 5,),
        )
    upsert_us = (time.perf_counter() - started) / (repeats // 4) * 1e6
    hits = RuleHits()
    started = time.perf_counter()
    for i in range(repeats):
        hits.count([i % 5], username="u", target_id="t")
    count_us = (time.perf_counter() - started) / repeats * 1e6
    started = time.perf_counter()
    hits.flush(store)
    flush_ms = (time.perf_counter() - started) * 1000
    store.close()
    return {
        "parser_check_us_per_call": round(parser_us, 1),
        "rule_hit_upsert_us_per_call": round(upsert_us, 1),
        "rule_hit_in_memory_us_per_call": round(count_us, 2),
        "rule_hits_flush_ms_once_a_second": round(flush_ms, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls for 1 client; 16 clients make calls/4 each")
    parser.add_argument("--mode", choices=("auto", "server", "handler"), default="auto")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    from server_process import registered_endpoints, stop_gateway

    mode = args.mode
    if mode == "auto":
        mode = "server" if "query" in registered_endpoints() else "handler"
    random.seed(1)
    name = f"mcpgw_bench_{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="mcpgw-qbench-"))
    maria, pg = create_databases(name)
    gateway = handler = store = None
    try:
        if mode == "server":
            gateway = start_server(tmp, maria, pg)
        else:
            handler, store = in_process_handler(tmp, maria, pg)
        results: dict[str, Any] = {}

        def through_gateway(tool: str, arguments: Callable[[], dict], clients: int, per_client: int) -> dict[str, float]:
            if gateway is not None:
                return run_threads(server_caller(gateway, tool, arguments), clients, per_client)
            return run_handler(handler, tool, arguments, clients, per_client)

        for engine, settings in (("maria", maria), ("pg", pg)):
            for clients in (1, 16):
                per_client = args.calls if clients == 1 else max(20, args.calls // 4)
                direct = run_threads(direct_caller(engine, settings), clients, per_client)
                through = through_gateway(
                    "run_sql_readonly", lambda e=engine: {"target_id": e, "sql": point_sql()}, clients, per_client
                )
                budget = 1.5 * direct["p50_ms"] + 1.0
                results[f"{engine}_c{clients}"] = {
                    "direct": direct,
                    "gateway": through,
                    "ratio_p50": round(through["p50_ms"] / direct["p50_ms"], 2),
                    "goal_p50_ms": round(budget, 3),
                    "meets_goal": through["p50_ms"] <= budget,
                }
        # The gateway's own floor: a tool that touches no database, through the same path.
        floor = {
            f"c{c}": through_gateway("list_targets", dict, c, args.calls if c == 1 else max(20, args.calls // 4)) for c in (1, 16)
        }
        for key, row in results.items():
            row["sql_tool_minus_floor_p50_ms"] = round(row["gateway"]["p50_ms"] - floor[key.split("_")[1]]["p50_ms"], 3)
        output = {
            "bench": "query_overhead",
            "mode": mode,
            "mode_note": "server: real HTTPS mcp-gateway serve (1 worker)" if mode == "server" else "handler.execute_tool in-process (no HTTP/TLS): /mcp/query not registered in this build",
            "python": platform.python_version(),
            "rows": ROWS,
            "results": results,
            "floor_list_targets": floor,
            "micro": micro(tmp),
        }  # fmt: skip
    finally:
        if gateway is not None:
            stop_gateway(gateway)
        if handler is not None:
            asyncio.run(handler.close())
            store.close()
        drop_databases(name)
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(output, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
