"""What `LOAD RAG SOURCES TO RUNTIME` means for what is already indexed.

- A source's `enabled` reaches the index with the LOAD: a disabled source stops appearing in
  searches at once (filters read rag_sources.enabled), and comes back when enabled again.
- A source removed from the runtime is hidden at once, then its documents, chunks and vectors
  are deleted in a background thread: in batches, so readers and syncs of other sources never
  wait long, and under the source's sync lock, so it waits for a running sync of that source.
  Progress goes to the log; `rag.admin.stats` shows the counts falling.

Only a change from one runtime to the next acts. At start nothing is deleted: an index may hold
sources the configuration never named (built by a tool or a benchmark), and it stays as it is.
With several workers each one sees the change; the sync lock makes the second purge a no-op.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from backends.retrieval.storage.postgresql.index import PgRagIndex
from backends.retrieval.storage.sqlite.index import RagIndex

log = logging.getLogger("mcp_gateway.rag.sources")

PURGE_BATCH = 2_000  # chunks per transaction
LOCK_POLL_S = 1.0


def source_states(rows: Iterable[Mapping[str, Any]]) -> dict[int, bool]:
    """{source_id: enabled} of runtime_rag_sources rows."""
    return {int(row["source_id"]): bool(int(row.get("enabled", 1))) for row in rows}


def apply_source_changes(
    index: RagIndex | PgRagIndex, data_dir: Path, old: dict[int, bool], new: dict[int, bool], stop: threading.Event
) -> threading.Thread | None:
    """Bring the index in line with a new runtime; returns the purge thread when one started."""
    removed = sorted(set(old) - set(new))

    def flags(conn: Any) -> None:
        for source_id, enabled in new.items():
            conn.execute(
                "UPDATE rag_sources SET enabled = ? WHERE source_id = ? AND enabled != ?", (int(enabled), source_id, int(enabled))
            )
        for source_id in removed:
            conn.execute("UPDATE rag_sources SET enabled = 0 WHERE source_id = ?", (source_id,))

    index.run(flags)
    if not removed:
        return None
    thread = threading.Thread(
        target=_purge_all, args=(index, Path(data_dir), removed, stop), name="rag-source-purge", daemon=True
    )
    thread.start()
    return thread


def _purge_all(index: RagIndex | PgRagIndex, data_dir: Path, source_ids: list[int], stop: threading.Event) -> None:
    for source_id in source_ids:
        lock = index.source_lock(source_id)
        while not lock.acquire(f"purge-{source_id}"):  # a sync of it is still running: let it end
            if stop.wait(LOCK_POLL_S):
                return
        try:
            purge_source(index, source_id, stop)
        except Exception:  # noqa: BLE001 - a purge left half done is finished by the next LOAD or start
            log.exception("deleting the documents of removed rag source %s failed", source_id)
        finally:
            lock.release()


def purge_source(index: RagIndex | PgRagIndex, source_id: int, stop: threading.Event | None = None) -> int:
    """Delete a source and everything indexed from it, PURGE_BATCH chunks per transaction (the
    index's purge_source). Returns the chunks deleted. Stopping halfway leaves a consistent index
    (each batch is one transaction) with the source still hidden."""
    started = time.monotonic()
    deleted = index.purge_source(source_id, stop, batch=PURGE_BATCH)
    log.info("removed rag source %s: %d chunks deleted in %.1f s", source_id, deleted, time.monotonic() - started)
    return deleted
