"""Query digests: normalisation, per-worker aggregation merged into stats_mcp_query_digest,
percentiles from the histogram, and `query_digest_stats` over statements run by the tools."""

from __future__ import annotations

import random

import pytest

from backends.digest import DigestRecorder, bucket_of, normalize_text, query_digest_stats
from backends.engines import engine_for
from backends.readonly import check_readonly
from gateway.errors import InvalidArgument
from tests.query import ok
from tests.query.test_sql_tools import make_store, sql_env  # noqa: F401 - the shared module fixture


def digest_text(sql: str, protocol: str = "pgsql") -> str:
    return normalize_text(check_readonly(sql, engine_for(protocol)).sql)


def test_literals_become_placeholders_and_in_lists_collapse() -> None:
    a = digest_text("SELECT * FROM items WHERE id = 1 AND name = 'x' AND id IN (1, 2, 3)")
    b = digest_text("select *  from items where id=22 and name='y' and id in (7)")
    assert a == b == "SELECT * FROM items WHERE id = ? AND name = ? AND id IN (?)"
    assert digest_text("SELECT * FROM other WHERE id = 1") != a
    assert digest_text("SELECT a FROM t1 LIMIT 5", "mysql") == "SELECT a FROM t1 LIMIT ?"
    assert digest_text('SELECT "x\'y" FROM "t 2" WHERE a = -1.5e3') == 'SELECT "x\'y" FROM "t 2" WHERE a = ?'
    assert digest_text("SELECT e'\\x41', 'it''s'") == "SELECT ?, ?"


def test_text_fallback() -> None:
    assert normalize_text("SHOW  search_path") == "SHOW search_path"
    assert normalize_text("SELECT 'a''b', 12.5e3, x1 FROM t WHERE id IN (1, 2,3)") == "SELECT ?, ?, x1 FROM t WHERE id IN (?)"


def test_percentiles_land_in_the_true_bucket(tmp_path: pytest.TempPathFactory) -> None:
    store = make_store(tmp_path / "data")
    recorder = DigestRecorder()
    rng = random.Random(7)
    samples = sorted(int(rng.lognormvariate(7, 1.2)) + 1 for _ in range(5000))  # ~1 ms median, long tail
    for value in samples:
        recorder.record(tool_name="run_sql_readonly", target_id="pg", digest_text="SELECT ?", elapsed_us=value)
    recorder.flush(store)
    [row] = query_digest_stats(store)
    assert row["count_star"] == 5000 and row["min_time_us"] == samples[0] and row["max_time_us"] == samples[-1]
    for p in (50, 90, 95, 99):
        true_value = samples[int(p / 100 * len(samples)) - 1]
        assert bucket_of(row[f"p{p}_us"]) == bucket_of(true_value), (p, row[f"p{p}_us"], true_value)
    assert row["p50_us"] <= row["p90_us"] <= row["p95_us"] <= row["p99_us"] <= row["max_time_us"]
    store.close()


def test_two_workers_merge(tmp_path: pytest.TempPathFactory) -> None:
    store = make_store(tmp_path / "data")
    first, second = DigestRecorder(), DigestRecorder()
    for recorder, times in ((first, [100, 300]), (second, [50, 5000, 70])):
        for elapsed in times:
            recorder.record(tool_name="run_sql_readonly", target_id="pg", digest_text="SELECT ?", elapsed_us=elapsed)
        recorder.record(tool_name="explain_sql", target_id="pg", digest_text="SELECT ?", elapsed_us=10)
    assert first.flush(store) == 2 and second.flush(store) == 2 and first.flush(store) == 0
    rows = {r["tool_name"]: r for r in query_digest_stats(store)}
    run = rows["run_sql_readonly"]
    assert (run["count_star"], run["sum_time_us"], run["min_time_us"], run["max_time_us"]) == (5, 5520, 50, 5000)
    assert rows["explain_sql"]["count_star"] == 2
    assert [r["tool_name"] for r in query_digest_stats(store, sort_by="sum_time")] == ["run_sql_readonly", "explain_sql"]
    assert [r["tool_name"] for r in query_digest_stats(store, min_count=3)] == ["run_sql_readonly"]
    assert len(query_digest_stats(store, limit=1)) == 1
    with pytest.raises(InvalidArgument, match="sort_by"):
        query_digest_stats(store, sort_by="count_star; DROP TABLE x")
    store.close()


def test_tools_record_digests(sql_env: dict) -> None:  # noqa: F811
    handler = sql_env["handler"]
    first = ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT name FROM items WHERE id = 1", stats=True)
    second = ok(handler, "run_sql_readonly", target_id="pg", sql="select name from items where id = 2", stats=True)
    ok(handler, "sample_rows", target_id="maria", table="items", where="id = 3")
    assert first["stats"]["digest"] == second["stats"]["digest"]
    handler.services.sql.flush_stats()
    rows = {(r["tool_name"], r["target_id"]): r for r in query_digest_stats(sql_env["store"])}
    run = rows[("run_sql_readonly", "pg")]
    assert run["digest"] == first["stats"]["digest"] and run["count_star"] == 2
    assert run["digest_text"] == "SELECT name FROM items WHERE id = ? LIMIT ?"
    assert rows[("sample_rows", "maria")]["digest_text"] == "SELECT * FROM `items` WHERE id = ? LIMIT ?"
