"""DuckDB as a fourth engine (backends/engines/duckdb.py), added as one module: a DuckDB file and
a list of Parquet/CSV files as targets, through the real read-only path (QueryHandler ->
ReadOnlySql -> the check -> the pool -> the engine): values, caps, schemas, EXPLAIN, the
timeout interrupt, the catalog tools, query rules, the result cache and digests, the profiling and
join tools, the index advice of /mcp/ai and the admin tools' refusal; and once through a running
gateway with the official MCP SDK client."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

from backends.engines import ENGINES, PROTOCOLS, engine_for, translate
from backends.engines import duckdb as duck
from backends.engines.plans import FullScan
from backends.targets import skip_reason
from gateway.assembly import open_store, share_backends
from gateway.errors import DeadlineExceeded, InvalidArgument, Unavailable
from gateway.evidence import EvidenceRecorder
from gateway.services import Services
from handlers.admin import AdminHandler
from handlers.ai.handler import AiHandler
from handlers.query import QueryHandler
from tests.query import add_target, error, insert, make_services, make_store, ok, reload
from tests.query import shop as shop_rows

ROWS = 50
LONG_RUNNING = "SELECT count(*) FROM range(100000000000) a"  # minutes of work: only the interrupt ends it


def seed(path: Path) -> None:
    """A small shop in a DuckDB file (closed afterwards: a writer would lock the readers out)."""
    conn = duckdb.connect(str(path))
    conn.execute(
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL UNIQUE, price DECIMAL(8,2) CHECK (price > 0),"
        " created DATE, data BLOB, tags VARCHAR[], note VARCHAR DEFAULT 'none')"
    )
    conn.executemany(
        "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (
                i,
                f"item {i}",
                decimal.Decimal(f"{i}.50"),
                datetime.date(2024, 1, (i % 28) + 1),
                bytes([i, 255]),
                ["a", str(i)],
                None,
            )
            for i in range(1, ROWS + 1)
        ],
    )
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item_id INTEGER REFERENCES items(id), qty INTEGER)")
    conn.execute("INSERT INTO orders SELECT i, 1 + i % 50, i % 7 FROM range(1, 201) t(i)")
    conn.execute("CREATE INDEX orders_qty ON orders(qty)")
    conn.execute("CREATE VIEW big_orders AS SELECT * FROM orders WHERE qty > 3")
    conn.execute("COMMENT ON TABLE items IS 'what we sell'")
    conn.execute("CREATE SCHEMA sales")
    conn.execute("CREATE TABLE sales.regions (id INTEGER PRIMARY KEY, region VARCHAR)")
    conn.execute("INSERT INTO sales.regions VALUES (1, 'north'), (2, 'south')")
    conn.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("duckdb")
    path = tmp / "shop.duckdb"
    seed(path)
    (tmp / "regions.csv").write_text("id,region\n1,north\n2,south\n")
    writer = duckdb.connect()
    writer.execute(
        f"COPY (SELECT i AS id, 1 + i % 2 AS region_id FROM range(10) t(i)) TO '{tmp / 'sales.parquet'}' (FORMAT parquet)"
    )
    writer.close()
    store = make_store(tmp / "data")
    add_target(store, "duck", "duckdb", database=str(path), timeout_ms=5000, allow_explain_analyze=1)
    add_target(store, "duck_slow", "duckdb", database=str(path), timeout_ms=300)
    add_target(store, "duck_cached", "duckdb", database=str(path), timeout_ms=5000, cache_ttl_ms=60_000)
    add_target(store, "duck_files", "duckdb", database=f"{tmp / 'sales.parquet'}, {tmp / 'regions.csv'}", timeout_ms=5000)
    add_target(store, "duck_missing", "duckdb", database=str(tmp / "nope.duckdb"))
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    yield {"handler": handler, "store": store, "path": path, "tmp": tmp}
    handler.pools.close()
    store.close()


# -- the registry and the driver's error table ------------------------------------------------------


def test_duckdb_is_one_more_engine_in_the_registry() -> None:
    engine = engine_for("duckdb")
    assert engine is duck.ENGINE is ENGINES["duckdb"] and "duckdb" in PROTOCOLS
    assert (engine.title, engine.default_port, engine.needs_auth_profile, engine.dialect) == ("DuckDB", 0, False, "duckdb")
    # the check's rules come from the engine: its readers are refused on every engine
    assert {"read_csv", "read_parquet", "glob", "query"} <= engine.readonly.denied_functions


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (duckdb.InterruptException("INTERRUPT Error: Interrupted!"), DeadlineExceeded),
        (duckdb.PermissionException('Permission Error: Cannot access file "/etc/passwd"'), InvalidArgument),
        (
            duckdb.InvalidInputException('Cannot execute statement of type "INSERT" ... attached in read-only mode!'),
            InvalidArgument,
        ),
        (
            duckdb.InvalidInputException('Cannot change configuration option "threads" - the configuration has been locked'),
            InvalidArgument,
        ),
        (duckdb.CatalogException("Catalog Error: Table with name nosuch does not exist!"), InvalidArgument),
        (duckdb.BinderException('Binder Error: Referenced column "x" not found'), InvalidArgument),
        (duckdb.ParserException('Parser Error: syntax error at or near "SELEC"'), InvalidArgument),
        (duckdb.IOException("IO Error: Could not set lock on file"), Unavailable),
        (duckdb.FatalException("FATAL Error: database has been invalidated"), Unavailable),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value.__name__,
)
def test_duckdb_errors_map_to_one_gateway_error(exc: Exception, expected: type) -> None:
    assert type(translate(exc, timeout_ms=100)) is expected
    assert type(duck.ENGINE.translate(exc, timeout_ms=100)) is expected
    assert "\n" not in str(translate(exc))


def test_a_duckdb_target_needs_no_auth_profile_and_an_existing_file(env: dict) -> None:
    row = {"active": 1, "protocol": "duckdb", "database": str(env["path"])}
    assert skip_reason(row, {}) == ""
    assert skip_reason({**row, "database": ""}, {}) == "duckdb path is empty"
    assert skip_reason({**row, "database": "/nonexistent/x.duckdb"}, {}) == "duckdb file missing: x.duckdb"
    twice = f"{env['tmp'] / 'regions.csv'}, {env['tmp'] / 'regions.csv'}"
    assert "distinct names" in skip_reason({**row, "database": twice}, {})
    loaded = {r["target_id"]: r for r in env["store"].read_runtime().table("runtime_mcp_target_profiles")}
    assert (loaded["duck"]["effective"], loaded["duck"]["privilege_warnings"]) == (1, "[]")  # checked at LOAD
    assert (loaded["duck_missing"]["effective"], loaded["duck_missing"]["skip_reason"]) == (0, "duckdb file missing: nope.duckdb")
    missing = error(env["handler"], "run_sql_readonly", target_id="duck_missing", sql="SELECT 1")
    assert missing["code"] == "NOT_FOUND" and "duckdb file missing" in missing["message"]


# -- run_sql_readonly through ReadOnlySql -------------------------------------------------------------


def test_values_come_back_json_safe_and_typed(env: dict) -> None:
    out = ok(
        env["handler"],
        "run_sql_readonly",
        target_id="duck",
        sql="SELECT id, name, price, created, data, tags, note FROM items WHERE id = 2",
        stats=True,
    )
    assert out["rows"] == [[2, "item 2", "2.50", "2024-01-03", {"$bytes_b64": "Av8="}, ["a", "2"], None]]
    types = {c["name"]: c["type"] for c in out["columns"]}
    assert types == {"id": "integer", "name": "varchar", "price": "decimal(8,2)", "created": "date", "data": "blob", "tags": "varchar[]", "note": "varchar"}  # fmt: skip
    assert out["stats"]["digest"].startswith("0x") and out["truncated"] is False


def test_row_and_byte_caps(env: dict) -> None:
    handler = env["handler"]
    capped = ok(handler, "run_sql_readonly", target_id="duck", sql="SELECT id FROM items ORDER BY id", max_rows=10)
    assert [r[0] for r in capped["rows"]] == list(range(1, 11))
    assert capped["truncated"] is True and capped["truncated_reason"] == "max_rows"
    exact = ok(handler, "run_sql_readonly", target_id="duck", sql="SELECT id FROM items", max_rows=ROWS)
    assert exact["row_count"] == ROWS and exact["truncated"] is False
    store = env["store"]
    store.set_variable("mcp-query_max_response_bytes", "1024")
    store.load_to_runtime("MCP VARIABLES")
    reload(store, handler)
    try:
        out = ok(
            handler, "run_sql_readonly", target_id="duck", sql="SELECT id, name, data, tags FROM items ORDER BY id", stats=True
        )
    finally:
        store.set_variable("mcp-query_max_response_bytes", "1000000")
        store.load_to_runtime("MCP VARIABLES")
        reload(store, handler)
    assert 0 < out["row_count"] < ROWS and out["truncated_reason"] == "max_bytes" and out["stats"]["result_bytes"] <= 1024


def test_the_schema_argument_chooses_where_names_resolve(env: dict) -> None:
    handler = env["handler"]
    out = ok(handler, "run_sql_readonly", target_id="duck", schema="sales", sql="SELECT region FROM regions ORDER BY id")
    assert out["rows"] == [["north"], ["south"]]
    # the next call on the (pooled) connection is back in main
    assert ok(handler, "run_sql_readonly", target_id="duck", sql="SELECT count(*) FROM items")["rows"] == [[ROWS]]
    assert error(handler, "run_sql_readonly", target_id="duck", sql="SELECT * FROM regions")["code"] == "INVALID_ARGUMENT"
    assert error(handler, "run_sql_readonly", target_id="duck", schema="nosuch", sql="SELECT 1")["code"] == "INVALID_ARGUMENT"


def test_a_default_schema_from_the_auth_profile(env: dict) -> None:
    conn = duck.ENGINE.connect(_settings(env["path"], default_schema="sales"), timeout_s=1, io_timeout_s=1)
    try:
        assert duck.ENGINE.default_schema(_settings(env["path"], default_schema="sales")) == "sales"
        out = duck.ENGINE.execute(conn, "SELECT count(*) FROM regions", timeout_ms=2000, max_rows=5, max_bytes=1000)
        assert out.rows == [[2]]
        out = duck.ENGINE.execute(conn, "SELECT count(*) FROM items", timeout_ms=2000, max_rows=5, max_bytes=1000, schema="main")
        assert out.rows == [[ROWS]]
    finally:
        conn.close()


def test_a_long_statement_is_interrupted_at_its_timeout(env: dict) -> None:
    handler = env["handler"]
    err = error(handler, "run_sql_readonly", target_id="duck_slow", sql=LONG_RUNNING)
    assert err["code"] == "DEADLINE_EXCEEDED" and "300 ms" in err["message"], err
    err = error(handler, "run_sql_readonly", target_id="duck", sql=LONG_RUNNING, timeout_sec=0.2)
    assert err["code"] == "DEADLINE_EXCEEDED" and "200 ms" in err["message"], err
    # the interrupted connections went back to the pool and answer normally
    for _ in range(3):
        assert ok(handler, "run_sql_readonly", target_id="duck_slow", sql="SELECT 42")["rows"] == [[42]]


def test_an_interrupt_never_outlives_its_statement(env: dict) -> None:
    """A deadline due just as its statement finishes must not reach the next statement."""
    engine = duck.ENGINE
    conn = engine.connect(_settings(env["path"]), timeout_s=1, io_timeout_s=1)
    try:
        for _ in range(30):
            with contextlib.suppress(DeadlineExceeded):  # a 1 ms deadline may interrupt the statement itself
                engine.execute(conn, "SELECT count(*) FROM range(20000)", timeout_ms=1, max_rows=5, max_bytes=10_000)
            assert engine.execute(conn, "SELECT 1", timeout_ms=5000, max_rows=5, max_bytes=1000).rows == [[1]]
    finally:
        conn.close()


def test_explain_gives_duckdbs_json_plan(env: dict) -> None:
    handler = env["handler"]
    out = ok(handler, "explain_sql", target_id="duck", sql="SELECT * FROM orders WHERE qty > 3")
    plan = out["plan"]
    assert isinstance(plan, list) and plan[0]["name"], plan
    analyzed = ok(handler, "explain_sql", target_id="duck", sql="SELECT count(*) FROM orders", analyze=True)
    assert isinstance(analyzed["plan"], str) and "Total Time" in analyzed["plan"]  # DuckDB's text profile
    text = ok(handler, "run_sql_readonly", target_id="duck", sql="EXPLAIN SELECT * FROM items")
    assert text["rows"][0][0] == "physical_plan"
    for refused in ("EXPLAIN ANALYZE SELECT 1", "EXPLAIN (FORMAT JSON) SELECT 1", "EXPLAIN (ANALYZE) SELECT 1"):
        assert error(handler, "run_sql_readonly", target_id="duck", sql=refused)["code"] == "INVALID_ARGUMENT", refused


# -- the catalog tools ------------------------------------------------------------------------------


def test_discovery_tools(env: dict) -> None:
    handler = env["handler"]
    assert ok(handler, "list_schemas", target_id="duck")["schemas"] == ["main", "sales"]
    tables = ok(handler, "list_tables", target_id="duck")["tables"]
    assert [(t["name"], t["type"]) for t in tables] == [("big_orders", "view"), ("items", "table"), ("orders", "table")]
    assert next(t for t in tables if t["name"] == "items")["comment"] == "what we sell"
    assert [t["name"] for t in ok(handler, "list_tables", target_id="duck", schema="sales")["tables"]] == ["regions"]
    assert [t["name"] for t in ok(handler, "list_tables", target_id="duck", name_filter="ORD")["tables"]] == [
        "big_orders",
        "orders",
    ]
    described = ok(handler, "describe_table", target_id="duck", table="items")
    columns = {c["name"]: c for c in described["columns"]}
    assert columns["id"]["key"] == "PRI" and columns["id"]["nullable"] is False
    assert columns["name"]["key"] == "UNI" and columns["price"]["type"] == "DECIMAL(8,2)"
    assert columns["note"]["default"] == "'none'"
    orders = {c["name"]: c for c in ok(handler, "describe_table", target_id="duck", table="orders")["columns"]}
    assert orders["qty"]["key"] == "MUL"
    constraints = ok(handler, "get_constraints", target_id="duck", table="orders")
    assert constraints["primary_key"]["columns"] == ["id"]
    fk = constraints["foreign_keys"][0]
    assert (fk["columns"], fk["referenced_table"], fk["referenced_columns"]) == (["item_id"], "items", ["id"])
    checks = ok(handler, "get_constraints", target_id="duck", table="items")["checks"]
    assert [c["expression"] for c in checks] == ["(price > 0)"]
    assert error(handler, "describe_table", target_id="duck", table="nosuch")["code"] == "NOT_FOUND"


def test_sampling_tools(env: dict) -> None:
    handler = env["handler"]
    rows = ok(handler, "sample_rows", target_id="duck", table="items", columns=["id", "name"], where="id <= 3", order_by="id")
    assert rows["rows"] == [[1, "item 1"], [2, "item 2"], [3, "item 3"]]
    distinct = ok(handler, "sample_distinct", target_id="duck", table="orders", column="qty")
    assert sorted(r[0] for r in distinct["rows"]) == list(range(7))


def test_table_facts_snapshot_and_privileges(env: dict) -> None:
    engine = duck.ENGINE
    conn = engine.connect(_settings(env["path"]), timeout_s=1, io_timeout_s=1)
    try:
        facts = engine.table_facts(conn, "main", "orders")
        assert facts["rows_estimate"] == 200 and facts["size_bytes"] is None
        assert [(i["columns"], i["primary"], i["unique"]) for i in facts["indexes"]] == [
            (["id"], True, True),
            (["qty"], False, False),
        ]
        snapshot = engine.snapshot(conn, "main")
        assert sorted(snapshot) == ["big_orders", "items", "orders"]
        assert snapshot["orders"]["foreign_keys"][0]["referenced_table"] == "items"
        assert snapshot["big_orders"]["depends_on"] == [["main", "orders"]]
        assert snapshot["items"]["unique"] == [["name"]]
        assert engine.privilege_warnings(conn) == []
        assert engine.has_rowid(conn, "main", "items") is False
        assert _setting(conn, "python_enable_replacements") == "false"  # no Python object read as a table
    finally:
        conn.close()
    writable = duckdb.connect(str(env["tmp"] / "writable.duckdb"))
    try:
        warnings = engine.privilege_warnings(duck.DuckDBConnection(writable, (), "main"))
        assert len(warnings) == 3 and "writable" in warnings[2]
    finally:
        writable.close()


# -- listed Parquet/CSV files ------------------------------------------------------------------------


def test_listed_files_are_views_and_nothing_else_is_readable(env: dict) -> None:
    handler = env["handler"]
    assert [t["name"] for t in ok(handler, "list_tables", target_id="duck_files")["tables"]] == ["regions", "sales"]
    out = ok(
        handler,
        "run_sql_readonly",
        target_id="duck_files",
        sql="SELECT r.region, count(*) FROM sales s JOIN regions r ON r.id = s.region_id GROUP BY 1 ORDER BY 1",
    )
    assert out["rows"] == [["north", 5], ["south", 5]]
    for sql in ("SELECT * FROM read_csv('/etc/passwd')", f"SELECT * FROM read_csv('{env['tmp'] / 'regions.csv'}')"):
        assert error(handler, "run_sql_readonly", target_id="duck_files", sql=sql)["code"] == "INVALID_ARGUMENT"
    # the database itself refuses any file but the listed ones, whatever reaches it
    conn = duck.ENGINE.connect(_settings(env["tmp"] / "x", database=f"{env['tmp'] / 'regions.csv'}"), timeout_s=1, io_timeout_s=1)
    try:
        with pytest.raises(InvalidArgument, match="reads only its own data"):
            duck.ENGINE.execute(conn, "SELECT * FROM read_csv('/etc/passwd')", timeout_ms=2000, max_rows=5, max_bytes=10_000)
        with pytest.raises(InvalidArgument, match="reads only its own data"):
            duck.ENGINE.execute(conn, "SET enable_external_access = true", timeout_ms=2000, max_rows=5, max_bytes=10_000)
        assert duck.ENGINE.privilege_warnings(conn) == []
        assert _setting(conn, "python_enable_replacements") == "false"
    finally:
        conn.close()


def _setting(conn: duck.DuckDBConnection, name: str) -> str:
    return conn.conn.execute("SELECT value FROM duckdb_settings() WHERE name = ?", (name,)).fetchone()[0]


# -- rules, the result cache and digests: engine-neutral, so DuckDB has them ------------------------


def test_query_rules_apply_to_duckdb(env: dict) -> None:
    store, handler = env["store"], env["handler"]
    insert(store, "mcp_query_rules", rule_id=31, active=1, match_pattern="orders", error_msg="orders are private", apply=1)
    store.load_to_runtime("MCP QUERY RULES")
    reload(store, handler)
    try:
        refused = error(handler, "run_sql_readonly", target_id="duck", sql="SELECT count(*) FROM orders")
        assert refused["message"] == "orders are private"
    finally:
        store.conn().execute("DELETE FROM main.mcp_query_rules")
        store.load_to_runtime("MCP QUERY RULES")
        reload(store, handler)
    assert ok(handler, "run_sql_readonly", target_id="duck", sql="SELECT count(*) FROM orders")["rows"] == [[200]]


def test_results_are_cached_and_digested(env: dict) -> None:
    handler = env["handler"]
    sql = "SELECT item_id, sum(qty) FROM orders GROUP BY item_id ORDER BY item_id LIMIT 3"
    first = ok(handler, "run_sql_readonly", target_id="duck_cached", sql=sql, stats=True)
    second = ok(handler, "run_sql_readonly", target_id="duck_cached", sql=sql, stats=True)
    assert first["stats"]["cache"] == "miss" and second["stats"]["cache"] == "hit"
    assert first["rows"] == second["rows"] and first["stats"]["digest"] == second["stats"]["digest"]
    assert ok(handler, "run_sql_readonly", target_id="duck", sql=sql, stats=True)["stats"]["cache"] == "off"
    sql_path = handler.services.sql
    sql_path.digests.flush(env["store"])
    found = (
        env["store"]
        .conn()
        .execute(
            "SELECT sum(count_star) FROM stats_mcp_query_digest WHERE target_id = 'duck_cached' AND digest = ?",
            (first["stats"]["digest"],),
        )
        .fetchone()
    )
    assert found[0] >= 1


# -- profiling and joins: the shop of tests/query, in DuckDB files ------------------------------------


def build_shop(path: Path, *, foreign_keys: bool) -> None:
    """tests/query/shop.py's shop (its PostgreSQL types are DuckDB's too), with and without keys."""
    conn = duckdb.connect(str(path))
    for statement in shop_rows.ddl("pgsql", foreign_keys=foreign_keys):
        conn.execute(statement)
    for table, (columns, values) in shop_rows.rows().items():  # one statement per table: executemany is slow on DuckDB
        row = f"({', '.join('?' for _ in columns)})"
        conn.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join(row for _ in values)}", [v for r in values for v in r]
        )
    conn.execute("CREATE TABLE events AS SELECT i AS id, i % 1000 AS account, 'x' AS note FROM range(20000) t(i)")
    conn.execute("CREATE TABLE lookups AS SELECT i AS id, i AS code FROM range(20000) t(i)")
    conn.execute("CREATE INDEX lookups_code ON lookups (code)")
    conn.close()


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Query, AI and admin handlers over two DuckDB shops, sharing one worker's services (and its evidence)."""
    tmp = tmp_path_factory.mktemp("duckshop")
    build_shop(tmp / "fk.duckdb", foreign_keys=True)
    build_shop(tmp / "nofk.duckdb", foreign_keys=False)
    store = open_store(tmp / "data")  # every declared variable: /mcp/ai's too
    store.initialize()
    add_target(store, "shop_fk", "duckdb", database=str(tmp / "fk.duckdb"), timeout_ms=10_000)
    add_target(store, "shop_nofk", "duckdb", database=str(tmp / "nofk.duckdb"), timeout_ms=10_000)
    store.set_variable("ai-slow_query_ms", "0")  # every frequent digest's plan is read
    store.load_to_runtime("MCP PROFILES")
    store.load_to_runtime("MCP VARIABLES")
    services = Services(data_dir=store.data_dir, store=store, runtime=store.read_runtime(), stats=None, metrics=None)  # type: ignore[arg-type]
    services.evidence = EvidenceRecorder(store)
    share_backends(services)
    query = QueryHandler(services)
    yield {"query": query, "ai": AiHandler(services), "admin": AdminHandler(services), "rows": shop_rows.rows()}
    query.catalog.close()
    query.pools.close()
    store.close()


