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
