"""Prometheus gauges of the RAG index and its syncs, read from the index when /metrics is scraped.

The index is shared by every worker (rag.db, and `mcp-gateway rag sync`) or by every instance
of a cluster (PostgreSQL, rag-backend = postgresql), so these numbers are the same whichever
process answers the scrape: they are read from the index at collection time, not kept per
process, through the same `?` statements on both backends. Names (all labelled by `source`,
the source's name, except the size):

    mcp_rag_documents, mcp_rag_chunks                     what the index holds
    mcp_rag_index_bytes                                   rag.db with its WAL; on PostgreSQL the
                                                          index's tables, their indexes and TOAST
    mcp_rag_sync_last_success_timestamp_seconds           end of the last successful sync (0: never)
    mcp_rag_sync_last_run_timestamp_seconds               end of the last sync, failed or not
    mcp_rag_sync_failing                                  1 when the last sync ended in an error
    mcp_rag_sync_interval_seconds                         sync_interval_s of the source (0: on demand)
    mcp_rag_sync_running, mcp_rag_sync_rows_read,
    mcp_rag_sync_rows_expected                            a sync in progress (rows of this run)

A collection costs two grouped counts over indexed columns (about 30 ms at 1M chunks on rag.db)
and a few small reads, through the storage's read-only handle (backends/retrieval/storage
`index_figures`). rag.db is read at every scrape, as a file every process opens read-only.
PostgreSQL is a server the whole cluster shares: each process reads it at most once every
SHARED_REFRESH_S on a short-lived connection, each statement bounded (storage/postgresql/state.py),
and serves the figures it read in between; while it is unreachable the RAG gauges are left out
(and it is not retried for SHARED_REFRESH_S) rather than holding the scrape.
"""

from __future__ import annotations

import calendar
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from backends.retrieval import storage
from backends.retrieval.job_liveness import live_job_ids, this_member
from gateway.runtime import Runtime

log = logging.getLogger("mcp_gateway.rag.metrics")

SHARED_REFRESH_S = 5.0  # an index the cluster shares (PostgreSQL) is read at most this often per process


def _epoch(text: str | None) -> float:
    if not text:
        return 0.0
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


class StateReader(Protocol):
    """What the collector reads the index through: rag.db's or PostgreSQL's."""

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]: ...
    def size_bytes(self) -> int: ...
    def held_sync_jobs(self) -> set[str] | None: ...


@dataclass
class IndexFigures:
    """What the gauges show, read in one go."""

    names: dict[int, str] = field(default_factory=dict)  # source_id -> name
    docs: dict[int, int] = field(default_factory=dict)
    chunks: dict[int, int] = field(default_factory=dict)
    size_bytes: int = 0
    states: dict[int, tuple[str | None, str | None, str | None]] = field(default_factory=dict)  # last_ok, last_run, error
    running: list[dict[str, Any]] = field(default_factory=list)  # progress entries of live jobs


def read_figures(db: StateReader, member: str) -> IndexFigures:
    """The figures from either backend: the same statements, `?` placeholders."""
    pairs = lambda sql: {int(r["source_id"]): r["n"] for r in db.query(sql)}  # noqa: E731
    figures = IndexFigures(
        names={int(r["source_id"]): r["name"] for r in db.query("SELECT source_id, name FROM rag_sources")},
        docs=pairs("SELECT source_id, count(*) AS n FROM rag_documents GROUP BY source_id"),
        chunks=pairs("SELECT source_id, count(*) AS n FROM rag_chunks GROUP BY source_id"),
        size_bytes=db.size_bytes(),
    )
    for r in db.query("SELECT source_id, last_ok_at, last_run_at, last_error FROM rag_sync_state"):
        figures.states[int(r["source_id"])] = (r["last_ok_at"], r["last_run_at"], r["last_error"])
    jobs = db.query("SELECT * FROM rag_sync_jobs WHERE state IN ('queued', 'running')")  # * : member_id may be new
    live = live_job_ids(jobs, db, member)
    for job in jobs:
        if job["job_id"] not in live:
            continue  # interrupted: its process or instance died
        figures.running += [e for e in _progress(job["progress_json"]) if e.get("phase") not in ("done", "failed", "queued")]
    return figures