def values_of(rows: dict, table: str, column: str) -> list[Any]:
    names, values = rows[table]
    return [row[names.index(column)] for row in values]


def test_table_profile_on_duckdb(shop: dict) -> None:
    handler = shop["query"]
    out = ok(handler, "table_profile", target_id="shop_fk", table="customers")
    assert (out["row_count"], out["row_count_exact"], out["sampled"], out["sample_method"]) == (30, True, False, "full")
    assert any(i["primary"] and i["columns"] == ["id"] for i in out["indexes"])
    columns = {c["name"]: c for c in out["columns"]}
    emails = values_of(shop["rows"], "customers", "email")
    assert columns["email"]["null_ratio"] == pytest.approx(emails.count(None) / 30, abs=1e-6)
    assert columns["email"]["distinct_estimate"] == 26 and columns["email"]["family"] == "string"
    names = values_of(shop["rows"], "customers", "name")
    assert columns["name"]["avg_length"] == pytest.approx(sum(len(n) for n in names) / 30, abs=0.01)
    joined = values_of(shop["rows"], "customers", "joined_on")
    assert (columns["joined_on"]["min"], columns["joined_on"]["max"]) == (min(joined).isoformat(), max(joined).isoformat())
    # more rows than the sample asks for: DuckDB's own seeded Bernoulli sample, the same rows each time
    sampled = ok(handler, "table_profile", target_id="shop_fk", table="order_items", sample_rows=100)
    assert (sampled["sampled"], sampled["sample_method"], sampled["row_count"]) == (True, "bernoulli", 300)
    assert 40 <= sampled["sample_rows"] <= 200
    assert {c["name"]: c for c in sampled["columns"]}["quantity"]["distinct_estimate"] == 5
    again = ok(handler, "table_profile", target_id="shop_fk", table="order_items", sample_rows=100)
    assert again["columns"] == sampled["columns"]


