"""Per-tool usage counters (`stats_mcp_query_tools_counters`), aggregated across workers.

Each worker counts in memory (no database write on the request path) and adds its deltas to
config.db about once a second and at shutdown; readers flush their own worker first, so a
caller sees its own calls at once and other workers' within a second.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gateway import sqlite
from gateway.store import ConfigStore

_UPSERT = """
INSERT INTO stats_mcp_query_tools_counters
    (endpoint, tool, schema, count, errors, first_seen, last_seen, sum_time, min_time, max_time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(endpoint, tool, schema) DO UPDATE SET
    count = count + excluded.count,
    errors = errors + excluded.errors,
    first_seen = MIN(first_seen, excluded.first_seen),
    last_seen = MAX(last_seen, excluded.last_seen),
    sum_time = sum_time + excluded.sum_time,
    min_time = MIN(min_time, excluded.min_time),
    max_time = MAX(max_time, excluded.max_time)
"""


class ToolStats:
    def __init__(self, store: ConfigStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str, str], list[float]] = {}

    def record(self, endpoint: str, tool: str, seconds: float, *, ok: bool, schema: str = "") -> None:
        micros = int(seconds * 1_000_000)
        now = time.time()
        with self._lock:
            row = self._pending.get((endpoint, tool, schema))
            if row is None:
                self._pending[(endpoint, tool, schema)] = [1, 0 if ok else 1, now, now, micros, micros, micros]
            else:
                row[0] += 1
                row[1] += 0 if ok else 1
                row[3] = now
                row[4] += micros
                row[5] = min(row[5], micros)
                row[6] = max(row[6], micros)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        conn = self.store.conn()
        with sqlite.transaction(conn):
            for (endpoint, tool, schema), row in pending.items():
                conn.execute(_UPSERT, (endpoint, tool, schema, *row))

    def read(self, *, reset: bool = False, endpoint: str | None = None) -> list[dict[str, Any]]:
        self.flush()
        conn = self.store.conn()
        where, params = ("WHERE endpoint = ?", (endpoint,)) if endpoint else ("", ())
        with sqlite.transaction(conn):
            rows = sqlite.rows(conn, f"SELECT * FROM stats_mcp_query_tools_counters {where} ORDER BY count DESC", params)
            if reset:
                conn.execute(f"DELETE FROM stats_mcp_query_tools_counters {where}", params)
        return rows
