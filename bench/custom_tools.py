"""CPU per call of a custom SQL tool (MCP TOOLS) against run_sql_readonly running the same
statement, side by side, on MariaDB and PostgreSQL. Goal: custom within 10 % of run_sql_readonly.

One real gateway (1 worker, HTTPS); a keep-alive httpx client sends --calls sequential
tools/call per side, in --rounds interleaved rounds (order rotated); for each side the server
CPU (user+system of the gateway's processes, psutil) per call and the client-observed p50.
The statement: a point query by primary key; the custom tool binds the id, run_sql_readonly
carries it as a literal (a new value each call, as agents do).

    python bench/custom_tools.py [--calls 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

import psutil  # noqa: E402
import psycopg  # noqa: E402
import pymysql  # noqa: E402
from server_process import call_tool, start_gateway  # noqa: E402

STATEMENT = "SELECT id, name, price FROM items WHERE id = {}"


def server_cpu(pid: int) -> float:
    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    name = f"mcpgw_bench_{uuid.uuid4().hex[:8]}"
    my = pymysql.connect(host="127.0.0.1", user="root", password="", autocommit=True)
    my.cursor().execute(f"CREATE DATABASE `{name}`")
    pg_admin = psycopg.connect(host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True)
    pg_admin.execute(f'CREATE DATABASE "{name}"')
    try:
        rows = [(i, f"item {i}", f"{i}.50") for i in range(1, 1001)]
        with pymysql.connect(host="127.0.0.1", user="root", password="", database=name, autocommit=True) as conn:
            cur = conn.cursor()
            cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40), price DECIMAL(10,2))")
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", rows)
        with psycopg.connect(host="127.0.0.1", user="postgres", dbname=name, autocommit=True) as conn:
            conn.execute("CREATE TABLE items (id INT PRIMARY KEY, name TEXT, price NUMERIC(10,2))")
            conn.cursor().executemany("INSERT INTO items VALUES (%s, %s, %s)", rows)
        results: dict[str, dict[str, float]] = {}
        with start_gateway() as gateway, gateway.client(timeout=30.0) as http:
            params = json.dumps([{"name": "id", "type": "integer", "minimum": 1, "maximum": 1000000}])
            for statement in (
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('my', 'root', '')",
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pg', 'postgres', 'trust')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
                f"VALUES ('maria', 'mysql', '127.0.0.1', 3306, '{name}', 'my')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
                f"VALUES ('pg', 'pgsql', '127.0.0.1', 5432, '{name}', 'pg')",
                "LOAD MCP PROFILES TO RUNTIME",
                *(
                    "INSERT INTO mcp_tools (tool_name, target_id, description, statement, parameters) VALUES "
                    f"('item_{t}', '{t}', 'One item by id.', '{STATEMENT.format(':id')}', '{params}')"
                    for t in ("maria", "pg")
                ),
                "LOAD MCP TOOLS TO RUNTIME",
            ):
                out = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
                assert not out["isError"], out
            time.sleep(1.5)
            pid = gateway.process.pid
            sides = {f"{t}_{side}": (t, side) for t in ("maria", "pg") for side in ("run_sql_readonly", "custom")}
            per_side: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
            for round_no in range(args.rounds):
                order = list(sides)[round_no % 4 :] + list(sides)[: round_no % 4]
                for key in order:
                    target, side = sides[key]
                    latencies = []
                    cpu0 = server_cpu(pid)
                    for i in range(args.calls):
                        row_id = (i * 7919 + round_no) % 1000 + 1
                        started = time.perf_counter()
                        if side == "custom":
                            out = call_tool(http, gateway, "query", f"item_{target}", {"id": row_id})
                        else:
                            out = call_tool(
                                http, gateway, "query", "run_sql_readonly", {"sql": STATEMENT.format(row_id), "target_id": target}
                            )
                        latencies.append((time.perf_counter() - started) * 1000)
                        assert not out["isError"] and out["structuredContent"]["rows"][0][0] == row_id, out
                    cpu = (server_cpu(pid) - cpu0) * 1000 / args.calls
                    per_side[key].append((cpu, statistics.median(latencies)))
            for key, samples in per_side.items():
                results[key] = {
                    "server_cpu_ms_per_call": round(statistics.median(c for c, _ in samples), 4),
                    "p50_ms": round(statistics.median(p for _, p in samples), 3),
                }
        ratios = {
            t: round(
                results[f"{t}_custom"]["server_cpu_ms_per_call"] / results[f"{t}_run_sql_readonly"]["server_cpu_ms_per_call"], 3
            )
            for t in ("maria", "pg")
        }
        print(json.dumps({
            "bench": "custom_tools", "calls": args.calls, "rounds": args.rounds, "loadavg": os.getloadavg(),
            "results": results, "custom_over_run_sql_cpu": ratios, "goal": "<= 1.10",
        }, indent=2))  # fmt: skip
    finally:
        my.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
        pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