def test_column_profile_on_duckdb_types(shop: dict, env: dict) -> None:
    handler = shop["query"]
    joined = ok(handler, "column_profile", target_id="shop_fk", table="customers", column="joined_on", buckets=3)
    assert joined["histogram_axis"] == "epoch_seconds" and sum(b["count"] for b in joined["histogram"]) == 30
    first = min(values_of(shop["rows"], "customers", "joined_on"))
    assert joined["histogram"][0]["low"] == datetime.datetime(first.year, first.month, first.day, tzinfo=datetime.UTC).timestamp()
    total = ok(handler, "column_profile", target_id="shop_fk", table="orders", column="total", buckets=5, top_k=3)
    assert total["histogram_axis"] == "value" and sum(b["count"] for b in total["histogram"]) == 100
    email = ok(handler, "column_profile", target_id="shop_fk", table="customers", column="email")
    assert email["unique_in_sample"] is True and email["pattern_hints"][0] == {"pattern": "email", "share": 1.0}
    # a list and a blob (the other fixture's items): read as text, measured in bytes
    items = {c["name"]: c for c in ok(env["handler"], "table_profile", target_id="duck", table="items")["columns"]}
    assert (items["tags"]["family"], items["data"]["family"]) == ("other", "binary")
    assert items["data"]["avg_length"] == 2.0 and items["tags"]["distinct_estimate"] == ROWS
    assert items["price"]["family"] == "decimal" and items["created"]["family"] == "temporal"


