"""PostgreSQL in one round trip (backends/engines/postgresql.py): BEGIN READ ONLY, the per-call
settings, the caller's statement and ROLLBACK go out as one libpq pipeline. Whatever happens
(success, a statement error, a server timeout, a truncated result, a settings error, a server
that goes silent), the connection ends idle and out of pipeline mode with the session's own
settings, or is closed. Values, columns and error codes are compared with the three-round-trip
path (the fallback for libpq < 14) on the same connection."""

from __future__ import annotations

import contextlib
import select
import socket
import tempfile
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from loop_ticks import run_ticking

from backends.engines import engine_for
from backends.engines import postgresql as execute
from gateway.errors import DeadlineExceeded, GatewayError, InvalidArgument, NotFound

LIMITS = {"timeout_ms": 3000, "max_rows": 100, "max_bytes": 1_000_000}
SESSION_OPTIONS = "-c statement_timeout=5000 -c default_transaction_read_only=on"  # as the pool opens them
SCHEMA = 'Odd "Schema", x'

pytestmark = pytest.mark.skipif(not execute._LIBPQ.pipeline, reason="libpq < 14: no pipeline mode")


@pytest.fixture(scope="module")
def db(postgres_db: dict) -> dict:
    with psycopg.connect(**postgres_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE audit (id int)")
        conn.execute(
            "CREATE FUNCTION loosen() RETURNS text LANGUAGE sql VOLATILE AS $$ SELECT"
            " set_config('statement_timeout', '0', false) || set_config('search_path', 'pg_temp', false)"
            " || set_config('standard_conforming_strings', 'off', false) $$"
        )
        conn.execute("CREATE FUNCTION w() RETURNS int LANGUAGE sql VOLATILE AS 'INSERT INTO audit VALUES (1) RETURNING 1'")
        conn.execute(f"CREATE SCHEMA {psycopg.sql.Identifier(SCHEMA).as_string(conn)}")
        conn.execute(f"CREATE TABLE {psycopg.sql.Identifier(SCHEMA, 'odd').as_string(conn)} (v text)")
        conn.execute(f"INSERT INTO {psycopg.sql.Identifier(SCHEMA, 'odd').as_string(conn)} VALUES ('in the odd schema')")
    return postgres_db


@pytest.fixture(params=["transactional", "autocommit"])
def conn(db: dict, request: pytest.FixtureRequest) -> Iterator[psycopg.Connection]:
    with psycopg.connect(**db, autocommit=request.param == "autocommit", options=SESSION_OPTIONS) as c:
        yield c


def _session(conn: psycopg.Connection) -> tuple:
    """What a call must leave as it found: outside any transaction and pipeline, the session's own settings."""
    assert not conn.closed
    assert conn.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    state = (
        conn.pgconn.parameter_status(b"standard_conforming_strings"),
        conn.execute("SELECT current_setting('statement_timeout'), current_setting('search_path')").fetchone(),
    )
    conn.rollback()
    return state


def _fallback(monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, sql: str, **limits: int) -> object:
    """The same call through the three-round-trip path; its result, or the error it raised."""
    with monkeypatch.context() as m:
        m.setattr(execute._LIBPQ, "pipeline", False)
        try:
            return engine_for("pgsql").execute(conn, sql, **limits)
        except GatewayError as exc:
            return exc


def test_success_leaves_the_session_as_it_was(conn: psycopg.Connection) -> None:
    before = _session(conn)
    out = engine_for("pgsql").execute(conn, "SELECT current_setting('statement_timeout') AS t, 1 + 1 AS two", **LIMITS)
    assert out.rows == [["3s", 2]]  # the per-call timeout was in force for the statement
    assert out.columns == [{"name": "t", "type": "text"}, {"name": "two", "type": "int4"}]
    assert _session(conn) == before


BAD = [
    "SELECT * FROM no_such_table",
    "SELEC 1",
    "SELECT 1 / 0",
    "SELECT 1; SELECT 2",
    "DELETE FROM audit",
    "SELECT w()",
    "SELECT generate_series(1, 3) / (2 - generate_series(1, 3))",  # fails after a row was sent
]


@pytest.mark.parametrize("sql", BAD)
def test_a_statement_error_gives_the_same_error_and_leaves_the_session_clean(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, sql: str
) -> None:
    before = _session(conn)
    with pytest.raises(NotFound if "no_such_table" in sql else InvalidArgument) as raised:
        engine_for("pgsql").execute(conn, sql, **LIMITS)
    assert _session(conn) == before
    old = _fallback(monkeypatch, conn, sql, **LIMITS)
    assert type(old) is type(raised.value) and str(old) == str(raised.value)
    assert conn.execute("SELECT count(*) FROM audit").fetchone() == (0,)
    conn.rollback()


def test_a_settings_error_aborts_the_statement_and_leaves_the_session_clean(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """statement_timeout past INT_MAX ms fails in the settings statement: the caller's
    statement must not run without them, and the pipeline's answers stay in step."""
    before = _session(conn)
    limits = {**LIMITS, "timeout_ms": 2**31}
    with pytest.raises(InvalidArgument) as raised:
        engine_for("pgsql").execute(conn, "SELECT w()", **limits)
    assert "22023" in str(raised.value)
    assert _session(conn) == before
    old = _fallback(monkeypatch, conn, "SELECT w()", **limits)
    assert type(old) is type(raised.value) and str(old) == str(raised.value)
    assert engine_for("pgsql").execute(conn, "SELECT 1", **LIMITS).rows == [[1]]


def test_a_server_timeout_is_deadline_exceeded_and_leaves_the_session_clean(conn: psycopg.Connection) -> None:
    before = _session(conn)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="200 ms"):
        engine_for("pgsql").execute(conn, "SELECT pg_sleep(10)", timeout_ms=200, max_rows=10, max_bytes=10_000)
    assert time.monotonic() - started < 3
    assert _session(conn) == before


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT g, repeat('x', 1000) FROM generate_series(1, 5000) g LIMIT 101", "max_bytes"),
        ("SELECT g FROM generate_series(1, 5000) g LIMIT 101", "max_rows"),
        ("SELECT g, repeat('x', 1000) FROM (SELECT generate_series(1, 50000000) AS g) s", "max_bytes"),  # no LIMIT: cancelled
    ],
)
@pytest.mark.parametrize("chunked", [execute._LIBPQ.chunked, False], ids=["as-built", "single-row"])
def test_a_truncated_result_leaves_the_session_clean(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, sql: str, reason: str, chunked: bool
) -> None:
    monkeypatch.setattr(execute._LIBPQ, "chunked", chunked)  # libpq < 17 reads one row per result
    before = _session(conn)
    limits = {**LIMITS, "max_bytes": 20_000, "timeout_ms": 20_000}
    started = time.monotonic()
    out = engine_for("pgsql").execute(conn, sql, **limits)
    assert time.monotonic() - started < 5  # the unlimited one is cancelled, not read to its end
    assert out.truncated_reason == reason
    assert out.rows[0] == ([1, "x" * 1000] if reason == "max_bytes" else [1])
    assert _session(conn) == before
    old = _fallback(monkeypatch, conn, sql, **limits)
    assert (old.rows, old.truncated_reason, old.result_bytes, old.columns) == (
        out.rows,
        out.truncated_reason,
        out.result_bytes,
        out.columns,
    )
    assert _session(conn) == before


