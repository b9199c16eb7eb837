"""Connection pooling of /mcp/query targets: a pooled borrow against connect-per-call.

For each engine (MariaDB, PostgreSQL, SQLite; the local servers of the test setup) one
thread runs `SELECT 1` N times two ways, alternating in rounds so drift hits both alike:

  pooled    backends.pools.TargetPools.connection(target) -> SELECT 1 -> return (rollback only
            when a transaction may be open: MariaDB sessions are autocommit)
            (the path every query tool takes: health bookkeeping, read-only session)
  connect   the same session settings, a fresh connection per call (connect, SELECT 1, close)

Reported per engine: per-call p50/p95 in microseconds for both, and the ratio connect/pooled
(how many times slower it would be without the pool). Also the discovery tool list_tables
through the handler's execute path (validation, thread hop, catalog SQL), p50/p95 in ms.

    python bench/pool_overhead.py --json bench/out/pool_overhead.json [--calls 300]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from report import emit  # noqa: E402

from backends.pools import TargetPools  # noqa: E402
from gateway.tools import CallContext  # noqa: E402
from handlers.query import QueryHandler  # noqa: E402
from tests.query import add_auth, add_target, make_services, make_store  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def select_one(conn: Any) -> None:
    if isinstance(conn, sqlite3.Connection):
        conn.execute("SELECT 1").fetchall()
        return
    with conn.cursor() as cur:
        cur.execute("SELECT 1")
        cur.fetchall()


def connect_once(target: Any) -> None:
    conn = target.engine.connect(target, timeout_s=5, io_timeout_s=30)
    select_one(conn)
    conn.close()


def pooled_once(pools: TargetPools, target_id: str) -> None:
    with pools.connection(target_id) as (_, conn):
        select_one(conn)


def timed(fn: Any, *args: Any) -> float:
    started = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - started) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mcpgw-bench-") as tmp_dir:
        result = measure(Path(tmp_dir), args.calls)
    emit(result, args.json)


def measure(tmp: Path, calls: int) -> dict[str, Any]:
    lite = tmp / "lite.db"
    conn = sqlite3.connect(lite)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    store = make_store(tmp / "data")
    add_auth(store, "root", "root")
    add_auth(store, "pg", "postgres")
    add_target(store, "mysql", "mysql", host="127.0.0.1", port=3306, database="mysql", auth_profile_id="root")
    add_target(store, "pgsql", "pgsql", host="127.0.0.1", port=5432, database="postgres", auth_profile_id="pg")
    add_target(store, "sqlite", "sqlite", database=str(lite))
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    pools = handler.pools

    engines: dict[str, Any] = {}
    for target_id in ("mysql", "pgsql", "sqlite"):
        target = pools.resolve(target_id)
        pooled_once(pools, target_id)  # warm: the first borrow opens the connection
        pooled: list[float] = []
        fresh: list[float] = []
        for _ in range(calls // 10):
            pooled += [timed(pooled_once, pools, target_id) for _ in range(10)]
            fresh += [timed(connect_once, target) for _ in range(10)]
        spec = handler.find_tool("list_tables")
        tool_ms = []
        for _ in range(max(20, calls // 5)):
            ctx = CallContext(
                endpoint="query", tool_name="list_tables", runtime=handler.services.runtime, deadline=time.monotonic() + 30
            )
            started = time.perf_counter()
            result = asyncio.run(handler.execute_tool(spec, {"target_id": target_id, "page_size": 20}, ctx))
            tool_ms.append((time.perf_counter() - started) * 1000)
            assert not result["isError"], result
        engines[target_id] = {
            "pooled_p50_us": round(statistics.median(pooled), 1),
            "pooled_p95_us": round(percentile(pooled, 0.95), 1),
            "connect_p50_us": round(statistics.median(fresh), 1),
            "connect_p95_us": round(percentile(fresh, 0.95), 1),
            "ratio_connect_over_pooled_p50": round(statistics.median(fresh) / statistics.median(pooled), 2),
            "list_tables_tool_p50_ms": round(statistics.median(tool_ms), 3),
            "list_tables_tool_p95_ms": round(percentile(tool_ms, 0.95), 3),
        }
    result = {
        "bench": "pool_overhead",
        "calls_per_mode": (calls // 10) * 10,
        "python": platform.python_version(),
        "engines": engines,
        "pool_stats": pools.stats(),
    }
    asyncio.run(handler.close())
    store.close()
    return result


if __name__ == "__main__":
    main()
