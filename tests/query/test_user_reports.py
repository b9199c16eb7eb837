"""What a new user hit with /mcp/query's SQL tools (issue 29, item 9): the refusal of INTO OUTFILE
says what it is, an unknown table is NOT_FOUND, and MariaDB's plan is parsed JSON like
PostgreSQL's, on real MariaDB, PostgreSQL and SQLite (the `sql_env` of test_sql_tools)."""

from __future__ import annotations

import pytest

from tests.query import error, ok
from tests.query.test_sql_tools import ENGINES, sql_env  # noqa: F401 - the shared fixture


@pytest.mark.parametrize("engine", ("maria", "pg"))
@pytest.mark.parametrize("into", ("OUTFILE", "DUMPFILE"))
def test_into_outfile_is_refused_saying_what_it_is(sql_env: dict, engine: str, into: str) -> None:  # noqa: F811
    err = error(sql_env["handler"], "run_sql_readonly", target_id=engine, sql=f"SELECT * FROM items INTO {into} '/tmp/i29_x'")
    assert err["code"] == "INVALID_ARGUMENT"
    assert f"INTO {into} writes a file" in err["message"] and "could not be parsed" not in err["message"]


@pytest.mark.parametrize("engine", ENGINES)
def test_an_unknown_table_is_not_found(sql_env: dict, engine: str) -> None:  # noqa: F811
    err = error(sql_env["handler"], "run_sql_readonly", target_id=engine, sql="SELECT * FROM no_such_table_i29")
    assert err["code"] == "NOT_FOUND", err
    assert "no_such_table_i29" in err["message"]
    # an unknown column is still the caller's mistake, not a missing object
    assert (
        error(sql_env["handler"], "run_sql_readonly", target_id=engine, sql="SELECT nope FROM items")["code"]
        == "INVALID_ARGUMENT"
    )


@pytest.mark.parametrize("engine", ("maria", "pg"))
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a.name, COUNT(*) FROM items a JOIN items b ON b.name = a.name WHERE a.price > 1 GROUP BY a.name ORDER BY 2 DESC",
        # MariaDB writes the condition's text into its JSON unescaped: a quote in a literal broke the plan
        """SELECT * FROM items WHERE name = 'say "hi"' OR note LIKE '%"%'""",
    ],
)
def test_the_plan_is_parsed_json_on_mariadb_as_on_postgresql(sql_env: dict, engine: str, sql: str) -> None:  # noqa: F811
    plan = ok(sql_env["handler"], "explain_sql", target_id=engine, sql=sql)["plan"]
    assert isinstance(plan, (dict, list)), type(plan)
    if engine == "maria":
        assert "query_block" in plan
    else:
        assert plan[0]["Plan"]["Node Type"]


# -- item 11: find_reference_candidates when the name does not tell ------------------------------

NO_KEY_DDL = [
    "CREATE TABLE i29_customers (id INT, name VARCHAR(40))",  # no declared key anywhere
    "CREATE TABLE i29_products (id INT, title VARCHAR(40))",
    "CREATE TABLE i29_orders (order_no INT, buyer_ref INT, qty INT, note VARCHAR(40))",
]


def _seed_without_keys(sql_env: dict, engine: str) -> None:  # noqa: F811
    import sqlite3

    import psycopg
    import pymysql

    rows = {
        "i29_customers": [(1000 + i, f"c{i}") for i in range(60)],
        "i29_products": [(i, f"p{i}") for i in range(1, 41)],
        "i29_orders": [(i, 1000 + (i * 7) % 60, 1 + i % 3, "n") for i in range(200)],
    }
    if engine == "maria":
        conn = pymysql.connect(**sql_env["maria"], autocommit=True)
        run, many, mark = conn.cursor().execute, conn.cursor().executemany, "%s"
    elif engine == "pg":
        conn = psycopg.connect(**sql_env["pg"], autocommit=True)
        run, mark = conn.execute, "%s"
        many = lambda sql, values: conn.cursor().executemany(sql, values)  # noqa: E731
    else:
        conn = sqlite3.connect(sql_env["lite"], isolation_level=None)
        run, many, mark = conn.execute, conn.executemany, "?"
    for statement in NO_KEY_DDL:
        run(statement)
    for table, values in rows.items():
        many(f"INSERT INTO {table} VALUES ({', '.join(mark for _ in values[0])})", values)
    conn.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_reference_the_name_does_not_tell_is_found_by_its_values(sql_env: dict, engine: str) -> None:  # noqa: F811
    _seed_without_keys(sql_env, engine)
    out = ok(sql_env["handler"], "find_reference_candidates", target_id=engine, table="i29_orders", column="buyer_ref")
    assert out["candidates"], out
    top = out["candidates"][0]
    assert (top["to_table"], top["to_columns"]) == ("i29_customers", ["id"]), out["candidates"]
    assert top["evidence"]["overlap_ratio"] == 1.0 and "name:none" in top["evidence"]["signals"]
    assert top["confidence"] > 0.5
    # products.id has a compatible type but holds other values: not proposed
    assert all(c["to_table"] != "i29_products" for c in out["candidates"]), out["candidates"]
    # the ON clause runs as given
    joined = ok(sql_env["handler"], "run_sql_readonly", target_id=engine, sql=top["example_sql"])
    assert joined["row_count"] == 10
    # a column whose values are in no key gets nothing
    qty = ok(sql_env["handler"], "find_reference_candidates", target_id=engine, table="i29_orders", column="order_no")
    assert all(c["to_table"] != "i29_customers" for c in qty["candidates"]), qty["candidates"]
