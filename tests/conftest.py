"""Shared fixtures: real MariaDB and PostgreSQL databases, created and dropped per test module.

Under CI (CI=true) a missing server fails loudly; on a developer's laptop it skips.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

MARIADB = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}
POSTGRES = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def _unavailable(what: str, exc: Exception) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not reachable under CI: {exc}")
    pytest.skip(f"{what} not reachable: {exc}")


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def mariadb_db() -> Iterator[dict]:
    """A fresh MariaDB database; yields connection settings {host, port, user, password, database}."""
    import pymysql

    try:
        admin = pymysql.connect(**MARIADB, autocommit=True)
    except Exception as exc:  # noqa: BLE001
        _unavailable("MariaDB at 127.0.0.1:3306", exc)
    name = _name("mcpgw")
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    try:
        yield {**MARIADB, "database": name}
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        admin.close()


@pytest.fixture(scope="module")
def postgres_db() -> Iterator[dict]:
    """A fresh PostgreSQL database; yields {host, port, user, dbname}."""
    import psycopg

    try:
        admin = psycopg.connect(**POSTGRES, dbname="postgres", autocommit=True)
    except Exception as exc:  # noqa: BLE001
        _unavailable("PostgreSQL at 127.0.0.1:5432", exc)
    name = _name("mcpgw")
    admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {**POSTGRES, "dbname": name}
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def gateway_server():
    """A real gateway subprocess (HTTPS, self-signed cert, explicit per-endpoint tokens), shared by
    the session; yields tests/server_process.GatewayProcess (base_url, tokens, ca_path, client()).
    Tests that change its runtime configuration must put it back; others start their own with
    server_process.start_gateway()."""
    from server_process import start_gateway

    with start_gateway() as gateway:
        yield gateway


# PostgreSQL 18 with pgvector, one per session (tests/pgvector_server.py): pgvector_server, pgvector_db.
from pgvector_server import pgvector_db, pgvector_server  # noqa: E402, F401
