"""Admins see who is connected: a long statement run through run_sql_readonly by OAuth user
alice is listed by admin_show_processes with subject "alice" (PostgreSQL: the transaction-local
application_name `mcp-gateway sub=alice` in pg_stat_activity; MariaDB: the worker's map of
pooled connection -> caller), and show_connections counts alice's running statement. The same
statement from a static token carries no subject. After the call, the pooled PostgreSQL session
is back to `mcp-gateway` (the label was transaction-local)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from admin.engine_accounts import Engine, Mariadb, Postgres
from admin.support import ok, tool
from server_process import GatewayProcess, call_tool, start_gateway

from oauth.oidc import OidcProvider


@pytest.fixture(scope="module")
def gateway(provider: OidcProvider) -> Iterator[GatewayProcess]:
    with start_gateway(variables={"mcp-oauth_issuer": provider.issuer}) as process:
        yield process


@pytest.fixture(scope="module", params=["mysql", "pgsql"])
def engine(request: pytest.FixtureRequest, gateway: GatewayProcess) -> Iterator[Engine]:
    if request.param == "mysql":
        engine: Engine = Mariadb(request.getfixturevalue("mariadb_db"))
        engine.execute("CREATE TABLE big (n INT PRIMARY KEY)")
        engine.execute("INSERT INTO big SELECT seq FROM seq_1_to_1000")
    else:
        engine = Postgres(request.getfixturevalue("postgres_db"))
        engine.execute("CREATE TABLE big (n int PRIMARY KEY)")
        engine.execute("INSERT INTO big SELECT generate_series(1, 1000)")
    target_id = f"who_{engine.protocol}_{uuid.uuid4().hex[:6]}"
    with gateway.client() as http:
        ok(
            http,
            gateway,
            "admin",
            "admin.upsert_auth_profile",
            {
                "auth_profile_id": target_id,
                "db_username": engine.settings["user"],
                "db_password": engine.settings.get("password", ""),
            },
        )
        ok(
            http,
            gateway,
            "admin",
            "admin.upsert_target_profile",
            {"target_id": target_id, **engine.target(target_id), "timeout_ms": 60000},
        )
        ok(http, gateway, "admin", "admin.load_to_runtime", {"module": "profiles"})
    engine.target_id = target_id
    yield engine


def _seen_while_running(gateway: GatewayProcess, engine: Engine, token: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start a long statement with `token`; return its admin_show_processes entry and what
    show_connections said meanwhile; then cancel it."""
    marker = f"who_{uuid.uuid4().hex[:8]}"
    sql = f"SELECT COUNT(*) AS {marker} FROM big a CROSS JOIN big b CROSS JOIN big c"
    outcome: dict[str, Any] = {}

    def long_call() -> None:
        with gateway.client(timeout=60) as http:
            outcome["result"] = call_tool(
                http, gateway, "query", "run_sql_readonly", {"sql": sql, "target_id": engine.target_id}, token=token
            )

    caller = threading.Thread(target=long_call)
    caller.start()
    try:
        with gateway.client() as http:
            running = None
            for _ in range(200):
                listed = ok(http, gateway, "admin", "admin_show_processes", {"target_id": engine.target_id})["processes"]
                running = next((p for p in listed if marker in p["statement"]), None)
                if running:
                    break
                time.sleep(0.05)
            assert running is not None, outcome
            connected = ok(http, gateway, "stats", "show_connections", {})["callers"]
            if isinstance(engine, Postgres):  # the label any worker or tool sees: pg_stat_activity
                with psycopg.connect(**engine.settings, autocommit=True) as pg:
                    row = pg.execute(
                        "SELECT application_name FROM pg_stat_activity WHERE pid = %s", (running["process_id"],)
                    ).fetchone()
                running["application_name"] = row[0] if row else None
            ok(http, gateway, "admin", "admin_kill_query", {"target_id": engine.target_id, "process_id": running["process_id"]})
            caller.join(timeout=10)
            assert not caller.is_alive()
    finally:
        caller.join(timeout=30)
    assert outcome["result"]["isError"] is True  # cancelled: nothing left running
    return running, connected


def test_admins_see_the_oauth_caller_of_a_running_statement(
    gateway: GatewayProcess, engine: Engine, provider: OidcProvider
) -> None:
    alice = provider.token("alice", gateway.url("query"), "mcp:query")
    running, connected = _seen_while_running(gateway, engine, alice)
    assert running["subject"] == "alice", running
    if isinstance(engine, Postgres):
        assert running["application_name"] == "mcp-gateway sub=alice", running
    assert {"target_id": engine.target_id, "subject": "alice", "statements": 1} in connected, connected
    # after the call nothing carries alice any more: not the map, not the pooled session
    with gateway.client() as http:
        assert not ok(http, gateway, "stats", "show_connections", {})["callers"]
        answer = tool(http, gateway, "query", "run_sql_readonly", {"sql": "SELECT 1 AS one", "target_id": engine.target_id})
        assert answer["rows"] == [[1]], answer
    if isinstance(engine, Postgres):
        with psycopg.connect(**engine.settings, autocommit=True) as pg:
            labels = pg.execute(
                "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'mcp-gateway%' "
                "AND datname = current_database()"
            ).fetchall()
        assert labels and all(label == "mcp-gateway" for (label,) in labels), labels


def test_a_static_token_caller_has_no_subject(gateway: GatewayProcess, engine: Engine) -> None:
    running, connected = _seen_while_running(gateway, engine, gateway.tokens["query"])
    assert running["subject"] is None, running
    if isinstance(engine, Postgres):
        assert running["application_name"] == "mcp-gateway", running
    assert not [c for c in connected if c["target_id"] == engine.target_id], connected
