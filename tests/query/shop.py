"""A small shop (customers, addresses, products, orders, order_items) built on real MariaDB,
PostgreSQL and SQLite, once with declared foreign keys and once without. The rows are made
here in Python, so a test can compute every expected figure from them independently of the
gateway.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pymysql

CATEGORIES = ["books", "games", "music", "tools"]
STATUSES = ["new", "paid", "shipped", "done"]


def rows() -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    customers = [
        (i, f"Customer {i}", None if i % 7 == 0 else f"c{i}@example.com", dt.date(2024, 1, 1) + dt.timedelta(days=i))
        for i in range(1, 31)
    ]
    addresses = [(i, 1 + (i * 7) % 30, f"{i} Main St", ["Oslo", "Lima", "Pune"][i % 3]) for i in range(1, 41)]
    products = [(i, f"Product {i}", Decimal(f"{i * 3 + 0.5:.2f}"), CATEGORIES[i % 4]) for i in range(1, 21)]
    orders = []
    for i in range(1, 101):
        customer = 1 + (i * 11) % 30
        address = None if i % 9 == 0 else 1 + (i * 13) % 40
        orders.append((i, customer, address, STATUSES[i % 4], Decimal(f"{(i * 17) % 500 + 0.25:.2f}")))
    items = [(i, 1 + (i * 3) % 100, 1 + (i * 7) % 20, 1 + i % 5) for i in range(1, 301)]
    return {
        "customers": (["id", "name", "email", "joined_on"], customers),
        "addresses": (["id", "customer_id", "street", "city"], addresses),
        "products": (["id", "name", "price", "category"], products),
        "orders": (["id", "customer_id", "address_id", "status", "total"], orders),
        "order_items": (["id", "order_id", "product_id", "quantity"], items),
    }


TYPES = {
    "mysql": {"int": "INT", "text": "VARCHAR(100)", "money": "DECIMAL(10,2)", "date": "DATE"},
    "pgsql": {"int": "integer", "text": "text", "money": "numeric(10,2)", "date": "date"},
    "sqlite": {"int": "INTEGER", "text": "TEXT", "money": "NUMERIC", "date": "DATE"},
}


def ddl(protocol: str, *, foreign_keys: bool) -> list[str]:
    t = TYPES[protocol]
    q = (lambda n: f"`{n}`") if protocol == "mysql" else (lambda n: f'"{n}"')

    def fk(col: str, parent: str) -> str:
        return f", FOREIGN KEY ({q(col)}) REFERENCES {q(parent)}({q('id')})" if foreign_keys else ""

    comment = " COMMENT 'where parcels go'" if protocol == "mysql" else ""
    statements = [
        f"CREATE TABLE customers (id {t['int']} PRIMARY KEY, name {t['text']} NOT NULL, email {t['text']} UNIQUE, joined_on {t['date']})",
        f"CREATE TABLE addresses (id {t['int']} PRIMARY KEY, customer_id {t['int']} NOT NULL, street {t['text']}{comment}, "
        f"city {t['text']}{fk('customer_id', 'customers')})",
        f"CREATE TABLE products (id {t['int']} PRIMARY KEY, name {t['text']} NOT NULL, price {t['money']}, category {t['text']})",
        f"CREATE TABLE orders (id {t['int']} PRIMARY KEY, customer_id {t['int']} NOT NULL, address_id {t['int']}, "
        f"status {t['text']} NOT NULL, total {t['money']}{fk('customer_id', 'customers')}{fk('address_id', 'addresses')})",
        f"CREATE TABLE order_items (id {t['int']} PRIMARY KEY, order_id {t['int']} NOT NULL, product_id {t['int']} NOT NULL, "
        f"quantity {t['int']} NOT NULL{fk('order_id', 'orders')}{fk('product_id', 'products')})",
    ]
    if protocol == "pgsql":
        statements.append("COMMENT ON COLUMN addresses.street IS 'where parcels go'")
    return statements


def _fill(cur: Any, protocol: str) -> None:
    mark = "?" if protocol == "sqlite" else "%s"
    for table, (columns, values) in rows().items():
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(mark for _ in columns)})"
        if protocol == "sqlite":
            values = [tuple(str(v) if isinstance(v, (Decimal, dt.date)) else v for v in row) for row in values]
        cur.executemany(sql, values)


def build_mysql(settings: dict[str, Any], database: str, *, foreign_keys: bool) -> None:
    conn = pymysql.connect(**{k: v for k, v in settings.items() if k != "database"}, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
            cur.execute(f"USE `{database}`")
            for statement in ddl("mysql", foreign_keys=foreign_keys):
                cur.execute(statement)
            _fill(cur, "mysql")
            cur.execute("ANALYZE TABLE customers, addresses, products, orders, order_items")
            cur.fetchall()
    finally:
        conn.close()


def drop_mysql(settings: dict[str, Any], database: str) -> None:
    conn = pymysql.connect(**{k: v for k, v in settings.items() if k != "database"}, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
    finally:
        conn.close()


def build_postgres(settings: dict[str, Any], schema: str, *, foreign_keys: bool) -> None:
    with psycopg.connect(**settings, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path = "{schema}"')
        for statement in ddl("pgsql", foreign_keys=foreign_keys):
            conn.execute(statement)
        with conn.cursor() as cur:
            _fill(cur, "pgsql")
        conn.execute("ANALYZE")


def build_sqlite(path: Path, *, foreign_keys: bool) -> None:
    conn = sqlite3.connect(path)
    for statement in ddl("sqlite", foreign_keys=foreign_keys):
        conn.execute(statement)
    _fill(conn, "sqlite")
    conn.commit()
    conn.close()


@contextmanager
def shop_targets(store: Any, tmp: Path, mariadb: dict[str, Any], postgres: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Targets maria / pg / lite_fk / lite_nofk and, per engine, the schema names with and without keys."""
    from tests.query import add_auth, add_target

    fk_db, nofk_db = f"{mariadb['database']}_fk", f"{mariadb['database']}_nofk"
    build_mysql(mariadb, fk_db, foreign_keys=True)
    build_mysql(mariadb, nofk_db, foreign_keys=False)
    build_postgres(postgres, "shop_fk", foreign_keys=True)
    build_postgres(postgres, "shop_nofk", foreign_keys=False)
    build_sqlite(tmp / "fk.db", foreign_keys=True)
    build_sqlite(tmp / "nofk.db", foreign_keys=False)
    add_auth(store, "maria_auth", mariadb["user"], mariadb["password"])
    add_auth(store, "pg_auth", postgres["user"], "")
    add_target(store, "maria", "mysql", host="127.0.0.1", port=mariadb["port"], database=fk_db, auth_profile_id="maria_auth")
    add_target(
        store, "pg", "pgsql", host="127.0.0.1", port=postgres["port"], database=postgres["dbname"], auth_profile_id="pg_auth"
    )
    add_target(store, "lite_fk", "sqlite", database=str(tmp / "fk.db"))
    add_target(store, "lite_nofk", "sqlite", database=str(tmp / "nofk.db"))
    try:
        yield {
            "maria": {"target_id": "maria", "fk": fk_db, "nofk": nofk_db, "target_nofk": "maria"},
            "pg": {"target_id": "pg", "fk": "shop_fk", "nofk": "shop_nofk", "target_nofk": "pg", "database": postgres["dbname"]},
            "lite": {"target_id": "lite_fk", "fk": "main", "nofk": "main", "target_nofk": "lite_nofk"},
        }
    finally:
        drop_mysql(mariadb, fk_db)
        drop_mysql(mariadb, nofk_db)


@contextmanager
def shop_env(tmp: Path, mariadb: dict[str, Any], postgres: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A QueryHandler over the shop targets, on a fresh data directory: {handler, store, shop}."""
    from gateway.assembly import open_store
    from handlers.query import QueryHandler
    from tests.query import make_services

    store = open_store(tmp / "data")  # every declared variable: the catalog's too
    store.initialize()
    store.load_to_runtime("MCP VARIABLES")
    with shop_targets(store, tmp, mariadb, postgres) as shop:
        store.load_to_runtime("MCP PROFILES")
        handler = QueryHandler(make_services(store))
        try:
            yield {"handler": handler, "store": store, "shop": shop}
        finally:
            handler.catalog.close()
            handler.pools.close()
            store.close()
