"""The PostgreSQL half of `bench/rag_latency.py --backend postgresql`: the same synthetic corpus
in PostgreSQL + pgvector through PgRagIndex.write_batch, then the same tool-level cases
(bench/rag_tools.py) as for rag.db, so the two backends are side by side in one run.

The load drops the HNSW index first and builds it once at the end (parallel, as `CREATE INDEX`
does for an initial bulk load); both times are reported. Recall@10 is against the same exact truth
as rag.db's (chunk ids are the same in both indexes).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from rag_latency import log, write_corpus
from rag_synth import SOURCES, Corpus

from backends.retrieval.storage.postgresql.index import INDEX_TABLES, PgRagIndex, schema_ddl

REPO_ROOT = Path(__file__).resolve().parents[1]


BENCH_SERVER_SETTINGS = (  # a bench-sized server: memory for the HNSW build (1M x 384 halfvec graph ~1.2 GB)
    ("maintenance_work_mem", "3GB"),
    ("max_parallel_maintenance_workers", "2"),
    ("shared_buffers", "2GB"),
)


def bench_server(data_root: Path):  # noqa: ANN201 - tests/pgvector_server.PgvectorServer
    """A PostgreSQL 18 + pgvector (tests/pgvector_server.py) whose data directory is `data_root`,
    kept between runs (a 1M build is not redone for every measurement); started if stopped."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    import shutil

    from pgvector_server import PgvectorServer, free_port

    port_file = data_root / "port"
    server = PgvectorServer(port=int(port_file.read_text()) if port_file.exists() else free_port())
    shutil.rmtree(server.root, ignore_errors=True)  # its temporary directory: ours is data_root
    server.root, server.pgdata, server.log = data_root, data_root / "data", data_root / "postgres.log"
    if not (server.pgdata / "PG_VERSION").exists():
        data_root.mkdir(parents=True, exist_ok=True)
        if server.user:
            data_root.chmod(0o755)
            shutil.chown(data_root, server.user)
        server.init()
        port_file.write_text(str(server.port))
        server.start()
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for name, value in BENCH_SERVER_SETTINGS:
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        server.restart()
    elif not (server.pgdata / "postmaster.pid").exists():
        server.start()
    return server


