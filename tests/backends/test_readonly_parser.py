"""Layer 3 on its own: the sqlglot allowlist (backends/readonly.py), no database involved.

The whole hostile corpus is refused by the parser alone; ordinary read statements pass and
come back regenerated; the output is a fixed point of the checker; and random text never
gets anything but a clean refusal or a statement that checks again to itself.
"""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from backends.engines import engine_for
from backends.readonly import check_readonly
from gateway.errors import InvalidArgument
from tests.backends.test_readonly_hostile import MYSQL_HOSTILE, PG_HOSTILE

SQLITE_HOSTILE = [
    "SELECT load_extension('/tmp/pwned.so')",
    "SELECT readfile('/etc/passwd')",
    "SELECT writefile('/tmp/pwned', 'x')",
    "SELECT * FROM fsdir('/')",
    "SELECT fts3_tokenizer('simple')",
    "ATTACH DATABASE '/tmp/pwned.db' AS pwned",
    "DETACH DATABASE main",
    "PRAGMA writable_schema = 1",
    "PRAGMA query_only = 0",
    "VACUUM INTO '/tmp/pwned.db'",
    "DELETE FROM items",
    "INSERT INTO items VALUES (1)",
    "CREATE TABLE pwned (a)",
    "SELECT 1; DELETE FROM items",
    "REPLACE INTO items VALUES (1)",
    "WITH d AS (SELECT 1) DELETE FROM items",
    "EXPLAIN DELETE FROM items",
]

ACCEPTED = [
    ("mysql", "SELECT id, name FROM items WHERE price > 10 ORDER BY id", "select"),
    ("mysql", "select * from items where name = 'a;b' -- trailing comment", "select"),
    ("mysql", "SELECT 1 UNION ALL SELECT 2", "select"),
    ("mysql", "WITH x AS (SELECT 1 AS a) SELECT a FROM x", "select"),
    ("mysql", "SHOW TABLES", "show"),
    ("mysql", "SHOW CREATE TABLE items", "show"),
    ("mysql", "DESCRIBE items", "describe"),
    ("mysql", "EXPLAIN SELECT * FROM items", "explain"),
    ("pgsql", "SELECT id FROM items WHERE name LIKE 'a%' ORDER BY 1", "select"),
    ("pgsql", "SELECT current_setting('work_mem')", "select"),
    ("pgsql", "SELECT x FROM generate_series(1, 3) AS x", "select"),
    ("pgsql", "SHOW search_path", "show"),
    ("pgsql", "EXPLAIN SELECT * FROM items", "explain"),
    ("pgsql", "SELECT * FROM (SELECT 1) AS s", "select"),
    ("sqlite", "SELECT * FROM pragma_table_info('items')", "select"),
    ("sqlite", "EXPLAIN QUERY PLAN SELECT * FROM items", "explain"),
]


@pytest.mark.parametrize("sql", MYSQL_HOSTILE)
def test_parser_alone_refuses_mysql_corpus(sql: str) -> None:
    with pytest.raises(InvalidArgument, match="refused"):
        check_readonly(sql, engine_for("mysql"), row_cap=10)


@pytest.mark.parametrize("sql", PG_HOSTILE)
def test_parser_alone_refuses_postgres_corpus(sql: str) -> None:
    with pytest.raises(InvalidArgument, match="refused"):
        check_readonly(sql, engine_for("pgsql"), row_cap=10)


@pytest.mark.parametrize("sql", SQLITE_HOSTILE)
def test_parser_alone_refuses_sqlite_corpus(sql: str) -> None:
    with pytest.raises(InvalidArgument, match="refused"):
        check_readonly(sql, engine_for("sqlite"), row_cap=10)


@pytest.mark.parametrize(("protocol", "sql", "kind"), ACCEPTED)
def test_read_statements_pass_and_regenerate_to_a_fixed_point(protocol: str, sql: str, kind: str) -> None:
    checked = check_readonly(sql, engine_for(protocol), row_cap=11)
    assert checked.kind == kind
    assert "--" not in checked.sql  # comments are not carried into what runs
    if kind == "select":
        assert checked.sql.endswith("LIMIT 11") or "LIMIT" in checked.sql
    assert check_readonly(checked.sql, engine_for(protocol), row_cap=11).sql == checked.sql


def test_reasons_are_specific() -> None:
    cases = {
        ("pgsql", "SELECT 1; SELECT 2"): "exactly one statement",
        ("pgsql", "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d"): "writable CTEs",
        ("pgsql", "SELECT * FROM pg_read_file('/etc/passwd')"): "pg_read_file",
        ("mysql", "SELECT /*! SLEEP(1) */ 1"): "conditional comments",
        ("mysql", "SELECT * FROM t FOR UPDATE"): "LOCK",
        ("mysql", "SELECT 1 INTO @x"): "INTO",
        ("pgsql", "EXPLAIN ANALYZE SELECT 1"): "ANALYZE",
        ("mysql", "SELECT * FROM t INTO OUTFILE '/tmp/x'"): "INTO OUTFILE writes a file on the database server",
    }
    for (protocol, sql), reason in cases.items():
        with pytest.raises(InvalidArgument) as info:
            check_readonly(sql, engine_for(protocol))
        assert reason in info.value.message, (sql, info.value.message)


