"""RAG search latency at scale: the ANN design against the naive vec0 brute force, side by side.

    python bench/rag_latency.py --chunks 200000 --dim 384 --json bench/out/rag_latency_200k.json

Builds (once, reused from bench/out/rag-<N>-<dim>/) an index of N synthetic chunks
(bench/rag_synth.py: Zipfian text, clustered unit vectors) through the real writer API
`RagIndex.write_batch`, then measures, on one core per query:

  layer    backends/retrieval/storage/sqlite/vector_store.py directly: VectorIndex.search p50/p95 and recall@10 against
           exact brute force (numpy over the float vectors stored in SQLite), unfiltered and with
           filters (broad source filter via `sql_filter`, a narrow one, a small doc_ids set, and
           the materialised-set approach for comparison), plus an expansion_search sweep.
  baseline the seeds' design, plain vec0 float brute force (`MATCH ... AND k = 10`), and the
           quantised alternative: vec0 bit[dim] hamming candidates rescored with exact floats.
  tools    the tool functions of RagHandler (bench/rag_tools.py) when that handler is present:
           rag.search_fts / search_vector / search_hybrid (fuse, fts_then_vec), with and without
           filters.

Prints JSON (and writes it to --json); ratios are against the vec0 brute force.
`--backend postgresql` also loads the corpus into PostgreSQL + pgvector and runs the same tool
cases there (bench/rag_latency_pg.py): both backends side by side, in one run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from rag_synth import SOURCES, Corpus  # noqa: E402
from report import emit  # noqa: E402

from backends.retrieval.storage.sqlite.vector_store import VectorIndex, read_vectors, sql_filter  # noqa: E402
from gateway.sqlite import connect, transaction  # noqa: E402

BUILD_VERSION = 1
MODEL_ID = "bench-synthetic"  # the vectors are synthetic; tool-level runs use query_embedding


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rss_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text().splitlines()
    values = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in status if line.startswith(("VmRSS", "VmHWM"))}
    return {"rss_mb": round(values.get("VmRSS", 0.0), 1), "peak_rss_mb": round(values.get("VmHWM", 0.0), 1)}


def dir_mb(path: Path) -> float:
    if path.is_file():
        return round(path.stat().st_size / 1e6, 1)
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1) if path.exists() else 0.0


def percentiles(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Wall-clock p50/p95 and the CPU time p50 of this process (threads included): on a shared
    machine the CPU figure is the one other tenants' load does not inflate."""
    wall = np.array([w for w, _ in samples]) * 1000
    cpu = np.array([c for _, c in samples]) * 1000
    return {
        "p50_ms": round(float(np.percentile(wall, 50)), 3),
        "p95_ms": round(float(np.percentile(wall, 95)), 3),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 3),
        "n": len(wall),
    }


# ---- build -----------------------------------------------------------------------------------


def build(out_dir: Path, corpus: Corpus, *, docs_per_txn: int) -> dict[str, Any]:
    """Build rag.db through RagIndex.write_batch, the ANN snapshot, and the vec0 baseline db."""
    marker = out_dir / "build.json"
    wanted = {"version": BUILD_VERSION, "chunks": corpus.n_chunks, "dim": corpus.dim, "seed": corpus.seed}
    if marker.exists():
        done = json.loads(marker.read_text())
        if {k: done.get(k) for k in wanted} == wanted:
            log(f"reusing the index built in {out_dir}")
            return done
    db = out_dir / "rag.db"
    loaded = out_dir / "load.json"
    if loaded.exists() and db.exists():
        log(f"reusing the SQLite load in {db}; building what follows it")  # an earlier run stopped after loading
        sqlite_load_s = json.loads(loaded.read_text())["sqlite_load_s"]
        for leftover in (Path(str(db) + ".ann"), out_dir / "vec0_baseline.db"):
            shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)
    else:
        shutil.rmtree(out_dir, ignore_errors=True)
        out_dir.mkdir(parents=True)
        sqlite_load_s = load_sqlite(db, corpus, docs_per_txn=docs_per_txn)
        loaded.write_text(json.dumps({"sqlite_load_s": sqlite_load_s}))

    conn = connect(db, vec=True)
    started = time.perf_counter()
    vectors_index = VectorIndex(db, dim=corpus.dim)
    vectors_index.refresh(conn)  # no snapshot yet: builds the HNSW graph from SQLite and saves it
    ann_build_s = time.perf_counter() - started
    vectors_index.compact_changes(conn)  # the snapshot reflects every change: the log can go
    started = time.perf_counter()
    build_vec0_baseline(conn, out_dir / "vec0_baseline.db", corpus.dim)
    vec0_build_s = time.perf_counter() - started
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    result = {
        **wanted,
        "sqlite_load_s": sqlite_load_s,
        "ann_build_s": round(ann_build_s, 1),
        "vec0_build_s": round(vec0_build_s, 1),
    }
    marker.write_text(json.dumps(result, indent=2))
    return result


