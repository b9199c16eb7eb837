"""Private PostgreSQL and MariaDB servers a test may kill and bring back.

The shared servers on 3306/5432 serve every test at once, so a test that needs a backend to
die gets its own: a fresh data directory in a temporary directory, a free port on 127.0.0.1,
and `kill()` / `start()` to take it down (a crash, not a clean shutdown) and bring it back on
the same port with the same data. When run as root the servers run as the `postgres` and
`mysql` system users (both refuse root). Under CI a missing binary fails the test loudly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pymysql
import pytest
from server_process import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MARIADBD = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
MARIADB_INSTALL_DB = shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db"
READ_USER, READ_PASSWORD = "gw_reader", "reader-secret-1"  # a read-only account on both


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is needed under CI")
    pytest.skip(f"{what} not installed")


def _as(user: str, command: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if os.geteuid() == 0 else command


def _own(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, user, user)


def _wait(probe, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            probe()
            return
        except Exception as exc:  # noqa: BLE001 - not up yet
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up within {timeout_s} s: {exc}") from exc
            time.sleep(0.05)


class PrivatePostgres:
    """A PostgreSQL 15 cluster in `root` (trust authentication, fsync off)."""

    engine = "pgsql"

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.data, self.log = root / "pgdata", root / "postgres.log"

    def init(self) -> None:
        _own(self.root, "postgres")
        subprocess.run(
            _as("postgres", [str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync"]),
            check=True,
            capture_output=True,
        )
        self.start()
        with psycopg.connect(**self.admin_kwargs(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {READ_USER} LOGIN PASSWORD '{READ_PASSWORD}'")
            conn.execute("CREATE TABLE parts (id int PRIMARY KEY, name text)")
            conn.execute("INSERT INTO parts VALUES (1, 'bolt'), (2, 'nut')")
            conn.execute(f"GRANT SELECT ON parts TO {READ_USER}")

    def admin_kwargs(self) -> dict:
        return {"host": "127.0.0.1", "port": self.port, "user": "postgres", "dbname": "postgres", "connect_timeout": 2}

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c shared_buffers=8MB"
        subprocess.run(
            _as("postgres", [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"]),
            check=True,
            capture_output=True,
        )
        _wait(self.probe, 30, "private PostgreSQL")

    def kill(self) -> None:
        """Immediate shutdown: every backend quits at once, no checkpoint (crash recovery at start)."""
        subprocess.run(
            _as("postgres", [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"]),
            check=True,
            capture_output=True,
        )

    def probe(self) -> None:
        psycopg.connect(**self.admin_kwargs()).close()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()


class PrivateMariaDB:
    """A MariaDB server in `root`, TCP on 127.0.0.1 plus a socket for the bootstrap."""

    engine = "mysql"

    def __init__(self, root: Path) -> None:
        self.root, self.port = root, free_port()
        self.data, self.socket, self.pid_file = root / "data", root / "mariadb.sock", root / "mariadb.pid"
        self.log = root / "mariadb.log"
        self.process: subprocess.Popen[bytes] | None = None

    def init(self) -> None:
        _own(self.root, "mysql")
        subprocess.run(
            _as(
                "mysql",
                [
                    MARIADB_INSTALL_DB,
                    "--no-defaults",
                    f"--datadir={self.data}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                ],
            ),
            check=True,
            capture_output=True,
        )
        self.start()
        with pymysql.connect(unix_socket=str(self.socket), user="root", autocommit=True) as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("CREATE TABLE shop.parts (id INT PRIMARY KEY, name VARCHAR(20))")
            cur.execute("INSERT INTO shop.parts VALUES (1, 'bolt'), (2, 'nut')")
            cur.execute(f"CREATE USER '{READ_USER}'@'127.0.0.1' IDENTIFIED BY '{READ_PASSWORD}'")
            cur.execute(f"GRANT SELECT ON shop.* TO '{READ_USER}'@'127.0.0.1'")

    def start(self) -> None:
        command = [
            MARIADBD,
            "--no-defaults",
            f"--datadir={self.data}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket}",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.log}",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=16M",
            "--innodb-log-file-size=8M",
            "--skip-log-bin",
            "--performance-schema=off",
        ]
        self.process = subprocess.Popen(_as("mysql", command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(self.probe, 60, "private MariaDB")

    def probe(self) -> None:
        """Up when the server answers a login over TCP (before the bootstrap, refusing it is an answer too)."""
        try:
            pymysql.connect(host="127.0.0.1", port=self.port, user=READ_USER, password=READ_PASSWORD, connect_timeout=2).close()
        except pymysql.err.OperationalError as exc:
            if not exc.args or exc.args[0] != 1045:  # 1045: access denied, said by a running server
                raise

    def kill(self) -> None:
        """SIGKILL the server: a crash."""
        pid = int(self.pid_file.read_text().strip())
        os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            assert self.process is not None
            self.process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.02)
        self.pid_file.unlink(missing_ok=True)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.kill()


def _require_binaries() -> None:
    if not (PG_BIN / "initdb").exists():
        _missing(f"PostgreSQL 15 server binaries in {PG_BIN}")
    if not (Path(MARIADBD).exists() and Path(MARIADB_INSTALL_DB).exists()):
        _missing("mariadbd and mariadb-install-db")


@contextlib.contextmanager
def private_servers() -> Iterator[tuple[PrivatePostgres, PrivateMariaDB]]:
    """A private PostgreSQL and a private MariaDB, initialised with a `parts` table and READ_USER."""
    _require_binaries()
    with tempfile.TemporaryDirectory(prefix="mcpgw-private-") as tmp:
        os.chmod(tmp, 0o755)  # the server users must reach their directories inside
        pg_root, my_root = Path(tmp) / "pg", Path(tmp) / "my"
        pg_root.mkdir()
        my_root.mkdir()
        postgres, mariadb = PrivatePostgres(pg_root), PrivateMariaDB(my_root)
        try:
            with ThreadPoolExecutor(2) as pool:  # initdb and mariadb-install-db side by side
                for started in [pool.submit(postgres.init), pool.submit(mariadb.init)]:
                    started.result()
            yield postgres, mariadb
        finally:
            postgres.stop()
            mariadb.stop()
