"""Query digests: every statement the query endpoint runs, normalised and counted.

A digest is the statement as sqlglot regenerated it for the read-only check (canonical case,
spacing and quoting; comments gone) with its literals replaced by `?` and IN lists collapsed
to one `?`, so `WHERE id = 1` and `where id=2` share one digest. Replacing literals in the
canonical text by pattern costs microseconds; doing it on a copy of the tree and generating
again cost ~5x more per call, for the same result on canonical SQL.
Each worker aggregates in memory and merges its deltas into `stats_mcp_query_digest` in
config.db at most once a second (one short write transaction instead of a write per call).
Latencies go into a fixed log-spaced histogram (JSON {bucket_upper_us: count}) so the
percentiles of show_queries survive aggregation across workers.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from gateway import sqlite
from gateway.errors import InvalidArgument

# Bucket upper bounds in microseconds: 1-2-5 steps from 50 us to 10 min, then +inf (-1).
BUCKETS_US: tuple[int, ...] = tuple(m * 10**e for e in range(1, 9) for m in (1, 2, 5) if 50 <= m * 10**e <= 600_000_000)
FLUSH_INTERVAL_S = 1.0
SORT_COLUMNS = {
    "count": "count_star",
    "sum_time": "sum_time",
    "avg_time": "sum_time * 1.0 / count_star",
    "max_time": "max_time",
    "last_seen": "last_seen",
}
# Quoted identifiers are kept whole; strings and numbers outside them become ?.
_LITERAL = re.compile(
    r'(?P<ident>"(?:[^"]|"")*"|`(?:[^`]|``)*`)'
    r"|(?<!\w)[eEnNxXbB]?'(?:[^'\\]|\\.|'')*'"
    r"|(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b"
)
_IN_LIST = re.compile(r"\(\s*\?(?:\s*,\s*\?)*\s*\)")
_SPACE = re.compile(r"\s+")


@functools.lru_cache(maxsize=1024)  # a repeated statement (a result-cache hit) costs a lookup, not three regexes
def normalize_text(sql: str) -> str:
    text = _LITERAL.sub(lambda m: m.group("ident") or "?", sql)
    return _SPACE.sub(" ", _IN_LIST.sub("(?)", text)).strip()


@functools.lru_cache(maxsize=1024)
def digest_of(digest_text: str) -> str:
    return "0x" + hashlib.blake2b(digest_text.encode(), digest_size=8).hexdigest().upper()


def bucket_of(elapsed_us: int) -> int:
    index = bisect_left(BUCKETS_US, elapsed_us)
    return BUCKETS_US[index] if index < len(BUCKETS_US) else -1


@dataclass
class _Agg:
    digest_text: str
    count: int = 0
    first_seen: float = 0.0
    last_seen: float = 0.0
    sum_us: int = 0
    min_us: int = 0
    max_us: int = 0
    histogram: dict[int, int] = field(default_factory=dict)

    def add(self, elapsed_us: int, now: float) -> None:
        if self.count == 0:
            self.first_seen, self.min_us = now, elapsed_us
        self.count += 1
        self.last_seen = now
        self.sum_us += elapsed_us
        self.min_us = min(self.min_us, elapsed_us)
        self.max_us = max(self.max_us, elapsed_us)
        bucket = bucket_of(elapsed_us)
        self.histogram[bucket] = self.histogram.get(bucket, 0) + 1


class DigestRecorder:
    """Per-worker aggregation with a periodic merge into config.db."""

    def __init__(self, *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.flush_interval_s = flush_interval_s
        self._pending: dict[tuple[str, str, str], _Agg] = {}
        self._callers: dict[tuple[str, str, str, str], list[float]] = {}  # (tool, target, digest, subject) -> [count, last]
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def record(self, *, tool_name: str, target_id: str, digest_text: str, elapsed_us: int, subject: str = "") -> str:
        """Count one run of a digest; `subject`: the OAuth caller who ran it (who ran what is kept
        in stats_mcp_query_digest_callers, beside the digest's own figures)."""
        digest = digest_of(digest_text)
        now = time.time()
        with self._lock:
            agg = self._pending.get((tool_name, target_id, digest))
            if agg is None:
                agg = self._pending[(tool_name, target_id, digest)] = _Agg(digest_text)
            agg.add(int(elapsed_us), now)
            if subject:
                seen = self._callers.setdefault((tool_name, target_id, digest, subject), [0, now])
                seen[0] += 1
                seen[1] = now
        return digest

    def due(self) -> bool:
        return time.monotonic() - self._last_flush >= self.flush_interval_s

    def flush(self, store: Any) -> int:
        """Merge pending deltas into stats_mcp_query_digest; returns the number of digests written."""
        with self._lock:
            pending, self._pending = self._pending, {}
            callers, self._callers = self._callers, {}
            self._last_flush = time.monotonic()
        if not pending:
            return 0
        conn = store.conn()
        with sqlite.transaction(conn):
            for (tool_name, target_id, digest, subject), (count, last_seen) in callers.items():
                conn.execute(
                    "INSERT INTO stats_mcp_query_digest_callers (tool_name, target_id, digest, subject, count_star, last_seen)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tool_name, target_id, digest, subject) DO UPDATE SET"
                    " count_star = count_star + excluded.count_star, last_seen = max(last_seen, excluded.last_seen)",
                    (tool_name, target_id, digest, subject[:256], int(count), last_seen),
                )
            for (tool_name, target_id, digest), agg in pending.items():
                old = sqlite.rows(
                    conn,
                    "SELECT histogram FROM stats_mcp_query_digest WHERE tool_name = ? AND target_id = ? AND digest = ?",
                    (tool_name, target_id, digest),
                )
                histogram = {int(k): v for k, v in json.loads(old[0]["histogram"]).items()} if old else {}
                for bucket, count in agg.histogram.items():
                    histogram[bucket] = histogram.get(bucket, 0) + count
                conn.execute(
                    "INSERT INTO stats_mcp_query_digest (tool_name, target_id, digest, digest_text, count_star, first_seen,"
                    " last_seen, sum_time, min_time, max_time, histogram) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (tool_name, target_id, digest) DO UPDATE SET count_star = count_star + excluded.count_star,"
                    " last_seen = max(last_seen, excluded.last_seen), sum_time = sum_time + excluded.sum_time,"
                    " min_time = min(min_time, excluded.min_time), max_time = max(max_time, excluded.max_time),"
                    " histogram = excluded.histogram",
                    (tool_name, target_id, digest, agg.digest_text, agg.count, agg.first_seen, agg.last_seen, agg.sum_us, agg.min_us, agg.max_us,
                     json.dumps({str(k): v for k, v in sorted(histogram.items())})),
                )  # fmt: skip
        return len(pending)


def percentile_us(histogram: dict[int, int], fraction: float, *, min_us: int, max_us: int) -> int:
    """Estimate a percentile by linear interpolation inside the bucket that holds it."""
    total = sum(histogram.values())
    if total == 0:
        return 0
    rank = fraction * total
    seen = 0
    lower = 0
    for bucket in sorted(histogram, key=lambda b: b if b >= 0 else float("inf")):
        count = histogram[bucket]
        upper = max_us if bucket < 0 else bucket
        if seen + count >= rank:
            estimate = lower + (upper - lower) * (rank - seen) / count
            return int(min(max(estimate, min_us), max_us))
        seen += count
        lower = upper
    return max_us


def query_digest_stats(
    store: Any, *, sort_by: str = "count", limit: int = 100, min_count: int = 1, reset: bool = False
) -> list[dict[str, Any]]:
    """Rows of stats_mcp_query_digest with averages and p50/p90/p95/p99 (all times in microseconds).
    reset=True zeroes the table in the same transaction as the read (every digest, as ProxySQL's
    stats_mcp_query_digest_reset does; rows past `limit` are dropped unread)."""
    order = SORT_COLUMNS.get(sort_by)
    if order is None:
        raise InvalidArgument(f"sort_by must be one of {', '.join(SORT_COLUMNS)}, got {sort_by!r}")
    conn = store.conn()
    select = f"SELECT * FROM stats_mcp_query_digest WHERE count_star >= ? ORDER BY {order} DESC, digest LIMIT ?"
    if reset:
        with sqlite.transaction(conn):
            rows = sqlite.rows(conn, select, (int(min_count), int(limit)))
            conn.execute("DELETE FROM stats_mcp_query_digest")
            conn.execute("DELETE FROM stats_mcp_query_digest_callers")  # their callers with them
    else:
        rows = sqlite.rows(conn, select, (int(min_count), int(limit)))
    result = []
    for row in rows:
        histogram = {int(k): v for k, v in json.loads(row.pop("histogram") or "{}").items()}
        bounds = {"min_us": row["min_time"], "max_us": row["max_time"]}
        result.append(
            {
                "tool_name": row["tool_name"],
                "target_id": row["target_id"],
                "digest": row["digest"],
                "digest_text": row["digest_text"],
                "count_star": row["count_star"],
                "first_seen": row["first_seen"],
                "last_seen": row["last_seen"],
                "sum_time_us": row["sum_time"],
                "min_time_us": row["min_time"],
                "max_time_us": row["max_time"],
                "avg_time_us": row["sum_time"] // max(1, row["count_star"]),
                **{f"p{p}_us": percentile_us(histogram, p / 100, **bounds) for p in (50, 90, 95, 99)},
            }
        )
    return result
