"""A MariaDB result's values, as the read-only path returns them, equal what pymysql's own
converters and backends/values.py make of them (backends/engines/mysql.py reads DECIMAL and DATE
as the server's text, and DATETIME through the C parser, to save the per-value parsing)."""

from __future__ import annotations

import pymysql
import pytest

from backends.engines.mysql import ENGINE
from backends.values import encode_row

COLUMNS = "d DECIMAL(30,10), z DECIMAL(5,0), n DECIMAL(4,2), dt DATE, ts DATETIME(6), t0 DATETIME, tm TIME(3), f DOUBLE"
ROWS = [
    "(12345678901234567890.0123456789, 0, -0.50, '2024-05-01', '2024-05-01 10:00:00.5', '2024-05-01 10:00:00', '-838:59:59', 0.1)",
    "(-0.0000000001, -12345, 99.99, '0099-01-09', '1970-01-01 00:00:00.000001', '9999-12-31 23:59:59', '12:00:00.123', -1e300)",
    "(0, 1, 0, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '00:00:00', NULL)",
    "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 3)",
    "(1.5, 7, 1, '2024-02-00', '2024-02-29 23:59:59.999999', '2024-00-00 00:00:00', '-00:00:01', 0)",
]


@pytest.fixture(scope="module")
def conn(mariadb_db: dict):
    admin = pymysql.connect(**mariadb_db, autocommit=True)
    with admin.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero and partial dates, as older schemas hold them
        cur.execute(f"CREATE TABLE v (id INT PRIMARY KEY AUTO_INCREMENT, {COLUMNS})")
        for row in ROWS:
            cur.execute(f"INSERT INTO v ({', '.join(c.split()[0] for c in COLUMNS.split(', '))}) VALUES {row}")
    yield admin
    admin.close()


def test_read_only_values_equal_pymysql_conversions_then_encoding(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT * FROM v ORDER BY id")
        expected = [encode_row(row) for row in cur.fetchall()]
    result = ENGINE.execute(conn, "SELECT * FROM v ORDER BY id", timeout_ms=5000, max_rows=100, max_bytes=1 << 20)
    assert result.rows == expected
    assert result.rows[0][:4] == [1, "12345678901234567890.0123456789", "0", "-0.50"]
    assert result.rows[2][4] == "0000-00-00"  # an invalid date stays its text on both paths


def test_the_connection_keeps_its_own_converters_after_a_read_only_statement(conn) -> None:
    ENGINE.execute(conn, "SELECT * FROM v", timeout_ms=5000, max_rows=100, max_bytes=1 << 20)
    with conn.cursor() as cur:
        cur.execute("SELECT n, dt FROM v WHERE id = 1")
        amount, day = cur.fetchone()
    assert type(amount).__name__ == "Decimal" and type(day).__name__ == "date"
