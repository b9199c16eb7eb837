"""What the three drivers raise, and which of their errors mean "the statement timed out".

Callers translate these into gateway errors where they call the driver (UNAVAILABLE,
DEADLINE_EXCEEDED, or a safe INTERNAL message); a driver's own text never reaches a client.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pymysql

DRIVER_ERRORS = (pymysql.err.Error, psycopg.Error, sqlite3.Error)
MYSQL_TIMEOUT_CODES = (1969, 3024)  # MariaDB max_statement_time, MySQL max_execution_time
# The value sent cannot be compared or stored: illegal mix of collations (a character outside
# utf8mb3 against the catalog), incorrect string value, invalid character string.
MYSQL_BAD_VALUE_CODES = (1267, 1270, 1271, 1300, 1366)


def is_bad_value(exc: BaseException) -> bool:
    """True when the engine (or driver) refused a value the caller sent: a NUL byte for
    PostgreSQL, a character MariaDB's catalog cannot hold. The caller's INVALID_ARGUMENT."""
    if isinstance(exc, psycopg.DataError | pymysql.err.DataError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in MYSQL_BAD_VALUE_CODES


def is_timeout(exc: BaseException) -> bool:
    """True when the engine cancelled the statement for running past its timeout."""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return True
    if isinstance(exc, pymysql.err.OperationalError) and exc.args and exc.args[0] in MYSQL_TIMEOUT_CODES:
        return True
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)
