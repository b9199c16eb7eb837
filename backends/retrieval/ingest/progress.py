"""What a running sync reports: counters per source, readable while the sync runs.

The pipeline threads update the counters (each counter has one writing thread); readers
take `snapshot()`, which also derives the rate and the ETA. Bad rows are kept with their
key, up to MAX_ERRORS_KEPT of them; beyond that only counted (`errors_truncated`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

MAX_ERRORS_KEPT = 100


@dataclass
class SourceProgress:
    source: str
    phase: str = "queued"  # queued|connecting|counting|reading|key_scan|done|failed
    rows_total: int | None = None  # rows past the cursor when the sync started
    rows_read: int = 0
    rows_skipped: int = 0
    docs_written: int = 0
    docs_deleted: int = 0
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    embed_s: float = 0.0  # wall time inside the embedder
    embed_cpu_s: float = 0.0  # CPU time of the calling thread inside the embedder (excludes a model's own threads)
    started_at: float | None = None
    finished_at: float | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # why the sync failed, {code, message}
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def start(self) -> None:
        self.started_at = time.time()
        self.phase = "connecting"

    def finish(self, phase: str) -> None:
        self.phase = phase
        self.finished_at = time.time()

    def bad_row(self, key: dict[str, Any], reason: str, message: str) -> None:
        with self._lock:
            self.rows_skipped += 1
            if len(self.errors) < MAX_ERRORS_KEPT:
                self.errors.append({"key": key, "reason": reason, "message": message})

    def snapshot(self) -> dict[str, Any]:
        now = self.finished_at or time.time()
        elapsed_s = max(now - self.started_at, 1e-9) if self.started_at else 0.0
        # Done = committed to the index (or skipped as bad), not merely read: reading runs ahead
        # of embedding, so a rate or ETA from rows read would promise far too early an end.
        rows_done = min(self.rows_read, self.docs_written + self.rows_skipped)
        rows_per_s = rows_done / elapsed_s if elapsed_s else 0.0
        eta_s = None
        if self.phase == "reading" and self.rows_total is not None and rows_per_s > 0:
            eta_s = round(max(self.rows_total - rows_done, 0) / rows_per_s, 1)
        with self._lock:
            errors = list(self.errors)
        return {
            "source": self.source,
            "phase": self.phase,
            "rows_total": self.rows_total,
            "rows_read": self.rows_read,
            "rows_done": rows_done,
            "rows_skipped": self.rows_skipped,
            "docs_written": self.docs_written,
            "docs_deleted": self.docs_deleted,
            "chunks_written": self.chunks_written,
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "embed_s": round(self.embed_s, 3),
            "embed_cpu_s": round(self.embed_cpu_s, 3),
            "elapsed_s": round(elapsed_s, 3),
            "rows_per_s": round(rows_per_s, 1),
            "chunks_per_s": round(self.chunks_written / elapsed_s, 1) if elapsed_s else 0.0,
            "eta_s": eta_s,
            "errors": errors,
            "errors_truncated": self.rows_skipped > len(errors),
            "error": self.error,
        }
