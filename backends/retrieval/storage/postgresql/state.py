"""The PostgreSQL index read for /metrics (backends/retrieval/metrics.py): one short-lived
connection per reading, every statement bounded, so a scrape never waits long on a server the
whole cluster shares."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from backends.drivers import LazyDriver
from backends.retrieval.storage.postgresql.index import index_size_bytes
from backends.retrieval.storage.postgresql.ingest import held_sync_jobs, pg_where

if TYPE_CHECKING:
    import psycopg
    from psycopg import rows as pgrows
else:  # imported when a PostgreSQL index opens (index.py)
    psycopg = LazyDriver("psycopg")
    pgrows = LazyDriver("psycopg.rows")

log = logging.getLogger("mcp_gateway.rag.metrics")

PG_STATEMENT_TIMEOUT_MS = 2000
PG_CONNECT_TIMEOUT_S = 2  # libpq's minimum

T = TypeVar("T")


class PgState:
    """One short-lived connection to the PostgreSQL index, every statement bounded."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(
            dsn,
            autocommit=True,
            connect_timeout=PG_CONNECT_TIMEOUT_S,
            application_name="mcp-gateway-metrics",
            options=f"-c statement_timeout={PG_STATEMENT_TIMEOUT_MS}",
        )

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.conn.cursor(row_factory=pgrows.dict_row) as cur:
            return cur.execute(pg_where(sql), tuple(params)).fetchall()

    def size_bytes(self) -> int:
        return index_size_bytes(self.conn)

    def held_sync_jobs(self) -> set[str]:
        return held_sync_jobs(self.conn)

    def close(self) -> None:
        self.conn.close()


def read_pg_state(dsn: str, read: Callable[[PgState], T]) -> T | None:
    """`read` on a fresh connection; None when the server is unreachable, has no index yet, or a
    statement fails (logged without the driver's text)."""
    try:
        db = PgState(dsn)
    except psycopg.Error as exc:
        log.warning("the RAG index database is unreachable for /metrics (%s)", type(exc).__name__)
        return None
    try:
        return read(db)
    except psycopg.errors.UndefinedTable:
        return None  # no index there yet: nothing to report
    except psycopg.Error as exc:
        log.warning("reading the RAG index for /metrics failed (%s)", type(exc).__name__)
        return None
    finally:
        db.close()
