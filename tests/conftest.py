"""Shared fixtures: real MariaDB and PostgreSQL databases, created and dropped per test module.

Under CI (CI=true) a missing server fails loudly; on a developer's laptop it skips.
"""

from __future__ import annotations

import os
import re
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


# -- running on several workers ------------------------------------------------------------------
# The README's command runs the modules on pytest-xdist workers (`--dist loadfile`): a module runs
# whole on one worker, so its module-scoped servers and databases start once, and modules share
# nothing but the servers on 3306/5432/6379, where each uses databases, users and ports of its own.
# Modules with a test marked `slow` go first (`--no-loadscope-reorder` keeps this order): a long one
# started last would leave the other workers idle at the end.


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    slow = {path for path, module_items in modules.items() if any(i.get_closest_marker("slow") for i in module_items)}
    items[:] = [item for path in sorted(modules, key=lambda path: path not in slow) for item in modules[path]]


_RUN_FILE = re.compile(r"(/tmp/mcpgw_\w*?)_[0-9a-f]{12}")  # the hostile corpora's per-run file names (their MARK)


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """A statement naming a per-run file gets an id without the random part: every xdist worker
    collects the corpus with its own MARK, and all must collect the same ids."""
    if isinstance(val, str) and _RUN_FILE.search(val):
        return _RUN_FILE.sub(r"\1_MARK", val)
    return None


# PostgreSQL 18 with pgvector, one per session (tests/pgvector_server.py): pgvector_server, pgvector_db.
from pgvector_server import pgvector_db, pgvector_server  # noqa: E402, F401