@pytest.mark.parametrize(
    ("declared", "family"),
    [
        ("HUGEINT", "integer"),
        ("UBIGINT", "integer"),
        ("INTEGER[3]", "other"),
        ("VARCHAR[]", "other"),
        ("STRUCT(x INTEGER)", "other"),
        ("MAP(VARCHAR, INTEGER)", "other"),
        ("ENUM('a', 'b')", "string"),
        ("TIMESTAMP WITH TIME ZONE", "temporal"),
        ("TIMESTAMP_NS", "temporal"),
        ("BLOB", "binary"),
        ("BIT", "other"),
        ("UUID", "uuid"),
        ("JSON", "json"),
        ("BOOLEAN", "boolean"),
        ("DECIMAL(10,2)", "decimal"),
    ],
)
def test_duckdb_type_families(declared: str, family: str) -> None:
    assert duck.ENGINE.profiling.type_family(declared) == family


def test_joins_on_duckdb(shop: dict) -> None:
    handler = shop["query"]
    declared = ok(handler, "suggest_joins", target_id="shop_fk", table_a="orders")["candidates"]
    assert {(c["from_table"], c["from_columns"][0], c["to_table"]) for c in declared} == {
        ("orders", "customer_id", "customers"),
        ("orders", "address_id", "addresses"),
        ("order_items", "order_id", "orders"),
    }
    assert all(c["kind"] == "declared" and c["confidence"] == 1.0 for c in declared)
    inferred = ok(handler, "suggest_joins", target_id="shop_nofk", table_a="orders", table_b="customers")["candidates"][0]
    assert (inferred["from_columns"], inferred["to_table"], inferred["kind"]) == (["customer_id"], "customers", "inferred")
    assert inferred["confidence"] >= 0.8 and inferred["evidence"]["overlap_ratio"] == 1.0
    rows = ok(handler, "run_sql_readonly", target_id="shop_nofk", sql=inferred["example_sql"])
    assert rows["row_count"] == 10  # the ON clause runs as given
    ref = ok(handler, "find_reference_candidates", target_id="shop_nofk", table="order_items", column="product_id")
    assert (ref["candidates"][0]["to_table"], ref["candidates"][0]["to_columns"]) == ("products", ["id"])


