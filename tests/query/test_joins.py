"""suggest_joins and find_reference_candidates on the shop, with and without declared foreign
keys, on real MariaDB, PostgreSQL and SQLite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from handlers.query.join_inference import name_signal, singular
from tests.query import error, insert, ok, reload
from tests.query.shop import shop_env

ENGINES = ("maria", "pg", "lite")
REAL = {
    ("orders", "customer_id", "customers", "id"),
    ("orders", "address_id", "addresses", "id"),
    ("order_items", "order_id", "orders", "id"),
    ("order_items", "product_id", "products", "id"),
    ("addresses", "customer_id", "customers", "id"),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict[str, Any]]:
    with shop_env(tmp_path_factory.mktemp("joins"), mariadb_db, postgres_db) as env:
        yield env


def place(env: dict, engine: str, variant: str) -> dict[str, str]:
    s = env["shop"][engine]
    return {"target_id": s["target_id"] if variant == "fk" else s["target_nofk"], "schema": s[variant]}


def edge(c: dict) -> tuple[str, str, str, str]:
    return (c["from_table"], c["from_columns"][0], c["to_table"], c["to_columns"][0])


@pytest.mark.parametrize("engine", ENGINES)
def test_declared_keys_rank_first(env: dict, engine: str) -> None:
    out = ok(env["handler"], "suggest_joins", table_a="orders", **place(env, engine, "fk"))
    kinds = [c["kind"] for c in out["candidates"]]
    assert kinds[:3] == ["declared"] * 3 and all(k == "declared" for k in kinds)  # nothing inferred duplicates a key
    assert {edge(c) for c in out["candidates"]} == {e for e in REAL if "orders" in (e[0], e[2])}
    assert all(c["confidence"] == 1.0 and c["evidence"]["signals"] == ["declared_fk"] for c in out["candidates"])


@pytest.mark.parametrize("engine", ENGINES)
def test_undeclared_references_are_found_with_evidence(env: dict, engine: str) -> None:
    handler = env["handler"]
    out = ok(handler, "suggest_joins", table_a="orders", table_b="customers", **place(env, engine, "nofk"))
    top = out["candidates"][0]
    assert edge(top) == ("orders", "customer_id", "customers", "id") and top["kind"] == "inferred"
    assert top["confidence"] >= 0.8 and top["evidence"]["overlap_ratio"] == 1.0
    assert "name:table_and_key_name" in top["evidence"]["signals"]
    rows = ok(handler, "run_sql_readonly", sql=top["example_sql"], target_id=place(env, engine, "nofk")["target_id"])
    assert rows["row_count"] == 10  # the ON clause runs as given
    ref = ok(handler, "find_reference_candidates", table="order_items", column="product_id", **place(env, engine, "nofk"))
    assert edge(ref["candidates"][0]) == ("order_items", "product_id", "products", "id")
    assert ref["candidates"][0]["confidence"] >= 0.8


@pytest.mark.parametrize("engine", ENGINES)
def test_only_real_references_are_proposed(env: dict, engine: str) -> None:
    """Every candidate over the whole schema is a real reference: columns that merely share a
    type (order_items.quantity and products.id are both integers) are never paired."""
    handler = env["handler"]
    found = set()
    for table in ("orders", "order_items", "customers", "products", "addresses"):
        out = ok(handler, "suggest_joins", table_a=table, max_candidates=50, min_confidence=0, **place(env, engine, "nofk"))
        found |= {edge(c) for c in out["candidates"]}
    assert found == REAL


def test_a_column_that_merely_names_a_table_but_holds_other_values_scores_low(env: dict) -> None:
    """Containment decides: product_id values that are not product ids fall below 0.5."""
    s = env["shop"]["lite"]
    import sqlite3

    path = env["store"].read_runtime().table("runtime_mcp_target_profiles")
    lite = next(r["database"] for r in path if r["target_id"] == s["target_nofk"])
    conn = sqlite3.connect(lite)
    conn.execute("CREATE TABLE reviews (id INTEGER PRIMARY KEY, product_id INTEGER, stars INTEGER)")
    conn.executemany("INSERT INTO reviews VALUES (?, ?, ?)", [(i, 1000 + i, i % 5) for i in range(1, 51)])
    conn.commit()
    conn.close()
    out = ok(env["handler"], "find_reference_candidates", table="reviews", column="product_id", target_id=s["target_nofk"])
    top = out["candidates"][0]
    assert top["to_table"] == "products" and top["evidence"]["overlap_ratio"] == 0.0 and top["confidence"] < 0.5


def test_rules_and_unknown_names_apply(env: dict) -> None:
    store, handler = env["store"], env["handler"]
    missing = error(handler, "suggest_joins", table_a="order", **place(env, "pg", "nofk"))
    assert missing["code"] == "NOT_FOUND" and "orders" in missing["details"]["closest"]
    missing = error(handler, "find_reference_candidates", table="orders", column="customerid", **place(env, "pg", "nofk"))
    assert missing["details"]["closest"][0] == "customer_id"
    insert(store, "mcp_query_rules", rule_id=8, active=1, match_pattern="customers", error_msg="customers are private", apply=1)
    store.load_to_runtime("MCP QUERY RULES")
    reload(store, handler)
    try:
        refused = error(handler, "suggest_joins", table_a="orders", table_b="customers", **place(env, "maria", "nofk"))
        assert refused["message"] == "customers are private"  # the containment query reads customers
    finally:
        store.conn().execute("DELETE FROM main.mcp_query_rules")
        store.load_to_runtime("MCP QUERY RULES")
        reload(store, handler)


@pytest.mark.parametrize(
    ("column", "table", "key", "signal"),
    [
        ("customer_id", "customers", "id", "table_and_key_name"),
        ("customerid", "customers", "id", "table_and_key_name"),
        ("category_id", "categories", "id", "table_and_key_name"),
        ("cust_id", "customers", "id", "abbreviation"),
        ("billing_address_id", "addresses", "id", "role_prefix"),
        ("customer_id", "customers", "customer_id", "key_name"),
        ("id", "customers", "id", None),
        ("quantity", "products", "id", None),
        ("order_id", "order_items", "id", None),
    ],
)
def test_name_signals(column: str, table: str, key: str, signal: str | None) -> None:
    assert name_signal(column, table, key) == signal


def test_singular() -> None:
    assert [singular(w) for w in ("customers", "categories", "addresses", "boxes", "status", "people")] == [
        "customer", "category", "address", "box", "status", "people",
    ]  # fmt: skip
