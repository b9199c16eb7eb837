"""rag.admin.stats: what the index holds per source, its size and model, and the recent sync jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backends.retrieval.call import Call
from backends.retrieval.storage.reader import Index, reading
from gateway.tools import CallContext, tool
from handlers.rag.models import AdminStatsIn, AdminStatsOut, Stats

RECENT_JOBS_IN_STATS = 5


class StatsTools:
    def __init__(self, index: Callable[[], Index], recent_jobs: Callable[[int], list[dict[str, Any]]]) -> None:
        self._index = index  # the open index (UNAVAILABLE while it is not)
        self._recent_jobs = recent_jobs  # the newest sync jobs of this process's runner, or none

    @tool("rag.admin.stats", title="Index statistics", read_only=True)
    def admin_stats(self, args: AdminStatsIn, ctx: CallContext) -> AdminStatsOut:
        """Per-source document and chunk counts with the last sync, and the index's size,
        schema version and embedding model."""
        index, call = self._index(), Call.of(ctx)
        with reading(index, call) as reader:
            counts = index.source_counts()
            sources = [
                {
                    "source_id": row[0],
                    "source_name": row[1],
                    "enabled": bool(row[2]),
                    "docs": counts.get(row[0], {}).get("docs", 0),
                    "chunks": counts.get(row[0], {}).get("chunks", 0),
                    "last_sync": row[3],
                    "last_error": row[4],
                }
                for row in reader.execute(
                    "SELECT s.source_id, s.name, s.enabled, st.last_ok_at, st.last_error FROM rag_sources s"
                    " LEFT JOIN rag_sync_state st ON st.source_id = s.source_id ORDER BY s.source_id"
                )
            ]
            meta = index.meta()
            totals = index.totals()
        size = index.size_bytes()
        return AdminStatsOut(
            sources=sources,
            jobs=self._recent_jobs(RECENT_JOBS_IN_STATS),
            index={
                **totals,
                "size_bytes": size,
                "schema_version": int(meta.get("schema_version", 0)),
                "embedding_model": meta.get("embedding_model", ""),
                "embedding_dim": int(meta.get("embedding_dim", 0)),
            },
            truncated=False,
            stats=Stats(k_requested=0, k_returned=len(sources), ms=call.ms(), mode="stats"),
        )
