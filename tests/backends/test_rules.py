"""MCP query rules: validation at LOAD (nothing changes on a bad rule), ProxySQL's evaluation
semantics, and their effect on the SQL tools against real PostgreSQL, with hits in
stats_mcp_query_rules."""

from __future__ import annotations

from typing import Any

import pytest

from backends.rules import COLUMNS, RuleSet, build_query_rules
from gateway import sqlite
from gateway.errors import ConfigError
from tests.query import error, insert, ok, reload
from tests.query.test_sql_tools import sql_env  # noqa: F401 - the shared module fixture


def rule(rule_id: int, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row.update(rule_id=rule_id, active=1, negate_match_pattern=0, re_modifiers="CASELESS", flagIN=0, apply=0)
    row.update(overrides)
    return row


def evaluate(rows: list[dict[str, Any]], sql: str, **call: str) -> Any:
    context = {"username": "app", "target_id": "pg", "schemaname": "public", "tool_name": "run_sql_readonly", **call}
    return RuleSet.from_rows(rows).evaluate(sql=sql, **context)


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"match_pattern": "SELECT ("}, "not a valid regular expression"),
        ({"re_modifiers": "CASELESS,MULTILINE"}, "re_modifiers"),
        ({"replace_pattern": "x"}, "needs a match_pattern"),
        ({"match_pattern": "(a)", "replace_pattern": "\\2"}, "not a valid replacement"),
        ({"error_msg": "no", "OK_msg": "yes"}, "not both"),
        ({"flagIN": -1}, "flagIN"),
        ({"timeout_ms": 0}, "timeout_ms"),
        ({"cache_ttl": -1}, "cache_ttl"),
        ({"active": 2}, "active"),
        ({"apply": "yes"}, "apply"),
    ],
)
def test_build_refuses_invalid_rules(overrides: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_query_rules({"mcp_query_rules": [rule(1), rule(2, **overrides)]}, {})


def test_a_bad_rule_changes_nothing_at_runtime(sql_env: dict) -> None:  # noqa: F811
    store = sql_env["store"]
    conn = store.conn()
    conn.execute("DELETE FROM main.mcp_query_rules")
    insert(store, "mcp_query_rules", **rule(1, match_pattern="items", comment="good"))
    store.load_to_runtime("MCP QUERY RULES")
    insert(store, "mcp_query_rules", **rule(2, match_pattern="[unclosed"))
    with pytest.raises(ConfigError, match="rule_id=2"):
        store.load_to_runtime("MCP QUERY RULES")
    assert [r["rule_id"] for r in sqlite.rows(conn, "SELECT rule_id FROM runtime_mcp_query_rules")] == [1]
    conn.execute("DELETE FROM main.mcp_query_rules")
    store.load_to_runtime("MCP QUERY RULES")
    store.save_to_disk("MCP QUERY RULES")
    assert sqlite.rows(conn, "SELECT * FROM disk.mcp_query_rules") == []


# -- evaluation semantics ------------------------------------------------------------------------


def test_filters_match_exactly_when_set() -> None:
    rows = [
        rule(1, username="other"),
        rule(2, target_id="mysql1"),
        rule(3, schemaname="sales"),
        rule(4, tool_name="explain_sql"),
        rule(5, username="app", target_id="pg", schemaname="public", tool_name="run_sql_readonly"),
        rule(6, username=""),  # '' matches anything, like NULL
        rule(7, active=0),
    ]
    assert evaluate(rows, "SELECT 1").matched == [5, 6]


def test_pattern_negation_and_case() -> None:
    rows = [
        rule(1, match_pattern="from secret"),
        rule(2, match_pattern="from secret", re_modifiers=""),
        rule(3, match_pattern="limit", negate_match_pattern=1),
    ]
    assert evaluate(rows, "SELECT * FROM SECRET").matched == [1, 3]
    assert evaluate(rows, "select * from secret limit 1").matched == [1, 2]


def test_rewrites_chain_in_rule_id_order_first_or_global() -> None:
    rows = [
        rule(20, match_pattern="b", replace_pattern="c"),
        rule(10, match_pattern="a", replace_pattern="b"),  # runs first: rule_id order
        rule(30, match_pattern="x", replace_pattern="y", re_modifiers="CASELESS,GLOBAL"),
    ]
    outcome = evaluate(rows, "a a x x")
    assert outcome.matched == [10, 20, 30]
    assert outcome.sql == "c a y y"  # without GLOBAL only the first match is replaced


def test_flag_in_out_and_apply() -> None:
    rows = [
        rule(1, match_pattern="select", flagOUT=5),
        rule(2, match_pattern="select", error_msg="flag 0 rule: skipped after the flag moved"),
        rule(3, flagIN=5, match_pattern="items", timeout_ms=500, log=1, apply=1),
        rule(4, flagIN=5, error_msg="after apply: never reached"),
    ]
    outcome = evaluate(rows, "SELECT * FROM items")
    assert outcome.matched == [1, 3]
    assert outcome.error_msg is None and outcome.timeout_ms == 500 and outcome.log is True
    other = evaluate(rows, "SELECT 1")  # rule 3 needs 'items', so evaluation reaches rule 4
    assert other.matched == [1, 4] and other.error_msg == "after apply: never reached" and other.error_rule == 4


def test_actions_accumulate() -> None:
    rows = [rule(1, timeout_ms=900), rule(2, timeout_ms=300), rule(3, timeout_ms=600), rule(4, OK_msg="cached answer")]
    outcome = evaluate(rows, "SELECT 1")
    assert outcome.timeout_ms == 300 and outcome.ok_msg == "cached answer" and outcome.matched == [1, 2, 3, 4]


def test_the_last_matching_cache_ttl_wins_and_zero_is_a_say() -> None:
    rows = [rule(1, cache_ttl=5000), rule(2, match_pattern="orders", cache_ttl=0), rule(3)]
    assert evaluate(rows, "SELECT 1").cache_ttl == 5000
    assert evaluate(rows, "SELECT * FROM orders").cache_ttl == 0  # rule 2 keeps orders out of the cache
    assert evaluate([rule(1)], "SELECT 1").cache_ttl is None  # no say: the target's cache_ttl_ms applies
    assert RuleSet.from_rows(rows).caches and not RuleSet.from_rows([rule(1, cache_ttl=0)]).caches


# -- on the SQL tools, real PostgreSQL -----------------------------------------------------------


def load_rules(env: dict, *rows: dict[str, Any]) -> None:
    store = env["store"]
    store.conn().execute("DELETE FROM main.mcp_query_rules")
    for row in rows:
        insert(store, "mcp_query_rules", **row)
    store.load_to_runtime("MCP QUERY RULES")
    reload(store, env["handler"])


def test_rules_on_the_tools(sql_env: dict) -> None:  # noqa: F811
    handler = sql_env["handler"]
    load_rules(
        sql_env,
        rule(1, match_pattern=r"\bsecret_table\b", error_msg="secret_table is off limits", apply=1),
        rule(2, match_pattern="^SELECT 42$", OK_msg="answered by a rule", apply=1),
        rule(3, match_pattern=r"FROM items_alias", replace_pattern="FROM sales.items"),
        rule(4, match_pattern="SELECT 'sneaky'", replace_pattern="DELETE FROM items"),
        rule(5, match_pattern="generate_series", timeout_ms=100),
        rule(6, username="postgres", tool_name="sample_rows", match_pattern="ORDER BY", error_msg="no sorting samples"),
        rule(7, username="somebody_else", match_pattern=".", error_msg="never: wrong db_username"),
    )
    blocked = error(handler, "run_sql_readonly", target_id="pg", sql="SELECT * FROM secret_table")
    assert blocked["message"] == "secret_table is off limits" and blocked["details"] == {"rule_id": 1}

    answered = ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT 42", stats=True)
    assert answered["message"] == "answered by a rule" and answered["rows"] == [] and answered["stats"]["rules"] == [2]

    rewritten = ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT region FROM items_alias", stats=True)
    assert rewritten["rows"] == [["north"]] and rewritten["stats"]["rules"] == [3]

    sneaky = error(handler, "run_sql_readonly", target_id="pg", sql="SELECT 'sneaky'")
    assert sneaky["code"] == "INVALID_ARGUMENT" and "refused" in sneaky["message"]  # rewritten SQL is checked again
    assert ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT count(*) FROM items")["rows"] == [[50]]

    slow = error(handler, "run_sql_readonly", target_id="pg", sql="SELECT count(*) FROM generate_series(1, 500000000)")
    assert slow["code"] == "DEADLINE_EXCEEDED" and "100 ms" in slow["message"]

    assert error(handler, "sample_rows", target_id="pg", table="items", order_by="id")["message"] == "no sorting samples"
    assert ok(handler, "sample_rows", target_id="pg", table="items", limit=1)["row_count"] == 1
    assert ok(handler, "run_sql_readonly", target_id="pg", sql="SELECT 1 ORDER BY 1", stats=True)["stats"]["rules"] == []

    handler.services.sql.flush_stats()
    hits = {
        r["rule_id"]: r
        for r in sqlite.rows(sql_env["store"].conn(), "SELECT * FROM stats_mcp_query_rules WHERE target_id = 'pg'")
    }
    assert {k: v["hits"] for k, v in hits.items()} == {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1}
    assert hits[1]["username"] == "postgres"
    load_rules(sql_env)  # leave no rules behind for other tests of this module
