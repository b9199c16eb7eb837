"""Which runtime version each worker serves (`runtime_workers`, schema.sql section `admin_state`).

A worker writes its row when it starts and whenever its runtime follower applies a new
version (gateway.app), and deletes it when it stops. `wait_applied` lets an admin change
answer only once every live worker serves it: after `admin.revoke_token` returns, no worker
accepts the revoked token any more. Rows of processes that died without cleaning up are
ignored (their pid is gone) and removed.
"""

from __future__ import annotations

import os
import time

from gateway import sqlite
from gateway.pids import pid_alive
from gateway.store import ConfigStore

POLL_S = 0.05


def applied(store: ConfigStore, version: int) -> None:
    """This worker now serves `version`."""
    store.conn().execute(
        "INSERT INTO runtime_workers (pid, version, applied_at) VALUES (?, ?, ?) "
        "ON CONFLICT(pid) DO UPDATE SET version = excluded.version, applied_at = excluded.applied_at",
        (os.getpid(), version, time.time()),
    )


def leave(store: ConfigStore) -> None:
    store.conn().execute("DELETE FROM runtime_workers WHERE pid = ?", (os.getpid(),))


def forget_all(store: ConfigStore) -> None:
    """At start, before any worker: a pid of the last run may belong to another process now."""
    store.conn().execute("DELETE FROM runtime_workers")


def serving(store: ConfigStore) -> dict[int, int]:
    """pid -> version of every live worker (rows of dead ones are removed)."""
    conn = store.conn()
    rows = {r["pid"]: r["version"] for r in sqlite.rows(conn, "SELECT pid, version FROM runtime_workers")}
    dead = [pid for pid in rows if not pid_alive(pid)]
    for pid in dead:
        conn.execute("DELETE FROM runtime_workers WHERE pid = ?", (pid,))
        del rows[pid]
    return rows


def wait_applied(store: ConfigStore, version: int, *, timeout_s: float) -> tuple[int, int]:
    """Wait until every live worker serves `version` or later, at most `timeout_s`.
    Returns (workers serving it, workers alive)."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = serving(store)
        done = sum(1 for v in rows.values() if v >= version)
        if done == len(rows) or time.monotonic() >= deadline:
            return done, len(rows)
        time.sleep(POLL_S)
