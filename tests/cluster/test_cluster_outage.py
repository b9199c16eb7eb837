"""get_status while the cluster database (mcp-cluster_dsn) is away, on a real gateway and a
PostgreSQL of the test's own that it stops, freezes and brings back.

While the database is down the gateway answers get_status at once with a structured view
(reachable: false, the versions last seen published and when, the members unknown) instead of
hanging or failing; it keeps serving its last runtime; when the database is back it follows the
cluster again without a restart. A frozen database (its postmaster stopped with SIGSTOP: a
connection attempt is accepted by the kernel and never answered) gets the same answer, bounded
by the status read's own timeouts.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

import httpx
import pytest
from pgvector_server import PgvectorServer, running_pgvector_server
from server_process import GatewayProcess, call_tool, post_rpc, start_gateway

from tests.cluster.support import admin, wait_until

HANG_S = 10.0  # a get_status not answered by then counts as hanging (the client gives up: the test fails)


@pytest.fixture(scope="module")
def private_server() -> Iterator[PgvectorServer]:
    yield from running_pgvector_server()  # its own: this module stops and freezes it


@pytest.fixture(scope="module")
def gateway(private_server: PgvectorServer) -> Iterator[GatewayProcess]:
    dsn = private_server.create_database("mcpgw_outage")
    variables = {"mcp-cluster_dsn": dsn, "mcp-cluster_member_name": "solo"}
    with start_gateway(variables=variables, workers=2) as gateway:  # each worker follows the cluster on its own
        yield gateway


def cluster_view(gateway: GatewayProcess, client: httpx.Client) -> dict:
    result = call_tool(client, gateway, "config", "get_status", {})
    assert not result.get("isError"), result
    status = result["structuredContent"]
    assert status["port"] and status["endpoints"], status  # the rest of the status stands
    return status["cluster"]


def served_value(gateway: GatewayProcess, client: httpx.Client, name: str) -> str:
    return call_tool(client, gateway, "config", "get_config", {"variable_name": name})["structuredContent"]["value"]


def assert_unknown_members(view: dict, seen: dict) -> None:
    assert view["reachable"] is False and view["member_id"] == "solo", view
    assert view["error"], view
    assert view["members"] is None and view["laggards"] is None, view
    assert view["versions"] == seen["versions"], view  # the last versions seen published...
    assert isinstance(view["versions_as_of"], float), view  # ...and when (unix time)
    assert view["serving"] == seen["serving"], view  # what this instance still serves


def test_status_while_the_cluster_database_is_down_then_back(gateway: GatewayProcess, private_server: PgvectorServer) -> None:
    with gateway.client(timeout=HANG_S) as client:
        wait_until(lambda: cluster_view(gateway, client)["laggards"] == [], 10.0)
        seen = cluster_view(gateway, client)
        assert seen["reachable"] is True and [m["member_id"] for m in seen["members"]] == ["solo"], seen
        assert {"MCP VARIABLES", "MCP PROFILES"} <= set(seen["versions"]) and seen["serving"] == seen["versions"], seen
        timeout_before = served_value(gateway, client, "mcp-timeout_ms")

        private_server.stop()
        try:
            for _ in range(6):  # both workers, several times: each answers, none waits on the database
                assert_unknown_members(cluster_view(gateway, client), seen)
            # The instance serves its last runtime meanwhile.
            assert post_rpc(client, gateway, "query", "tools/list").status_code == 200
            assert served_value(gateway, client, "mcp-timeout_ms") == timeout_before
            # A LOAD cannot reach the cluster: refused whole, nothing changes here either.
            admin(gateway, client, "SET mcp-timeout_ms = 26000")
            refused = call_tool(client, gateway, "admin", "admin.sql", {"statement": "LOAD MCP VARIABLES TO RUNTIME"})
            assert refused["isError"] and refused["structuredContent"]["error"]["code"] == "UNAVAILABLE", refused
            assert served_value(gateway, client, "mcp-timeout_ms") == timeout_before
        finally:
            private_server.start()

        # Back without a restart: the followers reconnect (backoff at most 2 s) and report again.
        wait_until(lambda: cluster_view(gateway, client)["reachable"] is True, 15.0)
        back = cluster_view(gateway, client)
        assert [m["member_id"] for m in back["members"]] == ["solo"] and back["laggards"] == [], back
        admin(gateway, client, "LOAD MCP VARIABLES TO RUNTIME")
        wait_until(lambda: served_value(gateway, client, "mcp-timeout_ms") == "26000", 5.0)
        after = cluster_view(gateway, client)
        assert after["versions"]["MCP VARIABLES"] == seen["versions"]["MCP VARIABLES"] + 1, (seen, after)
        assert gateway.process.poll() is None


def test_status_while_the_cluster_database_is_frozen(gateway: GatewayProcess, private_server: PgvectorServer) -> None:
    postmaster = int((private_server.pgdata / "postmaster.pid").read_text().split()[0])
    with gateway.client(timeout=HANG_S) as client:
        wait_until(lambda: cluster_view(gateway, client)["reachable"] is True, 15.0)
        seen = cluster_view(gateway, client)
        os.kill(postmaster, signal.SIGSTOP)  # new connections are accepted by the kernel, never answered
        try:
            for _ in range(2):
                assert_unknown_members(cluster_view(gateway, client), seen)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(postmaster, signal.SIGCONT)
        wait_until(lambda: cluster_view(gateway, client)["reachable"] is True, 15.0)
