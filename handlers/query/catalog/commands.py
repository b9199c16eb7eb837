"""`mcp-gateway query discover TARGET [--schema-filter P] [--notes TEXT]`: the job that
discovery.run_static starts, run in the foreground of the CLI with a progress bar.

It writes the same catalog.db in the data directory, so the gateway's catalog.* tools see
the run. The bar (tqdm, on stderr) counts tables harvested; the final run status goes to
stdout as JSON. Exit codes: 0 ok, 1 the run failed (the status says why), 2 it could not
start (unknown target, broken configuration).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from backends.pools import TargetPools
from gateway.errors import GatewayError
from gateway.store import ConfigStore
from handlers.query.catalog.jobs import DiscoveryJobs
from handlers.query.catalog.store import CatalogStore

POLL_S = 0.2


def add_query_commands(commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
    """`mcp-gateway query ...`: QueryHandler.add_cli."""
    query = commands.add_parser("query", help="query endpoint jobs")
    query_sub = query.add_subparsers(dest="query_command", required=True)
    discover = query_sub.add_parser("discover", help="harvest a target into the discovery catalog, with a progress bar")
    discover.add_argument("target", help="target_id of MCP PROFILES")
    discover.add_argument("--schema-filter", default="", help="a schema name or a pattern with * (default: every schema)")
    discover.add_argument("--notes", default="")
    discover.add_argument("--data-dir", help="default: ./mcp-gateway-data if it exists, else the running gateway's")
    discover.add_argument("--quiet", action="store_true")

    def command(args: argparse.Namespace) -> int:
        try:
            store = open_store(args.data_dir)  # an existing one: `query discover` never creates a data directory
        except GatewayError as exc:
            print(f"mcp-gateway query discover: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        store.initialize()
        return run_discover(store, args.target, args.schema_filter, args.notes, progress=not args.quiet)

    discover.set_defaults(func=command)


def run_discover(
    store: ConfigStore, target_id: str, schema_filter: str, notes: str, *, progress: bool = True, out: TextIO | None = None
) -> int:
    out = out or sys.stdout  # read at the call: a default bound at import keeps whatever stdout was then
    runtime = store.read_runtime()
    pools = TargetPools(runtime)
    catalog = CatalogStore(store.data_dir / "catalog.db")
    jobs = DiscoveryJobs(catalog, pools.connection)
    try:
        try:
            target = pools.resolve(target_id)
        except GatewayError as exc:
            print(f"mcp-gateway query discover: {exc.code}: {exc.message}", file=sys.stderr)
            return 2
        run_id = jobs.start(target, schema_filter, notes)
        status = _follow(jobs, catalog, run_id) if progress else jobs.wait(run_id, 24 * 3600)
        print(json.dumps(status, default=str), file=out, flush=True)
        if status["state"] != "ok":
            error = status.get("error") or {}
            print(f"mcp-gateway query discover: failed: {error.get('code')}: {error.get('message')}", file=sys.stderr)
            return 1
        return 0
    finally:
        jobs.close()
        catalog.close()
        pools.close()


def _follow(jobs: DiscoveryJobs, catalog: CatalogStore, run_id: int) -> dict[str, Any]:
    from tqdm import tqdm

    bar = tqdm(total=None, desc=f"run {run_id}", unit="table", file=sys.stderr, dynamic_ncols=True)
    try:
        while True:
            status = jobs.wait(run_id, POLL_S)
            progress = status["progress"]
            total = progress.get("tables_total") or None
            if total and bar.total != total:
                bar.total = total
            bar.n = progress.get("tables_done", 0)
            bar.set_postfix_str(
                f"{progress.get('phase', '')} schemas={progress.get('schemas_done', 0)}/{progress.get('schemas_total') or '?'}",
                refresh=False,
            )
            bar.refresh()
            if status["state"] in ("ok", "failed", "interrupted"):
                return status
            time.sleep(0 if status["state"] == "running" else POLL_S)
    finally:
        bar.close()