def test_full_scans_in_duckdbs_plans(shop: dict) -> None:
    handler = shop["query"]
    sql = "SELECT o.id FROM orders o JOIN customers c ON c.id = o.customer_id WHERE o.status = 'paid'"
    plan = ok(handler, "explain_sql", target_id="shop_fk", sql=sql)["plan"]
    scans = duck.ENGINE.full_scans(plan)
    assert sorted(s.table for s in scans) == ["customers", "orders"]
    assert all(s.alias == s.table and isinstance(s.rows_estimate, int) for s in scans)
    # a quoted name in the plan's database.schema.table; an index scan and a file's reader are no full scans
    quoted = {"name": "SEQ_SCAN", "extra_info": {"Table": 'shop."my schema"."odd.table"', "Estimated Cardinality": "7"}}
    index = {"name": "TABLE_SCAN", "extra_info": {"Table": "shop.main.orders", "Type": "Index Scan"}}
    parquet = {"name": "READ_PARQUET", "extra_info": {"Function": "READ_PARQUET", "Estimated Cardinality": "9"}}
    plan = [{"name": "HASH_JOIN", "children": [quoted, index, parquet], "extra_info": {}}]
    assert duck.ENGINE.full_scans(plan) == [FullScan("odd.table", "odd.table", 7)]
    assert duck.ENGINE.full_scans("a text profile") == []


