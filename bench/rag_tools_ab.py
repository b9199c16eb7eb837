"""The RAG tools of several checkouts side by side, interleaved, over one rag_latency.py index.

    python bench/rag_latency.py --chunks 200000 --build-only          # once
    python bench/rag_tools_ab.py --tree base=/tmp/old --tree this=. --tools vector,fts,hybrid --rounds 8

One long-lived child per tree (PYTHONPATH = the tree, cwd outside it, the tree's own
bench/rag_tools._open_handler), in its own data directory under --out-dir whose rag.db and
rag.db.ann are links to the one index built (the config database is each tree's own). Each round
asks every child in turn, the order alternating, for `calls` calls of each case through
execute_tool (one at a time, as rag_latency.py's tools); a child reports its CPU time per call
(time.process_time, all its threads) and the wall p50. Per tree the median over rounds; per case
the median of the per-round ratios to the first tree (adjacent in time). hybrid and vector_text
start each batch with a cold query-embedding cache. On this shared machine a round's ratio swings
by 10-25 %: effects under ~5 % need many rounds, or instruction counts (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from report import emit

CHILD = r"""
import base64, json, os, sys, time
from pathlib import Path
tree = Path(sys.argv[1]); data = Path(sys.argv[2]); chunks, dim = int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, str(tree / "bench"))
import anyio
import numpy as np
from rag_synth import Corpus
from rag_tools import _open_handler
from gateway.tools import CallContext

texts, queries = Corpus(chunks, dim).queries(200)
handler, _ = _open_handler(data, data / "rag.db", {})
from gateway.sqlite import connect as _c
_conn = _c(data / "rag.db")
docs20 = [d for (d,) in _conn.execute("SELECT doc_id FROM rag_documents ORDER BY doc_id LIMIT 20 OFFSET 1000")]
_conn.close()
b64 = [base64.b64encode(q.astype("<f4").tobytes()).decode() for q in queries]

def clear_cache():
    if hasattr(handler, "query_cache"):  # before issue 25: a new cache
        from handlers.rag.embeddings import QueryEmbeddingCache
        handler.query_cache = QueryEmbeddingCache(handler.embedder, max_entries=1024)
    elif hasattr(handler, "opened"):
        handler.opened.query_vectors().cache.clear()

CASES = {
    "vector": ("rag.search_vector", lambda i: {"query_embedding": {"dim": dim, "values_b64": b64[i]}, "k": 10}),
    "docs20": ("rag.search_vector", lambda i: {"query_embedding": {"dim": dim, "values_b64": b64[i]}, "k": 10, "filters": {"doc_ids": docs20}}),
    "src25": ("rag.search_vector", lambda i: {"query_embedding": {"dim": dim, "values_b64": b64[i]}, "k": 10, "filters": {"source_ids": [2]}}),
    "src5": ("rag.search_vector", lambda i: {"query_embedding": {"dim": dim, "values_b64": b64[i]}, "k": 10, "filters": {"source_ids": [4]}}),
    "fts": ("rag.search_fts", lambda i: {"query": texts[i], "k": 10}),
    "hybrid": ("rag.search_hybrid", lambda i: {"query": texts[i], "k": 10, "mode": "fuse"}),
    "vector_text": ("rag.search_vector", lambda i: {"query_text": texts[i], "k": 10}),
}

async def batch(case, n, start):
    tool, make = CASES[case]
    spec = handler.find_tool(tool)
    walls = []
    cpu0 = time.process_time()
    for j in range(n):
        i = (start + j) % len(texts)
        ctx = CallContext(endpoint="rag", tool_name=tool, runtime=handler.services.runtime, deadline=time.monotonic() + 30)
        t = time.perf_counter()
        r = await handler.execute_tool(spec, make(i), ctx)
        walls.append(time.perf_counter() - t)
        if r["isError"]:
            raise RuntimeError(r["structuredContent"])
    cpu = time.process_time() - cpu0
    return {"cpu_us": cpu / n * 1e6, "wall_p50_us": float(np.percentile(walls, 50)) * 1e6, "wall_mean_us": float(np.mean(walls)) * 1e6}

