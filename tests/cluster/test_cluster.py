"""Three real gateways on loopback ports sharing their configuration in one PostgreSQL
(mcp-cluster_dsn): a change made through instance 1 (a rotated token, a new target) is served by
instances 2 and 3 within a second; get_status shows the members and who lags; a PostgreSQL
restart is survived by every instance without restarting it. The tests run in order on one
cluster (module-scoped: three gateways start once).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pgvector_server import PgvectorServer
from server_process import GatewayProcess, call_tool, default_tokens, post_rpc, start_gateway

PROPAGATION_S = 1.0  # what the issue promises: every worker of every instance within a second


@dataclass
class Cluster:
    gateways: list[GatewayProcess]
    clients: list[httpx.Client]  # one keep-alive client per gateway, closed before it stops
    server: PgvectorServer


@pytest.fixture(scope="module")
def cluster(pgvector_server: PgvectorServer) -> Iterator[Cluster]:
    config_dsn = pgvector_server.create_database("mcpgw_cluster_config")
    tokens = default_tokens()  # an operator's bootstrap file, the same on every instance

    def variables(name: str) -> dict[str, object]:
        return {
            "mcp-cluster_dsn": config_dsn,
            "mcp-cluster_member_name": name,
            "rag-embedding_provider": "hash",
            "rag-embedding_dim": 64,
        }

    with contextlib.ExitStack() as stack:
        # Started together: the first to take the join lock publishes its configuration, the
        # others adopt the cluster's. The second has two workers: each must follow the cluster.
        with ThreadPoolExecutor(3) as pool:
            starting = [
                pool.submit(stack.enter_context, start_gateway(tokens=tokens, variables=variables(name), workers=workers))
                for name, workers in (("gw1", 1), ("gw2", 2), ("gw3", 1))
            ]
            gateways = [f.result() for f in starting]
        clients = [stack.enter_context(g.client()) for g in gateways]
        yield Cluster(gateways, clients, pgvector_server)
        pgvector_server.drop_database("mcpgw_cluster_config")


def admin(gateway: GatewayProcess, client: httpx.Client, statement: str) -> dict:
    result = call_tool(client, gateway, "admin", "admin.sql", {"statement": statement})
    assert not result.get("isError"), result
    return result["structuredContent"]


def status_code(gateway: GatewayProcess, client: httpx.Client, endpoint: str, token: str) -> int:
    return post_rpc(client, gateway, endpoint, "tools/list", token=token).status_code


def wait_until(check, timeout_s: float) -> float:
    """Seconds until `check()` held (for several calls in a row, so each worker answered), or fail."""
    started = time.monotonic()
    streak = 0
    while time.monotonic() - started < timeout_s:
        streak = streak + 1 if check() else 0
        if streak >= 4:
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"not served within {timeout_s} s")


def test_token_rotated_on_one_instance_is_served_by_all(cluster) -> None:
    gateways, clients = cluster.gateways, cluster.clients
    old = gateways[0].tokens["query"]
    new = "rotated-" + os.urandom(12).hex()
    for gateway, client in zip(gateways, clients):
        assert status_code(gateway, client, "query", old) == 200
    admin(gateways[0], clients[0], f"SET mcp-query_endpoint_auth = '{new}'")
    admin(gateways[0], clients[0], "LOAD MCP VARIABLES TO RUNTIME")
    for gateway, client in zip(gateways[1:], clients[1:]):
        waited = wait_until(
            lambda g=gateway, c=client: status_code(g, c, "query", new) == 200 and status_code(g, c, "query", old) == 401,
            PROPAGATION_S,
        )
        print(f"token rotation served by {gateway.base_url} after {waited:.3f} s")
    for gateway in gateways:
        gateway.tokens["query"] = new
    # Per-instance variables stay local: each instance still listens on its own port.
    ports = {call_tool(c, g, "config", "get_status", {})["structuredContent"]["port"] for g, c in zip(gateways, clients)}
    assert len(ports) == 3


def test_target_added_on_one_instance_is_served_by_all(cluster, tmp_path: Path) -> None:
    gateways, clients = cluster.gateways, cluster.clients
    db_file = tmp_path / "shared.sqlite"
    with sqlite3.connect(db_file) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
        conn.execute("INSERT INTO t VALUES (42)")
    admin(
        gateways[0],
        clients[0],
        f"INSERT INTO mcp_target_profiles (target_id, protocol, database) VALUES ('added_on_gw1', 'sqlite', '{db_file}')",
    )
    admin(gateways[0], clients[0], "LOAD MCP PROFILES TO RUNTIME")

    def answers(gateway: GatewayProcess, client: httpx.Client) -> bool:
        result = call_tool(client, gateway, "query", "run_sql_readonly", {"target_id": "added_on_gw1", "sql": "SELECT x FROM t"})
        return not result.get("isError") and result["structuredContent"]["rows"] == [[42]]

    for gateway, client in zip(gateways[1:], clients[1:]):
        waited = wait_until(lambda g=gateway, c=client: answers(g, c), PROPAGATION_S)
        print(f"new target served by {gateway.base_url} after {waited:.3f} s")


def test_status_shows_members_versions_and_laggards(cluster) -> None:
    gateways, client = cluster.gateways, cluster.clients[0]

    def cluster_status() -> dict:
        return call_tool(client, gateways[0], "config", "get_status", {})["structuredContent"]["cluster"]

    wait_until(lambda: not cluster_status()["laggards"], 5.0)
    shown = cluster_status()
    assert shown["member_id"] == "gw1"
    assert [m["member_id"] for m in shown["members"]] == ["gw1", "gw2", "gw3"]
    assert all(m["versions"] == shown["versions"] for m in shown["members"])
    assert {"MCP VARIABLES", "MCP PROFILES"} <= set(shown["versions"])

    # gw3 frozen: a LOAD through gw1 leaves it behind, and get_status says so.
    os.killpg(gateways[2].process.pid, signal.SIGSTOP)
    try:
        admin(gateways[0], client, "SET mcp-timeout_ms = 25000")
        admin(gateways[0], client, "LOAD MCP VARIABLES TO RUNTIME")
        time.sleep(0.3)
        shown = cluster_status()
        lagging = {m["member_id"]: m for m in shown["members"] if m["lagging"]}
        assert shown["laggards"] == ["gw3"], shown
        assert lagging["gw3"]["behind"] == ["MCP VARIABLES"]
    finally:
        os.killpg(gateways[2].process.pid, signal.SIGCONT)
    wait_until(lambda: not cluster_status()["laggards"], 5.0)


def test_postgresql_restart_is_survived(cluster) -> None:
    gateways, clients, server = cluster.gateways, cluster.clients, cluster.server
    server.stop()
    try:
        # The gap: every instance keeps serving its runtime; a LOAD cannot reach the cluster
        # and changes nothing (UNAVAILABLE), rather than splitting the cluster's configuration.
        for gateway, client in zip(gateways, clients):
            assert status_code(gateway, client, "query", gateway.tokens["query"]) == 200
        admin(gateways[0], clients[0], "SET mcp-query_endpoint_auth = 'during-the-gap-0123456789'")
        failed = call_tool(clients[0], gateways[0], "admin", "admin.sql", {"statement": "LOAD MCP VARIABLES TO RUNTIME"})
        assert failed["isError"] and failed["structuredContent"]["error"]["code"] == "UNAVAILABLE", failed
        assert status_code(gateways[0], clients[0], "query", gateways[0].tokens["query"]) == 200
    finally:
        server.start()
    new = "after-restart-" + os.urandom(8).hex()
    admin(gateways[0], clients[0], f"SET mcp-query_endpoint_auth = '{new}'")
    admin(gateways[0], clients[0], "LOAD MCP VARIABLES TO RUNTIME")
    for gateway, client in zip(gateways, clients):
        # The followers reconnect with a backoff of at most 2 s, then catch up.
        wait_until(lambda g=gateway, c=client: status_code(g, c, "query", new) == 200, 5.0)
        gateway.tokens["query"] = new
