"""The engine registry (backends/engines): one object per engine behind `Engine`, chosen from the
protocol; each driver's errors translated by its engine's table; drivers and protocol names
nowhere else in backends/ and gateway/."""

from __future__ import annotations

import ast
import sqlite3
from pathlib import Path

import psycopg
import pymysql
import pytest

from backends.engines import ENGINES, engine_for, translate
from gateway.errors import BadValue, Cancelled, DeadlineExceeded, InvalidArgument, Unavailable

ROOT = Path(__file__).resolve().parents[2]
DRIVERS = {"pymysql", "psycopg", "psycopg_pool", "sqlite3", "duckdb"}
PROTOCOL_NAMES = set(ENGINES)


def test_engine_for_chooses_by_protocol_and_names_the_known_ones() -> None:
    assert {name: engine.name for name, engine in ENGINES.items()} == {
        "mysql": "mysql",
        "pgsql": "pgsql",
        "sqlite": "sqlite",
        "duckdb": "duckdb",
    }
    with pytest.raises(InvalidArgument, match="unknown protocol 'oracle' \\(expected mysql, pgsql, sqlite, duckdb\\)"):
        engine_for("oracle")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), DeadlineExceeded),
        (psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"), BadValue),
        (psycopg.OperationalError("server closed the connection unexpectedly"), Unavailable),
        (pymysql.err.OperationalError(1317, "Query execution was interrupted"), Cancelled),
        (pymysql.err.OperationalError(3024, "maximum statement execution time exceeded"), DeadlineExceeded),
        (pymysql.err.OperationalError(1969, "Query execution was interrupted (max_statement_time exceeded)"), DeadlineExceeded),
        (pymysql.err.OperationalError(1267, "Illegal mix of collations"), BadValue),
        (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), InvalidArgument),
        (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), Unavailable),
        (sqlite3.OperationalError("interrupted"), DeadlineExceeded),
        (sqlite3.OperationalError("attempt to write a readonly database"), InvalidArgument),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else value.__name__,
)
def test_each_driver_error_maps_to_one_gateway_error(exc: Exception, expected: type) -> None:
    error = translate(exc, timeout_ms=100)
    assert type(error) is expected, (exc, error)
    engine = next(e for e in ENGINES.values() if isinstance(exc, e.errors))
    assert type(engine.translate(exc, timeout_ms=100)) is expected


def _modules(*packages: str) -> list[Path]:
    return [path for package in packages for path in sorted((ROOT / package).rglob("*.py"))]


def _outside_engines(path: Path) -> bool:
    return (ROOT / "backends" / "engines") not in path.parents


def _storage(path: Path) -> bool:
    """The retrieval index storages: storage, not targets; they may use psycopg (tests/test_architecture.py)."""
    return ROOT / "backends" / "retrieval" / "storage" in path.parents


def test_no_driver_import_in_gateway_or_backends_outside_the_engines() -> None:
    found = []
    for path in filter(_outside_engines, _modules("gateway", "backends")):
        drivers = DRIVERS - {"psycopg", "psycopg_pool"} if _storage(path) else DRIVERS
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            found += [f"{path.relative_to(ROOT)}: {name}" for name in names if name.split(".")[0] in drivers]
    assert found == []


def test_no_protocol_switch_in_gateway_or_backends_outside_the_engines() -> None:
    """No `protocol == "mysql"`, `in ("pgsql", ...)` or `{"sqlite": ...}` table: that knowledge is the engine's."""
    found = []
    for path in filter(_outside_engines, _modules("gateway", "backends")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
                values += [e for v in values if isinstance(v, ast.Tuple | ast.List | ast.Set) for e in v.elts]
            elif isinstance(node, ast.Dict):
                values = [k for k in node.keys if k is not None]
            else:
                continue
            if any(isinstance(v, ast.Constant) and v.value in PROTOCOL_NAMES for v in values):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
