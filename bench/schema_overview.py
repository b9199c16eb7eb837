"""The one-call schema overview and the query endpoint's resources, on a big PostgreSQL schema.

Builds a schema of --tables tables x 8 columns (one foreign key each, one index) and calls,
through QueryHandler's real path (in process, no HTTP), each --repeat times:

  get_schema_info        no detail: past mcp-query_summary_threshold (300) it answers a summary
  list_tables            summarize=true: the baseline (the listing tool's own summary)
  get_schema_info_rule   the same with a query rule active (every table asked of the rules)
  get_schema_info_full   detail=full for the 20 tables a name_filter keeps
  read_table_resource    db://target/schema/table (columns, keys, indexes)
  describe+constraints   describe_table then get_constraints: the baseline of one table's resource
  resources_list         read_resource list=true (mcp-resources_list_max 1000 entries)

Prints p50 wall ms and CPU ms per call of this process (the database server's CPU is not
counted), the ratio to the baseline, and the load average. Everything created is dropped.

    python bench/schema_overview.py --json bench/out/schema_overview.json [--tables 2000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psycopg  # noqa: E402
from report import emit  # noqa: E402

from handlers.query import QueryHandler  # noqa: E402
from tests.query import add_auth, add_target, insert, make_services, make_store, ok  # noqa: E402

POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def build(dbname: str, tables: int) -> None:
    with psycopg.connect(**POSTGRES, dbname=dbname, autocommit=True) as pg:
        pg.execute("CREATE TABLE t0000 (id int PRIMARY KEY, name text)")
        for n in range(1, tables):  # autocommit: thousands in one transaction exhaust max_locks_per_transaction
            pg.execute(
                f"CREATE TABLE t{n:04d} (id int PRIMARY KEY, parent_id int REFERENCES t{n - 1:04d}(id), "
                "name text, amount numeric, status text, created_at timestamptz, note text, flag boolean)"
            )
            pg.execute(f"CREATE INDEX ON t{n:04d} (status)")
        pg.execute("ANALYZE")


def measure(fn: Any, repeat: int) -> dict[str, float]:
    walls, cpus = [], []
    fn()  # warm
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w) * 1000)
        cpus.append((time.process_time() - c) * 1000)
    return {"p50_ms": round(statistics.median(walls), 2), "cpu_ms_per_call": round(statistics.median(cpus), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dbname = f"bench_overview_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        started = time.perf_counter()
        build(dbname, args.tables)
        build_s = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as tmp:
            store = make_store(Path(tmp))
            add_auth(store, "pg", "postgres")
            add_target(
                store, "pg", "pgsql", host="127.0.0.1", port=5432, database=dbname, auth_profile_id="pg", timeout_ms=30_000
            )
            store.load_to_runtime("MCP PROFILES")
            handler = QueryHandler(make_services(store))
            results: dict[str, Any] = {}

            def run(tool: str, **arguments: Any) -> Any:
                return lambda: ok(handler, tool, **arguments)

            summary = ok(handler, "get_schema_info", target_id="pg", schema="public")
            assert summary["summarized"] is True and summary["table_total"] == args.tables, summary["table_total"]
            results["get_schema_info"] = measure(run("get_schema_info", target_id="pg", schema="public"), args.repeat)
            results["list_tables_summarize"] = measure(
                run("list_tables", target_id="pg", schema="public", summarize=True), args.repeat
            )
            full = run("get_schema_info", target_id="pg", schema="public", detail="full", name_filter="t00")
            results["get_schema_info_full_filtered"] = measure(full, args.repeat)
            uri = "db://pg/public/t0005"
            results["read_table_resource"] = measure(run("read_resource", uri=uri), args.repeat)

            def describe_and_constraints() -> None:
                ok(handler, "describe_table", target_id="pg", schema="public", table="t0005")
                ok(handler, "get_constraints", target_id="pg", schema="public", table="t0005")

            results["describe_table+get_constraints"] = measure(describe_and_constraints, args.repeat)
            results["resources_list"] = measure(run("read_resource", list=True), args.repeat)
            insert(store, "mcp_query_rules", rule_id=1, active=1, match_pattern=r"\bt1999\b", error_msg="hidden", apply=1)
            store.load_to_runtime("MCP QUERY RULES")
            handler.services.runtime = store.read_runtime()
            hidden = ok(handler, "get_schema_info", target_id="pg", schema="public")
            assert hidden["table_total"] == args.tables - 1, hidden["table_total"]
            results["get_schema_info_with_rule"] = measure(run("get_schema_info", target_id="pg", schema="public"), args.repeat)
            base = results["list_tables_summarize"]
            for name in ("get_schema_info", "get_schema_info_with_rule"):
                results[name]["ratio_p50_vs_list_tables"] = round(results[name]["p50_ms"] / base["p50_ms"], 2)
            results["read_table_resource"]["ratio_p50_vs_describe+constraints"] = round(
                results["read_table_resource"]["p50_ms"] / results["describe_table+get_constraints"]["p50_ms"], 2
            )
            handler.services.targets.close()  # type: ignore[union-attr]
        emit(
            {
                "bench": "schema_overview",
                "tables": args.tables,
                "repeat": args.repeat,
                "build_s": round(build_s, 1),
                "loadavg": os.getloadavg(),
                "results": results,
            },
            args.json,
        )
    finally:
        with psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    main()
