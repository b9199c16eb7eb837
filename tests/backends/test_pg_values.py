"""A PostgreSQL result's values, as the read-only path returns them, equal what psycopg's own
loaders and backends/values.py make of them (backends/engines/postgresql.py reads numeric and
date as the server's text); and the dates psycopg cannot load (infinity, BC) come back as text
instead of failing the statement."""

from __future__ import annotations

from types import SimpleNamespace

import psycopg
import pytest

from backends.engines.postgresql import ENGINE, connect_kwargs
from backends.values import encode_row

COLUMNS = "n numeric, p numeric(30,10), d date, dn date[], nn numeric[], r daterange, t timestamptz"
ROWS = [
    "(12345678901234567890.0123456789, -0.0000000001, '2024-05-01', '{2024-01-02,NULL}', '{1.50,NULL,-3}', '[2024-01-01,2024-02-01)', '2024-05-01 10:00:00.5+00')",
    "('NaN', 0, '0099-01-09', '{}', '{}', 'empty', NULL)",
    "(0.000, 99.9900000000, '9999-12-31', NULL, NULL, '[2024-01-01,)', '1970-01-01 00:00:00+00')",
    "(NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
]
if psycopg.pq.version() >= 140000:  # numeric infinity: PostgreSQL 14
    ROWS.append("('Infinity', 1, '2000-02-29', NULL, '{-Infinity}', NULL, NULL)")


@pytest.fixture(scope="module")
def conn(postgres_db: dict):
    with psycopg.connect(**postgres_db, autocommit=True) as admin:
        admin.execute(f"CREATE TABLE v (id serial PRIMARY KEY, {COLUMNS})")
        names = ", ".join(c.split()[0] for c in COLUMNS.split(", "))
        for row in ROWS:
            admin.execute(f"INSERT INTO v ({names}) VALUES {row}")
        admin.execute(f"INSERT INTO v ({names}) VALUES ('1', '1', 'infinity', NULL, NULL, NULL, NULL)")
        admin.execute(f"INSERT INTO v ({names}) VALUES ('2', '2', '0044-03-15 BC', NULL, NULL, NULL, NULL)")
        admin.execute("ALTER DATABASE " + postgres_db["dbname"] + " SET DateStyle = 'German, DMY'")  # the target's own default
    target = SimpleNamespace(
        target_id="pg", host=postgres_db["host"], port=postgres_db["port"], database=postgres_db["dbname"],
        username=postgres_db["user"], password="", default_schema="", timeout_ms=5000, use_ssl=False, ssl_mode="",
    )  # fmt: skip
    session = psycopg.connect(**connect_kwargs(target, connect_timeout_s=5), autocommit=True)
    session.postgres_db = postgres_db
    yield session
    session.close()


def run(conn, sql: str) -> list[list]:
    return ENGINE.execute(conn, sql, timeout_ms=5000, max_rows=100, max_bytes=1 << 20).rows


def test_read_only_values_equal_psycopg_loading_then_encoding(conn) -> None:
    with psycopg.connect(**conn.postgres_db, autocommit=True) as plain:
        plain.execute("SET DateStyle = ISO")
        expected = [encode_row(row) for row in plain.execute("SELECT * FROM v WHERE id <= %s ORDER BY id", (len(ROWS),))]
    assert run(conn, f"SELECT * FROM v WHERE id <= {len(ROWS)} ORDER BY id") == expected
    assert run(conn, "SELECT p, d FROM v WHERE id = 1") == [["-0.0000000001", "2024-05-01"]]


def test_dates_psycopg_cannot_load_come_back_as_their_text(conn) -> None:
    assert run(conn, f"SELECT d FROM v WHERE id > {len(ROWS)} ORDER BY id") == [["infinity"], ["0044-03-15 BC"]]


def test_the_connection_keeps_its_own_loaders(conn) -> None:
    run(conn, "SELECT n, d FROM v")
    amount, day = conn.execute("SELECT n, d FROM v WHERE id = 1").fetchone()
    assert type(amount).__name__ == "Decimal" and type(day).__name__ == "date"
