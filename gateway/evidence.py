"""What the gateway saw, kept for anomaly detection and recommendations: no row data, no secrets.

Three kinds of evidence, recorded in memory on the request path (a dict increment or a deque
append, no I/O) and flushed to config.db about once a second with the tool counters, so every
worker's traffic is in one place:
- `evidence_traffic`: calls per endpoint, tool and outcome (`ok` or the error code) per 10-second
  bucket, and how many answers were cut by a cap (`truncated`);
- `evidence_events`: rare events one by one — failed authentications (client address, endpoint)
  and refused statements (token fingerprint, tool, the digest and its normalised text, literals
  already replaced by `?`);
- `evidence_digests`: calls, total and max time per query digest per bucket, and how often its
  result changed (a hash of the rows against the previous call's): stable results are cache candidates.
- `evidence_digest_samples`: the last statement run for each digest (target, schema, the checked
  text), kept only so recommendation.get can EXPLAIN a slow digest; never returned to a caller.
Rows older than the retention are pruned at flush; events and samples are also capped in number.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from gateway import sqlite
from gateway.store import ConfigStore

BUCKET_S = 10
MAX_EVENT_TEXT = 2_000  # characters of a refused statement's normalised text kept
MAX_EVENTS = 100_000
MAX_TRACKED_DIGESTS = 10_000
MAX_SAMPLE_SQL = 16_384
MAX_SAMPLES = 10_000


class EvidenceRecorder:
    def __init__(self, store: ConfigStore, *, retention_s: int = 86_400) -> None:
        self.store = store
        self.retention_s = retention_s
        # One event per call, appended on the event loop (atomic, no lock: ~0.3 us against ~2 us
        # for a locked dict update) and folded into buckets by flush().
        self._calls: deque[tuple[float, str, str, str, bool]] = deque(maxlen=1_000_000)
        self._digests: dict[tuple[int, str], list[int]] = {}
        self._samples: dict[str, tuple[str, str, str, float]] = {}  # digest -> (target_id, schema, sql, ts)
        self._last_result: dict[str, int] = {}  # digest -> hash of its last result (bounded below)
        self._events: deque[tuple[Any, ...]] = deque(maxlen=MAX_EVENTS)
        self._lock = threading.Lock()  # digests come from tool threads
        self._ready = False

    # -- the request path: in memory only ---------------------------------------------------
    def call(self, endpoint: str, tool: str, *, outcome: str = "ok", truncated: bool = False) -> None:
        """`outcome`: "ok", or the stable error code of a failed call."""
        self._calls.append((time.time(), endpoint, tool, outcome, truncated))

    def digest(
        self,
        digest: str,
        elapsed_us: int,
        *,
        result_hash: int | None = None,
        sample: tuple[str, str, str] | None = None,  # (target_id, schema, checked sql)
    ) -> None:
        now = time.time()
        key = (int(now) // BUCKET_S * BUCKET_S, digest)
        with self._lock:
            if sample is not None and len(sample[2]) <= MAX_SAMPLE_SQL:
                self._samples[digest] = (*sample, now)
            changed = 0
            if result_hash is not None:
                previous = self._last_result.get(digest)
                changed = int(previous is not None and previous != result_hash)
                if previous is None and len(self._last_result) >= MAX_TRACKED_DIGESTS:
                    self._last_result.clear()  # crude, but bounded; stability is re-learned
                self._last_result[digest] = result_hash
            row = self._digests.get(key)
            if row is None:
                self._digests[key] = [1, elapsed_us, elapsed_us, changed]
            else:
                row[0] += 1
                row[1] += elapsed_us
                row[2] = max(row[2], elapsed_us)
                row[3] += changed

    def event(
        self,
        kind: str,
        *,
        endpoint: str = "",
        tool: str = "",
        client: str = "",
        token_fp: str = "",
        digest: str = "",
        text: str = "",
    ) -> None:
        self._events.append((time.time(), kind, endpoint, tool, client, token_fp, digest, text[:MAX_EVENT_TEXT]))

    # -- persistence -------------------------------------------------------------------------
    def _ensure_schema(self, conn: Any) -> None:
        if not self._ready:
            for statement in sqlite.iter_statements(sqlite.schema_section("evidence")):
                conn.execute(statement)
            self._ready = True

    def flush(self) -> None:
        calls: dict[tuple[int, str, str, str], list[int]] = {}
        pending = self._calls
        while True:  # popleft, not a swap: appends from the event loop during the fold are kept
            try:
                now, endpoint, tool, outcome, truncated = pending.popleft()
            except IndexError:
                break
            row = calls.setdefault((int(now) // BUCKET_S * BUCKET_S, endpoint, tool, outcome), [0, 0])
            row[0] += 1
            row[1] += truncated
        with self._lock:
            digests, self._digests = self._digests, {}
            samples, self._samples = self._samples, {}
        events = []
        while True:
            try:
                events.append(self._events.popleft())
            except IndexError:
                break
        conn = self.store.conn()
        self._ensure_schema(conn)
        if not (calls or digests or events or samples):
            return
        cutoff = time.time() - self.retention_s
        with sqlite.transaction(conn):
            for (bucket, endpoint, tool, outcome), (n, truncated) in calls.items():
                conn.execute(
                    "INSERT INTO evidence_traffic(bucket, endpoint, tool, outcome, calls, truncated) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(bucket, endpoint, tool, outcome) DO UPDATE SET calls = calls + excluded.calls, "
                    "truncated = truncated + excluded.truncated",
                    (bucket, endpoint, tool, outcome, n, truncated),
                )
            for (bucket, digest), (n, sum_us, max_us, changes) in digests.items():
                conn.execute(
                    "INSERT INTO evidence_digests(bucket, digest, calls, sum_us, max_us, result_changes) VALUES (?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(bucket, digest) DO UPDATE SET calls = calls + excluded.calls, sum_us = sum_us + excluded.sum_us, "
                    "max_us = MAX(max_us, excluded.max_us), result_changes = result_changes + excluded.result_changes",
                    (bucket, digest, n, sum_us, max_us, changes),
                )
            conn.executemany(
                "INSERT INTO evidence_digest_samples(digest, target_id, schema_name, sql_text, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(digest) DO UPDATE SET target_id = excluded.target_id, schema_name = excluded.schema_name, "
                "sql_text = excluded.sql_text, updated_at = excluded.updated_at",
                [(digest, *sample) for digest, sample in samples.items()],
            )
            conn.executemany(
                "INSERT INTO evidence_events(ts, kind, endpoint, tool, client, token_fp, digest, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                events,
            )
            conn.execute("DELETE FROM evidence_traffic WHERE bucket < ?", (cutoff,))
            conn.execute("DELETE FROM evidence_digests WHERE bucket < ?", (cutoff,))
            conn.execute("DELETE FROM evidence_events WHERE ts < ?", (cutoff,))
            conn.execute(
                "DELETE FROM evidence_events WHERE id <= (SELECT MAX(id) FROM evidence_events) - ?",
                (MAX_EVENTS,),
            )
            conn.execute("DELETE FROM evidence_digest_samples WHERE updated_at < ?", (cutoff,))
            conn.execute(
                "DELETE FROM evidence_digest_samples WHERE digest IN "
                "(SELECT digest FROM evidence_digest_samples ORDER BY updated_at DESC LIMIT -1 OFFSET ?)",
                (MAX_SAMPLES,),
            )

    def sample(self, digest: str) -> dict[str, Any] | None:
        """The last statement recorded for `digest` (any worker's), for an EXPLAIN."""
        self.flush()
        found = sqlite.rows(self.store.conn(), "SELECT * FROM evidence_digest_samples WHERE digest = ?", (digest,))
        return found[0] if found else None

    def read(self, *, since: float) -> dict[str, list[dict[str, Any]]]:
        """Everything recorded since `since` (unix seconds), this worker's pending part included."""
        self.flush()
        conn = self.store.conn()
        return {
            "traffic": sqlite.rows(conn, "SELECT * FROM evidence_traffic WHERE bucket >= ? ORDER BY bucket", (since,)),
            "digests": sqlite.rows(conn, "SELECT * FROM evidence_digests WHERE bucket >= ? ORDER BY bucket", (since,)),
            "events": sqlite.rows(conn, "SELECT * FROM evidence_events WHERE ts >= ? ORDER BY id", (since,)),
            "first": sqlite.rows(conn, "SELECT MIN(bucket) AS first FROM evidence_traffic"),
        }
