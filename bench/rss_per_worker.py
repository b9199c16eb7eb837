"""Resident memory per gateway process, in the configurations an operator sizes for.

Each configuration runs a real `mcp-gateway serve --workers N` (tests/server_process.py), warms
it with a few calls (20 rag.search_hybrid, 20 get_config), then reads VmRSS and VmHWM of the
parent and of each worker from /proc, and the summed RSS and PSS of every process of the
instance's session (`total_*`: with the fork server and resource tracker; `served_*`: the
supervisor and workers only), and each process's RSS and PSS with its role (`processes`).
Configurations:

  hash        rag-embedding_provider=hash: no embedding model loaded (what a gateway costs)
  local       the local all-MiniLM-L6-v2 model (the default), empty index
  local+demo  the local model and the demo corpus (Python's documentation) indexed: the
              parent builds it on first start; measured once that sync has finished

The RSS a 1M-chunk index adds is measured by bench/rag_latency.py (ANN index loaded: see
bench/README.md); add it per worker, since each worker loads its own copy.

    python bench/rss_per_worker.py [--workers 2] [--configs hash,local,local+demo] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "tests")]

import server_process  # noqa: E402
from server_process import call_tool, start_gateway  # noqa: E402

MIB = 1024 * 1024
# Seconds to wait after the warm-up calls before reading memory (--settle-s). Right after the
# demo build the model's batch session may still be loaded (it is dropped 30 s after the last
# batch: BATCH_SESSION_IDLE_S), in the supervisor or the single process alike; whether it is yet
# moved one process's RSS by ~120 MiB between runs. 40 reads the instance after that release.
SETTLE_S = 0.0
DEMO_TIMEOUT_S = 900


def proc_pss_mib(pid: int) -> float:
    """Proportional set size: shared pages (libraries, the model's once) divided among the
    processes that map them, so a sum over processes is what the instance costs the machine."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) * 1024 / MIB, 1)
    return 0.0


def proc_memory(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) * 1024 / MIB, 1)
    return fields


def session_pids(leader: int) -> set[int]:
    """Every live process of the session `leader` leads (start_gateway starts a new session)."""
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == leader and fields[0] != "Z":
            pids.add(int(entry.name))
    return pids


def helper_name(pid: int) -> str:
    command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return next((name for name in ("forkserver", "resource_tracker") if name in command), command[:80])


def worker_pids(gw: server_process.GatewayProcess) -> list[int]:
    with gw.client() as client:
        text = client.get("/metrics").text
    return sorted(int(p) for p in re.findall(r'^mcp_gateway_process_start_time_seconds\{pid="(\d+)"\}', text, re.M))


def wait_for_demo(gw: server_process.GatewayProcess) -> float:
    """Seconds until the demo source's sync has finished (documents present, no sync running)."""
    started = time.monotonic()
    with gw.client(timeout=30) as client:
        while time.monotonic() - started < DEMO_TIMEOUT_S:
            text = client.get("/metrics").text
            documents = re.search(r'^mcp_rag_documents\{source="python_docs"\} ([0-9.e+]+)', text, re.M)
            running = re.search(r"^mcp_rag_sync_running\{", text, re.M)
            if documents and float(documents.group(1)) > 0 and not running:
                return round(time.monotonic() - started, 1)
            time.sleep(2)
    raise RuntimeError("the demo corpus did not finish indexing")