def test_index_advice_for_a_duckdb_target(shop: dict) -> None:
    """recommendation.get on /mcp/ai: a frequent filtered full scan gets the CREATE INDEX serving it."""
    for account in range(6):
        sql = f"SELECT count(*) FROM events e WHERE e.account = {account}"
        assert ok(shop["query"], "run_sql_readonly", target_id="shop_fk", sql=sql)["rows"][0][0] == 20
    # an indexed lookup: DuckDB's EXPLAIN shows it as a sequential scan (the ART index is chosen as
    # the statement starts), so the catalog is what tells the index exists
    for code in range(6):
        lookup = ok(shop["query"], "run_sql_readonly", target_id="shop_fk", sql=f"SELECT id FROM lookups WHERE code = {code}")
        assert lookup["rows"] == [[code]]
    out = ok(shop["ai"], "recommendation.get", target_id="shop_fk")
    missing = [r for r in out["recommendations"] if r["kind"] == "missing_index"]
    assert len(missing) == 1, missing
    index = missing[0]
    assert index["action"].startswith('CREATE INDEX "ix_events_account" ON "events" ("account")'), index
    assert index["evidence"]["full_scans"][0]["table"] == "events" and index["evidence"]["calls"] >= 6
    assert any("lookups has an index on (code)" in note for note in out["notes"]), out["notes"]