def test_limit_is_added_or_lowered_never_raised() -> None:
    assert check_readonly("SELECT a FROM t", engine_for("pgsql"), row_cap=101).sql == "SELECT a FROM t LIMIT 101"
    assert check_readonly("SELECT a FROM t LIMIT 5", engine_for("pgsql"), row_cap=101).sql == "SELECT a FROM t LIMIT 5"
    assert check_readonly("SELECT a FROM t LIMIT 5000", engine_for("pgsql"), row_cap=101).sql == "SELECT a FROM t LIMIT 101"
    assert check_readonly("SELECT a FROM t LIMIT ALL", engine_for("pgsql"), row_cap=101).sql == "SELECT a FROM t LIMIT 101"
    assert (
        check_readonly("SELECT a FROM t LIMIT 10, 5000", engine_for("mysql"), row_cap=101).sql
        == "SELECT a FROM t LIMIT 101 OFFSET 10"
    )
    assert check_readonly("SELECT a FROM t FETCH FIRST 500 ROWS ONLY", engine_for("pgsql"), row_cap=101).sql.endswith(
        "FETCH FIRST 101 ROWS ONLY"
    )
    assert check_readonly("SELECT a FROM t FETCH FIRST ROW ONLY", engine_for("pgsql"), row_cap=101).sql.endswith(
        "FETCH FIRST ROWS ONLY"
    )
    for computed in ("SELECT a FROM t LIMIT (SELECT 1000000)", "SELECT a FROM t FETCH FIRST 50 PERCENT ROWS ONLY"):
        with pytest.raises(InvalidArgument, match="number"):
            check_readonly(computed, engine_for("pgsql"), row_cap=101)


SUFFIXES = ["; DROP TABLE t", "; COMMIT; DELETE FROM t", " INTO OUTFILE '/tmp/x'", " FOR UPDATE", "/*! , SLEEP(5) */"]


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize(("protocol", "sql", "kind"), [a for a in ACCEPTED if a[2] == "select"])
def test_accepted_statement_plus_hostile_suffix_is_refused(protocol: str, sql: str, kind: str, suffix: str) -> None:
    with pytest.raises(InvalidArgument):
        check_readonly(sql + "\n" + suffix, engine_for(protocol))  # a newline: the suffix is never inside a comment


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(["mysql", "pgsql", "sqlite"]),
    parts=st.lists(
        st.sampled_from(
            [
                "SELECT",
                "1",
                "*",
                "FROM",
                "t",
                ";",
                "DELETE",
                "DROP",
                "TABLE",
                "WITH",
                "x",
                "AS",
                "(",
                ")",
                "INTO",
                "OUTFILE",
                "'f'",
                "FOR",
                "UPDATE",
                "/*",
                "*/",
                "--",
                "\n",
                "pg_sleep(1)",
                "SLEEP(1)",
                "UNION",
                "WHERE",
                "=",
                ",",
                "SET",
                "@a",
                ":=",
                "EXPLAIN",
                "ANALYZE",
                "SHOW",
                "RETURNING",
                "INSERT",
                "VALUES",
                "LIMIT",
                "COPY",
                "TO",
                "$$",
                '"',
                "`",
            ]
        ),  # fmt: skip
        max_size=14,
    ),
)
def test_fuzz_refuses_cleanly_or_returns_a_fixed_point(protocol: str, parts: list[str]) -> None:
    sql = " ".join(parts)
    try:
        checked = check_readonly(sql, engine_for(protocol), row_cap=10)
    except InvalidArgument:
        return
    # An independent look at what will run: sqlglot's own tree, with a short list of its write nodes.
    if (checked.kind, checked.dialect) != ("show", "postgres"):  # PostgreSQL SHOW is checked as text
        ran = sqlglot.parse_one(checked.sql.removeprefix("EXPLAIN QUERY PLAN ").removeprefix("EXPLAIN "), read=checked.dialect)
        writes = (exp.Insert, exp.Update, exp.Delete, exp.Drop, exp.Create, exp.Command, exp.Into, exp.Lock, exp.Set, exp.Copy)
        assert not list(ran.find_all(*writes)), (sql, checked.sql)
    assert check_readonly(checked.sql, engine_for(protocol), row_cap=10).sql == checked.sql


@pytest.mark.parametrize("protocol", ["mysql", "pgsql"])
@pytest.mark.parametrize(
    "sql",
    ["SELECT 1 /* /* */ ; DELETE FROM items; /* */ */", "SELECT 1 /* /* */ , pg_sleep(5) -- */", "SELECT 1 -- x\n"],
)
def test_comment_differentials_are_neutralised(protocol: str, sql: str) -> None:
    """PostgreSQL nests comments, MySQL does not: whatever sqlglot decides, what runs is the
    regenerated text, which carries no comment for the server to read differently."""
    try:
        checked = check_readonly(sql, engine_for(protocol), row_cap=11)
    except InvalidArgument:
        return
    assert checked.sql == "SELECT 1 LIMIT 11"


def test_parser_crashes_fail_closed() -> None:
    """sqlglot raised IndexError on this input (found by fuzzing): refused, not INTERNAL."""
    with pytest.raises(InvalidArgument, match="could not be parsed"):
        check_readonly("SHOW FULL", engine_for("mysql"))
    with pytest.raises(InvalidArgument):
        check_readonly("SELECT " + "(" * 5000 + "1" + ")" * 5000, engine_for("pgsql"))
