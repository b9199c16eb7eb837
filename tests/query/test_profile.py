"""table_profile and column_profile on real MariaDB, PostgreSQL and SQLite: the figures equal
those computed here from the rows the shop was built with."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.query import error, insert, ok, reload
from tests.query.shop import rows, shop_env

ENGINES = ("maria", "pg", "lite")
ROWS = rows()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict[str, Any]]:
    with shop_env(tmp_path_factory.mktemp("profile"), mariadb_db, postgres_db) as env:
        yield env


def column_values(table: str, column: str) -> list[Any]:
    names, values = ROWS[table]
    i = names.index(column)
    return [row[i] for row in values]


def where(env: dict, engine: str) -> dict[str, str]:
    s = env["shop"][engine]
    return {"target_id": s["target_id"], "schema": s["fk"]}


def by_name(profile: dict) -> dict[str, dict]:
    return {c["name"]: c for c in profile["columns"]}


@pytest.mark.parametrize("engine", ENGINES)
def test_table_profile_equals_independent_figures(env: dict, engine: str) -> None:
    out = ok(env["handler"], "table_profile", table="customers", **where(env, engine))
    assert (out["row_count"], out["row_count_exact"], out["sampled"], out["sample_rows"]) == (30, True, False, 30)
    assert not out["truncated"] and out["not_profiled"] == []
    assert any(i["primary"] and i["columns"] == ["id"] for i in out["indexes"])
    assert any(i["unique"] and i["columns"] == ["email"] for i in out["indexes"])
    if engine != "lite":
        assert out["size_bytes"] > 0
    columns = by_name(out)
    emails = column_values("customers", "email")
    email = columns["email"]
    assert email["null_ratio"] == pytest.approx(emails.count(None) / 30, abs=1e-6)
    assert email["distinct_estimate"] == len({e for e in emails if e is not None}) == 26
    names = column_values("customers", "name")
    assert columns["name"]["avg_length"] == pytest.approx(statistics.mean(len(n) for n in names), abs=0.01)
    assert (columns["id"]["min"], columns["id"]["max"]) == (1, 30)
    joined = column_values("customers", "joined_on")
    assert (columns["joined_on"]["min"], columns["joined_on"]["max"]) == (min(joined).isoformat(), max(joined).isoformat())


@pytest.mark.parametrize("engine", ENGINES)
def test_top_values_nulls_and_decimals(env: dict, engine: str) -> None:
    out = ok(env["handler"], "table_profile", table="orders", **where(env, engine))
    columns = by_name(out)
    statuses = Counter(column_values("orders", "status"))
    expected = sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0]))
    assert [(t["value"], t["count"]) for t in columns["status"]["top_values"]] == expected
    addresses = column_values("orders", "address_id")
    assert columns["address_id"]["null_ratio"] == pytest.approx(addresses.count(None) / len(addresses), abs=1e-6)
    totals = [float(t) for t in column_values("orders", "total")]
    assert float(columns["total"]["min"]) == min(totals) and float(columns["total"]["max"]) == max(totals)
    customers = Counter(column_values("orders", "customer_id"))
    assert columns["customer_id"]["distinct_estimate"] == len(customers)
    top = columns["customer_id"]["top_values"][0]
    assert top["count"] == max(customers.values()) and customers[top["value"]] == top["count"]


@pytest.mark.parametrize("engine", ENGINES)
def test_large_table_is_sampled_and_says_so(env: dict, engine: str) -> None:
    out = ok(env["handler"], "table_profile", table="order_items", sample_rows=100, **where(env, engine))
    assert out["sampled"] is True and out["row_count"] == 300 and out["row_count_exact"]
    assert out["sample_method"] == ("bernoulli" if engine == "pg" else "key_windows")
    assert 40 <= out["sample_rows"] <= 200
    quantity = by_name(out)["quantity"]
    assert quantity["null_ratio"] == 0 and quantity["distinct_estimate"] == 5  # 1..5, every value seen


@pytest.mark.parametrize("engine", ENGINES)
def test_column_profile_in_depth(env: dict, engine: str) -> None:
    handler = env["handler"]
    email = ok(handler, "column_profile", table="customers", column="email", **where(env, engine))
    assert email["unique_in_sample"] is True
    assert email["pattern_hints"][0] == {"pattern": "email", "share": 1.0}
    assert email["histogram_axis"] == "length"
    assert sum(b["count"] for b in email["histogram"]) == 26
    total = ok(handler, "column_profile", table="orders", column="total", buckets=5, top_k=3, **where(env, engine))
    assert total["histogram_axis"] == "value" and len(total["histogram"]) == 5
    assert sum(b["count"] for b in total["histogram"]) == 100
    assert len(total["column"]["top_values"]) == 3
    status = ok(handler, "column_profile", table="orders", column="status", **where(env, engine))
    assert status["unique_in_sample"] is False and status["pattern_hints"] == []


@pytest.mark.parametrize("engine", ENGINES)
def test_unknown_names_are_not_found_with_the_closest(env: dict, engine: str) -> None:
    handler = env["handler"]
    missing = error(handler, "table_profile", table="customer", **where(env, engine))
    assert missing["code"] == "NOT_FOUND" and "customers" in missing["details"]["closest"]
    missing = error(handler, "column_profile", table="customers", column="emial", **where(env, engine))
    assert missing["code"] == "NOT_FOUND" and missing["details"]["closest"][0] == "email"
    if engine != "lite":
        missing = error(
            handler, "table_profile", table="customers", target_id=env["shop"][engine]["target_id"], schema="shop_nokf"
        )
        assert missing["code"] == "NOT_FOUND"


def test_odd_identifiers_are_quoted_not_spliced(env: dict) -> None:
    out = error(env["handler"], "table_profile", table='customers" ; DROP TABLE orders; --', **where(env, "pg"))
    assert out["code"] == "NOT_FOUND"
    assert ok(env["handler"], "table_profile", table="orders", **where(env, "pg"))["row_count"] == 100


def test_a_query_rule_that_blocks_a_table_blocks_profiling_it(env: dict) -> None:
    store, handler = env["store"], env["handler"]
    insert(store, "mcp_query_rules", rule_id=7, active=1, match_pattern="customers", error_msg="customers are private", apply=1)
    store.load_to_runtime("MCP QUERY RULES")
    reload(store, handler)
    try:
        for engine in ENGINES:
            refused = error(handler, "table_profile", table="customers", **where(env, engine))
            assert refused["code"] == "INVALID_ARGUMENT" and refused["message"] == "customers are private"
            refused = error(handler, "column_profile", table="customers", column="email", **where(env, engine))
            assert refused["message"] == "customers are private"
            assert ok(handler, "table_profile", table="products", **where(env, engine))["row_count"] == 20
    finally:
        store.conn().execute("DELETE FROM main.mcp_query_rules")
        store.load_to_runtime("MCP QUERY RULES")
        reload(store, handler)


def test_a_profile_past_the_budget_returns_what_it_has(env: dict) -> None:
    store, handler = env["store"], env["handler"]
    s = env["shop"]["pg"]
    insert(store, "mcp_target_profiles", target_id="pg_hasty", protocol="pgsql", host="127.0.0.1", port=5432,
           database=s["database"], auth_profile_id="pg_auth", timeout_ms=15)  # fmt: skip
    store.load_to_runtime("MCP PROFILES")
    reload(store, handler)
    out = ok(handler, "table_profile", table="orders", schema=s["fk"], target_id="pg_hasty")
    assert out["truncated"] is True and out["columns"] == []
    assert out["not_profiled"] == ["id", "customer_id", "address_id", "status", "total"]
    assert "timeout" in out["notes"][-1]


def _sample_shape(values: list[int], windows: list[int] | None = None) -> dict[str, int]:
    counts = Counter(values)
    seen_in: dict[int, set[int]] = {}
    for i, v in enumerate(values):
        seen_in.setdefault(v, set()).add(windows[i] if windows else 0)
    return {
        "d": len(counts),
        "f1": sum(1 for k in counts.values() if k == 1),
        "k2": sum(k * k for k in counts.values()),
        "repeated": sum(1 for k in counts.values() if k > 1) if windows else 0,
        "crossing": sum(1 for v, k in counts.items() if k > 1 and len(seen_in[v]) > 1) if windows else 0,
    }


@pytest.mark.parametrize("distinct", [5, 1000, 25_000, 60_000])
def test_distinct_estimates_on_random_columns(distinct: int) -> None:
    """A 20 % Bernoulli sample of 100,000 rows drawn from `distinct` values: within 5 %."""
    import random

    from handlers.query.profile_sql import estimate_distinct

    rng = random.Random(distinct)
    table = [rng.randrange(distinct) for _ in range(100_000)]
    sample = [v for v in table if rng.random() < 0.2]
    exact = len(set(table))
    estimate = estimate_distinct(sampled=True, n=len(sample), total_non_null=len(table), **_sample_shape(sample))
    assert abs(estimate - exact) / exact < 0.05, (estimate, exact)


def test_distinct_estimates_on_unique_and_clustered_columns() -> None:
    from handlers.query.profile_sql import estimate_distinct

    rows = 1_000_000
    unique = list(range(20_000))
    assert estimate_distinct(sampled=True, n=20_000, total_non_null=rows, **_sample_shape(unique)) == rows
    # A creation time: ~10 rows a minute in key order; 20 windows of 1,000 neighbouring rows.
    starts = [i * 50_000 + 1234 for i in range(20)]
    keys = [s + j for s in starts for j in range(1000)]
    values = [k // 10 for k in keys]
    windows = [k // 50_000 for k in keys]
    estimate = estimate_distinct(sampled=True, n=len(values), total_non_null=rows, **_sample_shape(values, windows))
    assert abs(estimate - rows // 10) / (rows // 10) < 0.05, estimate


def test_a_big_view_is_sampled_from_its_first_rows(env: dict) -> None:
    import psycopg

    s = env["shop"]["pg"]
    with psycopg.connect(host="127.0.0.1", port=5432, user="postgres", dbname=s["database"], autocommit=True) as conn:
        conn.execute(f'CREATE VIEW "{s["fk"]}".items_view AS SELECT * FROM "{s["fk"]}".order_items')
    out = ok(env["handler"], "table_profile", table="items_view", sample_rows=100, **where(env, "pg"))
    assert (out["type"], out["row_count"], out["sampled"], out["sample_method"], out["sample_rows"]) == (
        "view",
        300,
        True,
        "first_rows",
        100,
    )
    assert not out["truncated"] and by_name(out)["quantity"]["distinct_estimate"] == 5
