"""The agent memory tools (agent.*, llm.*) on a discovered shop without declared keys: a whole
agent run is found by llm.search, its relationship shows in suggest_joins and
catalog.get_relationships, unsafe SQL is refused when stored, unknown ids are refused, and
everything survives a restart and a new discovery run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from handlers.query import QueryHandler
from tests.query import make_services
from tests.query.catalog.test_catalog import error, ok
from tests.query.shop import shop_env

TARGET = "pg"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict[str, Any]]:
    with shop_env(tmp_path_factory.mktemp("memory"), mariadb_db, postgres_db) as env:
        handler = env["handler"]
        run = ok(handler, "discovery.run_static", {"target_id": TARGET, "schema_filter": "shop_nofk"})
        orders = ok(handler, "catalog.get", {"target_id": TARGET, "schema": "shop_nofk", "name": "orders"})["object"]
        env.update(run_id=run["run_id"], orders_id=orders["object_id"])
        yield env


@pytest.fixture(scope="module")
def agent_run(env: dict) -> dict[str, Any]:
    """One whole agent run: start -> events -> summaries, a relationship, a domain, a metric,
    a question template, a note -> finish."""
    h, run_id = env["handler"], env["run_id"]
    start = ok(h, "agent.run_start", {"target_id": TARGET, "run_id": run_id, "model": "test-model", "notes": "shop tour"})
    agent = start["agent_run_id"]
    ok(
        h,
        "agent.event_append",
        {"agent_run_id": agent, "event_type": "tool_call", "payload": {"tool": "table_profile", "table": "orders"}},
    )
    ok(h, "agent.event_append", {"agent_run_id": agent, "event_type": "observation", "payload": "refunds are rare"})
    summary = ok(h, "llm.summary_upsert", {
        "agent_run_id": agent, "run_id": run_id, "object_id": env["orders_id"],
        "summary": "One row per checkout; total is the amount charged in euros.", "confidence": 0.9, "status": "reviewed",
        "sources": ["table_profile orders"],
    })  # fmt: skip
    relationship = ok(h, "llm.relationship_upsert", {
        "agent_run_id": agent, "from_schema": "shop_nofk", "from_table": "addresses", "from_columns": ["city"],
        "to_schema": "shop_nofk", "to_table": "customers", "to_columns": ["name"], "confidence": 0.42,
        "evidence": {"reason": "sales reps file customers by city"},
    })  # fmt: skip
    domain = ok(h, "llm.domain_upsert", {"agent_run_id": agent, "name": "fulfilment", "description": "getting parcels to buyers"})
    ok(h, "llm.domain_set_members", {"agent_run_id": agent, "domain_id": domain["id"], "members": [
        {"schema": "shop_nofk", "table": "orders", "role": "core"}, {"schema": "shop_nofk", "table": "addresses", "role": "lookup"},
    ]})  # fmt: skip
    metric = ok(h, "llm.metric_upsert", {
        "agent_run_id": agent, "name": "average basket", "description": "mean order total",
        "sql": "SELECT avg(total) FROM shop_nofk.orders", "unit": "EUR",
    })  # fmt: skip
    template = ok(h, "llm.question_template_add", {
        "agent_run_id": agent, "question": "How many orders did a customer place?",
        "sql_template": "SELECT count(*) FROM shop_nofk.orders WHERE customer_id = {customer_id}",
    })  # fmt: skip
    note = ok(
        h, "llm.note_add", {"target_id": TARGET, "run_id": run_id, "agent_run_id": agent, "body": "status 'done' means delivered"}
    )
    finish = ok(h, "agent.run_finish", {"agent_run_id": agent, "status": "ok"})
    assert finish["status"] == "ok"
    return {"agent": agent, "summary": summary["id"], "relationship": relationship["id"], "domain": domain["id"],
            "metric": metric["id"], "template": template["id"], "note": note["id"]}  # fmt: skip


def test_llm_search_finds_everything_the_agent_recorded(env: dict, agent_run: dict) -> None:
    h = env["handler"]
    expectations = {
        "checkout charged": ("summary", agent_run["summary"]),
        "sales reps": ("relationship", agent_run["relationship"]),
        "parcels buyers": ("domain", agent_run["domain"]),
        "basket": ("metric", agent_run["metric"]),
        "how many orders customer": ("question_template", agent_run["template"]),
        "delivered": ("note", agent_run["note"]),
    }
    for query, (kind, ref_id) in expectations.items():
        hits = ok(h, "llm.search", {"query": query, "target_id": TARGET})["results"]
        assert (hits[0]["kind"], hits[0]["ref_id"]) == (kind, ref_id), query
        assert hits[0]["agent_run_id"] == agent_run["agent"] and hits[0]["run_id"] == env["run_id"]
    only_metrics = ok(h, "llm.search", {"query": "orders", "target_id": TARGET, "kinds": ["metric"]})["results"]
    assert {hit["kind"] for hit in only_metrics} == {"metric"}
    assert ok(h, "llm.search", {"query": "basket", "target_id": "maria"})["results"] == []  # per target


def test_the_relationship_shows_in_suggest_joins_and_the_catalog(env: dict, agent_run: dict) -> None:
    h = env["handler"]
    joins = ok(
        h,
        "suggest_joins",
        {"target_id": TARGET, "schema": "shop_nofk", "table_a": "addresses", "table_b": "customers", "min_confidence": 0},
    )
    recorded = [c for c in joins["candidates"] if c["kind"] == "agent"]
    assert len(recorded) == 1 and recorded[0]["confidence"] == 0.42
    assert recorded[0]["on"] == '"addresses"."city" = "customers"."name"'
    assert recorded[0]["evidence"]["reason"] == "sales reps file customers by city"
    assert joins["candidates"][0]["from_columns"] == ["customer_id"]  # the measured inference still ranks above it
    rels = ok(h, "catalog.get_relationships", {"target_id": TARGET, "table": "addresses"})["relationships"]
    assert [(r["kind"], r["from_columns"], r["agent_run_id"]) for r in rels] == [("agent", ["city"], agent_run["agent"])]


def test_summaries_and_domains_read_back(env: dict, agent_run: dict) -> None:
    h = env["handler"]
    got = ok(h, "llm.summary_get", {"target_id": TARGET, "object_id": env["orders_id"]})["summaries"]
    assert got[0]["summary"].startswith("One row per checkout") and got[0]["status"] == "reviewed"
    orders = ok(h, "catalog.get", {"object_id": env["orders_id"]})
    assert orders["summaries"][0]["summary_id"] == agent_run["summary"]


def test_unsafe_sql_and_unknown_ids_are_refused(env: dict, agent_run: dict) -> None:
    h, run_id = env["handler"], env["run_id"]
    agent = ok(h, "agent.run_start", {"target_id": TARGET, "run_id": run_id})["agent_run_id"]
    for sql in ("DELETE FROM shop_nofk.orders", "SELECT 1; DROP TABLE shop_nofk.orders", "SELECT pg_sleep(10)"):
        refused = error(h, "llm.metric_upsert", {"agent_run_id": agent, "name": "bad", "sql": sql})
        assert refused["code"] == "INVALID_ARGUMENT" and refused["message"].startswith("metric 'bad' is not stored: refused")
    refused = error(
        h, "llm.question_template_add", {"agent_run_id": agent, "question": "q", "sql_template": "UPDATE t SET a = {x}"}
    )
    assert refused["code"] == "INVALID_ARGUMENT"
    assert ok(h, "llm.search", {"query": "bad", "target_id": TARGET, "kinds": ["metric"]})["results"] == []
    for tool, arguments in (
        ("agent.event_append", {"agent_run_id": 999_999, "event_type": "x"}),
        ("agent.run_start", {"target_id": TARGET, "run_id": 999_999}),
        ("llm.summary_upsert", {"agent_run_id": agent, "run_id": run_id, "object_id": 999_999, "summary": "s"}),
        ("llm.domain_set_members", {"agent_run_id": agent, "domain_id": 999_999, "members": []}),
        ("agent.event_append", {"agent_run_id": agent_run["agent"], "event_type": "late"}),  # that run is finished
    ):
        assert error(h, tool, arguments)["code"] == "INVALID_ARGUMENT", tool
    too_big = error(
        h, "llm.summary_upsert", {"agent_run_id": agent, "run_id": run_id, "object_id": env["orders_id"], "summary": "x" * 8001}
    )
    assert too_big["code"] == "INVALID_ARGUMENT"
    assert (
        error(h, "agent.event_append", {"agent_run_id": agent, "event_type": "x", "payload": "y" * 70_000})["code"]
        == "INVALID_ARGUMENT"
    )


def test_memory_survives_a_restart_and_a_new_run(env: dict, agent_run: dict) -> None:
    ok(env["handler"], "discovery.run_static", {"target_id": TARGET, "schema_filter": "shop_nofk", "notes": "again"})
    fresh = QueryHandler(make_services(env["store"]))
    try:
        hits = ok(fresh, "llm.search", {"query": "checkout", "target_id": TARGET})["results"]
        assert hits[0]["ref_id"] == agent_run["summary"]
        newest = ok(fresh, "catalog.get", {"target_id": TARGET, "schema": "shop_nofk", "name": "orders"})
        assert newest["object"]["run_id"] > env["run_id"]
        assert newest["summaries"][0]["summary_id"] == agent_run["summary"]  # the earlier run's summary, by name
        joins = ok(
            fresh, "suggest_joins", {"target_id": TARGET, "schema": "shop_nofk", "table_a": "addresses", "min_confidence": 0}
        )
        assert any(c["kind"] == "agent" for c in joins["candidates"])
    finally:
        fresh.catalog.close()
        fresh.pools.close()
