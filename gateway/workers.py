"""What every worker has done, for changes that must reach all of them before they answer
(`runtime_workers`, `cache_flush_requests`, schema.sql section `admin_state`).

A worker writes its row when it starts and whenever its runtime follower applies a new
version (gateway.app), and deletes it when it stops. `wait_applied` lets an admin change
answer only once every live worker serves it: after `admin.revoke_token` returns, no worker
accepts the revoked token any more. Rows of processes that died without cleaning up are
ignored (their pid is gone) and removed.

Caches live in each process, so a flush is a request every worker's follower carries out on
its next poll (`Services.cache_flushers` names what each cache type clears); the caller waits
for all of them the same way (`wait_flushed`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping

from gateway import sqlite
from gateway.pids import pid_alive
from gateway.store import ConfigStore

POLL_S = 0.05
KEEP_FLUSH_REQUESTS = 100

# cache type -> flush(target_id or None) -> entries dropped
Flushers = Mapping[str, Callable[[str | None], int]]


def applied(store: ConfigStore, version: int) -> None:
    """This worker now serves `version`. A new row starts past every earlier flush request:
    a process that starts has nothing cached."""
    store.conn().execute(
        "INSERT INTO runtime_workers (pid, version, applied_at, flushed_upto) "
        "VALUES (?, ?, ?, (SELECT COALESCE(MAX(id), 0) FROM cache_flush_requests)) "
        "ON CONFLICT(pid) DO UPDATE SET version = excluded.version, applied_at = excluded.applied_at",
        (os.getpid(), version, time.time()),
    )


def leave(store: ConfigStore) -> None:
    store.conn().execute("DELETE FROM runtime_workers WHERE pid = ?", (os.getpid(),))


def forget_all(store: ConfigStore) -> None:
    """At start, before any worker: a pid of the last run may belong to another process now."""
    store.conn().execute("DELETE FROM runtime_workers")


def _live(store: ConfigStore, column: str) -> dict[int, int]:
    """pid -> `column` of every live worker (rows of dead ones are removed)."""
    conn = store.conn()
    rows = {r["pid"]: r[column] for r in sqlite.rows(conn, f"SELECT pid, {column} FROM runtime_workers")}
    for pid in [pid for pid in rows if not pid_alive(pid)]:
        conn.execute("DELETE FROM runtime_workers WHERE pid = ?", (pid,))
        del rows[pid]
    return rows


def serving(store: ConfigStore) -> dict[int, int]:
    """pid -> runtime version of every live worker."""
    return _live(store, "version")


def _wait(store: ConfigStore, column: str, target: int, timeout_s: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout_s
    while True:
        rows = _live(store, column)
        done = sum(1 for v in rows.values() if v >= target)
        if done == len(rows) or time.monotonic() >= deadline:
            return done, len(rows)
        time.sleep(POLL_S)


LOAD_WAIT_S = 2.0  # how long a change waits for every worker to serve it before it answers anyway


def wait_applied(store: ConfigStore, version: int, *, timeout_s: float = LOAD_WAIT_S) -> tuple[int, int]:
    """Wait until every live worker serves `version` or later, at most `timeout_s`.
    Returns (workers serving it, workers alive)."""
    return _wait(store, "version", version, timeout_s)


# -- cache flushes ------------------------------------------------------------------------------


def request_flush(store: ConfigStore, cache_types: list[str], target_id: str | None) -> int:
    conn = store.conn()
    with sqlite.transaction(conn):
        conn.execute(
            "INSERT INTO cache_flush_requests (cache_types, target_id, requested_at) VALUES (?, ?, ?)",
            (",".join(cache_types), target_id, time.time()),
        )
        request_id = int(sqlite.scalar(conn, "SELECT last_insert_rowid()"))
        conn.execute("DELETE FROM cache_flush_requests WHERE id <= ?", (request_id - KEEP_FLUSH_REQUESTS,))
    return request_id


def flushed_upto(store: ConfigStore) -> int:
    """The last flush request this worker carried out (or started past)."""
    value = sqlite.scalar(store.conn(), "SELECT flushed_upto FROM runtime_workers WHERE pid = ?", (os.getpid(),))
    return int(value or 0)


def latest_flush(store: ConfigStore) -> int:
    return int(sqlite.scalar(store.conn(), "SELECT COALESCE(MAX(id), 0) FROM cache_flush_requests"))


def carry_out_flushes(store: ConfigStore, flushers: Flushers, *, after: int) -> int:
    """Run this process's flushers for every request past `after`, add what they dropped to the
    request and mark this worker done. Returns the last request id carried out."""
    conn = store.conn()
    requests = sqlite.rows(conn, "SELECT * FROM cache_flush_requests WHERE id > ? ORDER BY id", (after,))
    for request in requests:
        dropped = {kind: flushers[kind](request["target_id"]) for kind in request["cache_types"].split(",") if kind in flushers}
        with sqlite.transaction(conn):
            total = json.loads(
                sqlite.scalar(conn, "SELECT dropped_json FROM cache_flush_requests WHERE id = ?", (request["id"],)) or "{}"
            )
            for kind, count in dropped.items():
                total[kind] = total.get(kind, 0) + int(count)
            conn.execute("UPDATE cache_flush_requests SET dropped_json = ? WHERE id = ?", (json.dumps(total), request["id"]))
            conn.execute("UPDATE runtime_workers SET flushed_upto = ? WHERE pid = ?", (request["id"], os.getpid()))
        after = request["id"]
    return after


def wait_flushed(store: ConfigStore, request_id: int, *, timeout_s: float) -> tuple[int, int, dict[str, int]]:
    """Wait until every live worker carried out the request. Returns (workers done, workers
    alive, entries dropped per cache type over all of them)."""
    done, alive = _wait(store, "flushed_upto", request_id, timeout_s)
    raw = sqlite.scalar(store.conn(), "SELECT dropped_json FROM cache_flush_requests WHERE id = ?", (request_id,))
    return done, alive, json.loads(raw or "{}")
