"""What run_sql_readonly costs over the driver: a point query through the gateway against the
same query sent by the driver directly, for MariaDB and PostgreSQL, with 1 and 16 concurrent
clients. Goal: gateway p50 <= 1.5 x direct p50 + 1 ms.

    direct     one driver connection per client (autocommit), cursor.execute + fetchall, in
               client threads spread over --client-procs processes
    gateway_wN --mode server: tools/call run_sql_readonly over HTTPS to a real `mcp-gateway
               serve --workers N` (one gateway per --workers count, default 2 and 1), from the
               lean asyncio HTTP/1.1 keep-alive TLS client of bench/lean_client.py, one
               connection per client, spread over the same --client-procs processes;
               --mode handler: QueryHandler.execute_tool in-process (validation, thread hop,
               rules, parser, read-only transaction, digest), without HTTP/TLS/JSON-RPC.
               --mode auto (default) uses server when the build serves /mcp/query.

Each (engine, clients) pair runs --rounds interleaved rounds (direct and every gateway, in
rotated order), and the round with the median p50 is reported. Gateway rows also carry
server_cpu_ms_per_call (user+system CPU of the gateway's processes per call), which other
load on a shared machine distorts far less than latency. `floor_list_targets` is the same path with a tool
that touches no database; `--baseline-tree DIR` adds a gateway running another checkout (for
before/after in one run). Also reported: the per-call cost of the parser check alone, and of
counting a rule hit with an UPSERT into config.db per call versus the in-memory counter
flushed once a second.

The cached case (`cached` in each row, side `gateway_wN+hit`): the same point query on a twin
target with cache_ttl_ms set, over HOT ids that warm_cache stored first, so every measured
call is a result-cache hit. Goal: hit p50 <= 0.5 x the gateway's uncached p50 and <= 0.2 ms
of server CPU per call. `cache_stats` shows the hits and misses the gateways counted.

    python bench/query_overhead.py --json bench/out/query_overhead.json [--calls 400] [--mode auto]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
sys.path.insert(0, str(REPO_ROOT / "bench"))

import psycopg  # noqa: E402
import pymysql  # noqa: E402
from lean_client import Endpoint, run_http, run_threads, summary, tool_call  # noqa: E402
from report import emit  # noqa: E402

from backends.engines import engine_for  # noqa: E402
from backends.readonly import check_readonly  # noqa: E402
from backends.rules import RuleHits  # noqa: E402
from gateway.tools import CallContext  # noqa: E402

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
PGSQL = engine_for("pgsql")  # the engine the parser micro-measurement checks for
ROWS = 10_000
POOL_MAX = 16


HOT = 64  # distinct statements of the cached case, all cached before it is measured
CACHE_TTL_MS = 3_600_000


def point_sql() -> str:
    return f"SELECT id, name, val FROM points WHERE id = {random.randint(1, ROWS)}"


def hot_sql(row_id: int | None = None) -> str:
    return f"SELECT id, name, val FROM points WHERE id = {row_id or random.randint(1, HOT)}"


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


def bootstrap_toml(maria: dict, pg: dict, tokens: dict[str, str], port: int, *, cached: bool = True) -> str:
    lines = ["[variables]", f'"mcp-port" = {port}', '"mcp-use_ssl" = true', f'"mcp-query_pool_max" = {POOL_MAX}']
    lines += [f'"mcp-{endpoint}_endpoint_auth" = "{token}"' for endpoint, token in tokens.items()]
    lines += ["", "[[mcp_auth_profiles]]", 'auth_profile_id = "maria"', 'db_username = "root"', 'db_password = ""']
    lines += ["", "[[mcp_auth_profiles]]", 'auth_profile_id = "pg"', 'db_username = "postgres"', 'db_password = ""']
    for target_id, protocol, port_, database in (
        ("maria", "mysql", 3306, maria["database"]),
        ("pg", "pgsql", 5432, pg["dbname"]),
    ):
        lines += ["", "[[mcp_target_profiles]]", f'target_id = "{target_id}"', f'protocol = "{protocol}"', 'host = "127.0.0.1"']
        lines += [f"port = {port_}", f'database = "{database}"', f'auth_profile_id = "{target_id}"']
        if cached:  # its twin with the result cache on (a baseline tree may predate the column)
            lines += ["", "[[mcp_target_profiles]]", f'target_id = "{target_id}_cached"', f'protocol = "{protocol}"']
            lines += ['host = "127.0.0.1"', f"port = {port_}", f'database = "{database}"', f'auth_profile_id = "{target_id}"']
            lines += [f"cache_ttl_ms = {CACHE_TTL_MS}"]
    return "\n".join(lines) + "\n"


def start_server(tmp: Path, maria: dict, pg: dict, *, workers: int, source_tree: Path, cached: bool = True) -> Any:
    """`mcp-gateway serve --workers N` running the code of source_tree (this checkout, or a
    baseline copy given with --baseline-tree)."""
    import os
    import subprocess

    from server_process import GatewayProcess, _wait_healthy, default_tokens, free_port, gateway_command

    tmp.mkdir()
    data_dir, config_path, log_path = tmp / "data", tmp / "gateway.toml", tmp / "gateway.log"
    data_dir.mkdir()
    port = free_port()
    tokens = default_tokens()
    config_path.write_text(bootstrap_toml(maria, pg, tokens, port, cached=cached))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source_tree), env.get("PYTHONPATH", "")]))
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            gateway_command(data_dir, config_path, port, workers=workers), cwd=tmp, env=env, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    gateway = GatewayProcess(
        base_url=f"https://127.0.0.1:{port}", tokens=tokens, ca_path=data_dir / "tls" / "cert.pem", data_dir=data_dir,
        config_path=config_path, log_path=log_path, process=process,
    )  # fmt: skip
    _wait_healthy(gateway, 90, workers=workers)
    return gateway


def endpoint_of(gateway: Any) -> Endpoint:
    port = int(gateway.base_url.rsplit(":", 1)[1])
    return Endpoint(port=port, path="/mcp/query", token=gateway.tokens["query"], ca_path=str(gateway.ca_path))


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
        check_readonly(point_sql(), PGSQL, row_cap=201)
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


def cores_for_goal(measured: dict[str, float], clients: int, goal_p50_ms: float) -> dict[str, float]:
    """What the goal asks of the machine. With `clients` closed-loop clients, p50 near the mean
    means about clients / goal calls per second; at the CPU per call measured for the gateway
    and for the load generator (the database's own CPU not counted), that rate needs this many
    cores. More than the machine has means no gateway change alone can meet the goal here."""
    rate = clients / goal_p50_ms * 1000
    cpu_ms = measured.get("server_cpu_ms_per_call", 0.0) + measured.get("client_cpu_ms_per_call", 0.0)
    return {"calls_per_s": round(rate), "cpu_ms_per_call": round(cpu_ms, 3), "cores": round(rate * cpu_ms / 1000, 2)}


def median_round(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """The round with the median p50, with every round's p50 kept."""
    chosen = sorted(rounds, key=lambda r: r["p50_ms"])[len(rounds) // 2]
    return {**chosen, "p50_rounds": [r["p50_ms"] for r in rounds]}


def rotated(sides: list[str], index: int) -> list[str]:
    """Round `index` starts with a different side each time, so no side always runs first."""
    shift = index % len(sides)
    return sides[shift:] + sides[:shift]


def warm(gateway: Any) -> None:
    """Cache the HOT statements of both cached targets with warm_cache, so every measured call hits."""
    from server_process import call_tool

    with gateway.client() as http:
        for engine in ("maria", "pg"):
            queries = [hot_sql(i) for i in range(1, HOT + 1)]
            out = call_tool(http, gateway, "cache", "warm_cache", {"target_id": f"{engine}_cached", "queries": queries})
            assert out["structuredContent"]["cached"] == HOT, out


def cache_stats(gateway: Any) -> dict[str, Any]:
    """What the gateway's result cache counted: every measured call should be a hit."""
    from server_process import call_tool

    with gateway.client() as http:
        stats = call_tool(http, gateway, "cache", "get_cache_stats", {})["structuredContent"]
    return {
        "store": stats["store"], "entries": stats["entries"], "bytes": stats["bytes"],
        "per_target": {t["target_id"]: {"hits": t["hits"], "misses": t["misses"]} for t in stats["targets"]},
    }  # fmt: skip


def measure_servers(
    args: argparse.Namespace, servers: dict[str, Any], maria: dict, pg: dict
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Interleaved rounds: per engine and client count, each round measures the driver directly
    and every gateway (in rotated order), so a burst of other load on the machine hits all
    sides alike."""
    endpoints = {label: endpoint_of(gateway) for label, gateway in servers.items()}
    hits = {f"{label}+hit": label for label in servers if not label.startswith("baseline")}  # the cached case
    for label in hits.values():
        warm(servers[label])
    results: dict[str, Any] = {}
    for engine, settings in (("maria", maria), ("pg", pg)):
        for clients in (1, 16):
            per_client = args.calls if clients == 1 else max(20, args.calls // 4)
            spread = {"clients": clients, "calls_per_client": per_client, "procs": args.client_procs}
            rounds: dict[str, list[dict[str, float]]] = {"direct": [], **{label: [] for label in [*servers, *hits]}}
            body = lambda e=engine: tool_call("run_sql_readonly", {"target_id": e, "sql": point_sql()})  # noqa: E731
            hit_body = lambda e=engine: tool_call("run_sql_readonly", {"target_id": f"{e}_cached", "sql": hot_sql()})  # noqa: E731
            for index in range(args.rounds):
                for side in rotated(["direct", *endpoints, *hits], index):
                    if side == "direct":
                        measured = run_threads(direct_caller(engine, settings), **spread)
                    elif side in hits:
                        server = servers[hits[side]]
                        measured = run_http(endpoints[hits[side]], hit_body, **spread, server_group=server.process.pid)
                    else:
                        measured = run_http(endpoints[side], body, **spread, server_group=servers[side].process.pid)
                    rounds[side].append(summary(*measured))
            row: dict[str, Any] = {side: median_round(measured) for side, measured in rounds.items() if side not in hits}
            row["cached"] = {}
            for side, label in hits.items():
                hit = median_round(rounds[side])
                ratio = round(hit["p50_ms"] / row[label]["p50_ms"], 2)
                cpu = hit.get("server_cpu_ms_per_call")
                row["cached"][side] = {
                    **hit, "ratio_to_uncached_p50": ratio,
                    "meets_goal": ratio <= 0.5 and cpu is not None and cpu <= 0.2,
                }  # fmt: skip
            direct_p50 = row["direct"]["p50_ms"]
            row["goal_p50_ms"] = round(1.5 * direct_p50 + 1.0, 3)
            row["ratio_p50"] = {label: round(row[label]["p50_ms"] / direct_p50, 2) for label in servers}
            row["meets_goal"] = {label: row[label]["p50_ms"] <= row["goal_p50_ms"] for label in servers}
            row["cores_for_goal"] = {label: cores_for_goal(row[label], clients, row["goal_p50_ms"]) for label in servers}
            results[f"{engine}_c{clients}"] = row
            shown = {k: v["p50_ms"] for k, v in [*row.items(), *row["cached"].items()] if isinstance(v, dict) and "p50_ms" in v}
            print(f"{engine} c={clients}: {json.dumps(shown)}", file=sys.stderr, flush=True)
    # The gateway's own floor: a tool that touches no database, through the same path.
    floor: dict[str, Any] = {}
    for clients in (1, 16):
        per_client = args.calls if clients == 1 else max(20, args.calls // 4)
        rounds = {label: [] for label in servers}
        for index in range(args.rounds):
            for label in rotated(list(endpoints), index):
                measured = run_http(
                    endpoints[label], lambda: tool_call("list_targets", {}), clients=clients, calls_per_client=per_client,
                    procs=args.client_procs, server_group=servers[label].process.pid,
                )  # fmt: skip
                rounds[label].append(summary(*measured))
        floor[f"c{clients}"] = {label: median_round(measured) for label, measured in rounds.items()}
    for key, row in results.items():
        level = key.split("_")[1]
        row["sql_tool_minus_floor_p50_ms"] = {
            label: round(row[label]["p50_ms"] - floor[level][label]["p50_ms"], 3) for label in servers
        }
        # Even a tool that touches no database, at this row's goal:
        row["floor_cores_for_goal"] = {
            label: cores_for_goal(floor[level][label], int(level[1:]), row["goal_p50_ms"]) for label in servers
        }
    return results, floor


def measure_handler(args: argparse.Namespace, handler: Any, maria: dict, pg: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    results: dict[str, Any] = {}
    for engine, settings in (("maria", maria), ("pg", pg)):
        for clients in (1, 16):
            per_client = args.calls if clients == 1 else max(20, args.calls // 4)
            direct = summary(
                *run_threads(
                    direct_caller(engine, settings), clients=clients, calls_per_client=per_client, procs=args.client_procs
                )
            )
            through = run_handler(
                handler, "run_sql_readonly", lambda e=engine: {"target_id": e, "sql": point_sql()}, clients, per_client
            )
            goal = round(1.5 * direct["p50_ms"] + 1.0, 3)
            results[f"{engine}_c{clients}"] = {
                "direct": direct, "handler": through, "goal_p50_ms": goal, "meets_goal": through["p50_ms"] <= goal,
                "ratio_p50": round(through["p50_ms"] / direct["p50_ms"], 2),
            }  # fmt: skip
    floor = {
        f"c{c}": run_handler(handler, "list_targets", dict, c, args.calls if c == 1 else max(20, args.calls // 4))
        for c in (1, 16)
    }
    return results, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls for 1 client; 16 clients make calls/4 each")
    parser.add_argument("--mode", choices=("auto", "server", "handler"), default="auto")
    parser.add_argument("--workers", default="2,1", help="comma-separated uvicorn worker counts, one gateway each")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the round with the median p50 is reported")
    parser.add_argument("--client-procs", type=int, default=2, help="load-generator processes (direct and gateway alike)")
    parser.add_argument(
        "--baseline-tree", type=Path, help="also run a gateway (first --workers count) from this source tree, in the same rounds"
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    from server_process import registered_endpoints, stop_gateway

    mode = args.mode
    if mode == "auto":
        mode = "server" if "query" in registered_endpoints() else "handler"
    workers = [int(w) for w in args.workers.split(",")]
    random.seed(1)
    name = f"mcpgw_bench_{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="mcpgw-qbench-"))
    load_before = list(os.getloadavg())
    maria, pg = create_databases(name)
    servers: dict[str, Any] = {}
    handler = store = None
    try:
        if mode == "server":
            for count in workers:
                servers[f"gateway_w{count}"] = start_server(tmp / f"w{count}", maria, pg, workers=count, source_tree=REPO_ROOT)
            if args.baseline_tree:
                servers[f"baseline_w{workers[0]}"] = start_server(
                    tmp / "baseline", maria, pg, workers=workers[0], source_tree=args.baseline_tree.resolve(), cached=False
                )
            results, floor = measure_servers(args, servers, maria, pg)
        else:
            handler, store = in_process_handler(tmp, maria, pg)
            results, floor = measure_handler(args, handler, maria, pg)
        output = {
            "bench": "query_overhead",
            "mode": mode,
            "mode_note": (
                "server: real HTTPS mcp-gateway serve per worker count (gateway_wN); lean asyncio HTTP/1.1 keep-alive TLS "
                "clients and direct driver clients alike spread over client_procs processes, interleaved rounds"
                if mode == "server" else "handler.execute_tool in-process (no HTTP/TLS)"
            ),
            "python": platform.python_version(),
            "rows": ROWS,
            "rounds": args.rounds,
            "client_procs": args.client_procs,
            "baseline_tree": str(args.baseline_tree) if args.baseline_tree else None,
            "load_average_before_after": [load_before, list(os.getloadavg())],
            "cpus": os.cpu_count(),
            "results": results,
            "floor_list_targets": floor,
            "cache_stats": {label: cache_stats(g) for label, g in servers.items() if not label.startswith("baseline")},
            "micro": micro(tmp),
        }  # fmt: skip
    finally:
        for gateway in servers.values():
            stop_gateway(gateway)
        if handler is not None:
            asyncio.run(handler.close())
            store.close()
        drop_databases(name)
        shutil.rmtree(tmp, ignore_errors=True)
    emit(output, args.json)


if __name__ == "__main__":
    main()
