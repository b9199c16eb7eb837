"""Per-tool usage counters (`stats_mcp_query_tools_counters`), aggregated across workers.

Each worker counts in memory (no database write on the request path) and adds its deltas to
config.db about once a second and at shutdown; readers flush their own worker first, so a
caller sees its own calls at once and other workers' within a second.
"""

from __future__ import annotations

import time
from collections import deque
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


class ToolCounters:
    def __init__(self, store: ConfigStore) -> None:
        self.store = store
        # One event per call, appended on the event loop (atomic, no lock) and folded by flush();
        # the bound only matters when nothing flushes (a second holds ~20,000 calls).
        self._calls: deque[tuple[str, str, str, float, bool, float]] = deque(maxlen=1_000_000)

    def record(self, endpoint: str, tool: str, seconds: float, *, ok: bool, schema: str = "") -> None:
        self._calls.append((endpoint, tool, schema, seconds, ok, time.time()))

    def flush(self) -> None:
        pending: dict[tuple[str, str, str], list[Any]] = {}
        calls = self._calls
        while True:  # popleft, not a swap: a flush in a reader's thread loses none of the loop's appends
            try:
                endpoint, tool, schema, seconds, ok, now = calls.popleft()
            except IndexError:
                break
            micros = int(seconds * 1_000_000)
            row = pending.get((endpoint, tool, schema))
            if row is None:
                pending[(endpoint, tool, schema)] = [1, 0 if ok else 1, now, now, micros, micros, micros]
                continue
            row[0] += 1
            row[1] += 0 if ok else 1
            row[2] = min(row[2], now)
            row[3] = max(row[3], now)
            row[4] += micros
            row[5] = min(row[5], micros)
            row[6] = max(row[6], micros)
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