async def serve():
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("clear"):
            clear_cache()
        out = await batch(cmd["case"], cmd["n"], cmd["start"])
        print(json.dumps(out), flush=True)

anyio.run(serve)
"""


def data_dir(out_dir: Path, built: Path, name: str) -> Path:
    """The tree's own data directory, its rag.db and ANN snapshots those of the index built."""
    d = out_dir / f"ab-{name}"
    d.mkdir(parents=True, exist_ok=True)
    for f in ("rag.db", "rag.db.ann"):
        if not (d / f).exists():
            (d / f).symlink_to((built / f).resolve())
    return d


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tree", action="append", required=True, help="name=path")
    p.add_argument("--tools", default="vector")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--warm", type=int, default=200)
    p.add_argument("--chunks", type=int, default=200_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent / "out")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    built = a.out_dir / f"rag-{a.chunks}-{a.dim}"
    if not (built / "build.json").exists():
        raise SystemExit(f"no index in {built}: python bench/rag_latency.py --chunks {a.chunks} --dim {a.dim} --build-only")
    trees = dict(t.split("=", 1) for t in a.tree)
    procs = {}
    for name, path in trees.items():
        env = {**os.environ, "PYTHONPATH": path}
        procs[name] = subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                str(Path(path).resolve()),
                str(data_dir(a.out_dir, built, name)),
                str(a.chunks),
                str(a.dim),
            ],
            cwd=tempfile.gettempdir(),  # not a tree: the working directory would shadow PYTHONPATH
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = procs[name].stdout.readline()
        if not line:
            raise SystemExit(f"{name}: child failed")
    print("pids", {n: pr.pid for n, pr in procs.items()}, file=sys.stderr, flush=True)

    def ask(name: str, **cmd: object) -> dict:
        procs[name].stdin.write(json.dumps(cmd) + "\n")
        procs[name].stdin.flush()
        return json.loads(procs[name].stdout.readline())

    cases = a.tools.split(",")
    for case in cases:  # warm each path once
        for name in trees:
            ask(name, case=case, n=a.warm, start=0)
    res: dict = {c: {n: [] for n in trees} for c in cases}
    loads = [os.getloadavg()[0]]
    names = list(trees)
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for case in cases:
            for name in order:
                out = ask(name, case=case, n=a.calls, start=(r * a.calls) % 200, clear=case in ("hybrid", "vector_text"))
                res[case][name].append(out)
        loads.append(os.getloadavg()[0])
        print(
            f"round {r} load {loads[-1]:.2f} " + " ".join(f"{c}:{n}={res[c][n][-1]['cpu_us']:.0f}" for c in cases for n in names),
            file=sys.stderr,
            flush=True,
        )
    for pr in procs.values():
        pr.stdin.close()
        pr.wait()
    report: dict = {"bench": "rag_tools_ab", "chunks": a.chunks, "rounds": a.rounds, "calls": a.calls, "cpus": os.cpu_count()}
    report["load_average_1m"] = [round(x, 2) for x in loads]  # the machine is shared: context for the timings
    report["trees"] = trees
    first = names[0]
    for case in cases:
        rep = {}
        for name in names:
            rep[name] = {m: round(statistics.median(x[m] for x in res[case][name]), 1) for m in ("cpu_us", "wall_p50_us")}
            rep[name]["cpu_us_rounds"] = [round(x["cpu_us"]) for x in res[case][name]]
        for name in names[1:]:
            # per-round ratios (same round, adjacent in time), then their median
            ratios = [x["cpu_us"] / y["cpu_us"] for x, y in zip(res[case][name], res[case][first])]
            rep[f"{name}_over_{first}"] = {
                "cpu_median_of_round_ratios": round(statistics.median(ratios), 3),
                "wall_p50": round(rep[name]["wall_p50_us"] / rep[first]["wall_p50_us"], 3),
            }
        report[case] = rep
    emit(report, a.json)


if __name__ == "__main__":
    main()
