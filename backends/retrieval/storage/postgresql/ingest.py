"""What ingestion needs of the PostgreSQL RAG index besides documents (index.py): the
statements ingestion and the jobs share with rag.db, written with `?` placeholders (`pg_where`,
`PgExec`), and one sync per source across the whole cluster (`PgSourceLock`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from backends.drivers import LazyDriver
from gateway.errors import Unavailable

if TYPE_CHECKING:
    import psycopg
else:  # imported when a PostgreSQL index opens (index.py)
    psycopg = LazyDriver("psycopg")

SYNC_LOCK_CLASS = 0x7261_6773  # pg_advisory_lock(class, source_id): one sync per source in the cluster


def pg_where(where: str) -> str:
    """A FilterSQL condition (SQLite placeholders) for psycopg: the text is built from fixed
    fragments, user values are parameters only, so swapping the placeholder is all it takes."""
    return where.replace("?", "%s")


class PgExec:
    """What a write_batch callback gets on PostgreSQL: `execute` with `?` placeholders, as apsw's."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(pg_where(sql), tuple(params))
        return cur.fetchall() if cur.description else []


SYNC_LOCK_PREFIX = "mcp-sync "  # application_name of a session holding sync locks, before its job id
HELD_SYNC_LOCKS_SQL = (  # the jobs whose sessions hold a sync lock in this database now
    "SELECT DISTINCT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.classid::bigint = %s AND l.objsubid = 2 AND l.granted"
    " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)


def held_sync_jobs(conn: psycopg.Connection) -> set[str]:
    """Job ids holding a source's sync lock: alive wherever they run (job_liveness.py)."""
    return {
        name.removeprefix(SYNC_LOCK_PREFIX)
        for (name,) in conn.execute(HELD_SYNC_LOCKS_SQL, (SYNC_LOCK_CLASS,)).fetchall()
        if name and name.startswith(SYNC_LOCK_PREFIX)
    }


class PgSourceLock:
    """One sync per source across every instance of a cluster: a session advisory lock held on a
    connection of its own for the sync's duration. PostgreSQL releases it when that session ends,
    so a SIGKILLed instance never leaves it behind. Same interface as source_lock.SourceLock."""

    def __init__(self, dsn: str, source_id: int) -> None:
        self.dsn, self.source_id = dsn, source_id
        self.conn: psycopg.Connection | None = None

    def acquire(self, holder: str) -> bool:
        try:
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=3, application_name=f"{SYNC_LOCK_PREFIX}{holder}"[:63]
            )
        except psycopg.OperationalError as exc:
            raise Unavailable(f"the RAG index database is unreachable ({type(exc).__name__})") from exc
        if not conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (SYNC_LOCK_CLASS, self.source_id)).fetchone()[0]:
            conn.close()
            return False
        self.conn = conn
        return True

    def confirm(self) -> None:
        """Raises Unavailable unless this lock's session still holds it. Called inside each batch's
        write transaction: a PostgreSQL restart ends the lock's session (and frees the lock) while
        the pooled writer connections reconnect, so without this a sync could go on writing after
        another instance has taken the source."""
        held = False
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                held = bool(
                    self.conn.execute(
                        "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid::bigint = %s"
                        " AND objid::bigint = %s AND pid = pg_backend_pid() AND granted",
                        (SYNC_LOCK_CLASS, self.source_id),
                    ).fetchone()
                )
        if not held:
            raise Unavailable(
                "the sync lock of this source was lost (its database session ended, e.g. a PostgreSQL restart); "
                "the sync stopped with every written batch consistent: run it again"
            )

    def holder(self) -> str:
        """The job holding the lock (from its session's application_name), if any."""
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.dsn, autocommit=True, connect_timeout=3) as conn:
            row = conn.execute(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.granted",
                (SYNC_LOCK_CLASS, self.source_id),
            ).fetchone()
            return row[0].removeprefix(SYNC_LOCK_PREFIX) if row else ""
        return ""

    def release(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()  # ending the session releases the lock, reachable or not
            self.conn = None
