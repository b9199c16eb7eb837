"""Which names the read-only check refuses, and where (backends/readonly.py): every engine's denied
functions are refused as calls on every engine, table functions included; a plain table name is
checked only against the statement's own engine (its own function names, its credential catalogs,
and on DuckDB a name that would be read as a file). A table called `query` or `glob` on SQLite is
a table."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backends.engines import engine_for
from backends.readonly import check_readonly
from gateway.errors import InvalidArgument
from handlers.query import QueryHandler
from tests.query import add_target, error, make_services, make_store, ok

PROTOCOLS = ("mysql", "pgsql", "sqlite", "duckdb")
# Other engines' function names, used as plain table names: tables like any other.
TABLES_NAMED_LIKE_FUNCTIONS = ["query", "read_csv", "getenv", "load_extension", "readfile", "pg_sleep", "dblink"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", TABLES_NAMED_LIKE_FUNCTIONS)
def test_a_table_named_like_a_denied_function_is_a_table(protocol: str, name: str) -> None:
    engine = engine_for(protocol)
    if own_function(protocol, name):
        pytest.skip("the engine's own function (test_own_function_names_are_refused_as_tables)")
    checked = check_readonly(f"SELECT * FROM {name} AS t WHERE t.id = 1", engine, row_cap=10)
    assert name in checked.sql.lower()
    if not own_function(protocol, "glob"):
        quoted = engine.quote("glob")  # GLOB is an operator: as a table name it is quoted
        assert quoted in check_readonly(f"SELECT * FROM {quoted} JOIN {name} ON 1 = 1", engine, row_cap=10).sql


def own_function(protocol: str, name: str) -> bool:
    rules = engine_for(protocol).readonly
    return name in rules.denied_functions or name.startswith(rules.denied_prefixes)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM query('SELECT 1')",  # DuckDB's
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT getenv('HOME')",
        "SELECT load_extension('x')",  # SQLite's
        "SELECT * FROM fsdir('/')",
        "SELECT pg_sleep(1)",  # PostgreSQL's
        "SELECT * FROM dblink('host=x', 'SELECT 1') AS t(a int)",
        "SELECT sleep(1)",  # MySQL's
        "SELECT t.a FROM t, LATERAL read_text(t.a)",
    ],
)
def test_denied_functions_are_refused_as_calls_on_every_engine(protocol: str, sql: str) -> None:
    with pytest.raises(InvalidArgument, match="refused"):
        check_readonly(sql, engine_for(protocol))


@pytest.mark.parametrize(
    ("protocol", "sql"),
    [
        ("sqlite", "SELECT * FROM fsdir WHERE name = '/etc'"),  # a table-valued function, its argument from WHERE
        ("sqlite", "SELECT * FROM sqlar_anything"),  # a denied prefix
        ("duckdb", "SELECT * FROM query"),
        ("duckdb", "SELECT * FROM read_csv AS r"),
    ],
)
def test_own_function_names_are_refused_as_tables(protocol: str, sql: str) -> None:
    with pytest.raises(InvalidArgument, match="table function"):
        check_readonly(sql, engine_for(protocol))


@pytest.mark.parametrize(
    ("sql", "refused_on"),
    [
        ("SELECT * FROM mysql.user", {"mysql"}),
        ("SELECT * FROM pg_authid", {"pgsql"}),
        ("SELECT * FROM pg_catalog.pg_shadow", {"pgsql"}),
        ("SELECT * FROM 'data.csv'", {"duckdb"}),
    ],
)
def test_table_names_are_their_own_engines_matter(sql: str, refused_on: set[str]) -> None:
    for protocol in PROTOCOLS:
        engine = engine_for(protocol)
        if protocol in refused_on:
            with pytest.raises(InvalidArgument, match="refused"):
                check_readonly(sql, engine)
        elif protocol != "mysql" or "'" not in sql:  # MySQL reads '...' after FROM as no table at all
            check_readonly(sql, engine)


def test_replacement_scans_refuse_paths_only_where_the_engine_reads_them() -> None:
    duck, lite = engine_for("duckdb"), engine_for("sqlite")
    assert duck.readonly.replacement_scans and not lite.readonly.replacement_scans
    for sql in ('SELECT * FROM "/etc/passwd"', 'SELECT * FROM "x.parquet"', 'SELECT * FROM "s3://b/k"', 'SELECT * FROM "*.csv"'):
        with pytest.raises(InvalidArgument, match="would be read as a file"):
            check_readonly(sql, duck)
        check_readonly(sql, lite)  # a (missing) table to SQLite, which reads no file by name
    check_readonly('SELECT * FROM "order items"', duck)


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("names")
    path = tmp / "names.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE query (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("CREATE TABLE glob (id INTEGER PRIMARY KEY)")
    conn.executemany("INSERT INTO query VALUES (?, ?)", [(1, "a"), (2, "b")])
    conn.commit()
    conn.close()
    store = make_store(tmp / "data")
    add_target(store, "lite", "sqlite", database=str(Path(path)))
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    yield handler
    handler.pools.close()
    store.close()


def test_select_from_a_table_named_query_on_sqlite(lite: QueryHandler) -> None:
    assert ok(lite, "run_sql_readonly", target_id="lite", sql="SELECT * FROM query ORDER BY id")["rows"] == [[1, "a"], [2, "b"]]
    joined = ok(lite, "run_sql_readonly", target_id="lite", sql='SELECT count(*) FROM query q LEFT JOIN "glob" g ON g.id = q.id')
    assert joined["rows"] == [[2]]
    assert ok(lite, "sample_rows", target_id="lite", table="query", order_by="id")["rows"] == [[1, "a"], [2, "b"]]
    assert ok(lite, "describe_table", target_id="lite", table="glob")["columns"][0]["name"] == "id"
    refused = error(lite, "run_sql_readonly", target_id="lite", sql="SELECT * FROM query('SELECT 1')")
    assert refused["code"] == "INVALID_ARGUMENT" and refused["message"].startswith("refused:")