def test_admin_tools_refuse_a_duckdb_target(shop: dict) -> None:
    for name, extra in (("admin_list_users", {}), ("admin_show_processes", {}), ("admin_kill_query", {"process_id": 1})):
        refused = error(shop["admin"], name, target_id="shop_fk", **extra)
        assert refused["code"] == "INVALID_ARGUMENT"
        assert refused["message"] == "target 'shop_fk' is DuckDB: accounts and processes are not supported by duckdb"


# -- a running gateway, the official SDK client ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif("query" not in registered_endpoints(), reason="QueryHandler is not registered")
def test_duckdb_target_over_the_sdk(tmp_path: Path) -> None:
    path = tmp_path / "shop.duckdb"
    seed(path)
    with start_gateway() as gateway, gateway.client() as http:
        for statement in (
            f"INSERT INTO mcp_target_profiles (target_id, protocol, database, description) VALUES ('shop', 'duckdb', '{path}', 'the shop')",
            "LOAD MCP PROFILES TO RUNTIME",
        ):
            result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
            assert result["isError"] is False, result
        _wait_for_target(gateway, http, "shop")

        async def scenario() -> None:
            headers = {"Authorization": f"Bearer {gateway.tokens['query']}"}
            async with (
                httpx2.AsyncClient(headers=headers, verify=gateway.ssl_context(), timeout=httpx2.Timeout(20.0)) as client_http,
                Client(
                    streamable_http_client(gateway.url("query"), http_client=client_http), mode="auto", raise_exceptions=True
                ) as client,
            ):
                targets = await client.call_tool("list_targets", {})
                shop = next(t for t in targets.structured_content["targets"] if t["target_id"] == "shop")
                assert shop["protocol"] == "duckdb"
                tables = await client.call_tool("list_tables", {"target_id": "shop"})
                assert [t["name"] for t in tables.structured_content["tables"]] == ["big_orders", "items", "orders"]
                described = await client.call_tool("describe_table", {"target_id": "shop", "table": "orders"})
                assert [c["name"] for c in described.structured_content["columns"]] == ["id", "item_id", "qty"]
                out = await client.call_tool("run_sql_readonly", {"target_id": "shop", "sql": "SELECT sum(qty) FROM orders"})
                assert out.is_error is False and out.structured_content["rows"] == [[sum(i % 7 for i in range(1, 201))]]
                refused = await client.call_tool(
                    "run_sql_readonly", {"target_id": "shop", "sql": "SELECT * FROM read_csv('/etc/passwd')"}
                )
                assert refused.is_error is True and refused.structured_content["error"]["code"] == "INVALID_ARGUMENT"

        anyio.run(scenario)


def _wait_for_target(gateway: GatewayProcess, http: Any, target_id: str) -> None:
    deadline = time.monotonic() + 10  # workers follow the runtime within about a second
    while time.monotonic() < deadline:
        targets = call_tool(http, gateway, "query", "list_targets", {})["structuredContent"]["targets"]
        if any(t["target_id"] == target_id for t in targets):
            return
        time.sleep(0.2)
    raise AssertionError(f"target {target_id} never appeared")


class _settings:  # noqa: N801 - a TargetSettings for direct engine calls
    def __init__(self, path: Path, *, database: str | None = None, default_schema: str = "") -> None:
        self.target_id, self.host, self.port = "direct", "", 0
        self.database = database if database is not None else str(path)
        self.username = self.password = self.ssl_mode = ""
        self.default_schema = default_schema
        self.timeout_ms, self.use_ssl = 5000, False
