"""Prometheus gauges of the RAG index and its syncs, read from rag.db when /metrics is scraped.

rag.db is shared by every worker (and by `mcp-gateway rag sync`), so these numbers are the same
whichever worker answers the scrape: they are computed at collection time from the database,
not kept per process. Names (all labelled by `source`, the source's name, except the size):

    mcp_rag_documents, mcp_rag_chunks                     what the index holds
    mcp_rag_index_bytes                                   rag.db with its WAL
    mcp_rag_sync_last_success_timestamp_seconds           end of the last successful sync (0: never)
    mcp_rag_sync_last_run_timestamp_seconds               end of the last sync, failed or not
    mcp_rag_sync_failing                                  1 when the last sync ended in an error
    mcp_rag_sync_interval_seconds                         sync_interval_s of the source (0: on demand)
    mcp_rag_sync_running, mcp_rag_sync_rows_read,
    mcp_rag_sync_rows_expected                            a sync in progress (rows of this run)

A collection costs two grouped counts over indexed columns (about 30 ms at 1M chunks) and a
few small reads.
"""

from __future__ import annotations

import calendar
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway import sqlite
from gateway.pids import pid_alive
from gateway.runtime import Runtime

log = logging.getLogger("mcp_gateway.rag.metrics")


def _epoch(text: str | None) -> float:
    if not text:
        return 0.0
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


class RagIndexCollector(Collector):
    def __init__(self, index_path: Path, runtime: Callable[[], Runtime]) -> None:
        self.index_path = Path(index_path)
        self.runtime = runtime

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            conn = apsw.Connection(str(self.index_path), flags=apsw.SQLITE_OPEN_READONLY)
        except apsw.Error:
            return  # no index yet: nothing to report
        try:
            conn.set_busy_timeout(sqlite.BUSY_TIMEOUT_MS)
            yield from self._families(conn)
        except apsw.Error:
            log.warning("reading rag.db for /metrics failed", exc_info=True)
        finally:
            conn.close()

    def _families(self, conn: apsw.Connection) -> Iterator[GaugeMetricFamily]:
        names = dict(conn.execute("SELECT source_id, name FROM rag_sources").fetchall())
        docs = GaugeMetricFamily("mcp_rag_documents", "Documents in the RAG index, by source.", labels=["source"])
        chunks = GaugeMetricFamily("mcp_rag_chunks", "Chunks in the RAG index, by source.", labels=["source"])
        doc_counts = dict(conn.execute("SELECT source_id, count(*) FROM rag_documents GROUP BY source_id").fetchall())
        chunk_counts = dict(conn.execute("SELECT source_id, count(*) FROM rag_chunks GROUP BY source_id").fetchall())
        for source_id, name in names.items():
            docs.add_metric([name], doc_counts.get(source_id, 0))
            chunks.add_metric([name], chunk_counts.get(source_id, 0))
        yield docs
        yield chunks

        size = GaugeMetricFamily("mcp_rag_index_bytes", "Size of rag.db and its write-ahead log on disk.")
        size.add_metric([], sum(p.stat().st_size for p in (self.index_path, Path(f"{self.index_path}-wal")) if p.exists()))
        yield size

        yield from self._sync_state(conn, names)
        yield from self._running(conn)

    def _sync_state(self, conn: apsw.Connection, names: dict[int, str]) -> Iterator[GaugeMetricFamily]:
        success = GaugeMetricFamily(
            "mcp_rag_sync_last_success_timestamp_seconds", "End of the last successful sync (0: never).", labels=["source"]
        )
        last_run = GaugeMetricFamily("mcp_rag_sync_last_run_timestamp_seconds", "End of the last sync.", labels=["source"])
        failing = GaugeMetricFamily("mcp_rag_sync_failing", "1 when the last sync of the source failed.", labels=["source"])
        interval = GaugeMetricFamily(
            "mcp_rag_sync_interval_seconds", "The source's sync_interval_s (0: synced on demand).", labels=["source"]
        )
        states = {
            row[0]: row[1:]
            for row in conn.execute("SELECT source_id, last_ok_at, last_run_at, last_error FROM rag_sync_state").fetchall()
        }
        intervals = {int(row["source_id"]): int(row["sync_interval_s"]) for row in self.runtime().table("runtime_rag_sources")}
        for source_id, name in names.items():
            last_ok, ran, error = states.get(source_id, (None, None, None))
            success.add_metric([name], _epoch(last_ok))
            last_run.add_metric([name], _epoch(ran))
            failing.add_metric([name], 1.0 if error else 0.0)
            interval.add_metric([name], intervals.get(source_id, 0))
        yield from (success, last_run, failing, interval)

    def _running(self, conn: apsw.Connection) -> Iterator[GaugeMetricFamily]:
        running = GaugeMetricFamily("mcp_rag_sync_running", "1 while a sync of the source runs.", labels=["source"])
        rows_read = GaugeMetricFamily("mcp_rag_sync_rows_read", "Rows the running sync has read.", labels=["source"])
        rows_total = GaugeMetricFamily(
            "mcp_rag_sync_rows_expected", "Rows the running sync expects (past its cursor at the start).", labels=["source"]
        )
        jobs = conn.execute("SELECT pid, progress_json FROM rag_sync_jobs WHERE state = 'running'").fetchall()
        for pid, progress_json in jobs:
            if not pid_alive(int(pid or 0)):
                continue  # interrupted: its process died
            for entry in _progress(progress_json):
                if entry.get("phase") in ("done", "failed", "queued"):
                    continue
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
