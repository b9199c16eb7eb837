"""get_status reads a snapshot that a background task refreshes every second, instead of
collecting every worker's metric files on each call (the tool health checkers call): it says
how old its totals are, and they follow the traffic within a couple of seconds.
bench/gateway_overhead.py measures its cost beside get_config and the floor."""

from __future__ import annotations

import time

from server_process import GatewayProcess, call_tool, post_rpc


def _status(gateway: GatewayProcess, http) -> dict:
    result = call_tool(http, gateway, "config", "get_status", {})
    assert result["isError"] is False, result
    return result["structuredContent"]


def test_get_status_serves_a_recent_snapshot_of_the_totals(gateway_server: GatewayProcess) -> None:
    with gateway_server.client() as http:
        first = _status(gateway_server, http)
        assert 0 <= first["totals_age_s"] <= 2.5, first
        assert abs(first["totals_as_of"] + first["totals_age_s"] - time.time()) < 2, first
        for _ in range(25):
            assert post_rpc(http, gateway_server, "stats", "ping").status_code == 200
        deadline = time.monotonic() + 5
        while True:
            latest = _status(gateway_server, http)
            if latest["requests_total"] >= first["requests_total"] + 25:
                break
            assert time.monotonic() < deadline, (first, latest)
            time.sleep(0.2)
        assert latest["totals_as_of"] > first["totals_as_of"]
        assert {e["endpoint"] for e in latest["endpoints"]} >= {"config", "stats"}