def load_sqlite(db: Path, corpus: Corpus, *, docs_per_txn: int) -> float:
    """Every chunk into rag.db through RagIndex.write_batch (FTS by its triggers, vectors by write_vectors)."""
    from backends.retrieval.storage.sqlite.index import RagIndex

    index = RagIndex.open(db, embedding_model_id=MODEL_ID, dim=corpus.dim)
    for source_id, (name, _) in enumerate(SOURCES, start=1):
        index.upsert_source(source_id, name, backend_type="sqlite")
    load_s = write_corpus(index, corpus, docs_per_txn=docs_per_txn, label="SQLite")
    index.close()
    return round(load_s, 1)


def write_corpus(index: Any, corpus: Corpus, *, docs_per_txn: int, label: str) -> float:
    """Every document through the index's own write_batch, docs_per_txn per transaction; seconds."""
    started = time.perf_counter()
    made = 0
    for records, n_vectors in document_batches(corpus):
        for start in range(0, len(records), docs_per_txn):
            index.write_batch(records[start : start + docs_per_txn])
        made += n_vectors
        log(f"{label} load: {made}/{corpus.n_chunks} chunks ({made / (time.perf_counter() - started):.0f}/s)")
    return time.perf_counter() - started


def document_batches(corpus: Corpus) -> Iterator[tuple[list[Any], int]]:
    """The synthetic corpus as the index's write records, a batch of documents at a time, with
    the number of vectors (chunks) in each batch. Both backends' builds load these."""
    from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord

    for docs, vectors in corpus.documents():
        records, at = [], 0
        for doc in docs:
            chunks = []
            for chunk in doc.chunks:
                chunks.append(
                    ChunkRecord(
                        f"{doc.doc_id}#{chunk.chunk_index}",
                        chunk.chunk_index,
                        chunk.title,
                        chunk.body,
                        {},
                        f"h{chunk.rowid_hint}",
                        vectors[at],
                    )
                )
                at += 1
            records.append(
                DocumentRecord(
                    doc.doc_id,
                    doc.source_index + 1,
                    SOURCES[doc.source_index][0],
                    {"id": doc.doc_id},
                    doc.title,
                    "",
                    doc.metadata,
                    None,
                    chunks,
                )
            )
        yield records, len(vectors)


def build_vec0_baseline(conn: Any, path: Path, dim: int) -> None:
    """The naive design of the seeds in its own file: vec0 float[dim] (and bit[dim] quantised)."""
    conn.execute(f"ATTACH DATABASE '{path}' AS base")
    conn.execute(f"CREATE VIRTUAL TABLE base.vec_float USING vec0(embedding float[{dim}] distance_metric=cosine)")
    conn.execute(f"CREATE VIRTUAL TABLE base.vec_bit USING vec0(embedding bit[{dim}])")
    with transaction(conn):
        conn.execute("INSERT INTO base.vec_float (rowid, embedding) SELECT chunk_rowid, embedding FROM rag_vec_chunks")
        conn.execute(
            "INSERT INTO base.vec_bit (rowid, embedding) SELECT chunk_rowid, vec_quantize_binary(embedding) FROM rag_vec_chunks"
        )
    conn.execute("DETACH DATABASE base")


