"""Discovery tools on real MariaDB, PostgreSQL and SQLite: every tool on every engine."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest

from handlers.query import QueryHandler
from tests.query import add_auth, add_target, error, make_services, make_store, ok

ENGINES = ("maria", "pg", "lite")

MYSQL_DDL = [
    "CREATE TABLE authors (id INT PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE, "
    "name VARCHAR(50) DEFAULT 'anon' COMMENT 'display name', CONSTRAINT chk_name CHECK (name <> '')) COMMENT='people who write'",
    "CREATE TABLE books (id INT PRIMARY KEY, author_id INT NOT NULL, title VARCHAR(200), price DECIMAL(8,2), "
    "CONSTRAINT fk_author FOREIGN KEY (author_id) REFERENCES authors(id) ON DELETE CASCADE, "
    "CONSTRAINT price_pos CHECK (price > 0), KEY idx_title (title))",
    "CREATE VIEW cheap_books AS SELECT id, title FROM books WHERE price < 10",
    "CREATE TABLE `weird name; DROP` (id INT PRIMARY KEY)",
    "CREATE TABLE order_items (id INT)",
    "CREATE TABLE orderXitems (id INT)",
]
PG_DDL = [
    "CREATE TABLE authors (id int PRIMARY KEY, email text NOT NULL UNIQUE, name text DEFAULT 'anon', CONSTRAINT chk_name CHECK (name <> ''))",
    "COMMENT ON TABLE authors IS 'people who write'",
    "COMMENT ON COLUMN authors.name IS 'display name'",
    "CREATE TABLE books (id int PRIMARY KEY, author_id int NOT NULL, title text, price numeric(8,2), "
    "CONSTRAINT fk_author FOREIGN KEY (author_id) REFERENCES authors(id) ON DELETE CASCADE, CONSTRAINT price_pos CHECK (price > 0))",
    "CREATE INDEX idx_title ON books(title)",
    "CREATE VIEW cheap_books AS SELECT id, title FROM books WHERE price < 10",
    'CREATE TABLE "weird name; DROP" (id int PRIMARY KEY)',
    "CREATE TABLE order_items (id int)",
    'CREATE TABLE "orderXitems" (id int)',
    "CREATE SCHEMA sales",
    "CREATE TABLE sales.orders (id int PRIMARY KEY, book_id int REFERENCES public.books(id))",
]
SQLITE_DDL = [
    "CREATE TABLE authors (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE, name TEXT DEFAULT 'anon', CONSTRAINT chk_name CHECK (name <> ''))",
    "CREATE TABLE books (id INTEGER PRIMARY KEY, author_id INTEGER NOT NULL, title TEXT, price NUMERIC, "
    "CONSTRAINT fk_author FOREIGN KEY (author_id) REFERENCES authors(id) ON DELETE CASCADE, CONSTRAINT price_pos CHECK (price > 0))",
    "CREATE INDEX idx_title ON books(title)",
    "CREATE VIEW cheap_books AS SELECT id, title FROM books WHERE price < 10",
    'CREATE TABLE "weird name; DROP" (id INTEGER PRIMARY KEY)',
    "CREATE TABLE order_items (id INTEGER)",
    'CREATE TABLE "orderXitems" (id INTEGER)',
]
ALL_TABLES = ["authors", "books", "cheap_books", "orderXitems", "order_items", "weird name; DROP"]  # binary order


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, mariadb_db: dict, postgres_db: dict) -> Iterator[dict]:
    conn = pymysql.connect(**mariadb_db, autocommit=True)
    with conn.cursor() as cur:
        for statement in MYSQL_DDL:
            cur.execute(statement)
    conn.close()
    with psycopg.connect(**postgres_db, autocommit=True) as pg:
        for statement in PG_DDL:
            pg.execute(statement)
    tmp = tmp_path_factory.mktemp("discovery")
    lite_path = tmp / "lite.db"
    lite = sqlite3.connect(lite_path)
    for statement in SQLITE_DDL:
        lite.execute(statement)
    lite.commit()
    lite.close()

    store = make_store(tmp / "data")
    add_auth(store, "maria_auth", mariadb_db["user"], mariadb_db["password"])
    add_auth(store, "pg_auth", postgres_db["user"], "")
    add_target(
        store,
        "maria",
        "mysql",
        host="127.0.0.1",
        port=mariadb_db["port"],
        database=mariadb_db["database"],
        auth_profile_id="maria_auth",
        description="MariaDB books",
    )
    add_target(
        store,
        "pg",
        "pgsql",
        host="127.0.0.1",
        port=postgres_db["port"],
        database=postgres_db["dbname"],
        auth_profile_id="pg_auth",
        description="PostgreSQL books",
    )
    add_target(store, "lite", "sqlite", database=str(lite_path), description="SQLite books")
    add_target(store, "nodisc", "sqlite", database=str(lite_path), allow_discovery=0, allow_explain=0)
    add_target(store, "off", "sqlite", database=str(lite_path), active=0)
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    yield {"handler": handler, "maria_db": mariadb_db["database"], "pg_db": postgres_db["dbname"], "lite": Path(lite_path)}
    handler.pools.close()
    store.close()


def test_list_targets_shows_logical_targets_only(env: dict) -> None:
    out = ok(env["handler"], "list_targets")
    by_id = {t["target_id"]: t for t in out["targets"]}
    assert set(by_id) == {"lite", "maria", "nodisc", "pg"}  # 'off' is inactive: not routable
    assert by_id["maria"] == {
        "target_id": "maria",
        "description": "MariaDB books",
        "protocol": "mysql",
        "capabilities": ["inventory", "readonly_sql", "explain"],
    }
    assert by_id["nodisc"]["capabilities"] == ["readonly_sql"]
    assert out["default_target_id"] == "lite"  # no variable set: first effective target by id
    text = json.dumps(out)
    for leak in ("127.0.0.1", "3306", "5432", str(env["lite"]), "root", "postgres"):
        assert leak not in text


@pytest.mark.parametrize("engine", ENGINES)
def test_list_schemas(env: dict, engine: str) -> None:
    handler = env["handler"]
    out = ok(handler, "list_schemas", target_id=engine)
    expected = {"maria": env["maria_db"], "pg": "public", "lite": "main"}[engine]
    assert expected in out["schemas"]
    assert not {"information_schema", "mysql", "pg_catalog", "temp"} & set(out["schemas"])
    # Walking one schema per page yields the same list, each name once.
    walked, token = [], None
    while True:
        page = ok(handler, "list_schemas", target_id=engine, page_size=1, **({"page_token": token} if token else {}))
        walked += page["schemas"]
        token = page["next_page_token"]
        assert page["truncated"] == (token is not None)
        if token is None:
            break
    # Other test files create and drop databases on the shared servers meanwhile: compare the
    # names present both before and after the walk (each once, in the same order).
    stable = set(out["schemas"]) & set(ok(handler, "list_schemas", target_id=engine)["schemas"])
    assert len(walked) == len(set(walked))
    assert [n for n in walked if n in stable] == [n for n in out["schemas"] if n in stable]
    assert expected in stable
    if engine == "pg":
        assert {"public", "sales"} <= set(walked)


@pytest.mark.parametrize("engine", ENGINES)
def test_list_tables_types_filter_and_paging(env: dict, engine: str) -> None:
    handler = env["handler"]
    out = ok(handler, "list_tables", target_id=engine)
    assert [t["name"] for t in out["tables"]] == ALL_TABLES
    by_name = {t["name"]: t for t in out["tables"]}
    assert by_name["authors"]["type"] == "table"
    assert by_name["cheap_books"]["type"] == "view" and by_name["cheap_books"]["rows_estimate"] is None
    if engine != "lite":
        assert by_name["authors"]["comment"] == "people who write"
    # name_filter is a case-insensitive substring; '_' is a character, not a wildcard.
    names = [t["name"] for t in ok(handler, "list_tables", target_id=engine, name_filter="order_items")["tables"]]
    assert names == ["order_items"]
    assert [t["name"] for t in ok(handler, "list_tables", target_id=engine, name_filter="AUTH")["tables"]] == ["authors"]
    assert ok(handler, "list_tables", target_id=engine, name_filter="%")["tables"] == []
    walked, token, pages = [], None, 0
    while True:
        page = ok(handler, "list_tables", target_id=engine, page_size=4, **({"page_token": token} if token else {}))
        walked += [t["name"] for t in page["tables"]]
        token, pages = page["next_page_token"], pages + 1
        if token is None:
            break
    assert walked == ALL_TABLES and pages == 2


def test_list_tables_in_another_schema_and_unknown_schema(env: dict) -> None:
    handler = env["handler"]
    out = ok(handler, "list_tables", target_id="pg", schema="sales")
    assert out["schema"] == "sales" and [t["name"] for t in out["tables"]] == ["orders"]
    for engine in ENGINES:
        err = error(handler, "list_tables", target_id=engine, schema="no_such_schema")
        assert err["code"] == "NOT_FOUND" and "no_such_schema" in err["message"]


def test_page_tokens_are_validated(env: dict) -> None:
    handler = env["handler"]
    first = ok(handler, "list_tables", target_id="pg", page_size=2)
    token = first["next_page_token"]
    assert token and "authors" not in token  # opaque, not the raw key
    for bad in ("not-a-token!!", token[:-3], token + "x", "eyJhZnRlciI6ICJ4In0"):
        assert error(handler, "list_tables", target_id="pg", page_size=2, page_token=bad)["code"] == "INVALID_ARGUMENT"
    # A token is bound to its request: another filter, schema or target refuses it.
    err = error(handler, "list_tables", target_id="pg", page_size=2, page_token=token, name_filter="b")
    assert err["code"] == "INVALID_ARGUMENT" and "different request" in err["message"]
    assert error(handler, "list_tables", target_id="lite", page_size=2, page_token=token)["code"] == "INVALID_ARGUMENT"
    assert error(handler, "list_schemas", target_id="pg", page_token=token)["code"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("engine", ENGINES)
def test_describe_table(env: dict, engine: str) -> None:
    handler = env["handler"]
    out = ok(handler, "describe_table", target_id=engine, table="authors")
    cols = {c["name"]: c for c in out["columns"]}
    assert [c["name"] for c in out["columns"]] == ["id", "email", "name"]
    assert out["type"] == "table"
    assert cols["id"]["key"] == "PRI" and cols["id"]["nullable"] is False
    assert cols["email"]["key"] == "UNI" and cols["email"]["nullable"] is False
    assert cols["name"]["nullable"] is True and "anon" in cols["name"]["default"] and cols["name"]["key"] is None
    assert "int" in cols["id"]["type"].lower()
    assert cols["id"]["default"] is None
    if engine != "lite":
        assert cols["name"]["comment"] == "display name"
    books = {c["name"]: c for c in ok(handler, "describe_table", target_id=engine, table="books")["columns"]}
    assert books["title"]["key"] == "MUL"  # first column of idx_title
    view = ok(handler, "describe_table", target_id=engine, table="cheap_books")
    assert view["type"] == "view" and [c["name"] for c in view["columns"]] == ["id", "title"]
    weird = ok(handler, "describe_table", target_id=engine, table="weird name; DROP")
    assert [c["name"] for c in weird["columns"]] == ["id"]


@pytest.mark.parametrize("engine", ENGINES)
def test_names_are_values_never_sql(env: dict, engine: str) -> None:
    handler = env["handler"]
    for table in ("books; DROP TABLE books", "books' OR '1'='1", 'books" --', "books`; DROP TABLE books; --"):
        for tool in ("describe_table", "get_constraints"):
            err = error(handler, tool, target_id=engine, table=table)
            assert err["code"] == "NOT_FOUND", (tool, table, err)
    assert error(handler, "list_tables", target_id=engine, schema="x' OR '1'='1")["code"] == "NOT_FOUND"
    assert ok(handler, "describe_table", target_id=engine, table="books")["columns"]  # still there


@pytest.mark.parametrize("engine", ENGINES)
def test_get_constraints(env: dict, engine: str) -> None:
    handler = env["handler"]
    books = ok(handler, "get_constraints", target_id=engine, table="books")
    assert books["primary_key"]["columns"] == ["id"]
    (fk,) = books["foreign_keys"]
    assert fk["columns"] == ["author_id"] and fk["referenced_table"] == "authors" and fk["referenced_columns"] == ["id"]
    assert fk["on_delete"] == "CASCADE"
    assert fk["on_update"] in ("NO ACTION", "RESTRICT")
    if engine != "lite":
        assert fk["name"] == "fk_author"
    checks = {c["name"]: c["expression"] for c in books["checks"]}
    assert "price_pos" in checks and "price" in checks["price_pos"] and "0" in checks["price_pos"]
    authors = ok(handler, "get_constraints", target_id=engine, table="authors")
    assert [u["columns"] for u in authors["unique"]] == [["email"]]
    assert "chk_name" in {c["name"] for c in authors["checks"]}
    none = ok(handler, "get_constraints", target_id=engine, table="order_items")
    assert none["primary_key"] is None and none["foreign_keys"] == [] and none["unique"] == [] and none["checks"] == []


def test_cross_schema_foreign_key_on_postgres(env: dict) -> None:
    out = ok(env["handler"], "get_constraints", target_id="pg", schema="sales", table="orders")
    (fk,) = out["foreign_keys"]
    assert (fk["referenced_schema"], fk["referenced_table"], fk["referenced_columns"]) == ("public", "books", ["id"])


def test_discovery_refused_when_target_disallows_it(env: dict) -> None:
    handler = env["handler"]
    for tool, args in (
        ("list_schemas", {}),
        ("list_tables", {}),
        ("describe_table", {"table": "books"}),
        ("get_constraints", {"table": "books"}),
    ):
        err = error(handler, tool, target_id="nodisc", **args)
        assert err["code"] == "INVALID_ARGUMENT" and "allow_discovery" in err["message"]
        assert ok(handler, tool, target_id="lite", **args)


def test_unknown_inactive_and_malformed_requests(env: dict) -> None:
    handler = env["handler"]
    err = error(handler, "list_tables", target_id="nope")
    assert err["code"] == "NOT_FOUND" and "nope" in err["message"]
    err = error(handler, "list_tables", target_id="off")
    assert err["code"] == "NOT_FOUND" and "inactive" in err["message"]
    for args in ({"page_size": 0}, {"page_size": 100_000}, {"bogus": 1}, {"table": ""}):
        tool = "describe_table" if "table" in args else "list_tables"
        assert error(handler, tool, target_id="pg", **args)["code"] == "INVALID_ARGUMENT"
    assert error(handler, "describe_table", target_id="pg")["code"] == "INVALID_ARGUMENT"  # table is required


def test_default_target_is_used_when_target_id_is_omitted(env: dict) -> None:
    out = ok(env["handler"], "list_schemas")
    assert out["target_id"] == "lite" and out["schemas"] == ["main"]
