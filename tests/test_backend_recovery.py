"""A target answers within 1 s of its database server coming back, whatever the outage length.

A private PostgreSQL and a private MariaDB (tests/private_servers.py) serve one target each of
a real gateway. Two client threads per target call run_sql_readonly every 50 ms throughout;
both servers are killed (a crash: pg_ctl -m immediate, SIGKILL for mariadbd), kept down for
5 s (then 30 s: that case is one test, both engines at once), and started again. During the
outage every call must fail fast with UNAVAILABLE; after it, the first successful answer must
come within 1 s of the moment the server accepts connections again.

Before the change the PostgreSQL pool's reconnect backoff doubled (1, 2, 4, 8 s ...), so the
target stayed dark for seconds after its server was back (more than 10 s after a 30 s outage).
The figures are printed (pytest -s) for the report.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from private_servers import READ_PASSWORD, READ_USER, PrivateMariaDB, PrivatePostgres, private_servers
from server_process import GatewayProcess, call_tool, registered_endpoints, start_gateway

pytestmark = pytest.mark.skipif(
    not {"query", "admin"} <= set(registered_endpoints()), reason="the query and admin endpoints are needed"
)
CALL_INTERVAL_S = 0.05
RECOVERY_LIMIT_S = 1.0


@dataclass
class Calls:
    """What one target's client threads saw: (finished_at, seconds, outcome) per call."""

    target_id: str
    log: list[tuple[float, float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, finished_at: float, seconds: float, outcome: str) -> None:
        with self.lock:
            self.log.append((finished_at, seconds, outcome))

    def between(self, start: float, end: float) -> list[tuple[float, float, str]]:
        with self.lock:
            return [c for c in self.log if start <= c[0] < end]


@pytest.fixture(scope="module")
def setup() -> Iterator[tuple[GatewayProcess, PrivatePostgres, PrivateMariaDB]]:
    with private_servers() as (postgres, mariadb), start_gateway() as gateway, gateway.client() as http:
        statements = [
            "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) "
            f"VALUES ('reader', '{READ_USER}', '{READ_PASSWORD}')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('pg', 'pgsql', '127.0.0.1', {postgres.port}, 'postgres', 'reader')",
            "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
            f"VALUES ('maria', 'mysql', '127.0.0.1', {mariadb.port}, 'shop', 'reader')",
            "LOAD MCP PROFILES TO RUNTIME",
        ]
        for statement in statements:
            result = call_tool(http, gateway, "admin", "admin.sql", {"statement": statement})
            assert result["isError"] is False, result
        deadline = time.monotonic() + 10
        while _outcome(http, gateway, "pg") != "ok" or _outcome(http, gateway, "maria") != "ok":
            assert time.monotonic() < deadline, "the targets did not start answering"
            time.sleep(0.2)
        yield gateway, postgres, mariadb


def _outcome(http, gateway: GatewayProcess, target_id: str) -> str:
    result = call_tool(http, gateway, "query", "run_sql_readonly", {"sql": "SELECT id FROM parts", "target_id": target_id})
    return result["structuredContent"]["error"]["code"] if result["isError"] else "ok"


def _callers(gateway: GatewayProcess, calls: Calls, stop: threading.Event) -> list[threading.Thread]:
    def loop() -> None:
        with gateway.client(timeout=30.0) as http:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    outcome = _outcome(http, gateway, calls.target_id)
                except Exception as exc:  # noqa: BLE001 - recorded: the test fails on it
                    outcome = f"client error {type(exc).__name__}"
                finished = time.monotonic()
                calls.record(finished, finished - started, outcome)
                stop.wait(CALL_INTERVAL_S)

    return [threading.Thread(target=loop, daemon=True) for _ in range(2)]


def run_outage(gateway: GatewayProcess, servers: list[PrivatePostgres | PrivateMariaDB], outage_s: float) -> dict:
    """Kill every server, wait `outage_s`, start them again; return per-engine figures."""
    target_of = {"pgsql": "pg", "mysql": "maria"}
    calls = {s.engine: Calls(target_of[s.engine]) for s in servers}
    stop = threading.Event()
    threads = [t for s in servers for t in _callers(gateway, calls[s.engine], stop)]
    for thread in threads:
        thread.start()
    time.sleep(0.5)  # serving normally first
    for server in servers:
        server.kill()  # returns once the server is gone
    killed_at = time.monotonic()
    time.sleep(outage_s)
    restarting_at = time.monotonic()  # down until here, whatever the machine's load makes of the restart
    back_at: dict[str, float] = {}

    def restart(server: PrivatePostgres | PrivateMariaDB) -> None:
        server.start()  # returns once a fresh connection from here succeeds
        back_at[server.engine] = time.monotonic()

    restarts = [threading.Thread(target=restart, args=(s,)) for s in servers]
    for thread in restarts:
        thread.start()
    for thread in restarts:
        thread.join()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not all(
        any(c[2] == "ok" for c in calls[s.engine].between(back_at[s.engine], float("inf"))) for s in servers
    ):
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(timeout=35)
    figures = {}
    for server in servers:
        engine = server.engine
        during = calls[engine].between(killed_at + 0.2, restarting_at)  # a call in flight at the kill may end just after it
        after = [c for c in calls[engine].between(back_at[engine], float("inf")) if c[2] == "ok"]
        figures[engine] = {
            "outage_s": outage_s,
            "recovered_after_s": round(after[0][0] - back_at[engine], 3) if after else None,
            "failed_calls_during_outage": len(during),
            "outcomes_during_outage": sorted({c[2] for c in during}),
            "slowest_failed_call_s": round(max((c[1] for c in during), default=0.0), 3),
        }
    print(json.dumps(figures))
    return figures


def _check(figures: dict) -> None:
    for engine, figure in figures.items():
        assert figure["outcomes_during_outage"] == ["UNAVAILABLE"], (engine, figure)
        assert figure["recovered_after_s"] is not None, (engine, figure)
        assert figure["recovered_after_s"] <= RECOVERY_LIMIT_S, (engine, figure)


def test_targets_answer_within_a_second_after_a_5_s_outage(setup) -> None:
    gateway, postgres, mariadb = setup
    _check(run_outage(gateway, [postgres, mariadb], 5.0))


@pytest.mark.slow
def test_targets_answer_within_a_second_after_a_30_s_outage(setup) -> None:
    gateway, postgres, mariadb = setup
    _check(run_outage(gateway, [postgres, mariadb], 30.0))