# ---- measurement -----------------------------------------------------------------------------


def truth_top_k(
    conn: Any, dim: int, queries: np.ndarray, k: int, masks: dict[str, set[int] | None]
) -> dict[str, list[list[int]]]:
    """Exact top-k per query and filter: numpy over every float vector stored in SQLite."""
    rowids = np.array([r for (r,) in conn.execute("SELECT chunk_rowid FROM rag_vec_chunks ORDER BY chunk_rowid")], dtype=np.int64)
    _, matrix = read_vectors(conn, rowids.tolist(), dim)
    truth: dict[str, list[list[int]]] = {}
    sims = queries @ matrix.T  # (Q, N) dot products; fine for a few hundred queries
    for name, allowed in masks.items():
        keep = np.ones(len(rowids), dtype=bool) if allowed is None else np.isin(rowids, np.fromiter(allowed, dtype=np.int64))
        masked = np.where(keep[None, :], sims, -np.inf)
        top = np.argpartition(-masked, k, axis=1)[:, :k]
        truth[name] = [[int(rowids[j]) for j in row[np.argsort(-masked[i, row])] if keep[j]] for i, row in enumerate(top)]
    return truth


def recall_at_k(found: list[list[int]], truth: list[list[int]]) -> float:
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    return round(hits / max(1, sum(len(t) for t in truth)), 4)


def timed(fn, items) -> tuple[list[Any], list[tuple[float, float]]]:
    results, times = [], []
    for item in items:
        started, cpu_started = time.perf_counter(), time.process_time()
        results.append(fn(item))
        times.append((time.perf_counter() - started, time.process_time() - cpu_started))
    return results, times


def measure_layer(conn: Any, vindex: VectorIndex, queries: np.ndarray, *, k: int) -> dict[str, Any]:
    source_of = {name: i for i, (name, _) in enumerate(SOURCES, start=1)}
    filters = {
        "source_25pct": ("c.source_id = ?", (source_of["wiki_pages"],)),
        "source_5pct": ("c.source_id = ?", (source_of["release_notes"],)),
        "docs_20": ("c.doc_id IN (SELECT doc_id FROM rag_documents ORDER BY doc_id LIMIT 20 OFFSET 1000)", ()),
    }
    allowed_sets = {
        name: {r for (r,) in conn.execute(f"SELECT c.chunk_rowid FROM rag_chunks c WHERE {w}", p)}
        for name, (w, p) in filters.items()
    }
    log("computing exact truth")
    truth = truth_top_k(conn, vindex.dim, queries, k, {"none": None, **allowed_sets})
    out: dict[str, Any] = {}
    found, times = timed(lambda q: [r for r, _ in vindex.search(conn, q, k)], queries)
    out["vector"] = {**percentiles(times), "recall_at_10": recall_at_k(found, truth["none"])}
    for name, (where, params) in filters.items():
        found, times = timed(
            lambda q, w=where, p=params: [r for r, _ in vindex.search(conn, q, k, **sql_filter(conn, w, p))], queries
        )
        out[f"ann_filter_{name}"] = {
            **percentiles(times),
            "recall_at_10": recall_at_k(found, truth[name]),
            "allowed_chunks": len(allowed_sets[name]),
        }
    # The approach search.py uses today: materialise the allowed rowid set with SQL, then search.
    where, params = filters["source_25pct"]
    found, times = timed(
        lambda q: [
            r
            for r, _ in vindex.search(
                conn,
                q,
                k,
                allowed_rowids={r for (r,) in conn.execute(f"SELECT c.chunk_rowid FROM rag_chunks c WHERE {where}", params)},
            )
        ],
        queries[:20],
    )
    out["ann_filter_source_25pct_materialised_set"] = {
        **percentiles(times),
        "recall_at_10": recall_at_k(found, truth["source_25pct"][:20]),
    }
    sweep = {}
    default = vindex._index.expansion_search
    for expansion in (16, 32, 64, 96, 128, 256):
        vindex._index.expansion_search = expansion
        found, times = timed(lambda q: [r for r, _ in vindex.search(conn, q, k)], queries)
        sweep[str(expansion)] = {**percentiles(times), "recall_at_10": recall_at_k(found, truth["none"])}
    vindex._index.expansion_search = default
    out["expansion_search_sweep"] = sweep
    out["_truth"] = truth
    return out


