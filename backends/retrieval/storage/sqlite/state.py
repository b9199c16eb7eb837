"""rag.db read for /metrics (backends/retrieval/metrics.py): opened read-only for one reading,
as a file every process of this data directory opens."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import apsw

from gateway import sqlite

log = logging.getLogger("mcp_gateway.rag.metrics")

T = TypeVar("T")


class SqliteState:
    """rag.db opened read-only for one collection (never created: no index yet, no gauges)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        self.conn.set_busy_timeout(sqlite.BUSY_TIMEOUT_MS)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        return sqlite.rows(self.conn, sql, params)

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())

    def held_sync_jobs(self) -> None:
        return None  # one host: the job's pid says whether it lives

    def close(self) -> None:
        self.conn.close()


def read_sqlite_state(path: Path, read: Callable[[SqliteState], T]) -> T | None:
    """`read` on rag.db opened read-only; None when there is no index yet or reading fails (logged)."""
    try:
        db = SqliteState(path)
    except apsw.Error:
        return None  # no index yet: nothing to report
    try:
        return read(db)
    except apsw.Error:
        log.warning("reading rag.db for /metrics failed", exc_info=True)
        return None
    finally:
        db.close()
