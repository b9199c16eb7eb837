"""The embedded result-cache store: one SQLite file in the data directory, shared by every
worker of the server (bench/cache_store.py and bench/README.md say why not memory per worker).

A lookup is one indexed read (WAL: never blocked by a writer), so it can run on the event
loop. What a hit changes (its LRU position, its hit count, the target's hit and miss counters)
is kept in memory and written by `maintain()` - every half second from the cache's upkeep
thread, and before any write this process makes - so a hit costs no write. LRU order across
workers is therefore up to half a second behind; within a worker it is exact. Writes (put,
drop, upkeep) are short IMMEDIATE transactions; entry and byte totals are kept by triggers, so
enforcing the limits never scans the table. Durability does not matter for a cache
(synchronous=OFF), and the file is emptied when the server starts. DDL: schema.sql, section
`result_cache`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import apsw

from backends.result_cache.store import (
    COUNTERS,
    EXPIRED,
    LRU_BYTES,
    LRU_ENTRIES,
    ORDERS,
    EntryMeta,
    Evictions,
    Hit,
    Limits,
    Selector,
)
from gateway import sqlite

FILE_NAME = "result_cache.db"
BUSY_TIMEOUT_MS = 5_000
_ORDER_SQL = {"hits": "hits DESC", "age": "created_us", "size": "size DESC", "recent": "used_us DESC"}


def now_us() -> int:
    return time.time_ns() // 1000


class EmbeddedStore:
    kind = "embedded"

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._local = threading.local()
        self._lock = threading.Lock()
        # What hits changed, not yet written: key -> (last use, hits); (target, counter) -> n
        self._touched: dict[str, tuple[int, int]] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._conn()  # creates the file and tables now, not on the first lookup

    @staticmethod
    def reset(data_dir: Path) -> None:
        """Empty the store (server start: entries from before a restart are not trusted)."""
        for suffix in ("", "-wal", "-shm"):
            (Path(data_dir) / (FILE_NAME + suffix)).unlink(missing_ok=True)

    def _conn(self) -> apsw.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = apsw.Connection(str(self.path))
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")  # a cache: losing the last writes in a crash is fine
            with _write(conn):
                conn.execute(sqlite.schema_section("result_cache"))
            self._local.conn = conn
        return conn

    # -- the request path --------------------------------------------------------------------
    def get(self, key: str, target_id: str, max_age_ms: int) -> Hit | None:
        now = now_us()
        row = next(
            iter(self._conn().execute("SELECT payload, created_us, expires_us FROM cache_entries WHERE key = ?", (key,))), None
        )
        with self._lock:
            if row is None or now >= row[2] or now - row[1] >= max_age_ms * 1000:
                self._counts[(target_id, "misses")] = self._counts.get((target_id, "misses"), 0) + 1
                return None  # an expired row is removed (and counted) by the next upkeep or put
            hits = self._touched.get(key, (0, 0))[1]
            self._touched[key] = (now, hits + 1)
            self._counts[(target_id, "hits")] = self._counts.get((target_id, "hits"), 0) + 1
        return Hit(payload=row[0], age_ms=(now - row[1]) // 1000)

    def put(self, meta: EntryMeta, payload: bytes, ttl_ms: int, limits: Limits) -> Evictions:
        conn = self._conn()
        now = now_us()
        evicted: Evictions = {}
        with _write(conn):
            self._write_pending(conn)
            self._drop_expired(conn, now, evicted)
            conn.execute(
                "INSERT OR REPLACE INTO cache_entries (key, target_id, schema_name, digest, digest_text, tables, payload,"
                " size, created_us, expires_us, used_us) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (meta.key, meta.target_id, meta.schema, meta.digest, meta.digest_text, meta.tables_field(), payload,
                 len(payload), now, now + ttl_ms * 1000, now),
            )  # fmt: skip
            entries, size = conn.execute("SELECT entries, bytes FROM cache_totals").fetchall()[0]
            while entries > limits.max_entries or size > limits.max_bytes:
                # Oldest first, never the entry just written (it is the most recent, and fits).
                victims = conn.execute(
                    "SELECT key, target_id, size FROM cache_entries WHERE key != ? ORDER BY used_us, rowid LIMIT 32",
                    (meta.key,),
                ).fetchall()
                if not victims:
                    break
                for key, target_id, victim_size in victims:
                    if entries <= limits.max_entries and size <= limits.max_bytes:
                        break
                    _add(evicted, target_id, LRU_ENTRIES if entries > limits.max_entries else LRU_BYTES)
                    conn.execute("DELETE FROM cache_entries WHERE key = ?", (key,))
                    entries, size = entries - 1, size - victim_size
            self._write_counts(conn, evicted)
        return evicted

    # -- everything else ---------------------------------------------------------------------
    def drop(self, selector: Selector, reason: str) -> Evictions:
        conn = self._conn()
        evicted: Evictions = {}
        with _write(conn):
            self._write_pending(conn)
            where, params = "1", []
            if selector.target_id is not None:
                where, params = "target_id = ?", [selector.target_id]
            if selector.table is not None:
                where += " AND instr(tables, ?) > 0"
                params.append(f",{selector.table},")
            rows = conn.execute(f"SELECT key, target_id, tables, digest, digest_text FROM cache_entries WHERE {where}", params)
            doomed = [
                (key, target) for key, target, tables, digest, text in rows if selector.matches(target, tables, digest, text)
            ]
            for key, target_id in doomed:
                conn.execute("DELETE FROM cache_entries WHERE key = ?", (key,))
                _add(evicted, target_id, reason)
            self._write_counts(conn, evicted)
        return evicted

    def entries(self, target_id: str | None, limit: int, order_by: str) -> list[dict[str, Any]]:
        if order_by not in ORDERS:
            raise ValueError(order_by)
        self.maintain()  # this worker's pending hits, so hit counts and LRU order are current
        now = now_us()
        where, params = ("WHERE target_id = ?", [target_id]) if target_id is not None else ("", [])
        rows = self._conn().execute(
            "SELECT target_id, schema_name, digest, digest_text, tables, size, created_us, expires_us, used_us, hits"
            f" FROM cache_entries {where} ORDER BY {_ORDER_SQL[order_by]}, rowid LIMIT ?",
            [*params, limit],
        )
        return [
            {
                "target_id": target,
                "schema": schema,
                "digest": digest,
                "digest_text": text,
                "tables": [t for t in tables.split(",") if t],
                "size": size,
                "age_ms": (now - created) // 1000,
                "ttl_left_ms": max(0, (expires - now) // 1000),
                "idle_ms": (now - used) // 1000,
                "hits": hits,
            }
            for target, schema, digest, text, tables, size, created, expires, used, hits in rows
        ]

    def stats(self) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
        self.maintain()
        conn = self._conn()
        per_target: dict[str, dict[str, int]] = {}
        for target_id, counter, value in conn.execute("SELECT target_id, counter, value FROM cache_counters"):
            per_target.setdefault(target_id, _zero())[counter] = value
        for target_id, entries, size in conn.execute(
            "SELECT target_id, count(*), sum(size) FROM cache_entries GROUP BY target_id"
        ):  # fmt: skip
            row = per_target.setdefault(target_id, _zero())
            row["entries"], row["bytes"] = entries, size
        entries, size = conn.execute("SELECT entries, bytes FROM cache_totals").fetchall()[0]
        return per_target, {"entries": entries, "bytes": size}

    def totals(self) -> dict[str, int]:
        entries, size = self._conn().execute("SELECT entries, bytes FROM cache_totals").fetchall()[0]
        return {"entries": entries, "bytes": size}

    def maintain(self) -> Evictions:
        evicted: Evictions = {}
        if not self._touched and not self._counts and not self._any_expired():
            return evicted
        conn = self._conn()
        with _write(conn):
            self._write_pending(conn)
            self._drop_expired(conn, now_us(), evicted)
            self._write_counts(conn, evicted)
        return evicted

    def close(self) -> None:
        try:
            self.maintain()
        finally:
            conn = getattr(self._local, "conn", None)
            if conn is not None:
                conn.close()
                self._local.conn = None

    # -- inside a write transaction ----------------------------------------------------------
    def _any_expired(self) -> bool:
        return bool(self._conn().execute("SELECT 1 FROM cache_entries WHERE expires_us <= ? LIMIT 1", (now_us(),)).fetchall())

    def _write_pending(self, conn: apsw.Connection) -> None:
        with self._lock:
            touched, self._touched = self._touched, {}
            counts, self._counts = self._counts, {}
        if touched:
            conn.executemany(
                "UPDATE cache_entries SET used_us = max(used_us, ?), hits = hits + ? WHERE key = ?",
                [(used, hits, key) for key, (used, hits) in touched.items()],
            )
        _increment(conn, counts.items())

    @staticmethod
    def _drop_expired(conn: apsw.Connection, now: int, evicted: Evictions) -> None:
        for target_id, count in conn.execute(
            "SELECT target_id, count(*) FROM cache_entries WHERE expires_us <= ? GROUP BY target_id", (now,)
        ).fetchall():  # fmt: skip
            evicted[(target_id, EXPIRED)] = evicted.get((target_id, EXPIRED), 0) + count
        conn.execute("DELETE FROM cache_entries WHERE expires_us <= ?", (now,))

    @staticmethod
    def _write_counts(conn: apsw.Connection, evicted: Evictions) -> None:
        _increment(conn, evicted.items())


class _write:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error): one writer at a time across processes."""

    def __init__(self, conn: apsw.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> apsw.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _add(evicted: Evictions, target_id: str, reason: str) -> None:
    evicted[(target_id, reason)] = evicted.get((target_id, reason), 0) + 1


def _increment(conn: apsw.Connection, counts: Iterable[tuple[tuple[str, str], int]]) -> None:
    conn.executemany(
        "INSERT INTO cache_counters (target_id, counter, value) VALUES (?, ?, ?)"
        " ON CONFLICT (target_id, counter) DO UPDATE SET value = value + excluded.value",
        [(target_id, counter, n) for (target_id, counter), n in counts if n],
    )


def _zero() -> dict[str, int]:
    return {"entries": 0, "bytes": 0, **dict.fromkeys(COUNTERS, 0)}
