"""What the three drivers raise, and which of their errors mean "the statement timed out" or
"someone cancelled the statement".

Callers translate these into gateway errors where they call the driver (UNAVAILABLE,
DEADLINE_EXCEEDED, or a safe INTERNAL message); a driver's own text never reaches a client.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pymysql

DRIVER_ERRORS = (pymysql.err.Error, psycopg.Error, sqlite3.Error)
MYSQL_TIMEOUT_CODES = (1969, 3024)  # MariaDB max_statement_time, MySQL max_execution_time
MYSQL_KILLED_CODE = 1317  # ER_QUERY_INTERRUPTED: KILL QUERY (admin_kill_query), not a timeout
# PostgreSQL raises QueryCanceled (57014) for both a statement timeout and pg_cancel_backend; only
# the (English) message tells them apart. A server with translated messages reads as a timeout.
PG_CANCELLED_BY_REQUEST = "canceling statement due to user request"
# The value sent cannot be compared or stored: illegal mix of collations (a character outside
# utf8mb3 against the catalog), incorrect string value, invalid character string.
MYSQL_BAD_VALUE_CODES = (1267, 1270, 1271, 1300, 1366)


def is_bad_value(exc: BaseException) -> bool:
    """True when the engine (or driver) refused a value the caller sent: a NUL byte for
    PostgreSQL, a character MariaDB's catalog cannot hold. The caller's INVALID_ARGUMENT."""
    if isinstance(exc, psycopg.DataError | pymysql.err.DataError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in MYSQL_BAD_VALUE_CODES


def is_cancelled(exc: BaseException) -> bool:
    """True when someone stopped the statement (pg_cancel_backend, KILL QUERY), not a timeout."""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return (exc.diag.message_primary or "") == PG_CANCELLED_BY_REQUEST
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] == MYSQL_KILLED_CODE


def is_timeout(exc: BaseException) -> bool:
    """True when the engine cancelled the statement for running past its timeout."""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return not is_cancelled(exc)
    if isinstance(exc, pymysql.err.OperationalError) and exc.args and exc.args[0] in MYSQL_TIMEOUT_CODES:
        return True
    return isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)
