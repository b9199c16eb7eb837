"""The evidence recorder on a real config store: buckets add up across flushes, retention prunes."""

from __future__ import annotations

import time

import pytest

from gateway import sqlite
from gateway.evidence import BUCKET_S, EvidenceRecorder
from gateway.startup import open_store


@pytest.fixture
def store(tmp_path):
    s = open_store(tmp_path / "data")
    s.initialize()
    return s


def test_calls_digests_and_events_are_flushed_and_merged(store) -> None:
    rec = EvidenceRecorder(store)
    for i in range(5):
        rec.call("query", "run_sql_readonly", outcome="ok" if i else "INVALID_ARGUMENT", truncated=i == 1)
    rec.digest("0xAA", 1000, result_hash=1, sample=("t1", "shop", "SELECT * FROM orders WHERE id = 7"))
    rec.event(
        "sql_refused", endpoint="query", tool="run_sql_readonly", token_fp="fp", digest="0xBB", text="SELECT ? UNION SELECT ?"
    )
    rec.flush()
    other_worker = EvidenceRecorder(store)
    other_worker.call("query", "run_sql_readonly")
    other_worker.digest("0xAA", 3000, result_hash=1)
    other_worker.digest("0xAA", 3000, result_hash=2)  # its own previous result was 1: a change
    seen = other_worker.read(since=time.time() - 60)
    assert sum(r["calls"] for r in seen["traffic"]) == 6 and sum(r["truncated"] for r in seen["traffic"]) == 1
    assert sum(r["calls"] for r in seen["traffic"] if r["outcome"] == "INVALID_ARGUMENT") == 1
    assert all(r["bucket"] % BUCKET_S == 0 for r in seen["traffic"])
    assert sum(r["calls"] for r in seen["digests"]) == 3 and sum(r["sum_us"] for r in seen["digests"]) == 7000
    assert sum(r["result_changes"] for r in seen["digests"]) == 1
    assert [(e["kind"], e["token_fp"], e["digest"]) for e in seen["events"]] == [("sql_refused", "fp", "0xBB")]


def test_retention_prunes_old_rows(store) -> None:
    rec = EvidenceRecorder(store, retention_s=3600)
    rec.call("rag", "rag.search_fts")
    rec.flush()
    conn = store.conn()
    conn.execute(
        "INSERT INTO evidence_traffic(bucket, endpoint, tool, outcome, calls) VALUES (?, 'rag', 'old', 'ok', 1)",
        (int(time.time()) - 7200,),
    )
    rec.call("rag", "rag.search_fts")
    rec.flush()
    assert sqlite.scalar(conn, "SELECT COUNT(*) FROM evidence_traffic WHERE tool = 'old'") == 0
    assert sqlite.scalar(conn, "SELECT SUM(calls) FROM evidence_traffic") == 2


def test_digest_sample_is_the_latest_statement(store) -> None:
    rec = EvidenceRecorder(store)
    rec.digest("0xCC", 10, sample=("t1", "shop", "SELECT 1 FROM t WHERE a = 1"))
    rec.flush()
    rec.digest("0xCC", 10, sample=("t1", "shop", "SELECT 1 FROM t WHERE a = 2"))
    assert rec.sample("0xCC")["sql_text"] == "SELECT 1 FROM t WHERE a = 2"
    assert rec.sample("0xDD") is None
