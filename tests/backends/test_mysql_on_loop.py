"""MariaDB statements on the event loop (gateway/loop_io.py): a pooled session's reads wait on
the loop (other tasks run meanwhile), the caller's deadline closes the session, errors and caps
come out as off the loop, and a session whose reads would block (TLS, or pymysql's own socket
file) is refused before anything is sent, so the caller takes a thread. A real MariaDB."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pymysql
import pytest
from loop_ticks import run_ticking

from backends.engines.mysql import ENGINE
from gateway import loop_io
from gateway.errors import DeadlineExceeded, GatewayError

LIMITS = {"timeout_ms": 3000, "max_rows": 100, "max_bytes": 1_000_000}


@dataclass(frozen=True)
class Settings:  # backends.engines.base.TargetSettings
    host: str
    port: int
    database: str
    username: str
    password: str
    target_id: str = "maria"
    default_schema: str = ""
    timeout_ms: int = 5000
    use_ssl: bool = False
    ssl_mode: str = "disable"


@pytest.fixture
def target(mariadb_db: dict) -> Settings:
    return Settings(mariadb_db["host"], mariadb_db["port"], mariadb_db["database"], mariadb_db["user"], mariadb_db["password"])


@pytest.fixture
def conn(target: Settings) -> Iterator[pymysql.connections.Connection]:
    session = ENGINE.connect(target, timeout_s=5, io_timeout_s=30)  # as the pool opens it
    yield session
    session.close()


def test_a_plain_tcp_target_executes_on_the_loop_and_a_tls_one_does_not(target: Settings) -> None:
    assert ENGINE.executes_on_loop(target)
    assert not ENGINE.executes_on_loop(Settings(**{**target.__dict__, "use_ssl": True, "ssl_mode": "require"}))


def test_on_the_loop_the_statement_waits_without_blocking_the_loop(conn: pymysql.connections.Connection) -> None:
    out, ticks = run_ticking(lambda: ENGINE.execute(conn, "SELECT SLEEP(0.3) AS slept, 'é' AS t", **LIMITS))
    assert out.rows == [[0, "é"]]
    assert ticks >= 20  # ~60 ticks of the loop during the 300 ms the server took
    # the same session, off the loop, as before
    assert ENGINE.execute(conn, "SELECT 1 AS one", **LIMITS).rows == [[1]]


def test_on_the_loop_errors_timeouts_and_caps_are_as_off_the_loop(conn: pymysql.connections.Connection) -> None:
    def error_of(sql: str, **limits: int) -> GatewayError | None:
        try:
            ENGINE.execute(conn, sql, **{**LIMITS, **limits})
        except GatewayError as exc:
            return exc
        return None

    for sql, limits in (("SELECT * FROM no_such_table", {}), ("SELECT SLEEP(5)", {"timeout_ms": 200})):
        on, _ = run_ticking(lambda sql=sql, limits=limits: error_of(sql, **limits))
        off = error_of(sql, **limits)
        assert on is not None and (type(on), str(on)) == (type(off), str(off))
    assert isinstance(error_of("SELECT SLEEP(5)", timeout_ms=200), DeadlineExceeded)
    sql = "SELECT seq, REPEAT('x', 1000) AS pad FROM seq_1_to_5000"  # MariaDB's sequence engine
    on, _ = run_ticking(lambda: ENGINE.execute(conn, sql, **{**LIMITS, "max_bytes": 20_000}))
    off = ENGINE.execute(conn, sql, **{**LIMITS, "max_bytes": 20_000})
    assert (on.rows, on.truncated_reason) == (off.rows, off.truncated_reason) and on.truncated_reason == "max_bytes"


def test_the_calls_deadline_on_the_loop_closes_the_session(conn: pymysql.connections.Connection) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        run_ticking(lambda: ENGINE.execute(conn, "SELECT SLEEP(5)", **LIMITS), deadline_s=0.2)
    assert time.monotonic() - started < 2
    assert ENGINE.broken(conn)  # cut off midway: the pool discards it


def test_a_session_whose_reads_would_block_the_loop_is_refused_before_anything_is_sent(mariadb_db: dict) -> None:
    plain = pymysql.connect(**mariadb_db, autocommit=True)  # pymysql's own socket file: recv would block
    try:
        with pytest.raises(loop_io.WouldBlock):
            run_ticking(lambda: ENGINE.execute(plain, "SELECT 1", **LIMITS))
        assert ENGINE.execute(plain, "SELECT 1 AS one", **LIMITS).rows == [[1]]  # untouched: usable off the loop
    finally:
        plain.close()
