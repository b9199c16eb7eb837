"""Recommendation rules on constructed figures: advice only where the figures support it."""

from __future__ import annotations

from handlers.ai.recommend.advice import cache_candidates, missing_index, privilege_warnings, tool_outcomes


def test_error_and_truncation_ratios_need_enough_calls() -> None:
    rows = [
        {"endpoint": "query", "tool": "run_sql_readonly", "outcome": "ok", "calls": 60, "truncated": 30},
        {"endpoint": "query", "tool": "run_sql_readonly", "outcome": "DEADLINE_EXCEEDED", "calls": 30},
        {"endpoint": "query", "tool": "run_sql_readonly", "outcome": "INVALID_ARGUMENT", "calls": 10},
        {"endpoint": "rag", "tool": "rag.search_fts", "outcome": "UNAVAILABLE", "calls": 5},  # too few calls to judge
        {"endpoint": "config", "tool": "get_config", "outcome": "ok", "calls": 500},
    ]
    found = tool_outcomes(rows)
    assert [(r.kind, r.evidence["tool"]) for r in found] == [
        ("tool_errors", "run_sql_readonly"),
        ("caps_hit", "run_sql_readonly"),
    ]
    assert found[0].evidence["top_error_codes"] == {"DEADLINE_EXCEEDED": 30, "INVALID_ARGUMENT": 10}
    assert "timeout_ms" in found[0].action and "max_rows" in found[1].action


def test_cache_candidates_are_frequent_stable_and_not_trivial() -> None:
    digests = [
        {
            "digest": "0x1",
            "digest_text": "SELECT a FROM t WHERE b = ?",
            "count_star": 80,
            "sum_time": 80 * 4000,
            "target_id": "t1",
        },
        {"digest": "0x2", "digest_text": "SELECT now()", "count_star": 80, "sum_time": 80 * 4000, "target_id": "t1"},
        {"digest": "0x3", "digest_text": "SELECT 1", "count_star": 900, "sum_time": 900 * 50, "target_id": "t1"},
        {"digest": "0x4", "digest_text": "SELECT x FROM y", "count_star": 10, "sum_time": 10 * 9000, "target_id": "t1"},
    ]
    found = cache_candidates(digests, {"0x1": 0, "0x2": 12, "0x3": 0, "0x4": 0})
    assert [r.evidence["digest"] for r in found] == ["0x1"]
    assert "cache_ttl" in found[0].action and found[0].target_id == "t1"


def test_missing_index_and_privileges() -> None:
    digest = {
        "digest": "0x9",
        "digest_text": "SELECT * FROM orders WHERE status = ?",
        "count_star": 10,
        "sum_time": 10 * 90_000,
        "target_id": "t",
    }
    rec = missing_index(
        digest,
        [
            {
                "table": "orders",
                "rows_estimate": 100000,
                "index_statement": 'CREATE INDEX "ix_orders_status" ON "orders" ("status")',
            }
        ],
    )
    assert rec.severity == "warning" and rec.action.startswith('CREATE INDEX "ix_orders_status"')
    assert [
        r.target_id for r in privilege_warnings([{"target_id": "a", "privilege_warnings": ["can write"]}, {"target_id": "b"}])
    ] == ["a"]