def measure_baselines(
    conn: Any, out_dir: Path, queries: np.ndarray, truth: list[list[int]], *, k: int, n_brute: int
) -> dict[str, Any]:
    conn.execute(f"ATTACH DATABASE '{out_dir / 'vec0_baseline.db'}' AS base")
    out: dict[str, Any] = {}
    brute = "SELECT rowid, distance FROM base.vec_float WHERE embedding MATCH ? AND k = ?"
    found, times = timed(lambda q: [r for r, _ in conn.execute(brute, (q.tobytes(), k))], queries[:n_brute])
    out["vec0_float_brute_force"] = {**percentiles(times), "recall_at_10": recall_at_k(found, truth[:n_brute])}
    hamming = "SELECT rowid FROM base.vec_bit WHERE embedding MATCH vec_quantize_binary(?) AND k = ?"
    rescore = "SELECT chunk_rowid, embedding FROM rag_vec_chunks WHERE chunk_rowid IN (SELECT value FROM json_each(?))"
    for candidates in (100, 400):

        def quantised(q: np.ndarray, c: int = candidates) -> list[int]:
            ids = [r for (r,) in conn.execute(hamming, (q.tobytes(), c))]
            rows = list(conn.execute(rescore, (orjson.dumps(ids),)))
            mat = np.frombuffer(b"".join(b for _, b in rows), dtype=np.float32).reshape(len(rows), -1)
            order = np.argsort(-(mat @ q))[:k]
            return [rows[i][0] for i in order]

        found, times = timed(quantised, queries[:n_brute])
        out[f"vec0_bit_{candidates}_then_float_rescore"] = {
            **percentiles(times),
            "recall_at_10": recall_at_k(found, truth[:n_brute]),
        }
    conn.execute("DETACH DATABASE base")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--brute-queries", type=int, default=0, help="queries for the slow vec0 brute force (default: scaled to N)"
    )
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--out-dir", type=Path, default=REPO_ROOT / "bench" / "out")
    parser.add_argument("--docs-per-txn", type=int, default=1000)
    parser.add_argument("--skip-tools", action="store_true", help="measure the vector layer and baselines only")
    parser.add_argument(
        "--build-only",
        nargs="?",
        const="all",
        choices=("all", "sqlite", "postgresql"),
        help="build (or check) the index(es) --backend names and stop; `postgresql`: only PostgreSQL's copy",
    )
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite", help="postgresql: both, side by side")
    parser.add_argument(
        "--postgres-dsn",
        default="",
        help="PostgreSQL with pgvector to load into; default: a bench server kept in <out-dir>/pgserver",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", datefmt="%H:%M:%S")  # ANN rebuild progress

    corpus = Corpus(args.chunks, args.dim)
    out_dir = args.out_dir / f"rag-{args.chunks}-{args.dim}"
    if args.build_only:
        built = {}
        if args.build_only != "postgresql":
            built["sqlite"] = build(out_dir, corpus, docs_per_txn=args.docs_per_txn)
        if args.backend == "postgresql" or args.build_only == "postgresql":
            from rag_latency_pg import measure_postgres

            built["postgresql"] = measure_postgres(args, corpus, [], np.zeros((0, args.dim)), {}, out_dir / "rag.db")["build"]
        print(json.dumps(built, indent=2))
        return
    built = build(out_dir, corpus, docs_per_txn=args.docs_per_txn)
    db = out_dir / "rag.db"
    texts, queries = corpus.queries(args.queries)

    rss_before = rss_mb()
    conn = connect(db, vec=True)
    started = time.perf_counter()
    vindex = VectorIndex(db, dim=args.dim)
    vindex.refresh(conn)
    ann_load_s = time.perf_counter() - started
    rss_serving = rss_mb()
    result: dict[str, Any] = {
        "bench": "rag_latency",
        "chunks": args.chunks,
        "dim": args.dim,
        "queries": args.queries,
        "cpus": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),  # the machine is shared: context for the timings
        "build": built,
        "ann": {
            "load_s": round(ann_load_s, 2),
            "vectors": len(vindex._index),
            "memory_usage_mb": round(vindex._index.memory_usage / 1e6, 1),
        },
        "memory": {
            "before_index_mb": rss_before["rss_mb"],
            "serving_mb": rss_serving["rss_mb"],
            "serving_increase_mb": round(rss_serving["rss_mb"] - rss_before["rss_mb"], 1),
        },
        "disk_mb": {
            "rag_db": dir_mb(db),
            "rag_db_wal": dir_mb(Path(str(db) + "-wal")),
            "ann_snapshot": dir_mb(Path(str(db) + ".ann")),
            "vec0_baseline_db": dir_mb(out_dir / "vec0_baseline.db"),
        },
    }
    result["disk_mb"]["rag_db_by_table"] = {
        name: round(size / 1e6, 1)
        for name, size in conn.execute("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE ORDER BY pgsize DESC LIMIT 8")
    }
    result["disk_mb"]["vectors_truth_plus_ann"] = round(
        result["disk_mb"]["rag_db_by_table"].get("rag_vec_chunks", 0.0) + result["disk_mb"]["ann_snapshot"], 1
    )
    result["disk_mb"]["index_total"] = round(
        result["disk_mb"]["rag_db"] + result["disk_mb"]["rag_db_wal"] + result["disk_mb"]["ann_snapshot"], 1
    )
    for q in queries[:20]:  # warm the page cache and the graph's hot levels
        vindex.search(conn, q, args.k)
    log("measuring the vector layer")
    layer = measure_layer(conn, vindex, queries, k=args.k)
    truth = layer.pop("_truth")
    result["layer"] = layer
    log("measuring the vec0 baselines")
    n_brute = args.brute_queries or max(5, min(args.queries, 2_000_000 // args.chunks))
    result["baseline"] = measure_baselines(conn, out_dir, queries, truth["none"], k=args.k, n_brute=n_brute)
    brute_p50 = result["baseline"]["vec0_float_brute_force"]["p50_ms"]
    result["ratios"] = {"vec0_brute_p50_over_ann_p50": round(brute_p50 / max(layer["vector"]["p50_ms"], 1e-9), 1)}
    if args.backend == "postgresql":  # both backends' tools, measured interleaved (rag_tools.measure_tools)
        from rag_latency_pg import measure_postgres, side_by_side

        result["postgresql"] = measure_postgres(args, corpus, texts, queries, truth, db)
        if "tools" in result["postgresql"]:
            result["tools"] = result["postgresql"].pop("sqlite_tools")
            result["postgresql_vs_sqlite"] = side_by_side(result["tools"], result["postgresql"]["tools"])
    elif not args.skip_tools:
        from rag_tools import measure_tools

        result["tools"] = measure_tools({"sqlite": (out_dir, {})}, db, texts, queries, truth, k=args.k, dim=args.dim)["sqlite"]
    result["memory"]["peak_rss_mb"] = rss_mb()["peak_rss_mb"]
    result["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    emit(result, args.json)


if __name__ == "__main__":
    main()
