"""`mcp-gateway rag sync [--source NAME] [--data-dir DIR] [--quiet]` (RagHandler.add_cli): one sync
in the foreground, backends/retrieval/ingest/foreground.py run_sync."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from backends.retrieval.ingest.foreground import run_sync
from gateway.errors import GatewayError
from gateway.store import ConfigStore


def add_commands(commands: argparse._SubParsersAction, *, open_store: Callable[[str | None], ConfigStore]) -> None:
    """`mcp-gateway rag ...`: RagHandler.add_cli."""
    rag = commands.add_parser("rag", help="RAG index jobs")
    rag_sub = rag.add_subparsers(dest="rag_command", required=True)
    sync = rag_sub.add_parser("sync", help="sync sources into the index, with a progress bar")
    sync.add_argument("--source", help="one source name (default: all enabled)")
    sync.add_argument("--data-dir", help="default: ./mcp-gateway-data if it exists, else the running gateway's")
    sync.add_argument("--quiet", action="store_true")

    def command(args: argparse.Namespace) -> int:
        try:
            store = open_store(args.data_dir)  # an existing one: `rag sync` never creates a data directory
        except GatewayError as exc:
            print(f"mcp-gateway rag sync: {exc.message}", file=sys.stderr)
            return 2
        return run_sync(store, args.source, progress=not args.quiet)

    sync.set_defaults(func=command)
