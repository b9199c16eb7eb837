"""ProxySQL's read-and-zero twins: stats_mcp_query_digest_reset and stats_mcp_query_rules_reset
in admin SQL, and show_queries(reset=true) on /mcp/stats."""

from __future__ import annotations

import asyncio

import pytest

from backends.digest import DigestRecorder, query_digest_stats
from backends.rules import RuleHits
from gateway import sqlite
from gateway.admin_sql import AdminSQL
from gateway.assembly import open_store
from gateway.errors import InvalidArgument
from gateway.store import ConfigStore
from handlers.stats import StatsHandler
from tests.query import make_services


@pytest.fixture
def store(tmp_path) -> ConfigStore:
    store = open_store(tmp_path / "data")
    store.initialize()
    store.load_to_runtime("MCP VARIABLES")
    digests, hits = DigestRecorder(), RuleHits()
    for elapsed in (100, 200, 300):
        digests.record(tool_name="run_sql_readonly", target_id="pg", digest_text="SELECT ?", elapsed_us=elapsed)
    digests.record(tool_name="table_profile", target_id="pg", digest_text="SELECT COUNT(*) AS n FROM t", elapsed_us=50)
    hits.count([3, 4], username="app", target_id="pg")
    digests.flush(store)
    hits.flush(store)
    yield store
    store.close()


def count(store: ConfigStore, table: str) -> int:
    return sqlite.scalar(store.conn(), f"SELECT count(*) FROM {table}")


def test_reading_the_reset_tables_returns_and_zeroes(store: ConfigStore) -> None:
    admin = AdminSQL(store)
    out = admin.execute("SELECT tool_name, count_star, sum_time FROM stats_mcp_query_digest_reset ORDER BY tool_name")
    assert out["rows"] == [["run_sql_readonly", 3, 600], ["table_profile", 1, 50]]
    assert count(store, "stats_mcp_query_digest") == 0
    assert admin.execute("SELECT * FROM stats_mcp_query_digest_reset")["rows"] == []
    rules = admin.execute("SELECT rule_id, hits FROM stats_mcp_query_rules_reset ORDER BY rule_id")
    assert rules["rows"] == [[3, 1], [4, 1]] and count(store, "stats_mcp_query_rules") == 0


def test_a_failing_statement_zeroes_nothing(store: ConfigStore) -> None:
    admin = AdminSQL(store)
    with pytest.raises(InvalidArgument):
        admin.execute("SELECT no_such_column FROM stats_mcp_query_digest_reset")
    with pytest.raises(InvalidArgument):
        admin.execute("DELETE FROM stats_mcp_query_rules_reset")  # the copy is not writable
    assert count(store, "stats_mcp_query_digest") == 2 and count(store, "stats_mcp_query_rules") == 2
    plain = admin.execute("SELECT count(*) FROM stats_mcp_query_digest")
    assert plain["rows"] == [[2]] and count(store, "stats_mcp_query_digest") == 2  # the plain table only reads


def test_show_queries_reset_flag(store: ConfigStore) -> None:
    handler = StatsHandler(make_services(store))

    def show(**arguments: object) -> dict:
        spec = handler.find_tool("show_queries")
        result = asyncio.run(handler.execute_tool(spec, arguments, handler.context(spec, handler.services.runtime)))
        assert not result["isError"], result
        return result["structuredContent"]

    first = show(reset=True, sort_by="count")
    assert first["reset"] is True and [q["count_star"] for q in first["queries"]] == [3, 1]
    assert show()["queries"] == [] and query_digest_stats(store) == []
    assert handler.find_tool("show_queries").annotations["readOnlyHint"] is False
    handler.services.targets.close()