def test_set_config_in_a_function_does_not_outlive_the_call(conn: psycopg.Connection) -> None:
    before = _session(conn)
    out = engine_for("pgsql").execute(conn, "SELECT loosen()", **LIMITS)
    assert out.rows == [["0pg_tempoff"]]  # it did change them, inside the call
    assert _session(conn) == before
    with pytest.raises(InvalidArgument, match="read-only"):
        engine_for("pgsql").execute(conn, "SELECT w()", **LIMITS)


VALUES = """SELECT 12345678901234567890.123456789::numeric AS n, 'NaN'::numeric AS nan,
    timestamptz '2024-02-29 12:34:56.789+05:30' AS ts, date '2024-01-02' AS d, interval '1 day 2 hours' AS iv,
    '\\x00ff10'::bytea AS b, ARRAY[1, NULL, 3] AS ai, ARRAY['a,b', 'c"d'] AS at, '{"k": [1, 2.5, null]}'::json AS j,
    '{"k": true}'::jsonb AS jb, 'a\\b''c' AS backslash, NULL::int AS nothing, 1.5::float8 AS f,
    'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, true AS bo, 42::int8 AS big"""


@pytest.mark.parametrize("chunked", [execute._LIBPQ.chunked, False], ids=["as-built", "single-row"])
def test_values_and_columns_come_out_as_through_the_three_round_trips(
    conn: psycopg.Connection, monkeypatch: pytest.MonkeyPatch, chunked: bool
) -> None:
    monkeypatch.setattr(execute._LIBPQ, "chunked", chunked)
    out = engine_for("pgsql").execute(conn, VALUES, **LIMITS)
    old = _fallback(monkeypatch, conn, VALUES, **LIMITS)
    assert (out.columns, out.rows, out.result_bytes) == (old.columns, old.rows, old.result_bytes)
    assert [c["type"] for c in out.columns][:8] == ["numeric", "numeric", "timestamptz", "date", "interval", "bytea", "int4[]", "text[]"]  # fmt: skip
    assert out.rows[0][10] == "a\\b'c"  # standard_conforming_strings on for the statement


