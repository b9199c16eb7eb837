"""Whether the index is being built right now, so a search can say so instead of a bare k_returned: 0.

A sync job (rag.admin.sync, `mcp-gateway rag sync`, the demo corpus built on first start) in any
process records its progress in the index's rag_sync_jobs (rag.db or PostgreSQL). `BuildWatch.note()` sums the live ones
(state queued or running, and alive: backends/retrieval/job_liveness.py) into an `IndexBuild` that search results carry as
`index`: documents written so far, of how many rows the sources had to read. A job of this
process reports its in-memory progress (fresher than the table, which is written per batch).
The answer is kept for half a second: a search costs one small query at most twice a second.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backends.retrieval.job_liveness import live_job_ids

CACHE_S = 0.5


@dataclass(frozen=True)
class IndexBuild:
    """The live syncs' progress, summed (the search tools' `index`, handlers/rag/models.py IndexBuild)."""

    building: bool
    documents: int
    of: int | None  # rows the sources have to read; None until every source is counted
    sources: list[str]
    job_id: str
    message: str


class BuildWatch:
    def __init__(self, job_status: Callable[[str], dict[str, Any] | None], member: Callable[[], str]) -> None:
        self._job_status = job_status  # this process's view of a job (in memory), or None
        self._member = member  # this instance's member_id (whose jobs' pids are ours to check)
        self._lock = threading.Lock()
        self._at = -CACHE_S
        self._note: IndexBuild | None = None

    def note(self, index: Any) -> IndexBuild | None:
        """`index`: either backend's index (its `query` takes `?` placeholders on both)."""
        now = time.monotonic()
        if now - self._at < CACHE_S and (self._note is None or self._note.documents):
            # A note saying nothing is indexed yet is read again: the first batch may have landed.
            return self._note
        note = self._read(index)
        with self._lock:
            self._note, self._at = note, now
        return note

    def _read(self, index: Any) -> IndexBuild | None:
        rows = index.query(
            "SELECT job_id, pid, member_id, source_names, progress_json FROM rag_sync_jobs "
            "WHERE state IN ('queued', 'running') ORDER BY created_at",
        )
        alive = live_job_ids(rows, index, self._member())
        live = [row for row in rows if row["job_id"] in alive]
        if not live:
            return None
        documents, of, sources = 0, 0, []
        for row in live:
            status = self._job_status(row["job_id"])
            progress = status["sources"] if status else sqlite_json(row["progress_json"])
            for item in progress:
                sources.append(item["source"])
                documents += int(item.get("docs_written") or 0)
                of = None if of is None or item.get("rows_total") is None else of + int(item["rows_total"])
        if of is None:
            progress = f"{documents} documents indexed so far (the rows to index are still being counted)"
        else:
            progress = f"{documents} of {of} documents indexed so far"
        return IndexBuild(
            building=True,
            documents=documents,
            of=of,
            sources=sources,
            job_id=live[-1]["job_id"],
            message=f"the index is being built: {progress}; results cover only what is already indexed",
        )


def sqlite_json(text: str | None) -> list[dict[str, Any]]:
    value = json.loads(text or "[]")
    return value if isinstance(value, list) else []
