"""TargetPools against real servers: limits, health checks, read-only sessions, timeouts,
rebuilds on runtime changes, and recovery after a real PostgreSQL restart (a second
instance in a temp directory) and after MariaDB kills our sessions."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest

from backends.pools import BoundedPool, Health, TargetPools
from gateway.assembly import close_backends
from gateway.errors import Unavailable
from gateway.loop_io import WouldBlock
from handlers.query import QueryHandler
from tests.query import add_auth, add_target, make_services, make_store, ok, reload

STATS_KEYS = {"target_id", "protocol", "size", "in_use", "idle", "waiting", "max_size", "errors", "reconnects", "timeouts"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresInstance:
    """A throwaway PostgreSQL server (initdb + pg_ctl), run as the postgres user when we are root."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not bins:
            pytest.skip("no PostgreSQL server binaries under /usr/lib/postgresql")
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="mcpgw-pg-"))
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.dir, account.pw_uid, account.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"), "-o", options, "-w", "-t", "30", "start")

    def kill(self) -> None:
        """Immediate shutdown: every backend dies without a goodbye, as in a crash."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def pg2() -> Iterator[PostgresInstance]:
    instance = PostgresInstance()
    instance.start()
    try:
        yield instance
    finally:
        instance.remove()


def pools_for(
    tmp_path: Path, targets: list[tuple[str, str, dict]], auths: list[tuple[str, str]] = (), **variables: str
) -> TargetPools:
    store = make_store(tmp_path / f"data-{time.monotonic_ns()}")
    for name, value in variables.items():
        store.set_variable(f"mcp-query_{name}", value)
    store.load_to_runtime("MCP VARIABLES")
    for auth_id, user in auths:
        add_auth(store, auth_id, user)
    for target_id, protocol, extra in targets:
        add_target(store, target_id, protocol, **extra)
    store.load_to_runtime("MCP PROFILES")
    runtime = store.read_runtime()
    store.close()
    return TargetPools(runtime)


@pytest.fixture()
def lite_file(tmp_path: Path) -> Path:
    path = tmp_path / "lite.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("INSERT INTO t VALUES (1, 'one')")
    conn.commit()
    conn.close()
    return path


def all_engines(mariadb_db: dict, postgres_db: dict, lite_file: Path) -> list[tuple[str, str, dict]]:
    return [
        (
            "maria",
            "mysql",
            {"host": "127.0.0.1", "port": mariadb_db["port"], "database": mariadb_db["database"], "auth_profile_id": "root"},
        ),
        (
            "pg",
            "pgsql",
            {"host": "127.0.0.1", "port": postgres_db["port"], "database": postgres_db["dbname"], "auth_profile_id": "pg"},
        ),
        ("lite", "sqlite", {"database": str(lite_file)}),
    ]


AUTHS = [("root", "root"), ("pg", "postgres")]
WRITES = {
    "maria": "CREATE TABLE must_not_exist (id INT)",
    "pg": "CREATE TABLE must_not_exist (id int)",
    "lite": "INSERT INTO t VALUES (2, 'two')",
}


def stats_of(pools: TargetPools, target_id: str) -> dict:
    (stats,) = [s for s in pools.stats() if s["target_id"] == target_id]
    return stats


def run(conn, sql: str) -> list:
    if isinstance(conn, sqlite3.Connection):
        return conn.execute(sql).fetchall()
    with conn.cursor() as cur:
        cur.execute(sql)
        return list(cur.fetchall())


def test_sessions_are_read_only_single_statement_and_rolled_back(
    tmp_path: Path, mariadb_db: dict, postgres_db: dict, lite_file: Path
) -> None:
    pools = pools_for(tmp_path, all_engines(mariadb_db, postgres_db, lite_file), AUTHS, pool_max="1")
    try:
        for target_id in ("maria", "pg", "lite"):
            with pools.connection(target_id) as (target, conn):
                assert target.target_id == target_id
                assert run(conn, "SELECT 1") == [(1,)]
                with pytest.raises((pymysql.err.Error, psycopg.Error, sqlite3.Error)):
                    run(conn, WRITES[target_id])
            if target_id == "maria":
                with pools.connection("maria") as (_, conn), pytest.raises(pymysql.err.ProgrammingError):
                    run(conn, "SELECT 1; SELECT 2")  # no MULTI_STATEMENTS
            if target_id == "pg":
                with pools.connection("pg") as (_, conn):
                    run(conn, "SELECT 1")  # opens a transaction ...
                with pools.connection("pg") as (_, conn):  # ... which was rolled back on return
                    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert {s["target_id"]: s["size"] for s in pools.stats()} == {"lite": 1, "maria": 1, "pg": 1}
    finally:
        pools.close()


@pytest.mark.parametrize("engine", ["maria", "pg", "lite"])
def test_pool_limit_waiting_and_timeout(
    tmp_path: Path, mariadb_db: dict, postgres_db: dict, lite_file: Path, engine: str
) -> None:
    pools = pools_for(tmp_path, all_engines(mariadb_db, postgres_db, lite_file), AUTHS, pool_max="2", pool_timeout_ms="400")
    try:
        with pools.connection(engine), pools.connection(engine):
            stats = stats_of(pools, engine)
            assert set(stats) == STATS_KEYS
            unused = [s for s in pools.stats() if s["target_id"] != engine]
            assert len(unused) == 2 and all(
                s["size"] == 0 and s["errors"] == 0 and s["max_size"] == 2 for s in unused
            )  # listed before first use
            assert (stats["size"], stats["in_use"], stats["idle"]) == (2, 2, 0)
            waited: dict = {}

            def third() -> None:
                started = time.monotonic()
                try:
                    with pools.connection(engine):
                        waited["got"] = True
                except Unavailable as exc:
                    waited["error"] = exc.message
                waited["s"] = time.monotonic() - started

            thread = threading.Thread(target=third)
            thread.start()
            deadline = time.monotonic() + 2
            while stats_of(pools, engine)["waiting"] != 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert stats_of(pools, engine)["waiting"] == 1
            thread.join()
            assert "got" not in waited and waited["s"] >= 0.35
            assert waited["error"] == f"target {engine} is unreachable (no connection within the pool timeout)"
        stats = stats_of(pools, engine)
        assert (stats["size"], stats["in_use"], stats["idle"], stats["waiting"]) == (2, 0, 2, 0)
        assert (stats["max_size"], stats["timeouts"]) == (2, 1)  # mcp_gateway_pool_max_connections, _timeouts_total
        with pools.connection(engine):  # capacity is back
            pass
    finally:
        pools.close()


def test_statement_timeout_of_the_target(tmp_path: Path, mariadb_db: dict, postgres_db: dict, lite_file: Path) -> None:
    targets = [
        (tid, proto, {**extra, "timeout_ms": 300}) for tid, proto, extra in all_engines(mariadb_db, postgres_db, lite_file)
    ]
    pools = pools_for(tmp_path, targets, AUTHS)
    slow = {
        "maria": "SELECT SLEEP(3)",
        "pg": "SELECT pg_sleep(3)",
        "lite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
    }
    try:
        for target_id, sql in slow.items():
            started = time.monotonic()
            with pools.connection(target_id) as (_, conn):
                try:
                    result = run(conn, sql)
                except (pymysql.err.OperationalError, psycopg.errors.QueryCanceled, sqlite3.OperationalError):
                    result = None
            assert time.monotonic() - started < 2.5, target_id
            assert result in (None, [(1,)]), target_id  # MariaDB's SLEEP returns 1 when interrupted
            with pools.connection(target_id) as (_, conn):  # the connection is still good
                assert run(conn, "SELECT 1") == [(1,)]
    finally:
        pools.close()


def test_unreachable_target_is_unavailable_without_details(tmp_path: Path, lite_file: Path) -> None:
    port = free_port()  # nothing listens here
    targets = [
        ("deadmaria", "mysql", {"host": "127.0.0.1", "port": port, "database": "x", "auth_profile_id": "root"}),
        ("deadpg", "pgsql", {"host": "127.0.0.1", "port": port, "database": "x", "auth_profile_id": "pg"}),
    ]
    pools = pools_for(tmp_path, targets, AUTHS, pool_timeout_ms="300")
    try:
        for target_id in ("deadmaria", "deadpg"):
            with pytest.raises(Unavailable) as caught, pools.connection(target_id):
                pass
            message = caught.value.message
            assert message.startswith(f"target {target_id} is unreachable")
            assert str(port) not in message and "127.0.0.1" not in message and "root" not in message
        assert all(s["errors"] >= 1 for s in pools.stats())
    finally:
        pools.close()


def test_killed_mariadb_sessions_are_replaced(tmp_path: Path, mariadb_db: dict) -> None:
    target = [
        (
            "maria",
            "mysql",
            {"host": "127.0.0.1", "port": mariadb_db["port"], "database": mariadb_db["database"], "auth_profile_id": "root"},
        )
    ]
    admin = pymysql.connect(**mariadb_db, autocommit=True)

    def kill_session(pools: TargetPools) -> int:
        with pools.connection("maria") as (_, conn):
            (session,) = run(conn, "SELECT CONNECTION_ID()")[0]
        with admin.cursor() as cur:
            cur.execute("KILL CONNECTION %s", (session,))
        return session

    # Checked on borrow (idle_check 0): the dead session is pinged, discarded, replaced; no error.
    pools = pools_for(tmp_path, target, AUTHS, pool_idle_check_ms="0")
    try:
        old = kill_session(pools)
        with pools.connection("maria") as (_, conn):
            assert run(conn, "SELECT CONNECTION_ID()")[0][0] != old
        assert pools.stats()[0]["reconnects"] == 1 and pools.stats()[0]["errors"] == 0
    finally:
        pools.close()
    # Not checked (recently used): the call that meets the dead session gets UNAVAILABLE, the next one works.
    pools = pools_for(tmp_path, target, AUTHS, pool_idle_check_ms="600000")
    try:
        kill_session(pools)
        with pytest.raises(Unavailable, match="connection lost"), pools.connection("maria") as (_, conn):
            run(conn, "SELECT 1")
        with pools.connection("maria") as (_, conn):
            assert run(conn, "SELECT 1") == [(1,)]
        (stats,) = pools.stats()
        assert stats["errors"] == 1 and stats["reconnects"] == 1 and stats["size"] == 1
    finally:
        pools.close()
        admin.close()


def backend_pid(pools: TargetPools, target_id: str) -> int:
    with pools.connection(target_id) as (_, conn):
        return run(conn, "SELECT pg_backend_pid()")[0][0]


def until_ok(pools: TargetPools, target_id: str, *, within_s: float) -> tuple[int, int]:
    """Retry until the target answers; returns (backend pid, failed attempts)."""
    deadline, failures = time.monotonic() + within_s, 0
    while True:
        try:
            return backend_pid(pools, target_id), failures
        except Unavailable:
            failures += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_pools_reconnect_after_a_postgres_restart(tmp_path: Path, pg2: PostgresInstance) -> None:
    target = [("pg2", "pgsql", {"host": "127.0.0.1", "port": pg2.port, "database": "postgres", "auth_profile_id": "pg"})]
    # 1. Restart while the pool is idle; the borrow-time check finds the dead connection.
    pools = pools_for(tmp_path, target, AUTHS, pool_idle_check_ms="0", pool_timeout_ms="5000")
    try:
        before = backend_pid(pools, "pg2")
        pg2.kill()
        pg2.start()
        after, failures = until_ok(pools, "pg2", within_s=20)
        assert after != before and failures == 0  # the caller never saw the restart
        assert pools.stats()[0]["reconnects"] == 1
    finally:
        pools.close()
    # 2. A call during the outage gets UNAVAILABLE; after the restart the pool serves again.
    pools = pools_for(tmp_path, target, AUTHS, pool_idle_check_ms="600000", pool_timeout_ms="1000")
    try:
        before = backend_pid(pools, "pg2")
        pg2.kill()
        with pytest.raises(Unavailable) as caught:
            backend_pid(pools, "pg2")
        assert caught.value.message == "target pg2 is unreachable (connection lost)"
        with pytest.raises(Unavailable, match="is unreachable"):
            backend_pid(pools, "pg2")  # the server is down: no new connection either
        pg2.start()
        after, _ = until_ok(pools, "pg2", within_s=20)
        assert after != before
        (stats,) = pools.stats()
        assert stats["reconnects"] >= 1 and stats["errors"] >= 2
    finally:
        pools.close()


def test_runtime_change_rebuilds_only_changed_targets(tmp_path: Path, postgres_db: dict, lite_file: Path) -> None:
    store = make_store(tmp_path / "data")
    add_auth(store, "pg", "postgres")
    pg = {"host": "127.0.0.1", "port": postgres_db["port"], "database": postgres_db["dbname"], "auth_profile_id": "pg"}
    add_target(store, "keep", "pgsql", **pg)
    add_target(store, "change", "pgsql", **pg)
    add_target(store, "drop", "sqlite", database=str(lite_file))
    store.load_to_runtime("MCP PROFILES")
    handler = QueryHandler(make_services(store))
    pools = handler.services.targets
    assert pools is handler.pools
    try:
        pids = {tid: backend_pid(pools, tid) for tid in ("keep", "change")}
        ok(handler, "list_tables", target_id="drop")
        store.conn().execute("UPDATE main.mcp_target_profiles SET timeout_ms = 999 WHERE target_id = 'change'")
        store.conn().execute("DELETE FROM main.mcp_target_profiles WHERE target_id = 'drop'")
        store.load_to_runtime("MCP PROFILES")
        with pools.connection("change") as (_, held):  # borrowed across the LOAD ...
            reload(store, handler)
            assert run(held, "SELECT 1") == [(1,)]  # ... still usable, closed when given back
        assert held.closed
        assert backend_pid(pools, "keep") == pids["keep"]  # same pooled session: not rebuilt
        assert backend_pid(pools, "change") != pids["change"]  # new pool with the new settings
        assert pools.resolve("change").timeout_ms == 999
        assert {s["target_id"] for s in pools.stats()} == {"keep", "change"}
        assert ok(handler, "list_targets")["targets"][0]["target_id"] == "change"
    finally:
        import asyncio

        asyncio.run(handler.close())
        close_backends(handler.services)
        store.close()
    assert all(s["size"] == 0 for s in pools.stats())  # closed


def test_replaced_sqlite_file_is_reopened(tmp_path: Path, lite_file: Path) -> None:
    pools = pools_for(tmp_path, [("lite", "sqlite", {"database": str(lite_file)})], pool_idle_check_ms="0")
    try:
        with pools.connection("lite") as (_, conn):
            assert run(conn, "SELECT v FROM t") == [("one",)]
        fresh = tmp_path / "fresh.db"
        conn = sqlite3.connect(fresh)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        conn.execute("INSERT INTO t VALUES (1, 'replaced')")
        conn.commit()
        conn.close()
        os.replace(fresh, lite_file)
        with pools.connection("lite") as (_, conn):
            assert run(conn, "SELECT v FROM t") == [("replaced",)]
        assert pools.stats()[0]["reconnects"] == 1
    finally:
        pools.close()


def test_a_pool_asked_not_to_block_hands_out_only_a_ready_idle_connection(tmp_path: Path) -> None:
    """getconn(block=False), for a statement on the event loop: an idle connection that needs no
    ping, else WouldBlock with the pool as it was (no slot taken, nothing opened or pinged)."""
    opened: list[sqlite3.Connection] = []
    pinged: list[sqlite3.Connection] = []

    def connect() -> sqlite3.Connection:
        opened.append(sqlite3.connect(tmp_path / "x.db", check_same_thread=False))
        return opened[-1]

    pool = BoundedPool(connect, pinged.append, Health(idle_check_s=0.2), max_size=2, timeout_s=1.0)
    with pytest.raises(WouldBlock):
        pool.getconn(block=False)  # nothing idle: opening one would block the loop
    assert (opened, pool.stats()["size"]) == ([], 0)
    conn = pool.getconn()
    pool.putconn(conn)
    assert pool.getconn(block=False) is conn  # idle and fresh
    assert pool.stats() == {"size": 1, "in_use": 1, "idle": 0, "waiting": 0}
    pool.putconn(conn)
    time.sleep(0.3)  # idle past the health check: it would need a ping first
    with pytest.raises(WouldBlock):
        pool.getconn(block=False)
    assert pool.stats() == {"size": 1, "in_use": 0, "idle": 1, "waiting": 0} and pinged == []
    assert pool.getconn() is conn and pinged == [conn]  # the blocking path pings it
    pool.close()
