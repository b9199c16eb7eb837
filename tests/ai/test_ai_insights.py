"""anomaly.detect, anomaly.list and recommendation.get end to end: real traffic through a real TLS
gateway (the evidence is what the gateway itself recorded), the official SDK client on /mcp/ai,
and a real MariaDB target with a table of 80,000 rows and no index on the filtered column.

A steady workload raises nothing; the same number of refused injection attempts, an error spike
and a burst of bad tokens do. The slow full-scan digest the test creates gets the CREATE INDEX
that serves its predicate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pymysql
import pytest
from server_process import GatewayProcess, call_tool, post_rpc, start_gateway

from tests.ai.gateway_env import add_targets, ok, with_client

WORKLOAD = 40
INJECTIONS = [
    "SELECT id FROM events WHERE account = 1; DROP TABLE events",
    "SELECT * FROM events INTO OUTFILE '/tmp/stolen-events'",
    "SELECT SLEEP(10)",
    "SELECT LOAD_FILE('/etc/passwd')",
    "DELETE FROM events WHERE 1 = 1",
]


@pytest.fixture(scope="module")
def gateway(mariadb_db: dict) -> Iterator[tuple[GatewayProcess, httpx.Client]]:
    maria = pymysql.connect(**mariadb_db, autocommit=True)
    with maria.cursor() as cur:
        cur.execute("CREATE TABLE events (id INT PRIMARY KEY, kind INT NOT NULL, account INT NOT NULL, note VARCHAR(60))")
        cur.execute("INSERT INTO events SELECT seq, seq % 7, seq % 1000, REPEAT('x', 40) FROM seq_1_to_80000")
        cur.execute("ANALYZE TABLE events")
    maria.close()
    # ai-slow_query_ms low: a full scan of 80,000 rows takes a few ms on a quiet machine.
    with start_gateway(variables={"ai-slow_query_ms": 1}) as gw, gw.client() as http:
        add_targets(
            gw,
            http,
            [
                "INSERT INTO mcp_auth_profiles (auth_profile_id, db_username, db_password) VALUES ('root', 'root', '')",
                "INSERT INTO mcp_target_profiles (target_id, protocol, host, port, database, auth_profile_id) "
                f"VALUES ('ledger', 'mysql', '127.0.0.1', 3306, '{mariadb_db['database']}', 'root')",
            ],
        )
        yield gw, http


def run_sql(gw: GatewayProcess, http: httpx.Client, sql: str) -> dict[str, Any]:
    return call_tool(http, gw, "query", "run_sql_readonly", {"sql": sql, "target_id": "ledger"})


@pytest.mark.slow
def test_anomalies_for_injected_traffic_and_none_for_a_steady_workload(gateway: tuple[GatewayProcess, httpx.Client]) -> None:
    gw, http = gateway
    for i in range(WORKLOAD):  # steady, normal
        assert run_sql(gw, http, f"SELECT id, kind FROM events WHERE id = {i + 1}")["isError"] is False
    quiet = with_client(gw, lambda c: ok(c, "anomaly.detect", {"window_s": 120}))
    assert quiet["anomalies"] == [] and quiet["new"] == 0
    assert any("request-rate" in note for note in quiet["notes"])  # no baseline yet: said, not guessed

    for i in range(WORKLOAD):  # the same number of calls, refused
        refused = run_sql(gw, http, INJECTIONS[i % len(INJECTIONS)])
        assert refused["isError"] is True and refused["structuredContent"]["error"]["code"] == "INVALID_ARGUMENT"
    for _ in range(25):  # an error spike on another tool
        assert call_tool(http, gw, "query", "sample_rows", {"table": "no_such_table", "target_id": "ledger"})["isError"]
    for _ in range(12):  # a client guessing tokens
        assert post_rpc(http, gw, "query", "tools/list", token="tok-wrong-0123456789abcdef").status_code == 401

    found = with_client(gw, lambda c: ok(c, "anomaly.detect", {"window_s": 120}))
    by_kind = {(a["kind"], json.dumps(a["subject"], sort_keys=True)): a for a in found["anomalies"]}
    query_fp = hashlib.sha256(gw.tokens["query"].encode()).hexdigest()[:12]
    injection = by_kind[("sql_injection_attempts", json.dumps({"token_fingerprint": query_fp}))]
    # Every refusal counts toward the burst; the plain DELETE carries no injection signature.
    assert injection["severity"] == "high" and injection["evidence"]["refused_with_signatures"] == WORKLOAD * 4 // 5
    assert {"stacked_statement", "file_access", "time_delay"} <= set(injection["evidence"]["signatures"])
    assert ("refusal_burst", json.dumps({"token_fingerprint": query_fp})) in by_kind
    spike = by_kind[("error_rate_spike", json.dumps({"endpoint": "query", "tool": "sample_rows"}, sort_keys=True))]
    assert spike["evidence"]["window_errors"] == 25
    refusals = by_kind[("error_rate_spike", json.dumps({"endpoint": "query", "tool": "run_sql_readonly"}, sort_keys=True))]
    assert refusals["evidence"]["window_errors"] == WORKLOAD and refusals["evidence"]["window_calls"] == 2 * WORKLOAD
    assert by_kind[("auth_failure_burst", json.dumps({"client": "127.0.0.1"}))]["evidence"]["failures"] == 12
    assert found["new"] == len(found["anomalies"]) == 5
    text = json.dumps(found)
    assert "/etc/passwd" not in text and "stolen-events" not in text  # literals never kept
    assert not any(token in text for token in gw.tokens.values())

    again = with_client(gw, lambda c: ok(c, "anomaly.detect", {"window_s": 120}))  # the same window: not stored twice
    assert again["new"] == 0 and {a["id"] for a in again["anomalies"]} == {a["id"] for a in found["anomalies"]}
    listed = with_client(gw, lambda c: ok(c, "anomaly.list", {"kind": "sql_injection_attempts"}))
    assert [a["id"] for a in listed["anomalies"]] == [injection["id"]]
    assert len(with_client(gw, lambda c: ok(c, "anomaly.list", {}))["anomalies"]) == 5
    metrics = http.get("/metrics").text
    assert 'mcp_ai_anomalies_total{kind="sql_injection_attempts",severity="high"} 1.0' in metrics


def test_recommendations_name_the_missing_index(gateway: tuple[GatewayProcess, httpx.Client]) -> None:
    gw, http = gateway
    for account in range(10):  # one digest: a filtered full scan, repeated
        assert run_sql(gw, http, f"SELECT COUNT(*) AS n FROM events WHERE account = {account}")["isError"] is False
    out = with_client(gw, lambda c: ok(c, "recommendation.get", {"target_id": "ledger"}))
    kinds = {r["kind"] for r in out["recommendations"]}
    index = next(r for r in out["recommendations"] if r["kind"] == "missing_index")
    assert "CREATE INDEX `ix_events_account` ON " in index["action"] and "(`account`)" in index["action"]
    assert index["target_id"] == "ledger" and index["evidence"]["calls"] >= 10
    assert (
        index["evidence"]["full_scans"][0]["table"] == "events" and index["evidence"]["full_scans"][0]["rows_estimate"] > 50_000
    )
    assert "account = ?" in index["evidence"]["digest_text"]
    # The gateway connects as root: a privilege warning; run_sql_readonly failed half the time above.
    assert {"privileged_target", "tool_errors"} <= kinds
    errors = next(r for r in out["recommendations"] if r["kind"] == "tool_errors" and r["evidence"]["tool"] == "run_sql_readonly")
    assert errors["evidence"]["top_error_codes"] == {"INVALID_ARGUMENT": WORKLOAD}
