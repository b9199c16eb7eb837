"""The demo sync beside several workers: `mcp-gateway rag sync` in a child of the lean supervisor.

A module of its own so the supervisor imports only this (demo.py imports the whole ingest path:
the index, the source readers, sqlglot), and the child takes the app's imports away with it when
the sync is done.
"""

from __future__ import annotations

import atexit
import logging
import subprocess
import threading

from gateway.supervisor import python_command

log = logging.getLogger("mcp_gateway.rag.demo")


def sync_in_child(data_dir: str, source: str) -> None:
    """The supervisor's job with several workers (RagHandler.before_serve): sync `source` in a
    child process, which embeds through the supervisor's model (MCP_GATEWAY_EMBED_SOCKET).
    Stopped (SIGTERM) when the supervisor exits: what it committed stays, the next start resumes."""
    code = "from gateway.cli import main; sys.exit(main())"
    command = python_command(code) + ["rag", "sync", "--source", source, "--data-dir", data_dir]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)  # its progress bar goes to stderr, as in a thread
    atexit.register(child.terminate)

    def wait() -> None:
        status = child.wait()
        if status not in (0, -15):  # -15: stopped with the supervisor
            log.warning("demo corpus sync did not finish (exit %d); `mcp-gateway rag sync --source %s` retries", status, source)

    threading.Thread(target=wait, name="rag-demo-sync", daemon=True).start()
