"""rag.similarity_search over a user's own pgvector table vs the plain pgvector query, same run.

A PostgreSQL 18 + pgvector (tests/pgvector_server.py) gets a table of --rows rows (one
INSERT ... SELECT generate_series, a deterministic vector(64) per row, body text) and an HNSW
index (vector_cosine_ops). Then, interleaved per query (--queries, rotated order):

    plain    psycopg on one autocommit connection: SELECT id, category, body, embedding <=> q
             FROM docs ORDER BY embedding <=> q LIMIT k; fetchall (what a client would send itself)
    gateway  tools/call rag.similarity_search over HTTPS (keep-alive httpx client) to a real
             `mcp-gateway serve`: the read-only path (rules, check, read-only transaction), the
             same ORDER BY ... LIMIT k through the HNSW index, then chunking, BM25, MMR and
             the token budget, and the JSON-RPC answer

Both are given the same query vectors (query_embedding; no embedding cost in either). Reported:
p50/p95 of each, the ratio gateway/plain, the gateway's CPU per call (user+system of its
process, from /proc), recall@k of each side against an exact scan, and the load average.

    PYTHONPATH=$PWD python bench/similarity_search.py [--rows 100000] [--queries 200] [--k 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))
sys.path.insert(0, str(REPO_ROOT))

from pgvector_server import start_pgvector_server  # noqa: E402
from server_process import call_tool, start_gateway  # noqa: E402

EMBEDDING_SQL = (
    "(SELECT array_agg(sin(((i % 40) + 1) * (j + 1) * 0.7) + 0.35 * sin(i * (j + 3) * 0.013 + j * j) ORDER BY j)"
    " FROM generate_series(0, 63) j)::vector(64)"
)


def literal(vector: np.ndarray) -> str:
    return "[" + ",".join(map(str, vector.tolist())) + "]"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    total = cpu_s(pid)
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        total += tree_cpu_s(int(child))
    return total


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args()
    load_before = list(os.getloadavg())
    server = start_pgvector_server()
    name = f"bench_sim_{uuid.uuid4().hex[:8]}"
    dsn = server.create_database(name)
    try:
        started = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE docs (id int PRIMARY KEY, category text, body text, embedding vector(64))")
            conn.execute(
                "INSERT INTO docs SELECT i, (ARRAY['outdoor','kitchen','garden','office'])[1 + i % 4],"
                " 'row ' || i || ' about ' || (ARRAY['tents','knives','roses','desks'])[1 + i % 4] || '. '"
                " || repeat('Some longer text of row ' || i || ' with many words. ', 1 + i % 7),"
                f" {EMBEDDING_SQL} FROM generate_series(1, {args.rows}) i"
            )
            loaded = time.perf_counter()
            conn.execute("CREATE INDEX docs_embedding_hnsw ON docs USING hnsw (embedding vector_cosine_ops)")
            conn.execute("VACUUM ANALYZE docs")
            indexed = time.perf_counter()
            rng = np.random.default_rng(28)
            ids = [int(i) for i in rng.integers(1, args.rows, args.queries)]
            seeds = [
                np.array(json.loads(v), dtype=np.float32)
                for (v,) in conn.execute("SELECT embedding::text FROM docs WHERE id = ANY(%s)", (ids,))
            ]
            queries = [(seeds[i % len(seeds)] + rng.normal(0, 0.15, 64)).astype(np.float32) for i in range(args.queries)]
            conn.execute("SET enable_indexscan = off")
            truth = [
                {
                    r
                    for (r,) in conn.execute(
                        "SELECT id FROM docs ORDER BY embedding <=> %s::vector LIMIT %s", (literal(q), args.k)
                    )
                }
                for q in queries
            ]
        variables = {"rag-embedding_provider": "hash", "rag-embedding_dim": 64}
        with start_gateway(variables=variables) as gateway, gateway.client(timeout=60.0) as http:
            for statement in (
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('pgv', 'postgres', '')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id, max_rows) "
                f"VALUES ('vec', 'pgsql', '127.0.0.1', {server.port}, '{name}', 'pgv', 200)",
                "LOAD MCP PROFILES TO RUNTIME",
            ):
                result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
                assert not result["isError"], result
            deadline = time.monotonic() + 15  # the serving worker follows the LOAD within a second
            while time.monotonic() < deadline:
                probe = call_tool(http, gateway, "rag", "rag.vector_columns", {"target_id": "vec"})
                if not probe["isError"]:
                    break
                time.sleep(0.2)

            def via_gateway(q: np.ndarray) -> set[int]:
                b64 = base64.b64encode(q.astype("<f4").tobytes()).decode()
                arguments = {"target_id": "vec", "table": "docs", "query_embedding": {"dim": 64, "values_b64": b64}, "k": args.k}
                result = call_tool(http, gateway, "rag", "rag.similarity_search", arguments)
                assert not result["isError"], result
                return {row["key"]["id"] for row in result["structuredContent"]["rows"]}

            with psycopg.connect(dsn, autocommit=True) as plain_conn:

                def plain(q: np.ndarray) -> set[int]:
                    text = literal(q)
                    rows = plain_conn.execute(
                        "SELECT id, category, body, embedding <=> %s::vector FROM docs ORDER BY embedding <=> %s::vector LIMIT %s",
                        (text, text, args.k),
                    ).fetchall()
                    return {r[0] for r in rows}

                for q in queries[:10]:  # warm both: pools, caches, the HNSW pages
                    via_gateway(q)
                    plain(q)
                times: dict[str, list[float]] = {"plain": [], "gateway": []}
                recall = {"plain": 0, "gateway": 0}
                cpu_before = tree_cpu_s(gateway.process.pid)
                for i, q in enumerate(queries):
                    order = ("plain", "gateway") if i % 2 == 0 else ("gateway", "plain")
                    for side in order:
                        t0 = time.perf_counter()
                        found = plain(q) if side == "plain" else via_gateway(q)
                        times[side].append((time.perf_counter() - t0) * 1000)
                        recall[side] += len(found & truth[i])
                cpu_after = tree_cpu_s(gateway.process.pid)
        out = {
            "bench": "similarity_search",
            "rows": args.rows,
            "queries": args.queries,
            "k": args.k,
            "load_s": round(loaded - started, 2),
            "hnsw_build_s": round(indexed - loaded, 2),
            "plain_ms": {"p50": pct(times["plain"], 50), "p95": pct(times["plain"], 95)},
            "gateway_ms": {"p50": pct(times["gateway"], 50), "p95": pct(times["gateway"], 95)},
            "ratio_p50": round(statistics.median(times["gateway"]) / statistics.median(times["plain"]), 2),
            "gateway_cpu_ms_per_call": round((cpu_after - cpu_before) * 1000 / args.queries, 3),
            "recall_at_k": {side: round(hits / (args.k * args.queries), 4) for side, hits in recall.items()},
            "loadavg_before_after": [load_before, list(os.getloadavg())],
            "cpus": os.cpu_count(),
        }
        print(json.dumps(out, indent=2))
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(out, indent=2) + "\n")
    finally:
        server.drop_database(name)
        server.remove()


if __name__ == "__main__":
    main()
