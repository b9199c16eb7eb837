"""Whether a sync job its row calls queued or running is still alive, on either backend.

A job row carries the pid and the member (instance) that runs it. A pid is only meaningful on
the host that wrote it: on a PostgreSQL index shared by a cluster, instance B looking up
instance A's pid on its own host would call A's running job dead. So on PostgreSQL the
authority is the source's sync lock: a live job holds the advisory lock of every source it
has not finished, from `start` on (queued included), in a session named after the job
(pg_ingest.PgSourceLock), and PostgreSQL drops the lock when that session ends (kill -9, a
crash; a lost host once TCP gives up). A job is alive when such a session holds a lock and,
if the job is this member's, its pid is alive too (the only pid check that means anything).

rag.db lives on one host, so there the pid is the check, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from gateway.cluster import member_id
from gateway.pids import pid_alive


class JobLockView(Protocol):
    def held_sync_jobs(self) -> set[str] | None:
        """Job ids holding a source's sync lock now (PostgreSQL); None when the index cannot tell (rag.db)."""
        ...


def this_member(variables: Mapping[str, Any]) -> str:
    """This instance's member_id: mcp-cluster_member_name, or host:port (gateway.cluster's naming)."""
    return member_id({name: str(value) for name, value in variables.items() if value not in (None, "")})


def job_alive(row: Mapping[str, Any], held: set[str] | None, member: str) -> bool:
    """`row`: a rag_sync_jobs row (job_id, pid, member_id); `held`: held_sync_jobs()."""
    pid = int(row.get("pid") or 0)
    if held is None:
        return pid_alive(pid)
    if row["job_id"] not in held:
        return False  # its lock went with its session: the process or its host is gone
    return row.get("member_id") != member or pid_alive(pid)


def live_job_ids(rows: Iterable[Mapping[str, Any]], index: JobLockView, member: str) -> set[str]:
    """The job ids among `rows` (queued or running ones) that are alive; one lock query at most."""
    rows = list(rows)
    if not rows:
        return set()
    held = index.held_sync_jobs()
    return {row["job_id"] for row in rows if job_alive(row, held, member)}
