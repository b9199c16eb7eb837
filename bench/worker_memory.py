"""Memory of one serving worker that builds the demo corpus, side by side with another checkout.

    python bench/worker_memory.py --json bench/out/worker_memory.json \
        --tree . --baseline-tree /tmp/base [--providers local hash]

For each tree and embedding provider: a real gateway (`serve --workers 1`, demo corpus on, so
the first-start sync of ~930 chunks runs inside the one worker process) is started in a fresh
data directory. /proc/<pid>/status is sampled every 0.2 s until the demo sync has finished:
VmHWM is the sync's peak RSS. Then 40 rag.search_hybrid calls are served and VmRSS is read:
what the worker holds while serving, --idle seconds (35) after the sync. `hash` is the run without the model (a feature-hashing
embedder), which isolates what the model costs.

Goals (issue 12): serving < 400 MB, the sync's peak < 800 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from report import emit  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUERIES = (
    "how do I read a file line by line",
    "sort a list of dictionaries by a key",
    "difference between a list and a tuple",
    "parse command line arguments",
    "format a date as ISO 8601",
    "run a subprocess and capture its output",
    "what does the with statement do",
    "generator expression",
)


def proc_kb(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def demo_synced(data_dir: Path) -> bool:
    db = data_dir / "rag.db"
    if not db.exists():
        return False
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            row = conn.execute(
                "SELECT count(*) FROM rag_sync_state st JOIN rag_sources s ON s.source_id = st.source_id"
                " WHERE s.name = 'python_docs' AND st.last_ok_at IS NOT NULL"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return bool(row and row[0])


class _Probe:
    """One rag.search_fts at a time while the demo builds: does the index answer yet?"""

    def __init__(self, port: int, token: str) -> None:
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        self.headers["MCP-Protocol-Version"] = "2025-06-18"

    def hits(self, query: str) -> bool:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "rag.search_fts", "arguments": {"query": query, "k": 1}},
        }
        try:
            answer = self.client.post("/mcp/rag", json=body, headers=self.headers).json()
        except (httpx.HTTPError, ValueError):
            return False  # not listening yet
        result = answer.get("result") or {}
        return not result.get("isError", True) and bool(result.get("structuredContent", {}).get("results"))

    def close(self) -> None:
        self.client.close()


def run_one(tree: Path, provider: str, *, timeout_s: float, idle_s: float, keep: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="worker-mem-") as tmp:
        data_dir, config = Path(tmp) / "data", Path(tmp) / "gateway.toml"
        data_dir.mkdir()
        with __import__("socket").socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        token = f"tok-{secrets.token_hex(8)}"
        config.write_text(
            "[variables]\n"
            f'"mcp-rag_endpoint_auth" = "{token}"\n"mcp-use_ssl" = false\n"mcp-port" = {port}\n'
            f'"rag-embedding_provider" = "{provider}"\n'
        )
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "gateway.cli", "serve", "--data-dir", str(data_dir), "--config", str(config)]
        command += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        log_path = Path(tmp) / "gateway.log"
        began = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            samples, synced = [], False
            first_hit_s, next_probe, probe = None, 0.0, _Probe(port, token)
            while time.monotonic() - began < timeout_s:
                if process.poll() is not None:
                    raise RuntimeError(f"gateway exited: {log_path.read_text()[-2000:]}")
                samples.append(proc_kb(process.pid))
                if demo_synced(data_dir):
                    synced = True
                    break
                if first_hit_s is None and time.monotonic() >= next_probe:
                    # How soon a first search answers from the index being built (issue 29).
                    next_probe = time.monotonic() + 0.5
                    if probe.hits(QUERIES[0]):
                        first_hit_s = time.monotonic() - began
                time.sleep(0.2)
            probe.close()
            sync_s = time.monotonic() - began
            time.sleep(idle_s)  # the embedder drops its batch session once idle (BATCH_SESSION_IDLE_S)
            after_sync = proc_kb(process.pid)
            client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
            headers["MCP-Protocol-Version"] = "2025-06-18"
            for n in range(40):
                body = {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": "rag.search_hybrid", "arguments": {"query": QUERIES[n % len(QUERIES)] + f" {n}", "k": 10}},
                }
                answer = client.post("/mcp/rag", json=body, headers=headers).json()
                if answer.get("result", {}).get("isError", True):
                    raise RuntimeError(f"search failed: {answer}")
            client.close()
            serving = proc_kb(process.pid)
            chunks = (
                sqlite3.connect(f"file:{data_dir / 'rag.db'}?mode=ro", uri=True)
                .execute("SELECT count(*) FROM rag_chunks")
                .fetchone()[0]
            )
        finally:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        if keep is not None:  # the built index, for a look at its answers (bench/demo_questions.py)
            import shutil

            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(data_dir, keep)
    return {
        "provider": provider,
        "demo_synced": synced,
        "chunks": chunks,
        "sync_s": round(sync_s, 1),
        "first_hit_s": None if first_hit_s is None else round(first_hit_s, 1),
        "sync_peak_rss_mb": round(serving["VmHWM"] / 1024, 1),
        "rss_after_sync_mb": round(after_sync["VmRSS"] / 1024, 1),
        "rss_serving_mb": round(serving["VmRSS"] / 1024, 1),
        "rss_before_sync_mb": round(samples[0]["VmRSS"] / 1024, 1) if samples else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout measured")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout, measured the same way")
    parser.add_argument("--providers", nargs="+", default=["local", "hash"])
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for the demo sync")
    parser.add_argument("--idle", type=float, default=35.0, help="seconds between the sync's end and the serving figures")
    parser.add_argument("--label", default="this", help="name of --tree in the report")
    parser.add_argument("--merge", type=Path, nargs="*", default=[], help="earlier reports whose runs join this one")
    parser.add_argument("--keep", type=Path, help="copy the data directory of the last run here")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {args.label: args.tree.resolve()}
    if args.baseline_tree:
        trees["baseline"] = args.baseline_tree.resolve()
    report: dict[str, Any] = {"load_average_1m": round(os.getloadavg()[0], 2), "runs": {}}
    for earlier in args.merge:
        report["runs"].update(json.loads(earlier.read_text())["runs"])
    for label, tree in trees.items():
        for provider in args.providers:
            figures = run_one(tree, provider, timeout_s=args.timeout, idle_s=args.idle, keep=args.keep)
            report["runs"][f"{label}/{provider}"] = figures
            print(label, json.dumps(figures), file=sys.stderr)
    if "baseline/local" in report["runs"] and "this/local" in report["runs"]:
        this, base = report["runs"]["this/local"], report["runs"]["baseline/local"]
        report["ratios"] = {
            "serving_this_over_baseline": round(this["rss_serving_mb"] / base["rss_serving_mb"], 3),
            "sync_peak_this_over_baseline": round(this["sync_peak_rss_mb"] / base["sync_peak_rss_mb"], 3),
            "sync_s_this_over_baseline": round(this["sync_s"] / base["sync_s"], 3),
        }
        if this.get("first_hit_s") and base.get("first_hit_s"):
            report["ratios"]["first_hit_s_this_over_baseline"] = round(this["first_hit_s"] / base["first_hit_s"], 3)
    report["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    emit(report, args.json)


if __name__ == "__main__":
    main()
