"""One sync in the foreground (`mcp-gateway rag sync`, the demo corpus): the same job rag.admin.sync runs.

Progress bars (tqdm) go to stderr, one per source; the final job status is printed to stdout
as JSON. Exit codes: 0 the job succeeded, 1 it failed (the status says why), 2 it could not
start (unknown source, a sync of it already running, a broken configuration).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from backends.retrieval.embeddings import index_embedding_config, make_embedder
from backends.retrieval.ingest.jobs import JobManager
from backends.retrieval.ingest.sync import SyncOptions
from backends.retrieval.storage import open_index
from gateway.errors import GatewayError
from gateway.store import ConfigStore

POLL_S = 0.2


def run_sync(
    store: ConfigStore,
    source: str | None,
    progress: bool = True,
    *,
    full: bool = False,
    batch_rows: int = 500,
    out: TextIO = sys.stdout,
) -> int:
    """Sync one source (or every enabled one) of `store`'s data directory now; returns the process exit code."""
    data_dir = store.data_dir
    try:
        runtime = store.read_runtime()
        embedder = make_embedder(index_embedding_config(runtime))
        index = open_index(runtime, Path(data_dir), embedding_model_id=embedder.model_id, dim=embedder.dim)
    except GatewayError as exc:
        print(f"mcp-gateway rag sync: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    manager = JobManager(
        data_dir=Path(data_dir), index=index, embedder=embedder, runtime=lambda: runtime, make_embedder=make_embedder
    )
    try:
        try:
            result = manager.start([source] if source else None, options=SyncOptions(full=full, batch_rows=batch_rows))
        except GatewayError as exc:
            print(f"mcp-gateway rag sync: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        if not result.accepted:
            print(f"mcp-gateway rag sync: not started: {result.reason}", file=sys.stderr)
            return 2
        status = _follow(manager, result.job_id) if progress else manager.wait(result.job_id)
        print(json.dumps(status, default=str), file=out, flush=True)
        for item in status["sources"]:
            if item["rows_skipped"]:
                print(f"{item['source']}: {item['rows_skipped']} row(s) skipped (see errors in the status)", file=sys.stderr)
        if status["state"] != "ok":
            error = status.get("error") or {}
            print(f"mcp-gateway rag sync: failed: {error.get('code')}: {error.get('message')}", file=sys.stderr)
            return 1
        return 0
    finally:
        manager.close()
        index.close()


def _follow(manager: Any, job_id: str) -> dict[str, Any]:
    """Poll the job and draw one bar per source until it ends."""
    from tqdm import tqdm

    bars: dict[str, Any] = {}
    try:
        while True:
            status = manager.status(job_id)
            for item in status["sources"]:
                name = item["source"]
                if item["phase"] == "queued":
                    continue
                bar = bars.get(name)
                if bar is None:
                    bar = bars[name] = tqdm(total=item["rows_total"], desc=name, unit="row", file=sys.stderr, dynamic_ncols=True)
                if item["rows_total"] is not None and bar.total != item["rows_total"]:
                    bar.total = item["rows_total"]
                bar.n = item["rows_done"]
                bar.set_postfix_str(
                    f"{item['phase']} chunks={item['chunks_written']} embedded={item['chunks_embedded']} skipped={item['rows_skipped']}",
                    refresh=False,
                )
                bar.refresh()
            if status["state"] in ("ok", "failed", "interrupted"):
                return status
            time.sleep(POLL_S)
    finally:
        for bar in bars.values():
            bar.close()