@contextlib.contextmanager
def postgres_dsn(given: str, data_root: Path, database: str) -> Iterator[str]:
    """`given`, or the database `database` on the bench server in `data_root` (created if missing;
    the server is left running: `python bench/rag_latency_pg.py stop` stops it)."""
    if given:
        yield given
        return
    server = bench_server(data_root)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone():
            conn.execute(f'CREATE DATABASE "{database}"')
    with psycopg.connect(server.dsn_for(database), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    yield server.dsn_for(database)


def build_postgres(dsn: str, corpus: Corpus, *, model_id: str, docs_per_txn: int) -> tuple[PgRagIndex, dict[str, Any]]:
    """The corpus loaded into `dsn`, or the load an earlier run left there (bench_build says which)."""
    wanted = {"chunks": corpus.n_chunks, "dim": corpus.dim, "seed": corpus.seed, "model_id": model_id}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_build (build jsonb NOT NULL)")
        done = conn.execute("SELECT build FROM bench_build").fetchone()
    if done and {k: done[0].get(k) for k in wanted} == wanted:
        log(f"PostgreSQL: reusing the load in {dsn.rsplit('/', 1)[-1]}")
        index = PgRagIndex.open(dsn, embedding_model_id=model_id, dim=corpus.dim)
        build = done[0]
        if build.get("hnsw_options") != hnsw_options(index):  # the schema's HNSW parameters changed: rebuild it
            log(f"PostgreSQL: rebuilding the HNSW index ({build.get('hnsw_options')} -> {hnsw_options(index)})")
            with index.connection() as conn:
                conn.execute("DROP INDEX IF EXISTS rag_chunks_embedding")
            started = time.perf_counter()
            with index.connection() as conn:
                conn.execute(schema_ddl(corpus.dim, index.hnsw_type))
            build = {**build, "hnsw_build_s": round(time.perf_counter() - started, 1), "hnsw_options": hnsw_options(index)}
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("UPDATE bench_build SET build = %s::jsonb", (json.dumps(build),))
        return index, build
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM bench_build")
        conn.execute(f"DROP TABLE IF EXISTS {', '.join(reversed(INDEX_TABLES))} CASCADE")
    index, times = load_postgres(dsn, corpus, model_id=model_id, docs_per_txn=docs_per_txn)
    build = {**wanted, **times, "hnsw_options": hnsw_options(index)}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO bench_build (build) VALUES (%s::jsonb)", (json.dumps(build),))
    return index, build


def load_postgres(dsn: str, corpus: Corpus, *, model_id: str, docs_per_txn: int) -> tuple[PgRagIndex, dict[str, float]]:
    index = PgRagIndex.open(dsn, embedding_model_id=model_id, dim=corpus.dim)
    for source_id, (name, _) in enumerate(SOURCES, start=1):
        index.upsert_source(source_id, name, backend_type="sqlite")
    with index.connection() as conn:
        conn.execute("DROP INDEX IF EXISTS rag_chunks_embedding")
    load_s = write_corpus(index, corpus, docs_per_txn=docs_per_txn, label="PostgreSQL")
    started = time.perf_counter()
    with index.connection() as conn:
        conn.execute(schema_ddl(corpus.dim, index.hnsw_type))  # recreates the HNSW index, the rest exists
    hnsw_s = time.perf_counter() - started
    with psycopg.connect(dsn, autocommit=True) as conn:  # what autovacuum would do soon after a load this size
        conn.execute("VACUUM (ANALYZE) rag_chunks")
    log(f"PostgreSQL: loaded in {load_s:.0f} s, HNSW built in {hnsw_s:.0f} s")
    return index, {"load_s": round(load_s, 1), "hnsw_build_s": round(hnsw_s, 1)}


def hnsw_options(index: PgRagIndex) -> str:
    """The HNSW index's WITH (...) as the schema creates it now (m, ef_construction)."""
    ddl = schema_ddl(index.dim, index.hnsw_type)
    line = next(line for line in ddl.splitlines() if "rag_chunks_embedding" in line)
    return line[line.rindex("WITH") :].rstrip(";")


def disk_mb(index: PgRagIndex) -> dict[str, float]:
    with index.connection() as conn:
        parts = {
            name: conn.execute("SELECT pg_total_relation_size(%s::regclass)", (name,)).fetchone()[0] / 1e6
            for name in (*INDEX_TABLES, "rag_chunks_embedding", "rag_chunks_fts")
        }
        heap = conn.execute(
            "SELECT pg_relation_size('rag_chunks') + pg_relation_size(reltoastrelid) FROM pg_class WHERE relname = 'rag_chunks'"
        ).fetchone()[0]
    return {
        "index_total": round(sum(parts[t] for t in INDEX_TABLES), 1),
        "rag_chunks_heap_and_toast": round(heap / 1e6, 1),
        "hnsw_index": round(parts["rag_chunks_embedding"], 1),
        "gin_fts_index": round(parts["rag_chunks_fts"], 1),
    }


def measure_postgres(
    args: Any, corpus: Corpus, texts: list[str], queries: np.ndarray, truth: dict[str, list[list[int]]], sqlite_db: Path
) -> dict[str, Any]:
    from rag_tools import measure_tools

    from backends.retrieval.embeddings import make_embedder

    model_id = make_embedder({"provider": "local"}).model_id  # hybrid embeds its query text with it
    database = f"rag_latency_{corpus.n_chunks}_{corpus.dim}"
    with (
        postgres_dsn(args.postgres_dsn, args.out_dir / "pgserver", database) as dsn,
        tempfile.TemporaryDirectory(prefix="rag-latency-pg-") as data_dir,
    ):
        index, build = build_postgres(dsn, corpus, model_id=model_id, docs_per_txn=args.docs_per_txn)
        if args.build_only:
            index.close()
            return {"build": build}
        disk = disk_mb(index)
        log("sweeping hnsw.ef_search on PostgreSQL")
        sweep = ef_search_sweep(index, sqlite_db, queries, truth["none"], k=args.k)
        index.close()
        if args.skip_tools:
            return {"build": build, "disk_mb": disk, "ef_search_sweep": sweep}
        log("measuring the tools on rag.db and PostgreSQL, query by query in turn")
        pg_variables = {"rag-backend": "postgresql", "rag-postgres_dsn": dsn}
        tools = measure_tools(
            {"sqlite": (sqlite_db.parent, {}), "postgresql": (Path(data_dir), pg_variables)},
            sqlite_db,
            texts,
            queries,
            truth,
            k=args.k,
            dim=args.dim,
        )
    return {
        "build": build,
        "disk_mb": disk,
        "ef_search_sweep": sweep,
        "tools": tools["postgresql"],
        "sqlite_tools": tools["sqlite"],
    }


def ef_search_sweep(index: PgRagIndex, sqlite_db: Path, queries: np.ndarray, truth: list[list[int]], *, k: int) -> dict:
    """Layer-level: PgRagIndex.nearest p50/p95 and recall@10 per hnsw.ef_search floor (the default
    is pg_index.HNSW_EF_SEARCH_MIN), with the default unfiltered rescoring pool (RESCORE_MIN) and,
    as "<ef>, fetch 40", with 40 candidates. Recall compares chunk ids with rag.db's exact truth."""
    from rag_latency import percentiles, timed

    from backends.retrieval.storage.postgresql import index as pg_index
    from gateway.sqlite import connect

    lite = connect(sqlite_db)
    wanted = sorted({r for row in truth for r in row})
    chunk_of = dict(
        lite.execute(f"SELECT chunk_rowid, chunk_id FROM rag_chunks WHERE chunk_rowid IN ({','.join(map(str, wanted))})")
    )
    lite.close()
    truth_ids = [{chunk_of[r] for r in row} for row in truth]
    default, rescore, out = pg_index.HNSW_EF_SEARCH_MIN, pg_index.RESCORE_MIN, {}
    with index.connection() as conn:
        for ef, fetch in [(ef, rescore) for ef in (40, 64, 96, 128, 192, 256, 400)] + [(ef, 40) for ef in (64, 128)]:
            pg_index.HNSW_EF_SEARCH_MIN = ef  # the floor `nearest` applies, and the session's value it then keeps
            pg_index.RESCORE_MIN = fetch  # unfiltered candidates rescored: at least this many, or 2k
            conn.execute(f"SET hnsw.ef_search = {ef}")
            found, times = timed(lambda q: [r for r, _ in index.nearest(conn, q, k).rows], queries)
            ids = dict(
                conn.execute(
                    "SELECT chunk_rowid, chunk_id FROM rag_chunks WHERE chunk_rowid = ANY(%s)",
                    (sorted({r for row in found for r in row}),),
                ).fetchall()
            )
            hits = sum(len({ids[r] for r in row} & t) for row, t in zip(found, truth_ids, strict=True))
            out[str(ef) if fetch == rescore else f"{ef}, fetch {fetch}"] = {
                **percentiles(times),
                "recall_at_10": round(hits / max(1, sum(len(t) for t in truth_ids)), 4),
            }
        conn.execute(f"SET hnsw.ef_search = {default}")  # the connection goes back to the pool
    pg_index.HNSW_EF_SEARCH_MIN, pg_index.RESCORE_MIN = default, rescore
    return out


def side_by_side(sqlite_tools: dict[str, Any], pg_tools: dict[str, Any]) -> dict[str, Any]:
    """Per tool case: p50/p95 of both and PostgreSQL over SQLite, recall of both where measured."""
    rows = {}
    for case, lite in sqlite_tools.items():
        pg = pg_tools.get(case)
        if pg is None or "p50_ms" not in lite:
            continue
        row = {
            "sqlite_p50_ms": lite["p50_ms"],
            "postgresql_p50_ms": pg["p50_ms"],
            "p50_ratio": round(pg["p50_ms"] / max(lite["p50_ms"], 1e-9), 2),
            "sqlite_p95_ms": lite["p95_ms"],
            "postgresql_p95_ms": pg["p95_ms"],
            "p95_ratio": round(pg["p95_ms"] / max(lite["p95_ms"], 1e-9), 2),
        }
        if "recall_at_10" in lite:
            row.update(sqlite_recall_at_10=lite["recall_at_10"], postgresql_recall_at_10=pg["recall_at_10"])
        if "p50_over_unfiltered" in lite:
            row.update(
                sqlite_filtered_over_unfiltered=lite["p50_over_unfiltered"],
                postgresql_filtered_over_unfiltered=pg["p50_over_unfiltered"],
            )
        rows[case] = row
    return rows


if __name__ == "__main__":  # python bench/rag_latency_pg.py stop [out-dir]: stop the bench server
    if sys.argv[1:2] != ["stop"]:
        sys.exit("usage: python bench/rag_latency_pg.py stop [out-dir]")
    root = Path(sys.argv[2] if len(sys.argv) > 2 else REPO_ROOT / "bench" / "out") / "pgserver"
    if (root / "data" / "postmaster.pid").exists():
        bench_server(root).stop()
