"""Full scans each engine finds in its real plan shapes, and the index suggested from the statement's predicates."""

from __future__ import annotations

from backends.engines import engine_for
from backends.engines.plans import FullScan
from handlers.ai.recommend.plans import suggest_index

MYSQL, PGSQL, SQLITE, DUCKDB = engine_for("mysql"), engine_for("pgsql"), engine_for("sqlite"), engine_for("duckdb")

MARIADB_PLAN = {
    "query_block": {
        "select_id": 1,
        "nested_loop": [
            {"table": {"table_name": "o", "access_type": "ALL", "rows": 3, "attached_condition": "o.`status` = 'x'"}},
            {"block-nl-join": {"table": {"table_name": "c", "access_type": "eq_ref", "rows": 1}}},
        ],
    }
}
PG_PLAN = [
    {
        "Plan": {
            "Node Type": "Hash Join",
            "Plans": [
                {"Node Type": "Index Scan", "Relation Name": "customers", "Alias": "c"},
                {
                    "Node Type": "Hash",
                    "Plans": [{"Node Type": "Seq Scan", "Relation Name": "orders", "Alias": "o", "Plan Rows": 5000}],
                },
            ],
        }
    }
]
DUCKDB_PLAN = [
    {
        "name": "HASH_JOIN",
        "children": [
            {"name": "SEQ_SCAN", "children": [], "extra_info": {"Table": "shop.main.orders", "Type": "Sequential Scan", "Filters": "(status = 'x')", "Estimated Cardinality": "1021"}},
            {"name": "TABLE_SCAN", "children": [], "extra_info": {"Table": "shop.main.customers", "Type": "Index Scan"}},
        ],
        "extra_info": {"Join Type": "INNER"},
    }
]  # fmt: skip


def test_full_scans_in_each_engine_shape() -> None:
    assert MYSQL.full_scans(MARIADB_PLAN) == [FullScan("o", "o", 3)]
    assert PGSQL.full_scans(PG_PLAN) == [FullScan("orders", "o", 5000)]
    sqlite_rows = [{"detail": "SCAN orders AS o"}, {"detail": "SEARCH c USING INTEGER PRIMARY KEY (rowid=?)"}]
    assert SQLITE.full_scans(sqlite_rows) == [FullScan("orders", "o", None)]
    assert DUCKDB.full_scans(DUCKDB_PLAN) == [FullScan("orders", "orders", 1021)]


def test_index_from_equality_then_one_range_column() -> None:
    sql = "SELECT o.id FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id WHERE o.status = ? AND o.created_at > ? AND o.total < ?"
    suggestion = suggest_index(sql, MYSQL.dialect, FullScan("o", "o", 3))
    assert suggestion is not None
    assert (suggestion.schema, suggestion.table, suggestion.columns) == (
        "shop",
        "orders",
        ("status", "customer_id", "created_at"),
    )
    assert (
        suggestion.statement(MYSQL.quote)
        == "CREATE INDEX `ix_orders_status_customer_id_created_at` ON `shop`.`orders` (`status`, `customer_id`, `created_at`)"
    )


def test_unqualified_columns_of_a_single_table_and_pg_quoting() -> None:
    suggestion = suggest_index(
        "SELECT * FROM events WHERE kind = 'x'", PGSQL.dialect, FullScan("events", "events", 10), default_schema="public"
    )
    assert suggestion is not None
    assert suggestion.statement(PGSQL.quote) == 'CREATE INDEX "ix_events_kind" ON "public"."events" ("kind")'


def test_no_predicate_no_suggestion() -> None:
    assert suggest_index("SELECT count(*) FROM events", PGSQL.dialect, FullScan("events", "events", 10)) is None
    assert suggest_index("not sql at all (", PGSQL.dialect, FullScan("events", "events", 10)) is None


def test_a_plan_naming_tables_but_not_aliases_finds_the_aliased_table() -> None:
    """DuckDB's plans name the table only: the statement's one table of that name is the one scanned."""
    sql = "SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = 'x'"
    suggestion = suggest_index(sql, DUCKDB.dialect, FullScan("orders", "orders", 1021), default_schema="main")
    assert suggestion is not None and (suggestion.table, suggestion.columns) == ("orders", ("status", "customer_id"))
    self_join = "SELECT a.id FROM orders a JOIN orders b ON b.id = a.parent_id WHERE a.status = 'x'"
    assert suggest_index(self_join, DUCKDB.dialect, FullScan("orders", "orders", 10)) is None  # which one: unknown