def measure(name: str, workers: int) -> dict[str, Any]:
    variables = {"rag-embedding_provider": "hash"} if name == "hash" else {}
    original = server_process.gateway_command
    if name == "local+demo":  # the demo corpus is built by the parent on first start
        server_process.gateway_command = lambda *a, **k: [arg for arg in original(*a, **k) if arg != "--no-demo"]
    try:
        with start_gateway(workers=workers, variables=variables, startup_timeout_s=120) as gw:
            demo_s = wait_for_demo(gw) if name == "local+demo" else None
            with gw.client(timeout=30) as client:
                for i in range(20):
                    call_tool(client, gw, "rag", "rag.search_hybrid", {"query": f"how do I sort a list {i}", "k": 5})
                    call_tool(client, gw, "config", "get_config", {"variable_name": "mcp-timeout_ms"})
            time.sleep(max(1.5, SETTLE_S))
            pids = worker_pids(gw)
            result = {
                "config": name,
                "workers": workers,
                "parent_mib": proc_memory(gw.process.pid),
                "workers_mib": [proc_memory(pid) for pid in pids],
            }
            # What the instance holds: every process of its session once (with one worker the
            # parent serves): the supervisor, the workers, and multiprocessing's helpers (its
            # resource tracker; with --workers > 1 the fork server the workers are forked from).
            served = {gw.process.pid, *pids}
            every = served | session_pids(gw.process.pid)
            result["helpers"] = {pid: helper_name(pid) for pid in sorted(every - served)}
            roles = {**{pid: "worker" for pid in pids}, gw.process.pid: "supervisor" if workers > 1 else "server"}
            result["processes"] = [
                {"pid": pid, "role": roles.get(pid) or result["helpers"][pid], "rss_mib": proc_memory(pid)["VmRSS"]}
                | {"pss_mib": proc_pss_mib(pid)}
                for pid in sorted(every)
            ]
            result["total_rss_mib"] = round(sum(proc_memory(pid)["VmRSS"] for pid in every), 1)
            result["total_pss_mib"] = round(sum(proc_pss_mib(pid) for pid in every), 1)
            # The sums of before issue 30's fork server: the supervisor and the workers only.
            result["served_rss_mib"] = round(sum(proc_memory(pid)["VmRSS"] for pid in served), 1)
            result["served_pss_mib"] = round(sum(proc_pss_mib(pid) for pid in served), 1)
            if demo_s is not None:
                result["demo_index_s"] = demo_s
            return result
    finally:
        server_process.gateway_command = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--configs", default="hash,local,local+demo")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--compare-workers", help="e.g. 1,2: each config at each count, total RSS side by side (with --baseline-tree too)"
    )
    parser.add_argument("--baseline-tree", type=Path, help="also measure a gateway running this checkout, in the same run")
    parser.add_argument("--settle-s", type=float, default=0.0, help="wait this long after the warm-up before reading")
    args = parser.parse_args()
    global SETTLE_S
    SETTLE_S = args.settle_s
    if args.compare_workers:
        compare(args)
        return
    results = [measure(name, args.workers) for name in args.configs.split(",")]
    for result in results:
        rss = [w["VmRSS"] for w in result["workers_mib"]]
        result["worker_rss_mean_mib"] = round(sum(rss) / len(rss), 1)
    base = next((r["worker_rss_mean_mib"] for r in results if r["config"] == "hash"), None)
    if base:
        for result in results:
            result["worker_rss_vs_hash"] = round(result["worker_rss_mean_mib"] / base, 2)
    text = json.dumps({"results": results}, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


def compare(args: argparse.Namespace) -> None:
    """Total RSS of the instance at each worker count, for this tree and a baseline tree, in one
    run."""
    import os

    counts = [int(c) for c in args.compare_workers.split(",")]
    trees = {"gateway": REPO_ROOT, **({"baseline": args.baseline_tree.resolve()} if args.baseline_tree else {})}
    load_before = list(os.getloadavg())
    out: dict[str, Any] = {}
    for label, tree in trees.items():
        server_process.REPO_ROOT = tree  # what start_gateway puts first on the gateway's PYTHONPATH
        for name in args.configs.split(","):
            rows = {f"w{count}": measure(name, count) for count in counts}
            first = rows[f"w{counts[0]}"]
            for row in rows.values():
                row["total_rss_to_first"] = round(row["total_rss_mib"] / first["total_rss_mib"], 2)
                row["total_pss_to_first"] = round(row["total_pss_mib"] / first["total_pss_mib"], 2)
            out[f"{label}:{name}"] = rows
            for row in rows.values():
                row["served_rss_to_first"] = round(row["served_rss_mib"] / first["served_rss_mib"], 2)
                row["served_pss_to_first"] = round(row["served_pss_mib"] / first["served_pss_mib"], 2)
            shown = {
                k: (v["total_rss_mib"], v["total_pss_mib"], v["served_rss_mib"], v["served_pss_mib"]) for k, v in rows.items()
            }
            print(label, name, "total RSS, PSS; served RSS, PSS MiB", shown, file=sys.stderr, flush=True)
    text = json.dumps({"load_average_before_after": [load_before, list(os.getloadavg())], "results": out}, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
