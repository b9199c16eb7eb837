"""rag.search_hybrid latency side by side with another checkout, over the index rag_latency.py built.

    python bench/rag_latency.py --chunks 200000 --build-only          # once
    python bench/hybrid_latency.py --chunks 200000 --baseline-tree /tmp/base --json bench/out/hybrid_latency.json

Each round runs, for every tree in turn, one process that opens the real RagHandler over
bench/out/rag-<N>-<dim>/ (its own code: PYTHONPATH is the tree) and sends every query through
`execute_tool` with a cold query-embedding cache: hybrid fuse (the tree's default), hybrid
fts_then_vec and search_vector by text. Rounds alternate the trees' order, and the median round
is reported per tree, with ratios this / baseline. The machine is shared: the load average is
recorded, and the CPU time per call (`cpu_p50_ms`) is not inflated by other tenants.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from report import emit

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "bench"))
import anyio
from rag_synth import Corpus
from rag_latency import percentiles
from rag_tools import _open_handler
from gateway.tools import CallContext

chunks, dim, count, out_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
texts, _ = Corpus(chunks, dim).queries(count)
handler, embedder = _open_handler(out_dir, out_dir / "rag.db", {})
cases = {
    "hybrid_fuse": ("rag.search_hybrid", {"mode": "fuse"}),
    "hybrid_fts_then_vec": ("rag.search_hybrid", {"mode": "fts_then_vec"}),
    "vector_text": ("rag.search_vector", {}),
}

async def run():
    out = {}
    for name, (tool, extra) in cases.items():
        spec = handler.find_tool(tool)
        key = "query_text" if tool == "rag.search_vector" else "query"
        # a cold query-embedding cache: RagHandler.query_cache before issue 25, opened.queries after
        (handler.query_cache if hasattr(handler, "query_cache") else handler.opened.query_vectors().cache).clear()
        warm = CallContext(endpoint="rag", tool_name=tool, runtime=handler.services.runtime, deadline=time.monotonic() + 60)
        await handler.execute_tool(spec, {key: "warm up the path", "k": 10, **extra}, warm)
        samples = []
        for text in texts:
            ctx = CallContext(endpoint="rag", tool_name=tool, runtime=handler.services.runtime, deadline=time.monotonic() + 30)
            began, cpu = time.perf_counter(), time.process_time()
            result = await handler.execute_tool(spec, {key: text, "k": 10, **extra}, ctx)
            samples.append((time.perf_counter() - began, time.process_time() - cpu))
            if result["isError"]:
                raise RuntimeError(result["structuredContent"])
        out[name] = percentiles(samples)
    return out

print(json.dumps(anyio.run(run)))
"""


def run_tree(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    out_dir = (args.out_dir / f"rag-{args.chunks}-{args.dim}").resolve()
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-c", CHILD, str(args.chunks), str(args.dim), str(args.queries), str(out_dir)]
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--baseline-tree", type=Path, required=True, help="the checkout compared with (e.g. git archive of main)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"this": ROOT, "baseline": args.baseline_tree.resolve()}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    load = [os.getloadavg()[0]]
    for n in range(args.rounds):
        for name in list(trees) if n % 2 == 0 else list(reversed(trees)):
            rounds[name].append(run_tree(trees[name], args))
            print(name, json.dumps(rounds[name][-1]), file=sys.stderr)
        load.append(os.getloadavg()[0])
    report: dict[str, Any] = {"chunks": args.chunks, "queries": args.queries, "rounds": args.rounds}
    report["load_average_1m"] = [round(x, 2) for x in load]
    for name in trees:
        report[name] = {
            case: {
                metric: round(statistics.median(r[case][metric] for r in rounds[name]), 3)
                for metric in ("p50_ms", "p95_ms", "cpu_p50_ms")
            }
            for case in rounds[name][0]
        }
    report["this_over_baseline"] = {
        case: {m: round(report["this"][case][m] / report["baseline"][case][m], 3) for m in ("p50_ms", "p95_ms", "cpu_p50_ms")}
        for case in report["this"]
    }
    emit(report, args.json)


if __name__ == "__main__":
    main()