def test_an_empty_result_still_names_its_columns(conn: psycopg.Connection) -> None:
    """The final zero-row result carries the row description (the stream path had none to give)."""
    out = engine_for("pgsql").execute(conn, "SELECT 1 AS a, 'x'::text AS b WHERE false", **LIMITS)
    assert out.rows == [] and out.columns == [{"name": "a", "type": "int4"}, {"name": "b", "type": "text"}]


def test_the_schema_is_a_parameter_and_per_call(conn: psycopg.Connection) -> None:
    before = _session(conn)
    out = engine_for("pgsql").execute(conn, "SELECT v, current_schemas(false) FROM odd", schema=SCHEMA, **LIMITS)
    assert out.rows == [["in the odd schema", [SCHEMA]]]
    assert _session(conn) == before
    with pytest.raises(InvalidArgument, match="NUL"):
        engine_for("pgsql").execute(conn, "SELECT 1", schema="public\x00x", **LIMITS)


def test_a_connection_that_arrives_inside_a_transaction_is_rolled_back_first(db: dict) -> None:
    with psycopg.connect(**db) as conn:
        conn.execute("SET LOCAL statement_timeout = 0")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        out = engine_for("pgsql").execute(conn, "SELECT current_setting('statement_timeout')", **LIMITS)
        assert out.rows == [["3s"]]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_waiting_for_the_server_releases_the_gil(conn: psycopg.Connection) -> None:
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        time.sleep(0.05)
        started_ticks = ticks
        engine_for("pgsql").execute(conn, "SELECT pg_sleep(0.5)", **LIMITS)
        during = ticks - started_ticks
    finally:
        stop.set()
        thread.join()
    assert during > 100_000  # the other thread ran the whole time the call waited


@contextlib.contextmanager
def _freezable_proxy(port: int) -> Iterator[tuple[int, threading.Event]]:
    """A TCP relay to PostgreSQL that, once `frozen` is set, stops passing the server's bytes:
    a server that went silent (partition, stopped host) as the client sees it."""
    listener = socket.create_server(("127.0.0.1", 0))
    frozen, stop = threading.Event(), threading.Event()

    def relay() -> None:
        client, _ = listener.accept()
        server = socket.create_connection(("127.0.0.1", port))
        with client, server:
            while not stop.is_set():
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    if sock is client:
                        server.sendall(data)
                    elif not frozen.is_set():
                        client.sendall(data)

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], frozen
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_silent_server_is_given_up_on_and_the_connection_closed(db: dict) -> None:
    with _freezable_proxy(db["port"]) as (port, frozen), psycopg.connect(**{**db, "port": port}) as conn:
        assert engine_for("pgsql").execute(conn, "SELECT 1", **LIMITS).rows == [[1]]
        frozen.set()
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="did not answer"):
            engine_for("pgsql").execute(conn, "SELECT 1", timeout_ms=200, max_rows=10, max_bytes=10_000)
        elapsed = time.monotonic() - started
        assert 0.2 + execute._PG_MARGIN_S - 0.1 < elapsed < 0.2 + execute._PG_MARGIN_S + 2
        assert conn.closed  # a pool discards it


