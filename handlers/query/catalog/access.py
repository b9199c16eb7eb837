"""The discovery catalog of one process, as the /mcp/query tool groups share it: the store
(<data_dir>/catalog.db, store.py), the agent memory over it (memory.py) and the discovery jobs
that fill it (jobs.py). Opened at the first use, so a worker that serves no catalog tool never
opens the file; closed with the handler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway.errors import InvalidArgument
from gateway.tools import CallContext
from handlers.query.catalog.jobs import DiscoveryJobs
from handlers.query.catalog.memory import AgentMemory
from handlers.query.catalog.store import CatalogStore
from handlers.query.join_inference import Candidate
from handlers.query.variables import CATALOG_WRITES, variable


def require_writes(ctx: CallContext) -> None:
    """The catalog and agent memory write tools are refused while mcp-catalog_writes is false."""
    if not variable(ctx, CATALOG_WRITES):
        raise InvalidArgument(f"{ctx.tool_name} is refused: catalog writes are disabled (mcp-catalog_writes=false)")


class DiscoveryCatalog:
    """`connection(target_id)` is the pools' context manager -> (target, conn), for the jobs."""

    def __init__(self, path: Path, connection: Callable[[str], Any]) -> None:
        self.path = path
        self.connection = connection
        self._lock = threading.Lock()
        self._opened: tuple[CatalogStore, AgentMemory, DiscoveryJobs] | None = None

    def _open(self) -> tuple[CatalogStore, AgentMemory, DiscoveryJobs]:
        with self._lock:
            if self._opened is None:
                store = CatalogStore(self.path)
                self._opened = (store, AgentMemory(store), DiscoveryJobs(store, self.connection))
            return self._opened

    def store(self) -> CatalogStore:
        return self._open()[0]

    def memory(self) -> AgentMemory:
        return self._open()[1]

    def jobs(self) -> DiscoveryJobs:
        return self._open()[2]

    def close(self) -> None:
        with self._lock:
            if self._opened is not None:
                store, _, jobs = self._opened
                jobs.close()
                store.close()
                self._opened = None

    def recorded_relationships(self, target_id: str, schema: str) -> list[Candidate]:
        """The joins agents recorded (llm.relationship_upsert) in one schema, as join candidates."""
        rows = self.store().relationships(target_id, run_id=None, schema=schema, kinds=("agent",))
        return [
            Candidate(r["from_schema"], r["from_table"], r["from_columns"], r["to_schema"], r["to_table"], r["to_columns"], "agent",
                      r["confidence"], {**r["evidence"], "signals": ["agent"], "agent_run_id": r["agent_run_id"]})
            for r in rows
        ]  # fmt: skip
