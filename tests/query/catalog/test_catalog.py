"""discovery.run_static and the catalog.* tools on the shop (real MariaDB, PostgreSQL, SQLite):
harvest counts, search by a column comment and by a note, summaries of big listings, declared
and inferred relationships, the write switch, a restart, and `mcp-gateway query discover`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.cli import main as cli_main
from handlers.query import QueryHandler
from tests.query import make_services, reload
from tests.query.shop import shop_env

ENGINES = ("maria", "pg", "lite")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict[str, Any]]:
    with shop_env(tmp_path_factory.mktemp("catalog"), mariadb_db, postgres_db) as env:
        env["runs"] = {}
        for engine, s in env["shop"].items():
            out = ok(
                env["handler"],
                "discovery.run_static",
                {"target_id": s["target_id"], "schema_filter": s["fk"], "notes": "first look"},
            )
            env["runs"][engine] = out
        yield env


def call(handler: QueryHandler, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """As tests.query.call, with the arguments as a dict: catalog.get takes a `name`."""
    spec = handler.find_tool(tool)
    assert spec is not None, tool
    result = asyncio.run(handler.execute_tool(spec, arguments, handler.context(spec, handler.services.runtime)))
    return result["isError"], result["structuredContent"]


def ok(handler: QueryHandler, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    is_error, payload = call(handler, tool, arguments)
    assert not is_error, payload
    return payload


def error(handler: QueryHandler, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    is_error, payload = call(handler, tool, arguments)
    assert is_error, payload
    return payload["error"]


def set_variable(env: dict, name: str, value: str) -> None:
    env["store"].set_variable(name, value)
    env["store"].load_to_runtime("MCP VARIABLES")
    reload(env["store"], env["handler"])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_harvests_the_schema(env: dict, engine: str) -> None:
    run = env["runs"][engine]
    assert run["state"] == "ok" and run["notes"] == "first look"
    assert {k: run["counts"][k] for k in ("schemas", "tables", "columns", "foreign_keys")} == {
        "schemas": 1, "tables": 5, "columns": 21, "foreign_keys": 5,
    }  # fmt: skip
    assert run["progress"]["tables_done"] == run["progress"]["tables_total"] == 5
    s = env["shop"][engine]
    got = ok(env["handler"], "catalog.get", {"target_id": s["target_id"], "schema": s["fk"], "name": "orders"})
    assert got["object"]["run_id"] == run["run_id"] and got["object"]["object_type"] == "table"
    assert [c["column_name"] for c in got["columns"]] == ["id", "customer_id", "address_id", "status", "total"]
    assert {(r["kind"], r["from_table"], r["to_table"]) for r in got["relationships"]} == {
        ("declared_fk", "orders", "customers"), ("declared_fk", "orders", "addresses"), ("declared_fk", "order_items", "orders"),
    }  # fmt: skip
    column = ok(env["handler"], "catalog.get", {"target_id": s["target_id"], "schema": s["fk"], "name": "orders.total"})
    assert column["object"]["definition"]["type"].lower().startswith(("decimal", "numeric"))


@pytest.mark.parametrize("engine", ["maria", "pg"])
def test_searchable_by_a_column_comment(env: dict, engine: str) -> None:
    s = env["shop"][engine]
    found = ok(env["handler"], "catalog.search", {"query": "parcels", "target_id": s["target_id"]})["results"]
    assert [(r["table_name"], r["column_name"]) for r in found] == [("addresses", "street")]
    assert found[0]["comment"] == "where parcels go" and found[0]["score"] > 0


def test_searchable_by_a_note_and_by_name(env: dict) -> None:
    handler, s = env["handler"], env["shop"]["lite"]
    orders = ok(handler, "catalog.get", {"target_id": s["target_id"], "schema": "main", "name": "orders"})["object"]
    written = ok(
        handler,
        "catalog.upsert",
        {
            "object": {"object_id": orders["object_id"]},
            "notes": "checkout baskets, one row per purchase",
            "tags": ["sales", "core"],
        },
    )["object"]
    assert written["notes"].startswith("checkout") and written["tags"] == ["sales", "core"]
    found = ok(handler, "catalog.search", {"query": "checkout purchase", "target_id": s["target_id"]})["results"]
    assert found[0]["object_id"] == orders["object_id"]
    by_name = ok(handler, "catalog.search", {"query": "customer_id", "target_id": s["target_id"], "object_type": "column"})
    top_two = {(r["table_name"], r["column_name"]) for r in by_name["results"][:2]}
    assert top_two == {("orders", "customer_id"), ("addresses", "customer_id")}  # then customers.id (stemmed)


def test_big_listings_are_summarized(env: dict) -> None:
    handler, s = env["handler"], env["shop"]["pg"]
    set_variable(env, "mcp-query_summary_threshold", "10")
    try:
        summary = ok(handler, "catalog.list", {"target_id": "pg"})
        assert summary["summarized"] is True and summary["objects"] == []
        assert summary["summary"]["per_schema"][s["fk"]] == {"column": 21, "schema": 1, "table": 5}
        assert summary["summary"]["total"] == 27
        assert [c["tool"] for c in summary["suggested_calls"]][:2] == ["catalog.search", "catalog.list"]
        walked, token = [], None
        while True:
            page = ok(
                handler,
                "catalog.list",
                {"target_id": "pg", "summarize": False, "page_size": 8, **({"page_token": token} if token else {})},
            )
            assert page["summarized"] is False
            walked += [o["object_id"] for o in page["objects"]]
            token = page["next_page_token"]
            if token is None:
                break
        assert len(walked) == len(set(walked)) == 27
        small = ok(handler, "catalog.list", {"target_id": "pg", "object_type": "table"})
        assert small["summarized"] is False and len(small["objects"]) == 5
    finally:
        set_variable(env, "mcp-query_summary_threshold", "300")


def test_relationships_declared_and_inferred(env: dict) -> None:
    handler, s = env["handler"], env["shop"]["lite"]
    run = ok(handler, "discovery.run_static", {"target_id": s["target_nofk"]})
    assert run["counts"]["foreign_keys"] == 0
    plain = ok(handler, "catalog.get_relationships", {"target_id": s["target_nofk"]})
    assert plain["relationships"] == []
    inferred = ok(handler, "catalog.get_relationships", {"target_id": s["target_nofk"], "include_inferred": True})
    edges = {(r["from_table"], r["from_columns"][0], r["to_table"], r["to_columns"][0]) for r in inferred["relationships"]}
    assert edges == {
        ("orders", "customer_id", "customers", "id"), ("orders", "address_id", "addresses", "id"),
        ("order_items", "order_id", "orders", "id"), ("order_items", "product_id", "products", "id"),
        ("addresses", "customer_id", "customers", "id"),
    }  # fmt: skip
    assert all(r["kind"] == "inferred" for r in inferred["relationships"])
    one = ok(handler, "catalog.get_relationships", {"target_id": s["target_id"], "table": "products"})
    assert [(r["kind"], r["from_table"]) for r in one["relationships"]] == [("declared_fk", "order_items")]


def test_writes_refused_when_disabled(env: dict) -> None:
    handler, s = env["handler"], env["shop"]["lite"]
    set_variable(env, "mcp-catalog_writes", "false")
    try:
        for tool, arguments in (
            ("discovery.run_static", {"target_id": s["target_id"]}),
            (
                "catalog.upsert",
                {"object": {"target_id": s["target_id"], "object_type": "table", "schema_name": "main", "table_name": "x"}},
            ),
            ("catalog.delete", {"object_id": 1}),
            ("catalog.clear", {"target_id": s["target_id"]}),
        ):
            refused = error(handler, tool, arguments)
            assert refused["code"] == "INVALID_ARGUMENT" and "mcp-catalog_writes=false" in refused["message"], tool
        assert ok(handler, "catalog.search", {"query": "orders", "target_id": s["target_id"]})["results"]  # reads still work
    finally:
        set_variable(env, "mcp-catalog_writes", "true")
    assert handler.find_tool("catalog.upsert").annotations["readOnlyHint"] is False
    assert handler.find_tool("catalog_upsert") is handler.find_tool("catalog.upsert")  # the seed's spelling


def test_a_new_run_and_a_restart_keep_earlier_runs(env: dict) -> None:
    handler = env["handler"]
    second = ok(handler, "discovery.run_static", {"target_id": "pg", "schema_filter": "shop_*", "notes": "both schemas"})
    assert second["run_id"] > env["runs"]["pg"]["run_id"] and second["counts"]["schemas"] == 2
    runs = ok(handler, "discovery.status", {"target_id": "pg"})["runs"]
    assert [r["run_id"] for r in runs][:2] == [second["run_id"], env["runs"]["pg"]["run_id"]]
    fresh = QueryHandler(make_services(env["store"]))  # a restarted worker on the same data directory
    try:
        hits = ok(fresh, "catalog.search", {"query": "parcels", "target_id": "pg"})["results"]
        assert {h["run_id"] for h in hits} == {env["runs"]["pg"]["run_id"], second["run_id"]}
        only_first = ok(fresh, "catalog.search", {"query": "parcels", "target_id": "pg", "run_id": env["runs"]["pg"]["run_id"]})
        assert len(only_first["results"]) == 1
    finally:
        fresh.catalog.close()
        fresh.pools.close()
    cleared = ok(handler, "catalog.clear", {"target_id": "pg", "run_id": second["run_id"]})["deleted"]
    assert cleared["objects"] == 2 + 10 + 42 and cleared["runs"] == 1


def test_bad_input(env: dict) -> None:
    handler = env["handler"]
    assert error(handler, "discovery.status", {"run_id": 99999})["code"] == "NOT_FOUND"
    assert error(handler, "catalog.get", {"object_id": 99999})["code"] == "NOT_FOUND"
    assert error(handler, "catalog.get", {"target_id": "pg"})["code"] == "INVALID_ARGUMENT"
    assert error(handler, "discovery.run_static", {"target_id": "nope"})["code"] == "NOT_FOUND"
    failed = ok(handler, "discovery.run_static", {"target_id": "pg", "schema_filter": "no_such_schema"})
    assert failed["state"] == "failed" and failed["error"]["code"] == "NOT_FOUND"
    assert error(handler, "catalog.search", {"query": "x" * 600})["code"] == "INVALID_ARGUMENT"
    assert ok(handler, "catalog.search", {"query": 'NEAR("a" b) OR * "'})["results"] == []  # FTS5 syntax is only words


def test_cli_discover_with_progress(env: dict, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = str(env["store"].data_dir)
    assert cli_main(["query", "discover", "lite_fk", "--data-dir", data_dir, "--notes", "from the cli"]) == 0
    captured = capsys.readouterr()
    status = json.loads(captured.out.strip().splitlines()[-1])
    assert status["state"] == "ok" and status["counts"]["tables"] == 5 and status["notes"] == "from the cli"
    assert "5/5" in captured.err and "table" in captured.err  # the progress bar
    assert cli_main(["query", "discover", "nope", "--data-dir", data_dir]) == 2
    assert "NOT_FOUND" in capsys.readouterr().err
    runs = ok(env["handler"], "discovery.status", {"target_id": "lite_fk"})["runs"]
    assert runs[0]["run_id"] == status["run_id"]  # the gateway sees the CLI's run


def test_list_tables_summarizes_a_big_schema(env: dict, tmp_path) -> None:
    import sqlite3

    from tests.query import add_target

    path = tmp_path / "wide.db"
    conn = sqlite3.connect(path)
    for i in range(15):
        conn.execute(f"CREATE TABLE {'sales' if i % 2 else 'stock'}_{i} (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    add_target(env["store"], "wide", "sqlite", database=str(path))
    env["store"].load_to_runtime("MCP PROFILES")
    reload(env["store"], env["handler"])
    handler = env["handler"]
    set_variable(env, "mcp-query_summary_threshold", "10")
    try:
        out = ok(handler, "list_tables", {"target_id": "wide"})
        assert out["summarized"] is True and out["tables"] == [] and out["truncated"] is True
        assert out["summary"]["total"] == 15 and out["summary"]["per_type"] == {"table": 15}
        filters = [c["arguments"].get("name_filter") for c in out["suggested_calls"] if c["tool"] == "list_tables"]
        assert {"sales", "stock"} <= set(filters)
        listed = ok(handler, "list_tables", {"target_id": "wide", "name_filter": "sales"})
        assert listed["summarized"] is False and len(listed["tables"]) == 7
        page = ok(handler, "list_tables", {"target_id": "wide", "summarize": False, "page_size": 20})
        assert len(page["tables"]) == 15
        small = ok(handler, "list_tables", {"target_id": "lite_fk"})
        assert small["summarized"] is False and len(small["tables"]) == 5
    finally:
        set_variable(env, "mcp-query_summary_threshold", "300")