class RagIndexCollector(Collector):
    def __init__(self, data_dir: Path, runtime: Callable[[], Runtime]) -> None:
        self.data_dir = Path(data_dir)
        self.runtime = runtime
        self._lock = threading.Lock()
        self._shared_key: str | None = None  # the DSN the cached figures are of
        self._shared_figures: IndexFigures | None = None
        self._shared_read_at = -SHARED_REFRESH_S

    def collect(self) -> Iterator[GaugeMetricFamily]:
        runtime = self.runtime()
        member = this_member(runtime.variables)
        read = self._shared if storage.shares_index(runtime) else self._read
        figures = read(runtime, member)
        if figures is not None:
            intervals = {int(r["source_id"]): int(r["sync_interval_s"]) for r in runtime.table("runtime_rag_sources")}
            yield from families(figures, intervals)

    def _read(self, runtime: Runtime, member: str) -> IndexFigures | None:
        return storage.index_figures(runtime, self.data_dir, lambda db: read_figures(db, member))

    def _shared(self, runtime: Runtime, member: str) -> IndexFigures | None:
        with self._lock:  # one reader per process; concurrent scrapes share what it read
            key = runtime.var("rag-postgres_dsn")
            if key != self._shared_key:
                self._shared_key, self._shared_figures, self._shared_read_at = key, None, -SHARED_REFRESH_S
            if time.monotonic() - self._shared_read_at < SHARED_REFRESH_S:
                return self._shared_figures
            self._shared_read_at = time.monotonic()  # a failure is not retried before SHARED_REFRESH_S either
            self._shared_figures = self._read(runtime, member)
            return self._shared_figures


def families(figures: IndexFigures, intervals: dict[int, int]) -> Iterator[GaugeMetricFamily]:
    docs = GaugeMetricFamily("mcp_rag_documents", "Documents in the RAG index, by source.", labels=["source"])
    chunks = GaugeMetricFamily("mcp_rag_chunks", "Chunks in the RAG index, by source.", labels=["source"])
    for source_id, name in figures.names.items():
        docs.add_metric([name], figures.docs.get(source_id, 0))
        chunks.add_metric([name], figures.chunks.get(source_id, 0))
    yield docs
    yield chunks

    size = GaugeMetricFamily("mcp_rag_index_bytes", "Size of the RAG index: rag.db with its WAL, or its PostgreSQL relations.")
    size.add_metric([], figures.size_bytes)
    yield size

    success = GaugeMetricFamily(
        "mcp_rag_sync_last_success_timestamp_seconds", "End of the last successful sync (0: never).", labels=["source"]
    )
    last_run = GaugeMetricFamily("mcp_rag_sync_last_run_timestamp_seconds", "End of the last sync.", labels=["source"])
    failing = GaugeMetricFamily("mcp_rag_sync_failing", "1 when the last sync of the source failed.", labels=["source"])
    interval = GaugeMetricFamily(
        "mcp_rag_sync_interval_seconds", "The source's sync_interval_s (0: synced on demand).", labels=["source"]
    )
    for source_id, name in figures.names.items():
        last_ok, ran, error = figures.states.get(source_id, (None, None, None))
        success.add_metric([name], _epoch(last_ok))
        last_run.add_metric([name], _epoch(ran))
        failing.add_metric([name], 1.0 if error else 0.0)
        interval.add_metric([name], intervals.get(source_id, 0))
    yield from (success, last_run, failing, interval)

    running = GaugeMetricFamily("mcp_rag_sync_running", "1 while a sync of the source runs.", labels=["source"])
    rows_read = GaugeMetricFamily("mcp_rag_sync_rows_read", "Rows the running sync has read.", labels=["source"])
    rows_total = GaugeMetricFamily(
        "mcp_rag_sync_rows_expected", "Rows the running sync expects (past its cursor at the start).", labels=["source"]
    )
    for entry in figures.running:
        running.add_metric([entry["source"]], 1.0)
        rows_read.add_metric([entry["source"]], float(entry.get("rows_read") or 0))
        rows_total.add_metric([entry["source"]], float(entry.get("rows_total") or 0))
    yield from (running, rows_read, rows_total)


def _progress(progress_json: str) -> list[dict[str, Any]]:
    try:
        value = json.loads(progress_json or "[]")
    except ValueError:
        return []
    entries = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("source"), str)]
