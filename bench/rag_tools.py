"""Tool-level part of bench/rag_latency.py: the /mcp/rag tool functions over the built index.

Each call goes through `ToolHandler.execute_tool` (argument validation, the worker-thread hop,
the deadline, output shaping), on one event loop, one call at a time — the path the server runs
for a tools/call, minus HTTP. The handler is the real RagHandler with the local MiniLM
embedder; the synthetic vectors are declared as that model's in rag_meta (latency does not
depend on what the vectors mean). search_vector takes the synthetic query vectors as
query_embedding, so its recall@10 is measured against the same exact truth as the layer;
search_hybrid embeds its query text, and the embedding time is reported on its own.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from rag_latency import percentiles

from gateway.services import Services
from gateway.sqlite import connect
from gateway.tools import CallContext

SOURCE_25PCT = 2  # wiki_pages in bench/rag_synth.py SOURCES
SOURCE_5PCT = 4  # release_notes


def _open_handler(out_dir: Path, db: Path, variables: dict[str, str]):  # noqa: ANN202 - (RagHandler, Embedder)
    from backends.retrieval.embeddings import index_embedding_config, make_embedder
    from gateway.assembly import open_config
    from handlers.rag.handler import RagHandler

    store = open_config(out_dir)
    for name, value in variables.items():  # another backend: its own data directory, these variables
        store.set_variable(name, value)
    if variables:
        store.load_to_runtime("MCP VARIABLES")
    runtime = store.read_runtime()
    embedder = make_embedder(index_embedding_config(runtime))
    if not variables:
        conn = connect(db)
        conn.execute("UPDATE rag_meta SET value = ? WHERE key = 'embedding_model'", (embedder.model_id,))
        conn.close()
    services = Services(data_dir=out_dir, store=store, runtime=runtime, stats=None, metrics=None)  # type: ignore[arg-type]
    handler = RagHandler(services)
    anyio.run(handler.init)
    handler.embedder.embed(["warm up the model session"])  # loading the ONNX model is not a query's cost
    return handler, handler.embedder


def measure_tools(
    backends: dict[str, tuple[Path, dict[str, str]]],
    db: Path,
    texts: list[str],
    queries: np.ndarray,
    truth: dict[str, list[list[int]]],
    *,
    k: int,
    dim: int,
) -> dict[str, dict[str, Any]]:
    """Each backend is (its data directory, the variables that select it: none for rag.db in the
    directory, rag-backend ... for another copy of the index); `db` (rag.db) also maps chunk ids
    to the rowids the exact truth is in. Results per backend name.

    With more than one backend every case runs on all of them query by query, in turn (the
    first alternating), so each query's calls meet the machine in the same state: the ratios
    are side by side in time, not one backend's run after the other's (on a quiet 2-core VM,
    rag.db's own vector p50 varied 1.9-2.6 ms between runs a minute apart)."""
    handlers = {name: _open_handler(out_dir, db, variables) for name, (out_dir, variables) in backends.items()}
    conn = connect(db)
    doc_ids_20 = [d for (d,) in conn.execute("SELECT doc_id FROM rag_documents ORDER BY doc_id LIMIT 20 OFFSET 1000")]
    rowid_of = {}

    def vector_args(i: int, filters: dict[str, Any]) -> dict[str, Any]:
        b64 = base64.b64encode(queries[i].astype("<f4").tobytes()).decode()
        return {"query_embedding": {"dim": dim, "values_b64": b64}, "k": k, "filters": filters}

    cases: dict[str, tuple[str, Any]] = {
        "fts": ("rag.search_fts", lambda i: {"query": texts[i], "k": k}),
        "fts_filter_source_25pct": (
            "rag.search_fts",
            lambda i: {"query": texts[i], "k": k, "filters": {"source_ids": [SOURCE_25PCT]}},
        ),
        "fts_filter_source_5pct": (
            "rag.search_fts",
            lambda i: {"query": texts[i], "k": k, "filters": {"source_ids": [SOURCE_5PCT]}},
        ),
        "vector": ("rag.search_vector", lambda i: vector_args(i, {})),
        "ann_filter_source_25pct": ("rag.search_vector", lambda i: vector_args(i, {"source_ids": [SOURCE_25PCT]})),
        "ann_filter_source_5pct": ("rag.search_vector", lambda i: vector_args(i, {"source_ids": [SOURCE_5PCT]})),
        "ann_filter_docs_20": ("rag.search_vector", lambda i: vector_args(i, {"doc_ids": doc_ids_20})),
        "hybrid_fuse": ("rag.search_hybrid", lambda i: {"query": texts[i], "k": k, "mode": "fuse"}),
        "hybrid_fuse_filter_source_25pct": (
            "rag.search_hybrid",
            lambda i: {"query": texts[i], "k": k, "mode": "fuse", "filters": {"source_ids": [SOURCE_25PCT]}},
        ),
        "hybrid_fts_then_vec": ("rag.search_hybrid", lambda i: {"query": texts[i], "k": k, "mode": "fts_then_vec"}),
        "hybrid_fts_then_vec_filter_source_25pct": (
            "rag.search_hybrid",
            lambda i: {"query": texts[i], "k": k, "mode": "fts_then_vec", "filters": {"source_ids": [SOURCE_25PCT]}},
        ),
    }

    async def call(name: str, tool: str, args: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        handler, _ = handlers[name]
        ctx = CallContext(endpoint="rag", tool_name=tool, runtime=handler.services.runtime, deadline=time.monotonic() + timeout_s)
        return await handler.execute_tool(handler.find_tool(tool), args, ctx)

    async def run_all() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {name: {} for name in handlers}
        for case, (tool, make_args) in cases.items():
            # One unmeasured pass over the same queries first: each case is measured with its working
            # set in memory (for PostgreSQL, the HNSW pages in shared_buffers, which the keyword cases
            # before it evict; rag.db's ANN is in the process's memory from the start).
            for name in handlers:
                for i in range(len(texts)):
                    await call(name, tool, make_args(i), 60)
                if tool == "rag.search_hybrid":  # every hybrid case pays for embedding its queries
                    handler, _ = handlers[name]
                    handler.opened.query_vectors().cache.clear()
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in handlers}
            found: dict[str, list[list[str]]] = {name: [] for name in handlers}
            for i in range(len(texts)):
                order = list(handlers) if i % 2 == 0 else list(reversed(handlers))
                for name in order:
                    started, cpu_started = time.perf_counter(), time.process_time()
                    result = await call(name, tool, make_args(i), 30)
                    times[name].append((time.perf_counter() - started, time.process_time() - cpu_started))
                    if result["isError"]:
                        raise RuntimeError(f"{name} {case}: {result['structuredContent']}")
                    found[name].append([hit["chunk_id"] for hit in result["structuredContent"]["results"]])
            for name in handlers:
                out[name][case] = percentiles(times[name])
                if tool == "rag.search_vector":
                    out[name][case]["_found"] = found[name]
        return out

    measured = anyio.run(run_all)
    summaries = {name: _summarise(results, handlers[name][1], conn, truth, texts, rowid_of) for name, results in measured.items()}
    for handler, _ in handlers.values():
        anyio.run(handler.close)
    return summaries


def _summarise(
    results: dict[str, Any], embedder: Any, conn: Any, truth: dict[str, list[list[int]]], texts: list[str], rowid_of: dict
) -> dict[str, Any]:
    """Recall through the tool, filtered/unfiltered ratios, and the embedding time alone."""
    for name, truth_key in (
        ("vector", "none"),
        ("ann_filter_source_25pct", "source_25pct"),
        ("ann_filter_source_5pct", "source_5pct"),
        ("ann_filter_docs_20", "docs_20"),
    ):
        found = results[name].pop("_found")
        ids = sorted({c for row in found for c in row} - rowid_of.keys())  # chunk ids back to rowids
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rowid_of.update(
                conn.execute(
                    f"SELECT chunk_id, chunk_rowid FROM rag_chunks WHERE chunk_id IN ({','.join('?' * len(part))})", part
                ).fetchall()
            )
        hits = sum(len({rowid_of[c] for c in row} & set(t)) for row, t in zip(found, truth[truth_key], strict=True))
        results[name]["recall_at_10"] = round(hits / max(1, sum(len(t) for t in truth[truth_key])), 4)
    for name in list(results):
        base = {"ann": "vector"}.get(name.split("_filter_")[0], name.split("_filter_")[0])  # ann_filter_* filter vector
        if base != name:
            results[name]["p50_over_unfiltered"] = round(results[name]["p50_ms"] / results[base]["p50_ms"], 2)
            results[name]["cpu_p50_over_unfiltered"] = round(
                results[name]["cpu_p50_ms"] / max(results[base]["cpu_p50_ms"], 1e-6), 2
            )
    embed_times = []
    for text in texts:
        started, cpu_started = time.perf_counter(), time.process_time()
        embedder.embed([text + " x"])  # not the cached query: the real model's cost per query
        embed_times.append((time.perf_counter() - started, time.process_time() - cpu_started))
    results["query_embedding_alone"] = percentiles(embed_times)
    return results
