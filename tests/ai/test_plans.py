"""Full scans found in real plan shapes, and the index suggested from the statement's predicates."""

from __future__ import annotations

from handlers.ai.recommend.plans import FullScan, full_scans, suggest_index

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


def test_full_scans_in_each_engine_shape() -> None:
    assert full_scans("mysql", MARIADB_PLAN) == [FullScan("o", "o", 3)]
    assert full_scans("pgsql", PG_PLAN) == [FullScan("orders", "o", 5000)]
    sqlite_rows = [{"detail": "SCAN orders AS o"}, {"detail": "SEARCH c USING INTEGER PRIMARY KEY (rowid=?)"}]
    assert full_scans("sqlite", sqlite_rows) == [FullScan("orders", "o", None)]


def test_index_from_equality_then_one_range_column() -> None:
    sql = "SELECT o.id FROM shop.orders o JOIN shop.customers c ON c.id = o.customer_id WHERE o.status = ? AND o.created_at > ? AND o.total < ?"
    suggestion = suggest_index(sql, "mysql", FullScan("o", "o", 3))
    assert suggestion is not None
    assert (suggestion.schema, suggestion.table, suggestion.columns) == (
        "shop",
        "orders",
        ("status", "customer_id", "created_at"),
    )
    assert (
        suggestion.statement("mysql")
        == "CREATE INDEX `ix_orders_status_customer_id_created_at` ON `shop`.`orders` (`status`, `customer_id`, `created_at`)"
    )


def test_unqualified_columns_of_a_single_table_and_pg_quoting() -> None:
    suggestion = suggest_index(
        "SELECT * FROM events WHERE kind = 'x'", "pgsql", FullScan("events", "events", 10), default_schema="public"
    )
    assert suggestion is not None
    assert suggestion.statement("pgsql") == 'CREATE INDEX "ix_events_kind" ON "public"."events" ("kind")'


def test_no_predicate_no_suggestion() -> None:
    assert suggest_index("SELECT count(*) FROM events", "pgsql", FullScan("events", "events", 10)) is None
    assert suggest_index("not sql at all (", "pgsql", FullScan("events", "events", 10)) is None