def test_text_the_database_encoding_cannot_hold_is_invalid_argument(db: dict) -> None:
    """A LATIN1 database: the statement is encoded client-side (the stream path let the
    UnicodeEncodeError escape as a stack trace)."""
    name = f"{db['dbname']}_latin1"
    with psycopg.connect(**{**db, "dbname": "postgres"}, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
        try:
            with psycopg.connect(**{**db, "dbname": name}) as conn:
                with pytest.raises(InvalidArgument, match="encoding"):
                    engine_for("pgsql").execute(conn, "SELECT '日本'", **LIMITS)
                with pytest.raises(InvalidArgument, match="encoding"):
                    engine_for("pgsql").execute(conn, "SELECT 1", schema="日本", **LIMITS)
                assert engine_for("pgsql").execute(conn, "SELECT 'é' AS é", **LIMITS).rows == [["é"]]
                assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _frontend_messages(conn: psycopg.Connection, sql: str, **kwargs: object) -> list[list[str]]:
    """What the client sent during one call, from libpq's own protocol trace."""
    with tempfile.TemporaryFile("w+") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        try:
            with contextlib.suppress(GatewayError):
                engine_for("pgsql").execute(conn, sql, **{**LIMITS, **kwargs})
        finally:
            conn.pgconn.untrace()
        trace.seek(0)
        return [line.rstrip("\n").split("\t")[2:] for line in trace if line.startswith("F\t")]


def test_one_round_trip_with_the_values_as_parameters(conn: psycopg.Connection) -> None:
    sent = _frontend_messages(conn, "SELECT 1", schema=SCHEMA)
    kinds = [m[0] for m in sent]
    assert kinds.count("Sync") == 1 and kinds[-1] == "Sync" and "Query" not in kinds  # one exchange, all extended protocol
    parsed = [m[1] for m in sent if m[0] == "Parse"]
    assert len(parsed) == 4 and '"BEGIN READ ONLY"' in parsed[0] and '"ROLLBACK"' in parsed[3]
    assert "Schema" not in parsed[1] and "3000" not in parsed[1]  # the values travel in Bind, not in the text
    assert any(m[0] == "Bind" and "'3000'" in m[1] and "Schema" in m[1] for m in sent)


def test_after_a_statement_error_the_rollback_is_the_only_extra_trip(conn: psycopg.Connection) -> None:
    sent = _frontend_messages(conn, "SELECT 1 / 0")
    kinds = [m[0] for m in sent]
    assert kinds.count("Sync") == 1 and sent[-1] == ["Query", ' "ROLLBACK"']
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_value_psycopg_cannot_load_is_invalid_argument_and_the_session_stays_usable(conn: psycopg.Connection) -> None:
    """'infinity'::timestamp has no Python datetime: the caller is told to select it as text, not
    that the connection failed. (A date is read as its text, so 'infinity'::date just loads.)"""
    before = _session(conn)
    with pytest.raises(InvalidArgument) as raised:
        engine_for("pgsql").execute(conn, "SELECT 'infinity'::timestamp AS t", **LIMITS)
    assert "CAST(column AS text)" in str(raised.value)
    assert _session(conn) == before
    assert engine_for("pgsql").execute(conn, "SELECT CAST('infinity'::timestamp AS text) AS t", **LIMITS).rows == [["infinity"]]
    assert engine_for("pgsql").execute(conn, "SELECT 'infinity'::date AS d", **LIMITS).rows == [["infinity"]]


# -- on the event loop (gateway/loop_io.py): the same pipeline, its waits handed to the loop ---


def test_on_the_loop_the_statement_waits_without_blocking_the_loop(conn: psycopg.Connection) -> None:
    before = _session(conn)
    sql = "SELECT count(*) AS n, pg_sleep(0.3)::text AS slept"
    out, ticks = run_ticking(lambda: engine_for("pgsql").execute(conn, sql, **LIMITS))
    assert out.rows == [[1, ""]]
    assert ticks >= 20  # ~60 ticks of the loop during the 300 ms the server took
    assert _session(conn) == before
    bad, _ = run_ticking(lambda: _error_of(conn, "SELECT 1/0"))
    assert isinstance(bad, InvalidArgument) and "DivisionByZero" in str(bad)
    assert _session(conn) == before


def _error_of(conn: psycopg.Connection, sql: str) -> GatewayError | None:
    try:
        engine_for("pgsql").execute(conn, sql, **LIMITS)
    except GatewayError as exc:
        return exc
    return None


def test_on_the_loop_a_server_timeout_and_a_truncation_end_as_off_the_loop(conn: psycopg.Connection) -> None:
    before = _session(conn)
    with pytest.raises(DeadlineExceeded, match="200 ms"):
        run_ticking(
            lambda: engine_for("pgsql").execute(conn, "SELECT pg_sleep(10)", timeout_ms=200, max_rows=10, max_bytes=10_000)
        )
    assert _session(conn) == before
    sql = "SELECT g, repeat('x', 1000) FROM (SELECT generate_series(1, 50000000) AS g) s"  # no LIMIT: cancelled
    out, _ = run_ticking(lambda: engine_for("pgsql").execute(conn, sql, **{**LIMITS, "max_bytes": 20_000, "timeout_ms": 20_000}))
    assert out.truncated_reason == "max_bytes" and out.rows[0] == [1, "x" * 1000]
    assert _session(conn) == before


def test_the_calls_deadline_on_the_loop_closes_the_connection(db: dict) -> None:
    """The caller's deadline cancels the task while the server works: the pipeline is cut off
    midway, so the session's state is unknown and the connection is closed (a pool discards it)."""
    with psycopg.connect(**db, options=SESSION_OPTIONS) as conn:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            run_ticking(lambda: engine_for("pgsql").execute(conn, "SELECT pg_sleep(5)", **LIMITS), deadline_s=0.2)
        assert time.monotonic() - started < 2
        assert conn.closed
