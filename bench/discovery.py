"""Discovery at scale: profiling a 1,000,000-row table and harvesting a 2,000-table schema.

profile   A table of --rows rows (default 1,000,000) on MariaDB and on PostgreSQL, built by
          this script: id (key), customer_id (random 1..50,000), status (5 values), note
          (20 % NULL, 1,000 values), amount (random decimal), email (unique), created_at
          (follows the key, as in most tables: about 10 rows a minute, arrivals jittered). table_profile runs through the handler's real
          path with the targets' default timeout_ms (2000); the script prints, per column,
          the profile's null ratio and distinct estimate beside the exact values (COUNT(*) /
          COUNT(DISTINCT) over the whole table, run here directly: the baseline, timed too),
          with the relative error.
harvest   A schema of --tables tables x --columns columns (default 2,000 x 10) with comments
          and one foreign key per table, on PostgreSQL (and MariaDB with --harvest-mysql);
          discovery.run_static as the job the tool starts, followed through discovery.status
          the way a client would (the progress snapshots seen are counted), then catalog.search.

Everything created is dropped at the end (databases, schema, temp data directory).

    python bench/discovery.py --json bench/out/discovery.json [--rows 1000000] [--tables 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import psycopg  # noqa: E402
import pymysql  # noqa: E402
from report import emit  # noqa: E402

from gateway.assembly import open_store  # noqa: E402
from handlers.query import QueryHandler  # noqa: E402
from tests.query import add_auth, add_target, make_services  # noqa: E402

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}
COLUMNS = ("id", "customer_id", "status", "note", "amount", "email", "created_at")


def call(handler: QueryHandler, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    spec = handler.find_tool(tool)
    assert spec is not None
    result = asyncio.run(handler.execute_tool(spec, arguments, handler.context(spec, handler.services.runtime)))
    if result["isError"]:
        raise RuntimeError(f"{tool}: {result['structuredContent']}")
    return result["structuredContent"]


# -- building -------------------------------------------------------------------------------


def build_mysql_big(db: str, rows: int) -> None:
    conn = pymysql.connect(**MARIADB, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        cur.execute(
            "CREATE TABLE big (id INT PRIMARY KEY, customer_id INT NOT NULL, status VARCHAR(16) NOT NULL, note VARCHAR(64), "
            "amount DECIMAL(10,2), email VARCHAR(64), created_at DATETIME)"
        )
        cur.execute(
            # CRC32 mixes the row number: RAND(seq) for consecutive seeds is nearly linear in seq.
            "INSERT INTO big SELECT seq, 1 + CRC32(CONCAT('c', seq)) % 50000, ELT(1 + CRC32(CONCAT('s', seq)) % 5, 'new','paid','shipped','done','void'), "
            "IF(CRC32(CONCAT('n', seq)) % 5 = 0, NULL, CONCAT('note ', CRC32(CONCAT('v', seq)) % 1000)), (CRC32(CONCAT('a', seq)) % 100000) / 100, "
            f"CONCAT('user', seq, '@example.com'), '2024-01-01' + INTERVAL ((seq * 6 + CRC32(CONCAT('t', seq)) % 120) DIV 60) MINUTE "
            f"FROM seq_1_to_{rows}"
        )
        cur.execute("ANALYZE TABLE big")
        cur.fetchall()
    conn.close()


def build_pg_big(db: str, rows: int) -> None:
    with psycopg.connect(**POSTGRES, dbname=db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE big (id int PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, note text, "
            "amount numeric(10,2), email text, created_at timestamp)"
        )
        conn.execute("SELECT setseed(0.42)")
        conn.execute(
            "INSERT INTO big SELECT g, 1 + floor(random() * 50000)::int, (ARRAY['new','paid','shipped','done','void'])[1 + floor(random() * 5)::int], "
            "CASE WHEN random() < 0.2 THEN NULL ELSE 'note ' || floor(random() * 1000)::int END, round((random() * 1000)::numeric, 2), "
            f"'user' || g || '@example.com', '2024-01-01'::timestamp + ((g * 6 + floor(random() * 120)::int) / 60) * interval '1 minute' "
            f"FROM generate_series(1, {rows}) g"
        )
        conn.execute("ANALYZE big")


def exact_mysql(db: str) -> dict[str, Any]:
    conn = pymysql.connect(**MARIADB, database=db)
    with conn.cursor() as cur:
        parts = ", ".join(f"COUNT(`{c}`), COUNT(DISTINCT `{c}`)" for c in COLUMNS)
        cur.execute(f"SELECT COUNT(*), {parts} FROM big")
        row = cur.fetchone()
    conn.close()
    return _exact(row)


def exact_pg(db: str) -> dict[str, Any]:
    with psycopg.connect(**POSTGRES, dbname=db) as conn:
        parts = ", ".join(f'COUNT("{c}"), COUNT(DISTINCT "{c}")' for c in COLUMNS)
        row = conn.execute(f"SELECT COUNT(*), {parts} FROM big").fetchone()
    return _exact(row)


def _exact(row: tuple) -> dict[str, Any]:
    total = row[0]
    out = {"rows": total}
    for i, column in enumerate(COLUMNS):
        non_null, distinct = row[1 + 2 * i], row[2 + 2 * i]
        out[column] = {"null_ratio": (total - non_null) / total, "distinct": distinct}
    return out


def side_by_side(profile: dict[str, Any], exact: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for column in profile["columns"]:
        truth = exact[column["name"]]
        null_error = abs(column["null_ratio"] - truth["null_ratio"])
        distinct_error = abs(column["distinct_estimate"] - truth["distinct"]) / truth["distinct"]
        out.append(
            {
                "column": column["name"],
                "null_ratio": round(column["null_ratio"], 4),
                "null_ratio_exact": round(truth["null_ratio"], 4),
                "null_ratio_abs_error": round(null_error, 4),
                "distinct_estimate": column["distinct_estimate"],
                "distinct_exact": truth["distinct"],
                "distinct_rel_error": round(distinct_error, 4),
                "within_5pct": null_error <= 0.05 and distinct_error <= 0.05,
            }
        )
    return out


def build_wide_pg(db: str, schema: str, tables: int, columns: int) -> float:
    started = time.perf_counter()
    with psycopg.connect(**POSTGRES, dbname=db) as conn:  # batches of 200 tables per transaction
        conn.execute(f'CREATE SCHEMA "{schema}"')
        for t in range(tables):
            cols = ", ".join([f"id{'' if t else ''} int PRIMARY KEY" if c == 0 else f"c{c} text" for c in range(columns - 1)])
            ref = f', parent_id int REFERENCES "{schema}".t{t - 1}(id)' if t else ", parent_id int"
            conn.execute(f'CREATE TABLE "{schema}".t{t} ({cols}{ref})')
            conn.execute(f"COMMENT ON TABLE \"{schema}\".t{t} IS 'table number {t} of the wide bench schema'")
            if t % 200 == 199:
                conn.commit()  # the lock table holds a few hundred relations per transaction
        conn.execute(f"COMMENT ON COLUMN \"{schema}\".t1234.c3 IS 'the needle column'" if tables > 1234 else "SELECT 1")
    return time.perf_counter() - started


def build_wide_mysql(db: str, tables: int, columns: int) -> float:
    started = time.perf_counter()
    conn = pymysql.connect(**MARIADB, autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        for t in range(tables):
            cols = ", ".join(["id INT PRIMARY KEY" if c == 0 else f"c{c} VARCHAR(50)" for c in range(columns - 1)])
            comment = " COMMENT 'the needle column'" if t == 1234 else ""
            cur.execute(f"CREATE TABLE t{t} ({cols}, parent_id INT{comment}) COMMENT='table number {t} of the wide bench schema'")
    conn.close()
    return time.perf_counter() - started


def harvest(handler: QueryHandler, target_id: str, schema_filter: str) -> dict[str, Any]:
    started = time.perf_counter()
    run = call(handler, "discovery.run_static", {"target_id": target_id, "schema_filter": schema_filter, "wait_s": 0})
    snapshots = []
    while True:
        status = call(handler, "discovery.status", {"run_id": run["run_id"]})["runs"][0]
        snapshots.append(status["progress"].get("tables_done", 0))
        print(f"  run {run['run_id']}: {status['state']} {status['progress']}", file=sys.stderr)
        if status["state"] not in ("queued", "running"):
            break
        time.sleep(0.5)
    elapsed = time.perf_counter() - started
    load = os.getloadavg()[0]
    search_started = time.perf_counter()
    hits = call(handler, "catalog.search", {"query": "needle", "target_id": target_id})["results"]
    return {
        "seconds": round(elapsed, 2),
        "load_average_1m": load,
        "state": status["state"],
        "counts": status["counts"],
        "progress_snapshots": len(snapshots),
        "distinct_progress_values": len(set(snapshots)),
        "under_30_s": elapsed < 30,
        "search_ms": round((time.perf_counter() - search_started) * 1000, 1),
        "search_top": hits[0]["name"] if hits else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=2000)
    parser.add_argument("--columns", type=int, default=10)
    parser.add_argument("--harvest-mysql", action="store_true", help="also harvest a MariaDB schema (its DDL is slow to create)")
    parser.add_argument("--skip-profile", action="store_true")
    parser.add_argument("--skip-harvest", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    tag = uuid.uuid4().hex[:8]
    maria_db, pg_db, wide_db = f"bench_disc_{tag}", f"bench_disc_{tag}", f"bench_wide_{tag}"
    admin = psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True)
    admin.execute(f'CREATE DATABASE "{pg_db}"')
    tmp = tempfile.TemporaryDirectory(prefix="bench-discovery-")
    report: dict[str, Any] = {"machine": platform.platform(), "rows": args.rows, "tables": args.tables, "columns": args.columns}
    handler = None
    try:
        store = open_store(Path(tmp.name) / "data")
        store.initialize()
        store.load_to_runtime("MCP VARIABLES")
        add_auth(store, "maria", MARIADB["user"], MARIADB["password"])
        add_auth(store, "pg", POSTGRES["user"], "")
        add_target(store, "maria", "mysql", host="127.0.0.1", port=3306, database=maria_db, auth_profile_id="maria")
        add_target(store, "pg", "pgsql", host="127.0.0.1", port=5432, database=pg_db, auth_profile_id="pg")
        add_target(store, "maria_wide", "mysql", host="127.0.0.1", port=3306, database=wide_db, auth_profile_id="maria")
        store.load_to_runtime("MCP PROFILES")
        handler = QueryHandler(make_services(store))
        default_timeout_ms = handler.pools.resolve("pg").timeout_ms
        report["target_timeout_ms"] = default_timeout_ms
        if not args.skip_profile:
            started = time.perf_counter()
            build_mysql_big(maria_db, args.rows)
            build_pg_big(pg_db, args.rows)
            report["build_s"] = round(time.perf_counter() - started, 1)
            report["profile"] = {}
            for engine, exact_of, db in (("maria", exact_mysql, maria_db), ("pg", exact_pg, pg_db)):
                started = time.perf_counter()
                exact = exact_of(db)  # the baseline: every figure computed exactly over the whole table
                exact_ms = (time.perf_counter() - started) * 1000
                call(handler, "table_profile", {"target_id": engine, "table": "big"})  # warm the pool and the checker
                started = time.perf_counter()
                profile = call(handler, "table_profile", {"target_id": engine, "table": "big"})
                elapsed_ms = (time.perf_counter() - started) * 1000
                rows = side_by_side(profile, exact)
                report["profile"][engine] = {
                    "ms": round(elapsed_ms, 1),
                    "exact_ms": round(exact_ms, 1),
                    "exact_over_profile": round(exact_ms / elapsed_ms, 2),
                    "load_average_1m": os.getloadavg()[0],
                    "within_timeout": elapsed_ms < default_timeout_ms and not profile["truncated"],
                    "sampled": profile["sampled"],
                    "sample_rows": profile["sample_rows"],
                    "sample_method": profile["sample_method"],
                    "row_count": profile["row_count"],
                    "row_count_exact": profile["row_count_exact"],
                    "statements": profile["stats"]["statements"],
                    "columns": rows,
                    "all_within_5pct": all(r["within_5pct"] for r in rows),
                }
                print(json.dumps({engine: report["profile"][engine]}, indent=1), file=sys.stderr)
        if not args.skip_harvest:
            schema = f"wide_{tag}"
            report["harvest"] = {"pg": {"build_s": round(build_wide_pg(pg_db, schema, args.tables, args.columns), 1)}}
            report["harvest"]["pg"].update(harvest(handler, "pg", schema))
            if args.harvest_mysql:
                report["harvest"]["maria"] = {"build_s": round(build_wide_mysql(wide_db, args.tables, args.columns), 1)}
                report["harvest"]["maria"].update(harvest(handler, "maria_wide", ""))
    finally:
        if handler is not None:
            handler.catalog.close()
            handler.pools.close()
        admin.execute(f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)')
        admin.close()
        conn = pymysql.connect(**MARIADB, autocommit=True)
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{maria_db}`")
            cur.execute(f"DROP DATABASE IF EXISTS `{wide_db}`")
        conn.close()
        tmp.cleanup()
    emit(report, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
